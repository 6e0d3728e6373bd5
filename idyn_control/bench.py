"""Per-tick compute benchmarks (DESIGN.md §6): the project's tick and the C++ peer's, interleaved.

A scenario is a recorded :class:`TickSequence`: per tick the state (q, v), the contact
estimates, the swing flags and every reference the controller follows (base pose and
twist, swing-foot position/velocity/acceleration, joint posture). Both sides replay the
same sequence tick by tick:

- ``standing``: the robot on all its feet, joints moving as q_stand + A sin(2π f t + j)
  (A = 0.01 rad, f = 1 Hz) so that every solve differs; references fixed at the pose.
- ``trot``: a lock-step trot at 0.2 m/s of the project's own gait
  (:func:`idyn_control.sim.lockstep.run_scenario`, MuJoCo, ``qp_coulomb``), recorded after
  the trot has settled: moving references and contact switches (make and break).
- ``balance``: the lock-step balance task (:class:`~idyn_control.sim.tasks.BalanceTask`:
  a humanoid on its soles shifting its weight from foot to foot), recorded from the first
  shift on: moving references, every contact held.

The project's side runs each formulation with the compiled backend in two timed regions
(:class:`ProjectTick`): ``controller`` = :meth:`Controller.update` (state and contact mask
in, clamped torque out: the Python API tick of the lock-step loop and of the node's Python
tick, with Pinocchio, kinematic layer and QP compiled), and ``compiled`` = only the compiled
calls the node's native loop chains in a routine tick (Pinocchio pass, kinematic layer,
QP assembly and solve, clamp), called back to back without the Python layer, timed per
phase. The peer (PlaCo's DynamicsSolver, ``bench/peer_placo.py`` in its own venv) runs as
a long-lived subprocess driven block by block over a pipe (:mod:`idyn_control.bench_peer`).

:func:`run` interleaves them: in each of ``rounds`` rounds, blocks of ``block`` ticks
alternate peer / project (the order flips every block), so a load change on the shared
machine hits both sides alike; each round yields p50/p99/p99.9/max per side and the ratio
project/peer, reported with its spread over rounds (median, min, max), for wall time and
for the thread's CPU time (what other processes' time slices cannot inflate). ``priority``
runs both sides under SCHED_FIFO, as the node's loop. Never asserted in tests: machines are
noisy.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import bench_peer, formulations, robots
from .errors import ConfigError
from .qp import INF

DEADLINE_S = 1e-3
#: a tick whose wall time exceeds its thread's CPU time by more than this was preempted [µs]
PREEMPTED_US = 20.0
#: the standing scenario's joint motion: q_j = q_stand_j + A sin(2π f t + j)
AMPLITUDE_RAD, FREQUENCY_HZ = 0.01, 1.0
SCENARIOS = ("standing", "trot", "balance")
#: statistics whose project/peer ratio is reported per round (wall time; cpu_*: thread CPU time)
RATIO_STATS = ("p50_us", "p99_us", "p999_us", "max_us", "cpu_p50_us", "cpu_p99_us")
REGIONS = ("controller", "compiled")
#: per-tick records of the compiled region: phase times [s], QP iterations (ProxQP's and the working-set
#: guess's active-set steps), fast path taken
PHASES = ("engine", "layer", "solver", "qp_solve", "clamp", "iterations", "fast_path")
#: the trot recording: trot from 0.5 s at 0.2 m/s, replayed from SETTLE_S on (periodic gait)
TROT_START_S, TROT_VELOCITY, SETTLE_S = 0.5, (0.2, 0.0, 0.0), 1.5

TIMED_REGIONS = {
    "controller": "Controller.update(q, v, contact_mask): input checks, contact set, Pinocchio pass, "
                  "kinematic layer, formulation (QP assembly + QP solve), Result, safety clamp; "
                  "Pinocchio, kinematic layer and QP compiled (backend native), the rest Python",
    "compiled": "the node's compiled routine tick without ROS: state copy, contact-set switch when the "
                "schedule changes (Python, rare), then the three compiled calls back to back through "
                "the pybind11 binding (Pinocchio pass: crba, nonlinear effects, contact Jacobians and drifts; kinematic "
                "layer: q̈_des from the references; formulation: QP assembly + QP solve + τ), then the "
                "effort clamp",
    "peer": "PlaCo: contact switches when the schedule changes (contact.active, foot task hard/soft), "
            "robot.state.q/qd = state, robot.update_kinematics(), solver.solve(False) (tasks' errors "
            "and Jacobians, mass matrix, nonlinear effects, QP assembly, its QP solve, τ)",
}


# ---------------------------------------------------------------------- statistics
def summarize(times_s: np.ndarray, cpu_s: np.ndarray | None = None) -> dict:
    """p50/p99/p99.9/max [µs] and 1 kHz deadline misses of per-tick wall times [s]; with the
    ticks' thread CPU times, the same of those (``cpu_*``: the work without the time other
    processes held the core) and the count of preempted ticks (wall − CPU > PREEMPTED_US)."""
    us = np.asarray(times_s) * 1e6
    out = {
        "ticks": int(us.size),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p999_us": float(np.percentile(us, 99.9)),
        "max_us": float(us.max()),
        "mean_us": float(us.mean()),
        "misses": int((us > DEADLINE_S * 1e6).sum()),
    }
    if cpu_s is not None:
        cpu = np.asarray(cpu_s) * 1e6
        out.update({"cpu_p50_us": float(np.percentile(cpu, 50)), "cpu_p99_us": float(np.percentile(cpu, 99)),
                    "cpu_p999_us": float(np.percentile(cpu, 99.9)), "cpu_max_us": float(cpu.max()),
                    "preempted": int((us - cpu > PREEMPTED_US).sum())})
    return out


def spread(values) -> dict:
    """Per-round values and their median, min and max."""
    a = np.asarray(values, dtype=float)
    return {"rounds": [float(x) for x in a], "median": float(np.median(a)), "min": float(a.min()),
            "max": float(a.max())}


def machine() -> dict:
    out = {
        "node": platform.node(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


# ---------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class TickSequence:
    """What a controller is given, tick by tick: the scenario both sides replay.

    Arrays have T rows (one per tick, ``dt_s`` apart). Pinocchio order: q (T, nq) with the
    base quaternion (x, y, z, w), v (T, nv) with the base twist in the base frame. World
    frame for base and foot references. ``contact`` is the contact estimate, ``swing`` the
    feet the gait lifts; a contact holds where ``contact & ~swing`` (Controller.update).
    ``gains`` are the controller's (ControllerConfig: kp [1/s²], kd [1/s], weights),
    ``torque_limit_nm`` the commanded |τ| bound per joint, ``friction`` the ground μ.
    ``surfaces``: the flat feet, ``(link, ((x, y, z), ...))`` per sole [m, link frame], whose
    corners are the contact frames ``<link>_corner_<i>`` (the peer models each sole whole).
    ``measured_forces`` (T, k, 3) [N, world frame]: the contact forces handed to the
    controller before each tick (``Controller.set_measured_forces``: the simulator's over the
    period before it; standing: the forces that hold the pose), which the ``sensed``
    formulation replays; None in a file recorded before 2026-11-29.
    """

    name: str
    robot: str
    dt_s: float
    joint_names: tuple[str, ...]
    contact_frames: tuple[str, ...]
    base_frame: str
    friction: float
    torque_limit_nm: np.ndarray
    gains: dict
    q: np.ndarray
    v: np.ndarray
    contact: np.ndarray
    swing: np.ndarray
    q_ref: np.ndarray
    v_ref: np.ndarray
    a_ref: np.ndarray
    base_position_ref: np.ndarray
    base_rotation_ref: np.ndarray
    base_velocity_ref: np.ndarray
    base_angular_ref: np.ndarray
    foot_position_ref: np.ndarray
    foot_velocity_ref: np.ndarray
    foot_acceleration_ref: np.ndarray
    surfaces: tuple = ()
    measured_forces: np.ndarray | None = None

    META = ("name", "robot", "dt_s", "joint_names", "contact_frames", "base_frame", "friction", "gains", "surfaces")
    #: controller arrays written from the sequence before each tick (untimed on both sides)
    REFERENCES = ("q_ref", "v_ref", "a_ref", "base_position_ref", "base_rotation_ref", "base_velocity_ref",
                  "base_angular_ref", "foot_position_ref", "foot_velocity_ref", "foot_acceleration_ref", "swing")

    @property
    def ticks(self) -> int:
        return int(self.q.shape[0])

    @property
    def active(self) -> np.ndarray:
        """(T, k): contacts that hold (estimate says touching and the gait does not lift them)."""
        return self.contact & ~self.swing

    def switches(self) -> int:
        """Ticks whose set of holding contacts differs from the previous tick's."""
        a = self.active
        return int((a[1:] != a[:-1]).any(axis=1).sum())

    def save(self, path: Path) -> Path:
        """An ``.npz`` both venvs read (plain arrays; the metadata as one JSON string)."""
        meta = {k: getattr(self, k) for k in self.META}
        arrays = {f.name: getattr(self, f.name) for f in fields(self)
                  if f.name not in self.META and getattr(self, f.name) is not None}
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
        return path

    @classmethod
    def load(cls, path: Path) -> "TickSequence":
        with np.load(path) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in data.files if k != "meta"}
        meta["joint_names"], meta["contact_frames"] = tuple(meta["joint_names"]), tuple(meta["contact_frames"])
        meta["surfaces"] = tuple((link, tuple(map(tuple, corners))) for link, corners in meta.get("surfaces", ()))
        return cls(**meta, **arrays)


def _controller_config(spec, model, formulation: str, **options):
    """The controller the closed-loop scenarios run for this robot (its file's gains and
    formulation defaults), with ``options`` over the formulation's."""
    from .controller import ControllerConfig
    from .sim.lockstep import controller_overrides

    return ControllerConfig(formulation=formulation,
                            formulation_options={**spec.formulation_options(formulation), **options},
                            **controller_overrides(spec, model))


def _gains(ctrl) -> dict:
    """The controller's gains and weights, per joint for the posture."""
    keys = ("base_kp", "base_kd", "foot_kp", "foot_kd", "stance_weight", "base_weight", "swing_weight",
            "posture_weight", "damping")
    out = {k: float(getattr(ctrl.config, k)) for k in keys}
    out["joint_kp"], out["joint_kd"] = ctrl.joint_kp.tolist(), ctrl.joint_kd.tolist()
    return out


def _surfaces(spec) -> tuple:
    """The robot's soles as TickSequence.surfaces."""
    return tuple((s.link, tuple(tuple(map(float, c)) for c in s.corners)) for s in spec.surfaces)


def _base_frame(model) -> str:
    import pinocchio as pin

    pm = model.pin_model
    names = [f.name for f in pm.frames if f.parentJoint == 1 and f.type == pin.FrameType.BODY]
    return names[0] if names else ""


class _Recorder:
    """Wraps a Controller's ``update`` to record what it is given, tick by tick."""

    def __init__(self, ctrl):
        self.ctrl, self.update, self.set_measured = ctrl, ctrl.update, ctrl.set_measured_forces
        self.rows: dict[str, list] = {k: [] for k in ("q", "v", "contact", "measured_forces",
                                                      *TickSequence.REFERENCES)}
        self.measured = np.zeros((len(ctrl.model.contacts), 3))  # the last forces handed over
        ctrl.update = self
        ctrl.set_measured_forces = self._measured

    def _measured(self, forces_world):
        self.measured[:] = forces_world
        return self.set_measured(forces_world)

    def __call__(self, q, v, contact_mask):
        rows, c = self.rows, self.ctrl
        rows["q"].append(np.array(q, dtype=float))
        rows["v"].append(np.array(v, dtype=float))
        rows["contact"].append(np.array(contact_mask, dtype=bool))
        rows["measured_forces"].append(self.measured.copy())
        for name in TickSequence.REFERENCES:
            rows[name].append(np.array(getattr(c, name)))
        return self.update(q, v, contact_mask)

    def arrays(self, start: int) -> dict[str, np.ndarray]:
        return {k: np.ascontiguousarray(np.array(v[start:])) for k, v in self.rows.items()}


def standing_sequence(robot: str = "solo12", ticks: int = 2000, dt: float = 1e-3) -> TickSequence:
    """Standing on all feet, the joints moving as q_stand + A sin(2π f t + j) (so every
    solve differs), the base still; references: the standing pose."""
    from .controller import Controller

    spec = robots.spec(robot)
    model = robots.load(spec)
    config = _controller_config(spec, model, "qp_coulomb")
    ctrl = Controller(model, config)
    q_stand = robots.standing_configuration(model, spec)
    ctrl.reset(q_stand, np.zeros(model.nv))
    nb, na, k = model.n_base, model.na, len(model.contacts)
    t = np.arange(ticks) * dt
    phase = 2 * np.pi * FREQUENCY_HZ * t[:, None] + np.arange(na)[None, :]
    q = np.tile(q_stand, (ticks, 1))
    v = np.zeros((ticks, model.nv))
    q[:, model.joint_q_index] += AMPLITUDE_RAD * np.sin(phase)
    v[:, nb:] = 2 * np.pi * FREQUENCY_HZ * AMPLITUDE_RAD * np.cos(phase)
    f = ctrl.formulation
    f.prepare(q_stand, np.zeros(model.nv), model.contact_frames)
    feet = np.array(f.contacts.position, dtype=float).reshape(k, 3)
    refs = {name: np.repeat(np.array(getattr(ctrl, name))[None], ticks, axis=0) for name in TickSequence.REFERENCES}
    refs["foot_position_ref"][:] = feet
    result = ctrl.update(q_stand, np.zeros(model.nv), np.ones(k, dtype=bool)).result  # the forces that hold the pose
    held = np.zeros((k, 3))
    for frame, force in zip(result.contact_frames, result.forces):
        held[model.contact_frames.index(frame)] = force
    return TickSequence(name="standing", robot=str(robot), dt_s=dt, joint_names=tuple(model.joint_names),
                        contact_frames=tuple(model.contact_frames), base_frame=_base_frame(model),
                        friction=float(spec.friction), torque_limit_nm=np.array(ctrl.tau_limit),
                        gains=_gains(ctrl), q=q, v=v, contact=np.ones((ticks, k), dtype=bool), surfaces=_surfaces(spec),
                        measured_forces=np.repeat(held[None], ticks, axis=0), **refs)


def trot_sequence(robot: str = "solo12", ticks: int = 2000, dt: float = 1e-3) -> TickSequence:
    """A lock-step trot of the project's gait in MuJoCo (``qp_coulomb``, 0.2 m/s), as the
    controller saw it from ``SETTLE_S`` on: ``ticks`` ticks of moving references and
    contact switches. Raises if the robot falls or a tick falls back."""
    return _lockstep_sequence("trot", robot, ticks, dt, SETTLE_S, trot_start=TROT_START_S, velocity=TROT_VELOCITY)


def balance_sequence(robot: str = "g1", ticks: int = 2000, dt: float = 1e-3) -> TickSequence:
    """The lock-step balance task (``qp_coulomb``, the robot's own options) as the controller
    saw it from the first weight shift on: ``ticks`` ticks of moving references, every
    contact held. Raises if the robot falls or a tick falls back."""
    from .sim.tasks import BalanceConfig

    return _lockstep_sequence("balance", robot, ticks, dt, BalanceConfig().stand_s, gait=False, task="balance")


def _lockstep_sequence(name: str, robot: str, ticks: int, dt: float, settle_s: float, **scenario) -> TickSequence:
    """``ticks`` ticks of a lock-step run (:class:`~idyn_control.sim.lockstep.Scenario` of
    ``scenario``), as the controller saw them from ``settle_s`` [s] on."""
    from .sim.lockstep import LockstepRunner, Scenario

    start = int(round(settle_s / dt))
    runner = LockstepRunner(Scenario(robot=robot, formulation="qp_coulomb", duration=(start + ticks) * dt, dt=dt,
                                     **scenario))
    recorder = _Recorder(runner.controller)
    run = runner.run()
    if run.metrics.get("fell") or len(recorder.rows["q"]) < start + ticks:
        raise RuntimeError(f"the {name} recording fell at {run.metrics.get('fall_time_s')} s")
    fallbacks = int(run.trace.fallback[start:].sum())
    if fallbacks:
        raise RuntimeError(f"the {name} recording fell back to the safe output in {fallbacks} ticks")
    ctrl, model, spec = runner.controller, runner.robot, runner.spec
    return TickSequence(name=name, robot=str(robot), dt_s=dt, joint_names=tuple(model.joint_names),
                        contact_frames=tuple(model.contact_frames), base_frame=_base_frame(model),
                        friction=float(spec.friction), torque_limit_nm=np.array(ctrl.tau_limit),
                        gains=_gains(ctrl), surfaces=_surfaces(spec), **recorder.arrays(start))


def make_sequence(name: str, robot: str = "solo12", ticks: int = 2000) -> TickSequence:
    if name == "standing":
        return standing_sequence(robot, ticks)
    if name == "trot":
        return trot_sequence(robot, ticks)
    if name == "balance":
        return balance_sequence(robot, ticks)
    raise ValueError(f"unknown scenario {name!r}; valid: {SCENARIOS}")


# ---------------------------------------------------------------------- the project's tick
class ProjectTick:
    """One formulation replaying a :class:`TickSequence` in one timed region.

    ``region`` "controller": :meth:`Controller.update` per tick. "compiled": the compiled
    calls the node's native loop makes for a routine tick (``idyn_control.native.rt``'s
    plan: engine update, kinematic layer, solver), per phase; needs the compiled backend.
    References are written into the controller's arrays before the timer starts (as the
    peer's task targets are). Each instance keeps its own cursor in the sequence (wrapping
    at its end) and its own warm starts.
    """

    def __init__(self, seq: TickSequence, formulation: str, region: str = "controller", backend: str = "native"):
        from .controller import Controller

        if region not in REGIONS:
            raise ValueError(f"unknown region {region!r}; valid: {REGIONS}")
        self.seq, self.formulation, self.region = seq, formulation, region
        spec = robots.spec(seq.robot)
        model = robots.load(spec)
        if tuple(model.joint_names) != seq.joint_names or tuple(model.contact_frames) != seq.contact_frames:
            raise ValueError(f"sequence {seq.name!r} was recorded for another model of {seq.robot!r}")
        # a formulation without a compiled backend has no option for it: it runs in Python
        options = {"backend": backend} if backend and formulations.has_compiled_backend(formulation) else {}
        self.ctrl = Controller(model, _controller_config(spec, model, formulation, **options))
        self.ctrl.reset(seq.q[0], seq.v[0])
        self.backend = self.ctrl.formulation.backend
        self.cursor = 0
        self.status: dict[str, int] = {}
        self.fallbacks = 0
        self._refs = [(getattr(self.ctrl, name), getattr(seq, name)) for name in TickSequence.REFERENCES]
        a = seq.active
        self._active_changed = np.r_[True, (a[1:] != a[:-1]).any(axis=1)]
        self._active_changed[0] = (a[0] != a[-1]).any()  # the wrap from the last tick to the first
        c = seq.contact
        self._contact_changed = np.r_[(c[0] != c[-1]).any(), (c[1:] != c[:-1]).any(axis=1)]
        self.phases: list[np.ndarray] = []  # compiled: one (len(PHASES), n) array per block
        if region == "compiled":
            self._bind_compiled()

    # -- compiled calls (what rt.plan_for hands the node's C++ loop)
    def _bind_compiled(self) -> None:
        from . import native

        ctrl = self.ctrl
        f = ctrl.formulation
        solver, layer = getattr(f, "_native", None), ctrl._native_layer
        if f._engine is None or solver is None or layer is None:
            raise ValueError(f"{self.formulation}: no compiled tick ({f.native_unavailable or 'backend python'})")
        self._write_references(0)
        ctrl.update(self.seq.q[0], self.seq.v[0], self.seq.contact[0])  # fills the solvers' option/task buffers
        # contacts switch here without Controller.update's transitions (contact_ramp_time 0):
        # a held contact's force is unbounded, whichever contacts that first tick held
        f.contacts.max_normal_force[:] = INF
        # the binding's calls, each bound to its buffers (the layer's output, ctrl.qdd_des, is
        # the solver's input): one call per stage with scalar arguments, as rt.cpp makes them
        self._engine_call = f._engine.update
        self._layer_call = layer._call
        self._layer_mask = layer.mask
        solver._tau_max.check()
        if isinstance(solver, native.QpContact):
            tail = ()
        elif isinstance(solver, native.Wbc):
            tail = (len(f._task_list),)
        else:
            raise ValueError(f"{self.formulation}: no compiled QP")
        self._solver_call = (solver._ext.solve, tail)
        self._solver_info = solver.info  # [iterations, QP solve time [s], ...]
        self._tau_cmd = np.zeros(f.model.na)
        self._status_names = native.STATUS

    def _write_references(self, i: int) -> None:
        for target, rows in self._refs:
            target[...] = rows[i]
        if self.seq.measured_forces is not None:  # what the sensed formulation replays
            self.ctrl.set_measured_forces(self.seq.measured_forces[i])

    def run_block(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` ticks from the cursor on; per-tick wall and thread CPU times [s]."""
        return self._run_compiled(n) if self.region == "compiled" else self._run_controller(n)

    def _run_controller(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        seq, ctrl = self.seq, self.ctrl
        q, v, contact = seq.q, seq.v, seq.contact
        wall, cpu = np.empty(n), np.empty(n)
        perf, thread_ns = time.perf_counter, time.thread_time_ns
        T = seq.ticks
        for j in range(n):
            i = self.cursor
            self.cursor = (i + 1) % T
            self._write_references(i)
            c0 = thread_ns()
            t0 = perf()
            cmd = ctrl.update(q[i], v[i], contact[i])
            t1 = perf()
            c1 = thread_ns()
            wall[j], cpu[j] = t1 - t0, (c1 - c0) * 1e-9
            if cmd.source != "formulation":
                self.fallbacks += 1
            status = cmd.result.status if cmd.result is not None else "none"
            self.status[status] = self.status.get(status, 0) + 1
        return wall, cpu

    def _run_compiled(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        seq, f = self.seq, self.ctrl.formulation
        q, v, contact, active = seq.q, seq.v, seq.contact, seq.active
        terms_q, terms_v, cs = f.terms.q, f.terms.v, f.contacts
        engine_fn, layer_fn = self._engine_call, self._layer_call
        solve_fn, tail = self._solver_call
        layer_out, solver_in = self.ctrl.qdd_des, f.qdd_des  # handed over as rt.cpp does (memcpy)
        copyto = np.copyto
        info, mask = self._solver_info, self._layer_mask
        tau, tau_cmd, lim = f.tau, self._tau_cmd, self.ctrl.tau_limit
        neg_lim = -lim
        wall, cpu = np.empty(n), np.empty(n)
        ph = np.empty((len(PHASES), n))
        perf, thread_ns = time.perf_counter, time.thread_time_ns
        T = seq.ticks
        names = self._status_names
        for j in range(n):
            i = self.cursor
            self.cursor = (i + 1) % T
            self._write_references(i)
            fast0 = info[2]
            c0 = thread_ns()
            t0 = perf()
            terms_q[:] = q[i]
            terms_v[:] = v[i]
            if self._active_changed[i]:
                cs.set_active_mask(active[i])
            if self._contact_changed[i]:
                mask[:] = contact[i]
            engine_fn()
            t1 = perf()
            layer_fn()
            copyto(solver_in, layer_out)
            t2 = perf()
            status = solve_fn(cs.version, *tail)
            t3 = perf()
            np.minimum(tau, lim, out=tau_cmd)
            np.maximum(tau_cmd, neg_lim, out=tau_cmd)
            t4 = perf()
            c1 = thread_ns()
            wall[j], cpu[j] = t4 - t0, (c1 - c0) * 1e-9
            ph[0, j], ph[1, j], ph[2, j], ph[3, j], ph[4, j] = t1 - t0, t2 - t1, t3 - t2, info[1], t4 - t3
            ph[5, j], ph[6, j] = info[0], info[2] != fast0
            name = names[status] if 0 <= status < len(names) else "failed"
            self.status[name] = self.status.get(name, 0) + 1
        self.phases.append(ph)
        return wall, cpu

    def phase_summary(self) -> dict:
        """Where the compiled tick's time goes: p50/p99 [µs] of each phase (``qp_solve``:
        the QP solver's own timer: working-set guess and ProxQP, part of ``solver``), QP
        iterations per tick (ProxQP's and the guess's active-set steps) and, for
        qp_coulomb, the share of ticks its fast path (Stage II alone) served and the solver
        time with and without it."""
        if not self.phases:
            return {}
        ph = np.concatenate(self.phases, axis=1)
        pct = lambda x: {"p50_us": float(np.percentile(x, 50)), "p99_us": float(np.percentile(x, 99))}  # noqa: E731
        out = {name: pct(ph[k] * 1e6) for k, name in enumerate(PHASES[:5])}
        out["iterations"] = {"p50": float(np.percentile(ph[5], 50)), "p99": float(np.percentile(ph[5], 99)),
                             "max": float(ph[5].max())}
        if self.formulation in ("qp_coulomb", "qp_noslip"):
            fast = ph[6] > 0
            out["fast_path_share"] = float(fast.mean())
            for key, sel in (("solver_fast_path", fast), ("solver_two_stages", ~fast)):
                if sel.any():
                    out[key] = pct(ph[2, sel] * 1e6)
        return out


# ---------------------------------------------------------------------- the protocol
def parse_variants(entries) -> list[tuple[str, str, str]]:
    """``name[:backend][@region]`` → (formulation, backend, region); no region = both."""
    out = []
    for entry in entries:
        spec, _, region = entry.partition("@")
        name, _, backend = spec.partition(":")
        # an unknown name fails before minutes of benchmarking
        compiled = formulations.has_compiled_backend(name)
        if not compiled and backend == "native":
            raise ValueError(f"{name!r} has no compiled backend: time it as {name}:python")
        backend = backend or ("native" if compiled else "python")
        regions = (region,) if region else REGIONS
        for r in regions:
            if r not in REGIONS:
                raise ValueError(f"unknown timed region {r!r} in {entry!r}; valid: {REGIONS}")
            if r == "compiled" and backend == "python":
                if region:
                    raise ValueError(f"{entry!r}: the compiled region needs the native backend")
                continue
            out.append((name, backend, r))
    return out


def run(entries=("qp_coulomb", "wbc_qp"), *, robot: str = "solo12", scenarios=("standing",),
        rounds: int = 10, ticks: int = 20_000, block: int = 250, warmup: int = 500, peer: str = "auto",
        sequence_ticks: int = 2000, priority: int = 0, out_dir: Path | None = None,
        log: Callable[[str], None] = print) -> dict:
    """Benchmark the project's tick against the peer's, interleaved; a JSON-ready report.

    ``ticks`` timed ticks per project variant and scenario, split over ``rounds`` rounds of
    blocks of ``block`` ticks; in each block pair the peer replays the same number of ticks
    of the same sequence (so it times ``len(variants)`` × as many). ``peer``: "auto" (if its
    venv exists), "on" (create it with bench/setup_peer.sh), "off". ``priority`` > 0 runs
    both sides under SCHED_FIFO at that priority (the peer inherits it), as the node's
    ``loop_priority`` runs its tick: other processes then no longer preempt a tick. Sequences
    are written to ``out_dir`` (the peer reads them from there).
    """
    variants = parse_variants(entries)
    out_dir = Path(out_dir or Path.cwd() / "results" / "bench")
    per_round = max(1, ticks // rounds)
    block = max(1, min(block, per_round))
    blocks = -(-per_round // block)
    report: dict[str, Any] = {
        "protocol": {
            "rounds": rounds, "ticks_per_round": blocks * block, "block": block, "warmup": warmup,
            "order": "per round, per block, per variant: a peer block and a project block of the same length, "
                     "peer first and project first alternating; the peer's ticks of a round are pooled",
            "timed_regions": TIMED_REGIONS,
            "references": "written before each tick's timer starts on both sides (controller arrays; "
                          "PlaCo task targets)",
            "scheduling": f"SCHED_FIFO {priority}" if priority > 0 else "SCHED_OTHER (normal)",
            "preempted": f"a tick whose wall time exceeds its thread CPU time by > {PREEMPTED_US:g} µs",
        },
        "machine": machine(),
        "scenarios": [],
    }
    peer_python = bench_peer.peer_python(setup=(peer == "on")) if peer != "off" else None
    report["peer"] = None if peer_python is None else {"name": "placo", "python": str(peer_python)}
    with _scheduling(priority):
        for scenario in scenarios:
            _scenario(report, scenario, robot, variants, peer_python, rounds, blocks, block, warmup, sequence_ticks,
                      out_dir, log)
    return report


@contextmanager
def _scheduling(priority: int):
    """SCHED_FIFO at ``priority`` (> 0) for this process and the peer it starts, then back."""
    if priority <= 0:
        yield
        return
    before = os.sched_getscheduler(0), os.sched_getparam(0)
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))  # PermissionError without CAP_SYS_NICE
    try:
        yield
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def _scenario(report: dict, scenario: str, robot: str, variants, peer_python, rounds: int, blocks: int, block: int,
              warmup: int, sequence_ticks: int, out_dir: Path, log) -> None:
    """Record one scenario, set up both sides, run the rounds; appends to ``report``."""
    spec = robots.spec(robot)
    if not (spec.contact_frames or spec.surfaces):
        log(f"  {scenario}: {robot} has no feet; skipped")
        return
    log(f"  {scenario}: recording the {sequence_ticks}-tick sequence ...")
    try:
        seq = make_sequence(scenario, robot, sequence_ticks)
    except RuntimeError as err:  # the robot fell while the trot was recorded
        log(f"  {scenario}: {err}; skipped")
        report["scenarios"].append({"name": scenario, "robot": robot, "error": str(err)})
        return
    path = seq.save(out_dir / f"{spec.name}_{scenario}.npz")  # a robot file's path would leave out_dir
    entry: dict[str, Any] = {"name": scenario, "robot": robot, "sequence": str(path), "sequence_ticks": seq.ticks,
                             "contact_switches": seq.switches(), "project": [], "not_run": []}
    ticks_ = []
    for name, backend, region in variants:
        try:
            ticks_.append(ProjectTick(seq, name, region, backend))
        except (ConfigError, ValueError) as err:  # e.g. an option of the robot's only Python runs
            log(f"  {name}:{backend}@{region}: not run ({err})")
            entry["not_run"].append({"formulation": name, "backend": backend, "region": region, "reason": str(err)})
    client = None
    if peer_python is not None:
        try:
            client = bench_peer.PeerProcess(peer_python, path, robot)
            entry["peer"] = {"setup": client.hello}
            report["peer"]["versions"] = client.hello.get("versions")
        except bench_peer.PeerError as err:
            entry["peer"] = {"error": str(err)}
            log(f"  peer failed: {err}")
    try:
        _rounds(entry, ticks_, client, rounds, blocks, block, warmup, log)
    finally:
        if client is not None:
            entry["peer"]["sanity"] = client.close()
    report["scenarios"].append(entry)


def _rounds(entry: dict, ticks_: list[ProjectTick], client, rounds: int, blocks: int, block: int, warmup: int,
            log) -> None:
    """Warm up, then the interleaved rounds; fills ``entry`` with per-round statistics."""
    for t in ticks_:
        t.run_block(warmup)
        t.phases.clear()
    if client is not None:
        client.run_block(warmup)
    mine: list[list[dict]] = [[] for _ in ticks_]  # per variant, per round
    mine_all: list[list[tuple]] = [[] for _ in ticks_]
    theirs: list[dict] = []
    theirs_all: list[tuple] = []
    gc.collect()
    gc.freeze()  # as the node after configure: the survivors stay out of the young generations
    try:
        for r in range(rounds):
            own: list[list[tuple]] = [[] for _ in ticks_]
            peer_blocks: list[tuple] = []
            for b in range(blocks):
                for k, t in enumerate(ticks_):
                    peer_first = (r + b + k) % 2 == 0
                    if client is not None and peer_first:
                        peer_blocks.append(client.run_block(block))
                    own[k].append(t.run_block(block))
                    if client is not None and not peer_first:
                        peer_blocks.append(client.run_block(block))
            for k in range(len(ticks_)):
                wall, cpu = (np.concatenate(x) for x in zip(*own[k]))
                mine[k].append(summarize(wall, cpu))
                mine_all[k].append((wall, cpu))
            line = f"  round {r + 1}/{rounds}: " + ", ".join(
                f"{t.formulation}@{t.region} {mine[k][-1]['p50_us']:.0f}" for k, t in enumerate(ticks_))
            if peer_blocks:
                wall, cpu = (np.concatenate(x) for x in zip(*peer_blocks))
                theirs.append(summarize(wall, cpu))
                theirs_all.append((wall, cpu))
                line += f", placo {theirs[-1]['p50_us']:.0f}"
            log(line + " (p50 µs)")
    finally:
        gc.unfreeze()
    pooled = lambda rows: summarize(*(np.concatenate(x) for x in zip(*rows)))  # noqa: E731
    if theirs:
        entry.setdefault("peer", {}).update({"summary": pooled(theirs_all), "rounds": theirs})
    for k, t in enumerate(ticks_):
        row: dict[str, Any] = {"formulation": t.formulation, "region": t.region, "backend": t.backend,
                               "summary": pooled(mine_all[k]), "rounds": mine[k], "status": dict(t.status),
                               "fallbacks": t.fallbacks}
        if t.phases:
            row["phases"] = t.phase_summary()
        if theirs:
            row["ratio_to_peer"] = {stat: spread([m[stat] / p[stat] for m, p in zip(mine[k], theirs)])
                                    for stat in RATIO_STATS}
        entry["project"].append(row)


# ---------------------------------------------------------------------- report
def _ratio_text(ratio: dict | None, stats) -> str:
    if not ratio:
        return ""
    return "".join(f"{ratio[k]['median']:.2f} [{ratio[k]['min']:.2f}, {ratio[k]['max']:.2f}]".ljust(20) for k in stats)


def format_report(report: dict) -> str:
    """The readable summary: per scenario, each side's pooled statistics (wall time, then
    thread CPU time), the ratio project/peer per round as median [min, max], and where the
    compiled tick's time goes."""
    m, p = report["machine"], report["protocol"]
    lines = [f"machine:  {m['processor']} ({m['cpus']} cpus), load average {m.get('loadavg', '?')} at the start",
             f"protocol: {p['rounds']} rounds × {p['ticks_per_round']} ticks per variant, blocks of {p['block']} "
             f"ticks alternating with the peer's, {p['scheduling']}; ratio = project / peer per round: "
             f"median [min, max]"]
    for sc in report["scenarios"]:
        if "error" in sc:
            lines += ["", f"{sc['robot']} {sc['name']}: not measured ({sc['error']})"]
            continue
        peer = sc.get("peer") or {}
        rows = [(f"{r['formulation']}{':python' if r['backend'] == 'python' else ''} {r['region']}", r["summary"],
                 r.get("ratio_to_peer")) for r in sc["project"]]
        if "summary" in peer:
            rows.append(("placo (C++ peer)", peer["summary"], None))
        lines += ["", f"{sc['robot']} {sc['name']} ({sc['sequence_ticks']}-tick sequence, "
                      f"{sc['contact_switches']} contact switches)",
                  f"{'wall time [µs]':<24}{'p50':>7}{'p99':>8}{'p99.9':>8}{'max':>8}{'miss':>6}{'preempt':>9}"
                  f"   {'ratio p50':<20}{'ratio p99':<20}"]
        for label, s, ratio in rows:
            lines.append(f"{label:<24}{s['p50_us']:>7.1f}{s['p99_us']:>8.1f}{s['p999_us']:>8.1f}{s['max_us']:>8.0f}"
                         f"{s['misses']:>6d}{s.get('preempted', 0):>9d}   {_ratio_text(ratio, ('p50_us', 'p99_us'))}")
        lines.append(f"{'thread CPU time [µs]':<24}{'p50':>7}{'p99':>8}{'p99.9':>8}{'max':>8}{'':>15}"
                     f"   {'ratio p50':<20}{'ratio p99':<20}")
        for label, s, ratio in rows:
            lines.append(f"{label:<24}{s['cpu_p50_us']:>7.1f}{s['cpu_p99_us']:>8.1f}{s['cpu_p999_us']:>8.1f}"
                         f"{s['cpu_max_us']:>8.0f}{'':>15}   {_ratio_text(ratio, ('cpu_p50_us', 'cpu_p99_us'))}")
        for r in sc["project"]:
            ph = r.get("phases")
            if not ph:
                continue
            text = (f"  {r['formulation']} compiled, p50 µs: engine {ph['engine']['p50_us']:.1f}, layer "
                    f"{ph['layer']['p50_us']:.1f}, solver {ph['solver']['p50_us']:.1f} (QP "
                    f"{ph['qp_solve']['p50_us']:.1f}, {ph['iterations']['p50']:.0f} iterations, p99 "
                    f"{ph['iterations']['p99']:.0f}), clamp {ph['clamp']['p50_us']:.1f}")
            if "fast_path_share" in ph:
                text += f"; fast path {100 * ph['fast_path_share']:.0f} % of ticks"
                for key, name in (("solver_fast_path", "solver with it"), ("solver_two_stages", "without")):
                    if key in ph:
                        text += f", {name} {ph[key]['p50_us']:.0f}/{ph[key]['p99_us']:.0f}"
                text += " (p50/p99)"
            lines.append(text)
        shares = [s["preempted"] / s["ticks"] for _, s, _ in rows if s.get("ticks")]
        if shares and max(shares) > 0.005:
            lines.append(f"  note: other processes preempted up to {100 * max(shares):.1f} % of a side's ticks: wall p99 "
                         f"and beyond measure the scheduler here; the CPU-time rows compare the work (--priority 50 "
                         f"runs both sides under SCHED_FIFO, as the node's loop)")
        if "summary" in peer:
            lines.append("  placo p50 per round µs: " + ", ".join(f"{r['p50_us']:.0f}" for r in peer["rounds"]))
        sanity = peer.get("sanity") or {}
        if sanity.get("failures"):
            lines.append(f"  peer sanity FAILED: {'; '.join(sanity['failures'])}")
        if "error" in peer:
            lines.append(f"  peer failed: {peer['error'].splitlines()[-1] if peer['error'] else '?'}")
        for r in sc.get("not_run", ()):
            lines.append(f"  {r['formulation']}:{r['backend']} {r['region']}: not run ({r['reason']})")
        for r in sc["project"]:
            if r["fallbacks"] or set(r["status"]) - {"solved"}:
                lines.append(f"  {r['formulation']} {r['region']}: status {r['status']}, fallbacks {r['fallbacks']}")
    if report.get("peer") is None:
        lines.append("\npeer: not run (bash bench/setup_peer.sh, or --peer on)")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(format_report(run(sys.argv[1:] or ["qp_coulomb", "wbc_qp"], ticks=2000)))
