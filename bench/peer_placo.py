#!/usr/bin/env python3
"""Peer benchmark: PlaCo's C++ ``DynamicsSolver`` on the Solo12 standing scenario.

Run it with the peer virtual environment's python (``bench/setup_peer.sh`` makes it),
never with the project's venv: ``placo`` pins its own Pinocchio (``pin==3.8.0``), so this
script must not import ``idyn_control``.

    .peer-venv/bin/python bench/peer_placo.py \\
        --urdf <example-robot-data>/robots/solo_description/robots/solo12.urdf \\
        --package-dir <dir that contains example-robot-data> \\
        --ticks 10000 --json results/peer_placo.json

Scenario (DESIGN.md §6, the same one the lead runs through idyn_control's ``wbc_qp``):
Solo12 standing on its four feet as unilateral point contacts (friction pyramid μ = 0.7),
joint torque limits ±2.7 N·m, a CoM task and a joint posture task, dt = 1 ms. The base
is fixed at the height where the feet touch z = 0 (computed from forward kinematics) with
identity orientation and zero velocity. Each tick, actuated joint j (Pinocchio order,
j = 0…11) is set to

    q_j = q_stand_j + A·sin(2π·f·t + j),   v_j = 2π·f·A·cos(2π·f·t + j),

t = tick·dt, A = 0.01 rad, f = 1 Hz, so every solve differs. The timed region is the full
per-tick work: state update + ``update_kinematics`` + ``solve`` (PlaCo rebuilds and
solves its QP inside ``solve``: mass matrix, nonlinear effects, task Jacobians,
assembly, QP solve, integration). Sanity checks (outside the timed region) fail the run
loudly: every solve must succeed, and the sum of the predicted normal contact forces must
equal m·g within 5 % (at the unperturbed standing state, and on average over the run).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
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

FEET = ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT")
# Solo12 standing posture: front legs knee-backward, hind legs knee-forward.
STAND = {
    "FL_HAA": 0.0, "FL_HFE": 0.8, "FL_KFE": -1.6,
    "FR_HAA": 0.0, "FR_HFE": 0.8, "FR_KFE": -1.6,
    "HL_HAA": 0.0, "HL_HFE": -0.8, "HL_KFE": 1.6,
    "HR_HAA": 0.0, "HR_HFE": -0.8, "HR_KFE": 1.6,
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--urdf", required=True, help="Solo12 URDF (meshes as package:// URIs)")
    p.add_argument("--package-dir", default=None,
                   help="directory that contains the URDF's packages (e.g. the 'share' dir that "
                        "holds example-robot-data); package:// is rewritten to it. "
                        "Default: found from the URDF's location")
    p.add_argument("--ticks", type=int, default=10000, help="timed ticks (default 10000)")
    p.add_argument("--warmup", type=int, default=500, help="untimed warm-up ticks (default 500)")
    p.add_argument("--json", dest="json_out", default=None, help="write the results here")
    p.add_argument("--dt", type=float, default=0.001, help="control period [s] (default 0.001)")
    p.add_argument("--deadline-us", type=float, default=1000.0,
                   help="a tick slower than this is a deadline miss (default 1000 µs = 1 kHz)")
    p.add_argument("--friction", type=float, default=0.7)
    p.add_argument("--torque-limit", type=float, default=2.7, help="|τ_j| bound [N·m]")
    p.add_argument("--feet", default=",".join(FEET), help="contact frames, comma separated")
    p.add_argument("--nominal-base-height", type=float, default=0.24,
                   help="expected standing base height [m], checked against kinematics")
    p.add_argument("--base-height", type=float, default=None,
                   help="force the base height [m] instead of computing it (feet at z = 0)")
    p.add_argument("--amplitude", type=float, default=0.01, help="joint perturbation A [rad]")
    p.add_argument("--frequency", type=float, default=1.0, help="joint perturbation f [Hz]")
    p.add_argument("--com-kp", type=float, default=100.0)
    p.add_argument("--com-weight", type=float, default=1.0)
    p.add_argument("--posture-kp", type=float, default=100.0)
    p.add_argument("--posture-weight", type=float, default=1e-2)
    p.add_argument("--contact-kp", type=float, default=0.0,
                   help="PD gain on the foot position tasks that carry the contacts "
                        "(0: rigid contact J·q̈ + J̇·v = 0; kd is critical, 2·sqrt(kp))")
    p.add_argument("--force-tolerance", type=float, default=0.05,
                   help="allowed relative error of Σ f_z vs m·g (default 0.05)")
    p.add_argument("--gc-off", action="store_true",
                   help="disable Python's garbage collector during the timed ticks")
    return p.parse_args(argv)


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


def load_robot(urdf: Path, package_dir: str | None):
    text = urdf.read_text()
    if "package://" in text:
        pkg = Path(package_dir) if package_dir else find_package_dir(urdf, text)
        if pkg is None or not pkg.is_dir():
            sys.exit(f"peer_placo: cannot resolve package:// in {urdf}: pass --package-dir")
        text = text.replace("package://", str(pkg.resolve()) + "/")
        missing = [u for u in sorted(set(re.findall(r'filename="([^"]+)"', text)))
                   if not Path(u).exists()]
        if missing:
            sys.exit(f"peer_placo: mesh files not found after rewriting package:// to {pkg}: "
                     f"{missing[:3]}")
    # The URDF is passed as text (with package:// rewritten); collision pairs are not needed.
    robot = placo.RobotWrapper(str(urdf), int(placo.Flags.ignore_collisions), text)
    return robot


def percentile(a, p):
    return float(np.percentile(a, p))


def machine_info():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "node": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        info["affinity"] = sorted(os.sched_getaffinity(0))
    except AttributeError:
        pass
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS"):
        if var in os.environ:
            info[var] = os.environ[var]
    return info


def versions():
    from importlib import metadata

    out = {}
    for dist in ("placo", "pin", "numpy", "eigenpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    urdf = Path(args.urdf)
    if not urdf.is_file():
        sys.exit(f"peer_placo: no URDF at {urdf}")
    feet = tuple(f for f in args.feet.split(",") if f)
    robot = load_robot(urdf, args.package_dir)
    model = robot.model
    nq, nv = model.nq, model.nv
    if nq != nv + 1:
        sys.exit(f"peer_placo: expected a floating-base model, got nq={nq} nv={nv}")

    # Actuated joints in Pinocchio order (names[0] is "universe", names[1] the free flyer).
    joints = [n for n in robot.joint_names() if n not in ("universe", "root_joint")]
    q_idx = np.array([robot.get_joint_offset(n) for n in joints])
    v_idx = np.array([robot.get_joint_v_offset(n) for n in joints])
    unknown = sorted(set(STAND) - set(joints))
    if unknown:
        sys.exit(f"peer_placo: joints {unknown} not in the URDF (is it Solo12?)")
    q_stand_j = np.array([STAND.get(n, 0.0) for n in joints])

    # Standing configuration; base height from kinematics so that the feet touch z = 0.
    q0 = np.array(robot.state.q, dtype=float)
    q0[:7] = [0, 0, 0, 0, 0, 0, 1]
    q0[q_idx] = q_stand_j
    robot.state.q = q0
    robot.state.qd = np.zeros(nv)
    robot.update_kinematics()
    foot_z = np.array([robot.get_T_world_frame(f)[2, 3] for f in feet])
    kin_height = float(-foot_z.mean())
    base_height = kin_height if args.base_height is None else args.base_height
    if abs(kin_height - args.nominal_base_height) > 0.01:
        print(f"peer_placo: WARNING: feet touch z=0 at base height {kin_height:.4f} m, "
              f"nominal {args.nominal_base_height} m", file=sys.stderr)
    q0[2] = base_height
    robot.state.q = q0
    robot.update_kinematics()
    feet_world = {f: np.array(robot.get_T_world_frame(f)[:3, 3]) for f in feet}
    feet_z_after = [float(p[2]) for p in feet_world.values()]

    solver = placo.DynamicsSolver(robot)
    solver.dt = args.dt
    solver.mask_fbase(False)  # floating base: its generalized force must be zero
    solver.enable_torque_limits(True)
    for n in joints:
        solver.set_torque_limit(n, args.torque_limit)

    contacts = []
    for f in feet:
        target = feet_world[f].copy()
        target[2] = 0.0
        task = solver.add_position_task(f, target)  # hard by default: carries the contact
        task.kp = args.contact_kp
        contact = solver.add_unilateral_point_contact(task)  # f_z ≥ 0 along world z
        contact.mu = args.friction
        contacts.append(contact)

    com_target = np.array(robot.com_world())
    com_task = solver.add_com_task(com_target)
    com_task.configure("com", "soft", args.com_weight)
    com_task.kp = args.com_kp

    posture = solver.add_joints_task()
    posture.set_joints({n: float(v) for n, v in zip(joints, q_stand_j)})
    posture.configure("posture", "soft", args.posture_weight)
    posture.kp = args.posture_kp

    mass = float(robot.total_mass())
    g = float(np.linalg.norm(np.asarray(model.gravity.linear)))
    weight = mass * g
    failures = []

    def normal_sum():
        return float(sum(c.wrench[2] for c in contacts))

    # Static check at the unperturbed standing state: Σ f_z = m·g.
    res = solver.solve(False)
    if not res.success:
        failures.append("static solve failed")
    static_ratio = normal_sum() / weight
    static_tau_max = float(np.max(np.abs(np.asarray(res.tau)[6:])))
    if abs(static_ratio - 1.0) > args.force_tolerance:
        failures.append(f"static Σf_z/(m·g) = {static_ratio:.4f}")

    two_pi_f = 2.0 * math.pi * args.frequency
    amp = args.amplitude
    phase0 = np.arange(len(joints), dtype=float)
    q = q0.copy()
    v = np.zeros(nv)
    total = args.warmup + args.ticks
    times = np.empty(args.ticks)
    ratios = np.empty(args.ticks)
    tau_max = 0.0
    slip_max = 0.0
    unsolved = 0
    perf = time.perf_counter
    state = robot.state

    if args.gc_off:
        gc.collect()
        gc.disable()
    try:
        for k in range(total):
            t = k * args.dt
            t0 = perf()
            # --- timed: state update + kinematics + QP assembly + solve ---
            phase = two_pi_f * t + phase0
            q[q_idx] = q_stand_j + amp * np.sin(phase)
            v[v_idx] = two_pi_f * amp * np.cos(phase)
            state.q = q
            state.qd = v
            robot.update_kinematics()
            res = solver.solve(True)
            t1 = perf()
            # --- untimed: bookkeeping and sanity checks ---
            if k >= args.warmup:
                i = k - args.warmup
                times[i] = t1 - t0
                if not res.success:
                    unsolved += 1
                    ratios[i] = np.nan
                    continue
                fz = 0.0
                for c in contacts:
                    w = c.wrench
                    fz += w[2]
                    if w[2] > 1e-9:
                        slip_max = max(slip_max, max(abs(w[0]), abs(w[1])) / w[2])
                ratios[i] = fz / weight
                tau_max = max(tau_max, float(np.max(np.abs(np.asarray(res.tau)[6:]))))
    finally:
        if args.gc_off:
            gc.enable()

    us = times * 1e6
    finite = ratios[np.isfinite(ratios)]
    mean_ratio = float(finite.mean()) if finite.size else float("nan")
    if unsolved:
        failures.append(f"{unsolved} solves failed")
    if not finite.size or abs(mean_ratio - 1.0) > args.force_tolerance:
        failures.append(f"mean Σf_z/(m·g) over the run = {mean_ratio:.4f}")
    if tau_max > args.torque_limit * (1 + 1e-6) + 1e-9:
        failures.append(f"max |τ| {tau_max:.4f} exceeds the limit {args.torque_limit}")
    if slip_max > args.friction * (1 + 1e-6) + 1e-9:
        failures.append(f"max |f_t|/f_n {slip_max:.4f} exceeds μ = {args.friction}")

    ver = versions()
    result = {
        "peer": "placo",
        "version": ver["placo"],
        "versions": ver,
        "scenario": {
            "name": "solo12_stand_4pt",
            "robot": "solo12",
            "urdf": str(urdf.resolve()),
            "contacts": list(feet),
            "contact_model": "unilateral point contact, friction pyramid (add_unilateral_point_contact)",
            "contact_kp": args.contact_kp,
            "friction": args.friction,
            "torque_limit_nm": args.torque_limit,
            "dt_s": args.dt,
            "base_height_m": base_height,
            "base_height_from_kinematics_m": kin_height,
            "nominal_base_height_m": args.nominal_base_height,
            "feet_z_at_base_height_m": feet_z_after,
            "standing_joints": {n: float(x) for n, x in zip(joints, q_stand_j)},
            "joint_order": joints,
            "perturbation": (f"q_j = q_stand_j + {amp}*sin(2*pi*{args.frequency}*t + j), "
                             "v_j = d/dt; j = index in joint_order; base fixed, zero velocity"),
            "tasks": {
                "com": {"priority": "soft", "weight": args.com_weight, "kp": args.com_kp,
                        "kd": "2*sqrt(kp)", "target": com_target.tolist()},
                "posture": {"priority": "soft", "weight": args.posture_weight,
                            "kp": args.posture_kp, "kd": "2*sqrt(kp)"},
                "feet": {"priority": "hard", "kp": args.contact_kp},
                "torque_regularization": float(solver.torque_cost),
            },
            "timed": "state update + update_kinematics() + solve(True)",
            "warmup": args.warmup,
            "gc_disabled": bool(args.gc_off),
        },
        "ticks": args.ticks,
        "p50_us": percentile(us, 50),
        "p99_us": percentile(us, 99),
        "p999_us": percentile(us, 99.9),
        "max_us": float(us.max()),
        "mean_us": float(us.mean()),
        "min_us": float(us.min()),
        "deadline_us": args.deadline_us,
        "misses": int(np.count_nonzero(us > args.deadline_us)),
        "sanity": {
            "mass_kg": mass,
            "weight_n": weight,
            "static_normal_force_sum_n": static_ratio * weight,
            "static_ratio": static_ratio,
            "static_max_abs_tau_nm": static_tau_max,
            "run_ratio_mean": mean_ratio,
            "run_ratio_min": float(finite.min()) if finite.size else None,
            "run_ratio_max": float(finite.max()) if finite.size else None,
            "run_max_abs_tau_nm": tau_max,
            "run_max_tangential_over_normal": slip_max,
            "failed_solves": unsolved,
            "tolerance": args.force_tolerance,
            "ok": not failures,
            "failures": failures,
        },
        "machine": machine_info(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    print(f"placo {ver['placo']} (pin {ver['pin']}, numpy {ver['numpy']}) — Solo12, "
          f"{len(feet)} point contacts, mu={args.friction}, |tau|<={args.torque_limit} N·m")
    print(f"base height {base_height:.4f} m (kinematics {kin_height:.4f}, nominal "
          f"{args.nominal_base_height}); mass {mass:.4f} kg")
    print(f"ticks {args.ticks} (+{args.warmup} warm-up): p50 {result['p50_us']:.1f} µs  "
          f"p99 {result['p99_us']:.1f} µs  p99.9 {result['p999_us']:.1f} µs  "
          f"max {result['max_us']:.1f} µs  misses(>{args.deadline_us:.0f} µs) {result['misses']}")
    print(f"sanity: static Σf_z/(m·g) {static_ratio:.5f}, run mean {mean_ratio:.5f} "
          f"[{result['sanity']['run_ratio_min']:.4f}, {result['sanity']['run_ratio_max']:.4f}], "
          f"max|tau| {tau_max:.3f} N·m, max|f_t|/f_n {slip_max:.3f}")

    if args.json_out:
        out = Path(args.json_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")

    if failures:
        print("peer_placo: SANITY CHECK FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
