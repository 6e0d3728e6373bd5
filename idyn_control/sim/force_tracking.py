"""Seed 004 §IV in closed loop: ANYmal C presses the ground with one foot while standing.

Three legs support the free-floating torso at a constant pose (x = y = 0, z = 0.57 m,
zero roll/pitch/yaw) with base gains Kp = 2000·I₆, Kd = 100·I₆ for every controller; the
left-front foot exerts on the ground a desired force λ_d(t) (the contact force of the
ground on the foot, world frame: F_z > 0 presses):

- ``sine``: F_x = 30 sin(0.2t), F_y = 20 sin(t), F_z = 140 − 50 sin(2t) [N];
- ``step``: F_x = F_y = 0, F_z = 100 → 130 → 160 → 130 → 100 N, ``step_level_s`` per level.

Lock-step like :mod:`idyn_control.sim.lockstep`: every control period the MuJoCo state
goes through :meth:`Controller.update` (the node's code path), the torque is held for one
period and the force on the pressing foot is the one MuJoCo applied (``f_meas``, averaged
over the period), never the controller's prediction (``f_pred``, recorded beside it).

Gains: the controller's base gains are acceleration gains (q̈ = Kp e + Kd ė, i.e. the
paper's impedance (10) with Λ_d = I in place of Λ_d = Λ_c): Kp = 2000 s⁻², Kd = 100 s⁻¹
(ω = 45 rad/s, ζ = 1.1) on all six axes.

The controller's contact Jacobian is that of the foot centre (the ``*_FOOT`` frame, the
centre of MuJoCo's foot sphere), as in the paper; MuJoCo applies the force at the bottom
of the sphere, ``radius`` lower. A tangential force f_t there has a moment r × f_t about
the centre that the controller does not model (see :func:`contact_point_torque_error`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pinocchio as pin

from .. import robots
from ..controller import Controller, ControllerConfig
from ..errors import ConfigError
from .lockstep import CONTACT_THRESHOLD_N, FALL_HEIGHT_FRACTION, FALL_TILT_RAD
from .mujoco_model import build_mujoco

PROFILES = ("sine", "step")
#: F_z levels of the step profile [N] (seed 004 §IV)
STEP_LEVELS_N = (100.0, 130.0, 160.0, 130.0, 100.0)
#: the sine profile's slowest component, F_x = 30 sin(0.2 t), has this period [s]
SINE_PERIOD_S = 2.0 * math.pi / 0.2


def desired_force(profile: str, t: float, step_level_s: float = 2.0, out: np.ndarray | None = None) -> np.ndarray:
    """λ_d(t) [N, world] of the pressing foot for a profile of seed 004 §IV."""
    out = np.zeros(3) if out is None else out
    if profile == "sine":
        out[0] = 30.0 * math.sin(0.2 * t)
        out[1] = 20.0 * math.sin(t)
        out[2] = 140.0 - 50.0 * math.sin(2.0 * t)
    elif profile == "step":
        level = min(int(t / step_level_s), len(STEP_LEVELS_N) - 1)
        out[0] = out[1] = 0.0
        out[2] = STEP_LEVELS_N[level]
    else:
        raise ConfigError("profile", profile, f"must be one of {PROFILES}")
    return out


def standing_at_height(model, name: str, base_height: float, foot_radius: float) -> np.ndarray:
    """ANYmal-style stance (HAA = 0, HFE = ±a, KFE = ∓2a: feet under the hips) whose base is
    at ``base_height`` [m] with the foot spheres touching the ground (bisection on a)."""
    q = robots.standing_configuration(model, name, foot_height=foot_radius)
    joints = {j: q[model.joint_q_index[model.joint_index(j)]] for j in robots.spec(name).standing_joints}
    signs = {j: np.sign(v) for j, v in joints.items()}
    ratio = {j: abs(v) / max(abs(u) for u in joints.values()) for j, v in joints.items()}

    def pose(a):
        qa = q.copy()
        for j in joints:
            qa[model.joint_q_index[model.joint_index(j)]] = signs[j] * ratio[j] * 2.0 * a
        data = model.pin_model.createData()
        qa[2] = 0.0
        pin.framesForwardKinematics(model.pin_model, data, qa)
        qa[2] = foot_radius - min(data.oMf[i].translation[2] for i in model.contact_frame_ids)
        return qa

    lo, hi = 0.05, 1.2  # half the knee angle [rad]: straighter legs stand higher
    if not (pose(hi)[2] <= base_height <= pose(lo)[2]):
        raise ConfigError("base_height", base_height, f"must be in [{pose(hi)[2]:.3f}, {pose(lo)[2]:.3f}] m")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if pose(mid)[2] > base_height else (lo, mid)
    return pose(0.5 * (lo + hi))


@dataclass
class ForceTrackingScenario:
    """One run of seed 004 §IV.

    Attributes:
        formulation: "pidc_qp" (proposed), "pidc_qp_howsm" (HOWSM) or "pidcwcu" (PIDCWCU).
        profile: "sine" or "step".
        duration: simulated time [s]; None: one F_x period (sine), five levels (step).
        step_level_s: duration of one level of the step profile [s].
        settle_s: time after the start (and after every step) left out of the error
            statistics [s]; the measured settling times are reported beside it.
        friction: ground μ (the paper does not give it; ANYmal C's default).
    """

    formulation: str = "pidc_qp"
    profile: str = "sine"
    duration: float | None = None
    dt: float = 1e-3
    robot: str = "anymal_c"
    force_frame: str = "LF_FOOT"
    base_height: float = 0.57
    base_kp: float = 2000.0
    base_kd: float = 100.0
    step_level_s: float = 2.0
    settle_s: float = 0.5
    friction: float = 0.7
    formulation_options: dict[str, Any] = field(default_factory=dict)

    @property
    def length_s(self) -> float:
        if self.duration is not None:
            return self.duration
        return SINE_PERIOD_S if self.profile == "sine" else len(STEP_LEVELS_N) * self.step_level_s

    def validate(self) -> None:
        if self.profile not in PROFILES:
            raise ConfigError("profile", self.profile, f"must be one of {PROFILES}")
        if not (math.isfinite(self.length_s) and self.length_s > 0):
            raise ConfigError("duration", self.duration, "must be > 0 [s]")
        if not (math.isfinite(self.step_level_s) and self.step_level_s > self.settle_s >= 0):
            raise ConfigError("step_level_s", self.step_level_s, "must be > settle_s ≥ 0 [s]")


@dataclass
class ForceTrackingRun:
    """Per-tick arrays (N ticks, world frame) and the metrics of :func:`summarize`.

    Attributes:
        t [s] (N,); f_des, f_meas, f_pred [N] (N, 3): desired, MuJoCo-applied (averaged over
        the period) and controller-predicted force on the pressing foot; f_support [N]
        (N, 3): sum of the other feet's measured forces; base_pos [m], base_rpy [rad]
        (N, 3); tau [N·m] (N, na): commanded (after the safety layer); tau_raw [N·m]: the
        formulation's (before clamping); fallback (N,) bool; active (N,) int: binding
        inequalities (QP methods; 0 otherwise); slip [m] (N,): horizontal displacement of
        the pressing foot from its start.
    """

    scenario: ForceTrackingScenario
    t: np.ndarray
    f_des: np.ndarray
    f_meas: np.ndarray
    f_pred: np.ndarray
    f_support: np.ndarray
    base_pos: np.ndarray
    base_rpy: np.ndarray
    tau: np.ndarray
    tau_raw: np.ndarray
    fallback: np.ndarray
    active: np.ndarray
    slip: np.ndarray
    tau_limit: np.ndarray
    base_ref: np.ndarray
    fall_time_s: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def pressing_stance(s: ForceTrackingScenario):
    """(robot model, its MuJoCo world, the stance q: torso at ``base_height``, feet on the ground)."""
    robot = robots.load(s.robot, friction=s.friction)
    sim = build_mujoco(robot, friction=s.friction, compliant=False, timestep=s.dt)
    return robot, sim, standing_at_height(robot, s.robot, s.base_height, sim.contacts[0].radius)


def controller_config(s: ForceTrackingScenario) -> ControllerConfig:
    """The controller of every run (lock-step and the node's): base gains Kp, Kd, the force
    contact, the other gains at their defaults, the last torque held if a solve fails."""
    options = {"force_contacts": (s.force_frame,), **s.formulation_options}
    return ControllerConfig(formulation=s.formulation, formulation_options=options, dt=s.dt,
                            base_kp=s.base_kp, base_kd=s.base_kd, safe_output="hold")


def allocate_run(s: ForceTrackingScenario, ticks: int, na: int, tau_limit: np.ndarray) -> ForceTrackingRun:
    """A run of ``ticks`` ticks, zero-filled (the base reference is the stance's)."""
    z = np.zeros
    return ForceTrackingRun(
        scenario=s, t=z(ticks), f_des=z((ticks, 3)), f_meas=z((ticks, 3)), f_pred=z((ticks, 3)),
        f_support=z((ticks, 3)), base_pos=z((ticks, 3)), base_rpy=z((ticks, 3)), tau=z((ticks, na)),
        tau_raw=z((ticks, na)), fallback=z(ticks, dtype=bool), active=z(ticks, dtype=int),
        slip=z(ticks), tau_limit=np.array(tau_limit, dtype=float), base_ref=np.array([0.0, 0.0, s.base_height]))


def run_force_tracking(scenario: ForceTrackingScenario | None = None, **overrides: Any) -> ForceTrackingRun:
    """Run seed 004 §IV's experiment for one controller and profile in MuJoCo (lock-step)."""
    s = replace(scenario or ForceTrackingScenario(), **overrides)
    s.validate()
    robot, sim, q = pressing_stance(s)
    v = np.zeros(robot.nv)
    ctrl = Controller(robot, controller_config(s))
    sim.set_state(q, v)
    q, v = sim.state()
    ctrl.reset(q, v)
    ticks = int(round(s.length_s / s.dt))
    run = allocate_run(s, ticks, robot.na, ctrl.tau_limit)
    ctrl.set_base_reference(run.base_ref, np.eye(3))
    formulation = ctrl.formulation
    k = robot.contact_index(s.force_frame)
    support = np.arange(len(robot.contact_frames)) != k
    z = np.zeros
    forces = z((len(robot.contact_frames), 3))
    mask = sim.contact_forces_array(forces)[:, 2] > CONTACT_THRESHOLD_N
    mask[:] = True  # the robot starts standing on its four feet
    foot0 = sim.frame_position(s.force_frame)
    f_des = z(3)
    for n in range(ticks):
        t = n * s.dt
        desired_force(s.profile, t, s.step_level_s, out=f_des)
        formulation.set_desired_forces({s.force_frame: f_des})
        cmd = ctrl.update(q, v, mask)
        run.t[n] = t
        run.f_des[n] = f_des
        run.base_pos[n] = q[:3]
        run.base_rpy[n] = base_rpy(q)
        run.tau[n] = cmd.tau
        run.fallback[n] = cmd.source != "formulation"
        if cmd.result is not None:
            run.tau_raw[n] = cmd.result.tau
            if cmd.source == "formulation" and s.force_frame in cmd.result.contact_frames:
                run.f_pred[n] = cmd.result.forces[cmd.result.contact_frames.index(s.force_frame)]
        run.active[n] = getattr(formulation, "n_active_inequalities", 0)
        sim.step(cmd.tau)
        sim.contact_forces_array(forces)
        run.f_meas[n] = forces[k]
        run.f_support[n] = forces[support].sum(axis=0)
        run.slip[n] = float(np.linalg.norm((sim.frame_position(s.force_frame) - foot0)[:2]))
        np.greater(forces[:, 2], CONTACT_THRESHOLD_N, out=mask)
        q, v = sim.state()
        if fallen(q, s.base_height):
            run.fall_time_s = t + s.dt
            trim(run, n + 1)
            break
    run.metrics = summarize(run)
    return run


def base_rpy(q: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw [rad] of the floating base at ``q`` (quaternion x, y, z, w at q[3:7])."""
    return pin.rpy.matrixToRpy(pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix())


def fallen(q: np.ndarray, base_height: float) -> bool:
    """The torso fell: below half its height or tilted by more than 1 rad (as lockstep)."""
    R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
    return bool(q[2] < FALL_HEIGHT_FRACTION * base_height or R[2, 2] < math.cos(FALL_TILT_RAD))


def trim(run: ForceTrackingRun, n: int) -> None:
    """Keep the first ``n`` ticks of ``run``."""
    for name in ("t", "f_des", "f_meas", "f_pred", "f_support", "base_pos", "base_rpy", "tau", "tau_raw",
                 "fallback", "active", "slip"):
        setattr(run, name, getattr(run, name)[:n])


def _levels(s: ForceTrackingScenario, t_end: float) -> list[float]:
    """Times the reference jumps [s]: the start, and every step of the step profile."""
    if s.profile != "step":
        return [0.0]
    return [i * s.step_level_s for i in range(len(STEP_LEVELS_N)) if i * s.step_level_s < t_end]


def settled_mask(run: ForceTrackingRun) -> np.ndarray:
    """Ticks outside the first ``settle_s`` after the start and after every step."""
    s, t = run.scenario, run.t
    keep = np.ones(t.size, dtype=bool)
    for t0 in _levels(s, t[-1] + s.dt if t.size else 0.0):
        keep &= ~((t >= t0) & (t < t0 + s.settle_s))
    return keep


def settling_times(run: ForceTrackingRun, tol_n: float = 2.0, hold_s: float = 0.1) -> list[float]:
    """Per reference jump: time until every axis's force error is within ``tol_n`` [N]
    and stays there for ``hold_s`` [s]; NaN when that never happens before the next jump."""
    s, t = run.scenario, run.t
    good = np.abs(run.f_meas - run.f_des).max(axis=1) <= tol_n
    hold = max(1, int(round(hold_s / s.dt)))
    jumps = _levels(s, t[-1] + s.dt) if t.size else []
    out = []
    for i, t0 in enumerate(jumps):
        t1 = jumps[i + 1] if i + 1 < len(jumps) else t[-1] + s.dt
        idx = np.flatnonzero((t >= t0) & (t < t1))
        settled = math.nan
        for j in range(idx.size - hold + 1):
            if good[idx[j]:idx[j] + hold].all():
                settled = float(t[idx[j]] - t0)
                break
        out.append(settled)
    return out


def summarize(run: ForceTrackingRun) -> dict[str, Any]:
    """Force-tracking RMSE / max error per axis (after settling), base drift, torques."""
    s = run.scenario
    keep = settled_mask(run)
    err = (run.f_meas - run.f_des)[keep]
    pred_err = (run.f_pred - run.f_des)[keep]
    pos_drift = np.linalg.norm(run.base_pos - run.base_ref, axis=1)
    rot_drift = np.array([np.linalg.norm(pin.log3(pin.rpy.rpyToMatrix(*r))) for r in run.base_rpy])
    over = np.abs(run.tau_raw) > run.tau_limit * (1.0 + 1e-9)
    # the foot-centre Jacobian's cost: the unmodelled moment r × f_t makes the error grow
    # with the tangential force; least-squares slope of each axis's error on (F_x, F_y)
    X = np.column_stack((run.f_des[keep, :2], np.ones(int(keep.sum()))))
    slope = np.linalg.lstsq(X, err, rcond=None)[0][:2].T if err.shape[0] > 3 else np.full((3, 2), math.nan)
    return {
        "formulation": s.formulation, "profile": s.profile, "duration_s": float(run.t.size * s.dt),
        "fell": run.fall_time_s is not None, "fall_time_s": run.fall_time_s,
        "settle_s": s.settle_s,
        "settling_times_s": settling_times(run),
        "rmse_N": np.sqrt((err ** 2).mean(axis=0)).tolist() if err.size else [math.nan] * 3,
        "max_error_N": np.abs(err).max(axis=0).tolist() if err.size else [math.nan] * 3,
        "error_per_tangential_force": slope.tolist(),  # [axis][F_x, F_y] [N/N]
        "predicted_rmse_N": np.sqrt((pred_err ** 2).mean(axis=0)).tolist() if err.size else [math.nan] * 3,
        "base_position_drift_max_m": float(pos_drift.max()),
        "base_position_drift_settled_max_m": float(pos_drift[keep].max()) if keep.any() else math.nan,
        "base_orientation_drift_max_deg": float(np.degrees(rot_drift.max())),
        "base_orientation_drift_settled_max_deg": float(np.degrees(rot_drift[keep].max())) if keep.any() else math.nan,
        "tau_max_abs_Nm": float(np.abs(run.tau).max()),
        "tau_raw_max_over_limit": float((np.abs(run.tau_raw) / run.tau_limit).max()),
        "ticks_over_torque_limit": int(over.any(axis=1).sum()),
        "fallback_ticks": int(run.fallback.sum()),
        "ticks_with_binding_inequalities": int((run.active > 0).sum()),
        "foot_slip_max_m": float(run.slip.max()),
        "support_normal_min_N": float(run.f_support[:, 2].min()),
    }
