#!/usr/bin/env python3
"""Benchmark peer: PlaCo's C++ ``DynamicsSolver`` replaying a recorded tick sequence.

Run it with the peer virtual environment's python (``bench/setup_peer.sh`` makes it),
never with the project's venv: ``placo`` pins its own Pinocchio (``pin==3.8.0``), so this
script must not import ``idyn_control``. ``idyn-control bench`` writes the sequences
(``results/bench/<robot>_<scenario>.npz``: state, contact estimates, swing flags and the
controller's references per tick, its gains, friction and torque limits) and drives this
script as a long-lived subprocess::

    .peer-venv/bin/python bench/peer_placo.py --serve --sequence results/bench/solo12_trot.npz \\
        --urdf <example-robot-data>/robots/solo_description/robots/solo12.urdf \\
        --package-dir <dir that contains example-robot-data>

``--serve`` answers one JSON line per request line on stdin: first, unasked, the set-up
(``{"ready": true, ...}`` or ``{"error": ...}``); ``{"op": "run", "ticks": n}`` → the next n
ticks of the sequence (wrapping at its end) and their wall and thread CPU times
``{"times_ns": [...], "cpu_ns": [...]}``;
``{"op": "quit"}`` → the sanity summary, then it exits. Without ``--serve`` it runs
``--ticks`` ticks itself and prints their statistics (a manual check).

The solver mirrors the project's controller (idyn_control.controller): unilateral point
contacts (friction pyramid, the sequence's μ) on the feet that hold (contact estimate and
not swinging), whose position tasks are hard with kp = kd = 0 (rigid contact, J q̈ + J̇ v = 0,
as the contact rows of the project's QPs); swing feet as soft position tasks
(swing_weight, foot_kp, foot_kd, target position/velocity/acceleration of the gait); feet
neither holding nor swinging as soft tasks of weight 0; a base frame task (base_weight,
base_kp, base_kd, the base pose and twist references); a joint posture task
(posture_weight, joint_kp, joint_kd, the joint position and velocity references; PlaCo's
joints task takes no acceleration feed-forward, the gait's is small); the torque limits. dt = the sequence's. Timed region, per tick: the contact switch when the
set of holding feet changes (``contact.active``, the foot task made hard or soft),
``robot.state.q``/``qd`` = the state, ``robot.update_kinematics()``, ``solver.solve(False)``
(tasks, mass matrix, nonlinear effects, QP assembly and solve, τ; no integration: the next
state comes from the sequence). The references are written before the timer starts.
Sanity (outside the timed region): every solve succeeds, |τ| within the limits, the
contact forces in the friction pyramid, and Σ f_z / (m g) averaged over the ticks run.

Flat feet (the sequence's ``surfaces``: a sole whose polygon corners are the project's
contact points): PlaCo takes each sole whole, as a unilateral planar contact (``Contact6D``:
a 6-D wrench whose centre of pressure stays in a length × width rectangle, in the friction
pyramid) on a frame at the centre of the polygon's bounding box, which this script adds to
the URDF as a massless fixed link; the rectangle spans the polygon's x extent and the
narrowest y extent of its corners (inside the polygon). Its frame task is hard with kp = kd
= 0 (the whole sole's acceleration zero, as wbc_qp holds a sole: one rigid body). The
project's corners as PlaCo point contacts would be four hard position tasks on one rigid
body, redundant equality rows: PlaCo fails every solve of G1 standing that way. A sole holds
when all its corners hold.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

try:
    import placo
except ImportError as exc:  # pragma: no cover - depends on the interpreter used
    sys.exit(
        f"peer_placo: cannot import placo ({exc}).\n"
        "Run bench/setup_peer.sh and use the peer venv's python (.peer-venv/bin/python)."
    )

#: allowed |mean Σ f_z / (m g) − 1| over the ticks run (the base accelerates little on average)
FORCE_TOLERANCE = 0.1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sequence", required=True, help="tick sequence (.npz) written by idyn-control bench")
    p.add_argument("--urdf", required=True, help="the robot's URDF (meshes as package:// URIs)")
    p.add_argument("--package-dir", default=None,
                   help="directory that contains the URDF's packages (e.g. the 'share' dir that holds "
                        "example-robot-data); package:// is rewritten to it. Default: found above the URDF")
    p.add_argument("--serve", action="store_true", help="answer run requests on stdin (JSON lines)")
    p.add_argument("--ticks", type=int, default=10000, help="without --serve: timed ticks (default 10000)")
    p.add_argument("--warmup", type=int, default=500, help="without --serve: untimed warm-up ticks")
    p.add_argument("--json", dest="json_out", default=None, help="without --serve: write the results here")
    return p.parse_args(argv)


# ---------------------------------------------------------------------- robot and sequence
def find_package_dir(urdf: Path, text: str) -> Path | None:
    """The directory holding the first package:// package, searched above the URDF."""
    m = re.search(r"package://([^/\"']+)/", text)
    if not m:
        return None
    package = m.group(1)
    for parent in urdf.resolve().parents:
        if parent.name == package:
            return parent.parent
        if (parent / package).is_dir():
            return parent
    return None


def sole_frame(link: str) -> str:
    return f"{link}_sole"


def sole_geometry(corners) -> tuple[np.ndarray, float, float]:
    """(centre [m, link frame], length [m], width [m]) of a sole polygon's rectangle: the
    bounding box's centre, its x extent, the narrowest y extent of the corners about it."""
    c = np.asarray(corners, dtype=float)
    centre = 0.5 * (c.min(axis=0) + c.max(axis=0))
    return centre, float(np.ptp(c[:, 0])), float(2.0 * np.abs(c[:, 1] - centre[1]).min())


def with_sole_frames(text: str, surfaces) -> str:
    """The URDF with a massless link fixed at each sole's rectangle centre (PlaCo's planar
    contacts need a frame there)."""
    extra = []
    for link, corners in surfaces:
        xyz = " ".join(repr(float(x)) for x in sole_geometry(corners)[0])
        name = sole_frame(link)
        extra.append(f'<link name="{name}"/><joint name="{name}_joint" type="fixed"><parent link="{link}"/>'
                     f'<child link="{name}"/><origin xyz="{xyz}" rpy="0 0 0"/></joint>')
    return text.replace("</robot>", "\n".join(extra) + "\n</robot>") if extra else text


def load_robot(urdf: Path, package_dir: str | None, surfaces=()):
    text = with_sole_frames(urdf.read_text(), surfaces)
    if "package://" in text:
        pkg = Path(package_dir) if package_dir else find_package_dir(urdf, text)
        if pkg is None or not pkg.is_dir():
            raise RuntimeError(f"cannot resolve package:// in {urdf}: pass --package-dir")
        text = text.replace("package://", str(pkg.resolve()) + "/")
    # the URDF as text (package:// rewritten); collision pairs are not needed
    return placo.RobotWrapper(str(urdf), int(placo.Flags.ignore_collisions), text)


def load_sequence(path: Path) -> dict:
    """The sequence's metadata and arrays (the format of idyn_control.bench.TickSequence)."""
    with np.load(path) as data:
        seq = json.loads(str(data["meta"]))
        seq.update({k: data[k] for k in data.files if k != "meta"})
    seq.setdefault("surfaces", [])
    return seq


def versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("placo", "pin", "numpy", "eigenpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# ---------------------------------------------------------------------- the replay
class PlacoReplay:
    """PlaCo's DynamicsSolver set up as the project's controller, replaying a sequence."""

    def __init__(self, seq: dict, robot):
        self.seq, self.robot = seq, robot
        joints = [n for n in robot.joint_names() if n not in ("universe", "root_joint")]
        if tuple(joints) != tuple(seq["joint_names"]) or robot.model.nq != seq["q"].shape[1]:
            raise RuntimeError(f"joint order differs from the sequence's: placo {joints}, "
                               f"sequence {list(seq['joint_names'])}")
        self.joints = joints
        g = seq["gains"]
        kp, kd = np.asarray(g["joint_kp"], float), np.asarray(g["joint_kd"], float)
        if np.ptp(kp) > 0 or np.ptp(kd) > 0:
            raise RuntimeError("per-joint posture gains differ; PlaCo's joints task takes one kp and kd")
        self.gains = g
        solver = self.solver = placo.DynamicsSolver(robot)
        solver.dt = float(seq["dt_s"])
        solver.mask_fbase(False)  # floating base: its generalized force must be zero
        solver.enable_torque_limits(True)
        for name, limit in zip(joints, seq["torque_limit_nm"]):
            solver.set_torque_limit(name, float(limit))
        self.state = robot.state
        robot.state.q = seq["q"][0]
        robot.state.qd = seq["v"][0]
        robot.update_kinematics()

        T = np.eye(4)
        T[:3, :3] = seq["base_rotation_ref"][0]
        T[:3, 3] = seq["base_position_ref"][0]
        base = solver.add_frame_task(seq["base_frame"], T)
        base.configure("base", "soft", g["base_weight"], g["base_weight"])
        self.base_position, self.base_orientation = base.position(), base.orientation()
        for task in (self.base_position, self.base_orientation):
            task.kp, task.kd = g["base_kp"], g["base_kd"]

        # one unit per point foot, or per sole (its corners' contact indices)
        self.feet, self.contacts, units = [], [], []
        frames = list(seq["contact_frames"])
        corner_of = {f"{link}_corner_{i}": link for link, corners in seq["surfaces"] for i in range(len(corners))}
        for i, frame in enumerate(frames):
            if frame in corner_of:
                continue
            task = solver.add_position_task(frame, np.array(seq["foot_position_ref"][0, i], dtype=float))
            contact = solver.add_unilateral_point_contact(task)
            contact.mu = float(seq["friction"])
            self.feet.append(task)
            self.contacts.append(contact)
            units.append([i])
        for link, corners in seq["surfaces"]:
            _, length, width = sole_geometry(corners)
            name = sole_frame(link)
            task = solver.add_frame_task(name, robot.get_T_world_frame(name))
            contact = solver.add_planar_contact(task)
            contact.length, contact.width, contact.unilateral = length, width, True
            contact.mu = float(seq["friction"])
            self.feet.append(task)
            self.contacts.append(contact)
            units.append([frames.index(c) for c, owner in corner_of.items() if owner == link])

        self.posture = solver.add_joints_task()
        self.posture.configure("posture", "soft", g["posture_weight"])
        self.posture.kp, self.posture.kd = float(kp[0]), float(kd[0])

        active, swing = seq["contact"] & ~seq["swing"], seq["swing"]
        # unit modes per tick: 0 holds (contact; a sole: every corner), 1 swings, 2 neither
        active = np.stack([active[:, u].all(axis=1) for u in units], axis=1)
        swing = np.stack([swing[:, u].any(axis=1) for u in units], axis=1)
        self.modes = np.where(active, 0, np.where(swing, 1, 2)).astype(np.int8)
        wrap = np.vstack((self.modes[-1:], self.modes[:-1]))
        self.changed = (self.modes != wrap).any(axis=1)
        self.ticks = int(seq["q"].shape[0])
        self.cursor = 0
        self._set_modes(self.modes[0])
        self.weight = float(robot.total_mass()) * float(np.linalg.norm(np.asarray(robot.model.gravity.linear)))
        self.limit = np.asarray(seq["torque_limit_nm"], float)
        # sanity, accumulated over every tick run
        self.solves = 0
        self.failed = 0
        self.fz_ratio_sum = 0.0
        self.tau_excess = 0.0
        self.slip_max = 0.0

    def _set_modes(self, modes) -> None:
        """The contact switch: holding feet carry a unilateral contact and a hard task."""
        g = self.gains
        for task, contact, mode in zip(self.feet, self.contacts, modes):
            contact.active = bool(mode == 0)
            # a sole's frame task: its position and orientation parts
            parts = (task.position(), task.orientation()) if hasattr(task, "orientation") else (task,)
            if mode == 0:  # rigid: J q̈ + J̇ v = 0, as wbc_qp's contact rows (contact_gain 0)
                task.configure("foot", "hard", *(1.0,) * len(parts))
                gains = (0.0, 0.0)
                if not hasattr(task, "orientation"):  # a landed point foot: no swing feed-forward left
                    task.dtarget_world = np.zeros(3)
                    task.ddtarget_world = np.zeros(3)
            elif mode == 1:
                task.configure("foot", "soft", *(g["swing_weight"],) * len(parts))
                gains = (g["foot_kp"], g["foot_kd"])
            else:
                task.configure("foot", "soft", *(0.0,) * len(parts))
                gains = (0.0, 0.0)
            for part in parts:
                part.kp, part.kd = gains

    def write_references(self, i: int) -> None:
        """The tick's targets (untimed, as the project's references)."""
        s = self.seq
        position, orientation = self.base_position, self.base_orientation
        position.target_world = s["base_position_ref"][i]
        position.dtarget_world = s["base_velocity_ref"][i]
        orientation.R_world_frame = s["base_rotation_ref"][i]
        orientation.omega_world = s["base_angular_ref"][i]
        if self.modes[i].any():  # some foot swings or floats
            for k, task in enumerate(self.feet):
                if self.modes[i, k] == 1 and not hasattr(task, "orientation"):  # soles: no swing here
                    task.target_world = s["foot_position_ref"][i, k]
                    task.dtarget_world = s["foot_velocity_ref"][i, k]
                    task.ddtarget_world = s["foot_acceleration_ref"][i, k]
        names = self.joints
        self.posture.set_joints(dict(zip(names, s["q_ref"][i].tolist())))
        self.posture.set_joints_velocities(dict(zip(names, s["v_ref"][i].tolist())))

    def run_block(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``n`` ticks; per-tick wall and thread CPU times [ns]."""
        q, v = self.seq["q"], self.seq["v"]
        state, robot, solver = self.state, self.robot, self.solver
        changed, modes = self.changed, self.modes
        wall, cpu = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        perf, thread_ns = time.perf_counter_ns, time.thread_time_ns
        for j in range(n):
            i = self.cursor
            self.cursor = (i + 1) % self.ticks
            self.write_references(i)
            c0 = thread_ns()
            t0 = perf()
            # --- timed: contact switch + state + kinematics + tasks + QP assembly and solve ---
            if changed[i]:
                self._set_modes(modes[i])
            state.q = q[i]
            state.qd = v[i]
            robot.update_kinematics()
            res = solver.solve(False)
            t1 = perf()
            c1 = thread_ns()
            wall[j], cpu[j] = t1 - t0, c1 - c0
            self._check(i, res)
        return wall, cpu

    def _check(self, i: int, res) -> None:
        """Untimed bookkeeping: success, Σ f_z, torque limits, friction."""
        self.solves += 1
        if not res.success:
            self.failed += 1
            return
        fz = 0.0
        mu = float(self.seq["friction"])
        for contact, mode in zip(self.contacts, self.modes[i]):
            if mode == 0:
                w = contact.wrench
                fz += w[2]
                if w[2] > 1e-9:
                    self.slip_max = max(self.slip_max, max(abs(w[0]), abs(w[1])) / w[2] / mu)
        self.fz_ratio_sum += fz / self.weight
        tau = np.asarray(res.tau)[6:]
        self.tau_excess = max(self.tau_excess, float(np.max(np.abs(tau) - self.limit)))

    def sanity(self) -> dict:
        ok_solves = self.solves - self.failed
        mean = self.fz_ratio_sum / ok_solves if ok_solves else float("nan")
        failures = []
        if self.failed:
            failures.append(f"{self.failed} of {self.solves} solves failed")
        if not (abs(mean - 1.0) <= FORCE_TOLERANCE):
            failures.append(f"mean Σf_z/(m·g) = {mean:.4f}")
        if self.tau_excess > 1e-6:
            failures.append(f"|τ| exceeds its limit by {self.tau_excess:.3g} N·m")
        if self.slip_max > 1 + 1e-6:
            failures.append(f"max |f_t|/(μ f_n) = {self.slip_max:.4f}")
        return {"solves": self.solves, "failed": self.failed, "mean_fz_over_weight": mean,
                "max_tau_excess_nm": self.tau_excess, "max_tangential_over_mu_normal": self.slip_max,
                "ok": not failures, "failures": failures}


def describe(replay: PlacoReplay) -> dict:
    s = replay.seq
    return {
        "peer": "placo", "versions": versions(), "python": platform.python_version(),
        "scenario": s["name"], "robot": s["robot"], "ticks": replay.ticks,
        "contacts": list(s["contact_frames"]), "friction": float(s["friction"]), "base_frame": s["base_frame"],
        "soles": [dict(zip(("link", "length_m", "width_m"), (link, *sole_geometry(corners)[1:])))
                  for link, corners in s["surfaces"]],
        "torque_regularization": float(replay.solver.torque_cost),
        "scheduling": {"policy": os.sched_getscheduler(0), "priority": os.sched_getparam(0).sched_priority},
        "timed": "contact switch (when the holding feet change) + robot.state.q/qd + update_kinematics() "
                 "+ solve(False)",
    }


# ---------------------------------------------------------------------- entry points
def serve(replay: PlacoReplay, stdin=sys.stdin, stdout=sys.stdout) -> int:
    """Answer run requests until quit or end of input (one JSON object per line each way)."""
    def answer(obj):
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    answer({"ready": True, **describe(replay)})
    gc.collect()
    gc.freeze()  # as the project's side: set-up objects stay out of the young generations
    for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op == "run":
            wall, cpu = replay.run_block(int(request["ticks"]))
            answer({"times_ns": wall.tolist(), "cpu_ns": cpu.tolist(), "cursor": replay.cursor})
        elif op == "quit":
            answer({"sanity": replay.sanity()})
            return 0
        else:
            answer({"error": f"unknown op {op!r}"})
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        seq = load_sequence(Path(args.sequence))
        replay = PlacoReplay(seq, load_robot(Path(args.urdf), args.package_dir, seq["surfaces"]))
    except Exception as exc:  # noqa: BLE001 - reported to the driving process, then exit
        if args.serve:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        raise
    if args.serve:
        return serve(replay)
    replay.run_block(args.warmup)
    us = replay.run_block(args.ticks)[0] / 1e3
    result = {**describe(replay), "timed_ticks": args.ticks,
              "p50_us": float(np.percentile(us, 50)), "p99_us": float(np.percentile(us, 99)),
              "p999_us": float(np.percentile(us, 99.9)), "max_us": float(us.max()),
              "sanity": replay.sanity()}
    print(f"placo {result['versions']['placo']}: {seq['robot']} {seq['name']}, {args.ticks} ticks: "
          f"p50 {result['p50_us']:.1f} µs  p99 {result['p99_us']:.1f} µs  p99.9 {result['p999_us']:.1f} µs  "
          f"max {result['max_us']:.1f} µs; sanity {result['sanity']}")
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["sanity"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
