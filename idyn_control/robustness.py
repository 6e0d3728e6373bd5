"""Always a usable answer: random physically possible cases and the invariants every answer
of a QP formulation must meet (issue 14 item 1).

A case is a robot, a formulation and one tick's inputs: joint positions inside their
limits, a base orientation (any, or within 45° of upright), moderate velocities, a desired
acceleration, a random subset of held contacts and, for ``pidc_qp`` and its baselines, a
desired force on the first contact. :func:`check` says what an answer violates:

- ``nonfinite``: τ, q̈ or a force is NaN/inf;
- ``dynamics``: ‖M q̈ + h − Sᵀτ − Σ Jᵀf‖ / max(1, ‖M q̈ + h‖) > 1e-6 (any status);
- ``friction`` / ``unilateral``: a force outside its pyramid or pulling, by more than
  1e-6 of the robot's weight, where the formulation promises it
  (``respects_friction``; ``qp_noslip`` only unilateral) and the answer does not report
  ``Result.relaxed["friction"]``;
- ``torque_limits``: |τ| above τ_max (relative 1e-6) where the formulation promises it,
  unreported;
- ``relaxed_amount``: a reported relaxation whose amount is not what the answer shows
  (friction, torque limits, contact acceleration; :func:`relaxation_shown`).

A *silent failure* is a "solved" answer with any of those, or an exception; a status other
than "solved" is reported (the controller counts it and falls back). ``test_robustness.py``
draws cases with hypothesis; ``bench/robustness.py`` runs ≥ 10⁴ of them and writes JSON.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pinocchio as pin

from . import formulations, robots
from .formulations.base import Formulation, Result
from .model import ContactConfig, RobotModel
from .qp import SOLVED

#: the QP formulations (and the closed-form pidc baseline) whose answers are checked;
#: ``:python`` runs the Python reference of a formulation with a compiled tick
FORMULATIONS = ("wbc_qp", "wbc_qp:python", "qp_coulomb", "qp_coulomb:python", "qp_noslip", "qp_noslip:python",
                "pidc_qp", "pidc_qp_howsm", "pidcwcu")
#: formulations that take a desired force on their first contact (seed 004)
FORCE_CONTROL = ("pidc_qp", "pidc_qp_howsm", "pidcwcu")
#: relative dynamics residual an answer may have (DESIGN.md §2)
RESIDUAL_TOL = 1e-6
#: slack of the friction, unilateral and torque checks (of the weight [N], of τ_max)
CONSTRAINT_TOL = 1e-6
#: the case of a robot with a toe and a heel point per foot (two held points on one rigid
#: link: no q̈ keeps both still while the foot turns)
TOE_HEEL_SUFFIX = "+toe_heel"
TOE_HEEL_OFFSET_M = 0.02


def make(name: str, model: RobotModel) -> Formulation:
    """``name`` or ``name:backend``; force-controlled formulations get their first contact."""
    base, _, backend = name.partition(":")
    options: dict[str, Any] = {"backend": backend} if backend else {}
    if base in FORCE_CONTROL and model.contact_frames:
        options["force_contacts"] = (model.contact_frames[0],)
    return formulations.make(base, model, **options)


def with_toe_and_heel(model: RobotModel, offset_m: float = TOE_HEEL_OFFSET_M) -> RobotModel:
    """A copy of ``model`` whose every contact becomes two, ``offset_m`` ahead of and behind
    the foot frame along its x axis, on the same link (frames ``<foot>_toe``, ``<foot>_heel``)."""
    pm = pin.Model(model.pin_model)
    contacts = []
    for c, fid in zip(model.contacts, model.contact_frame_ids):
        foot = pm.frames[fid]
        for sign, tag in ((1.0, "toe"), (-1.0, "heel")):
            placement = foot.placement * pin.SE3(np.eye(3), np.array([sign * offset_m, 0.0, 0.0]))
            pm.addFrame(pin.Frame(f"{c.frame}_{tag}", foot.parentJoint, fid, placement, pin.FrameType.OP_FRAME))
            contacts.append(ContactConfig(f"{c.frame}_{tag}", c.normal_world.copy(), c.friction))
    copy = RobotModel(pm, urdf_xml=model.urdf_xml, contacts=contacts, package_dirs=model.package_dirs)
    copy.tau_max[:] = model.tau_max
    return copy


@dataclass
class Robot:
    """A robot of the cases: its model, standing configuration and weight [N]."""

    name: str
    model: RobotModel
    q_standing: np.ndarray
    weight_n: float


def load_robot(source: str) -> Robot:
    """A shipped robot's name or a robot file's path; ``<either>+toe_heel`` for the
    toe-and-heel variant (:func:`with_toe_and_heel`)."""
    base, toe_heel = (source[: -len(TOE_HEEL_SUFFIX)], True) if source.endswith(TOE_HEEL_SUFFIX) else (source, False)
    model = robots.load(base)
    q = robots.standing_configuration(model, base)
    if toe_heel:
        model = with_toe_and_heel(model)
    name = robots.spec(base).name + (TOE_HEEL_SUFFIX if toe_heel else "")
    return Robot(name, model, q, pin.computeTotalMass(model.pin_model) * 9.81)


@dataclass(frozen=True)
class Case:
    """One tick's inputs (see the module doc)."""

    q: np.ndarray
    v: np.ndarray
    qdd_des: np.ndarray
    active: tuple[str, ...]
    desired_force: np.ndarray  # [N, world], first contact of force-controlled formulations


def case_from_unit(robot: Robot, u: dict[str, Any]) -> Case:
    """A case from unit draws (so that hypothesis can shrink them): ``near_standing``
    (bool), ``joints`` in [0, 1]^na (fraction of the joint range, or of ±0.3 rad about the
    standing pose), ``quat`` in [-1, 1]^4 (a direction), ``upright`` (bool: tilt ≤ 45°),
    ``v``, ``qdd`` in [-1, 1]^nv, ``mask`` (bool per contact), ``force`` in [-1, 1]^3."""
    m = robot.model
    q = robot.q_standing.copy()
    lo = np.where(np.isfinite(m.q_lower), m.q_lower, -math.pi)
    hi = np.where(np.isfinite(m.q_upper), m.q_upper, math.pi)
    joints = np.asarray(u["joints"], dtype=float)
    if u["near_standing"]:
        q[m.joint_q_index] = np.clip(q[m.joint_q_index] + 0.6 * (joints - 0.5), lo, hi)
    else:
        q[m.joint_q_index] = lo + joints * (hi - lo)
    nb = m.n_base
    if nb:
        quat = np.asarray(u["quat"], dtype=float)
        norm = float(np.linalg.norm(quat))
        quat = quat / norm if norm > 1e-3 else np.array([0.0, 0.0, 0.0, 1.0])
        if u["upright"]:  # the same direction, its rotation scaled to at most 45°
            angle = 2.0 * math.acos(min(1.0, abs(quat[3])))
            axis = quat[:3] / max(1e-12, float(np.linalg.norm(quat[:3])))
            half = 0.5 * min(angle, math.pi / 4)
            quat = np.concatenate((math.sin(half) * axis, [math.cos(half)]))
        q[3:7] = quat
    v_unit = np.asarray(u["v"], dtype=float)
    v = np.zeros(m.nv)
    if nb:
        v[:3] = 0.5 * v_unit[:3]     # [m/s]
        v[3:6] = 1.0 * v_unit[3:6]   # [rad/s]
    v_max = np.where(np.isfinite(m.v_max) & (m.v_max > 0.0), np.minimum(m.v_max, 10.0), 10.0)
    v[nb:] = 0.3 * v_max * v_unit[nb:]  # moderate: 30 % of the joint's speed limit
    qdd = 5.0 * np.asarray(u["qdd"], dtype=float)  # [m/s², rad/s²]
    active = tuple(frame for frame, on in zip(m.contact_frames, u["mask"]) if on)
    share = robot.weight_n / max(1, len(m.contact_frames))
    fx, fy, fz = np.asarray(u["force"], dtype=float)
    force = np.array([0.5 * share * fx, 0.5 * share * fy, share * (1.0 + fz)])  # F_z in [0, 2 share]
    return Case(q, v, qdd, active, force)


def random_unit(robot: Robot, rng: np.random.Generator) -> dict[str, Any]:
    """The unit draws of :func:`case_from_unit` from a numpy generator (the bench's)."""
    m = robot.model
    return {"near_standing": bool(rng.random() < 0.5), "joints": rng.random(m.na), "quat": rng.uniform(-1, 1, 4),
            "upright": bool(rng.random() < 0.5), "v": rng.uniform(-1, 1, m.nv), "qdd": rng.uniform(-1, 1, m.nv),
            "mask": rng.random(len(m.contact_frames)) < 0.7, "force": rng.uniform(-1, 1, 3)}


def solve(f: Formulation, case: Case) -> Result:
    """One solve of ``case`` (the desired force set first where ``f`` takes one)."""
    if hasattr(f, "set_desired_forces") and f.options.get("force_contacts"):
        f.set_desired_forces({f.options["force_contacts"][0]: case.desired_force})
    return f.solve(case.q, case.v, case.qdd_des, case.active)


def check(f: Formulation, result: Result, weight_n: float) -> list[str]:
    """The invariants ``result`` (the last solve of ``f``) violates (module doc)."""
    violations = []
    if not (np.isfinite(result.tau).all() and np.isfinite(result.qdd).all() and np.isfinite(result.forces).all()):
        return ["nonfinite"]
    if f.dynamics_residual(result) > RESIDUAL_TOL:
        violations.append("dynamics")
    tol = CONSTRAINT_TOL * max(1.0, weight_n)
    cs, m = f.contacts, f.model
    unilateral = f.respects_friction or f.name == "qp_noslip"
    if f.predicts_forces and unilateral and "friction" not in result.relaxed:
        for frame, force in zip(result.contact_frames, result.forces):
            i = m.contact_index(frame)
            if cs.basis[i, 2] @ force < -tol:
                violations.append("unilateral")
                break
            if f.respects_friction and (cs.friction_rows[i] @ force).max() > tol:
                violations.append("friction")
                break
    if f.respects_torque_limits and "torque_limits" not in result.relaxed:
        if (np.abs(result.tau) > m.tau_max * (1.0 + CONSTRAINT_TOL) + CONSTRAINT_TOL).any():
            violations.append("torque_limits")
    for key, amount in result.relaxed.items():
        shown = relaxation_shown(f, result, key)
        if shown is not None and abs(amount - shown) > CONSTRAINT_TOL * max(1.0, weight_n, shown):
            violations.append("relaxed_amount")
            break
    return violations


def relaxation_shown(f: Formulation, result: Result, key: str) -> float | None:
    """How far ``result`` is outside the constraint ``key`` of ``RELAXED_CONSTRAINTS``, from
    the answer itself (None for ``non_penetration``, whose bound is internal)."""
    m, cs = f.model, f.contacts
    if key == "torque_limits":
        return max(0.0, float((np.abs(result.tau) - m.tau_max).max(initial=0.0)))
    if key == "friction":
        return max([0.0] + [float((cs.friction_rows[m.contact_index(frame)] @ force).max())
                            for frame, force in zip(result.contact_frames, result.forces)])
    if key == "contact_acceleration":
        gain = f.options.get("contact_gain", 0.0)
        worst = 0.0
        for frame in result.contact_frames:
            i = m.contact_index(frame)
            a = cs.J[i] @ result.qdd + cs.drift[i] + gain * (cs.J[i] @ f.terms.v)
            worst = max(worst, float(np.linalg.norm(a)))
        return worst
    return None


@dataclass
class Tally:
    """Counts over the cases of one (robot, formulation)."""

    cases: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)
    silent_failures: int = 0
    exceptions: int = 0
    relaxed: dict[str, int] = field(default_factory=dict)
    relaxed_max: dict[str, float] = field(default_factory=dict)
    worst_residual: float = 0.0
    solve_time_s: list[float] = field(default_factory=list)

    def add(self, f: Formulation, result: Result | None, weight_n: float, error: str | None = None) -> list[str]:
        """Book one case; returns its violations (``["exception"]`` when it raised)."""
        self.cases += 1
        if result is None:
            self.exceptions += 1
            self.silent_failures += 1
            self.violations[error or "exception"] = self.violations.get(error or "exception", 0) + 1
            return ["exception"]
        self.statuses[result.status] = self.statuses.get(result.status, 0) + 1
        violations = check(f, result, weight_n)
        for v in violations:
            self.violations[v] = self.violations.get(v, 0) + 1
        if violations and result.status == SOLVED:
            self.silent_failures += 1
        for key, amount in result.relaxed.items():
            self.relaxed[key] = self.relaxed.get(key, 0) + 1
            self.relaxed_max[key] = max(self.relaxed_max.get(key, 0.0), amount)
        if np.isfinite(result.qdd).all():
            self.worst_residual = max(self.worst_residual, f.dynamics_residual(result))
        self.solve_time_s.append(result.compute_time_s)
        return violations

    def summary(self) -> dict[str, Any]:
        t = np.asarray(self.solve_time_s) if self.solve_time_s else np.zeros(1)
        return {"cases": self.cases, "statuses": self.statuses, "not_solved": self.cases - self.statuses.get(SOLVED, 0),
                "violations": self.violations, "silent_failures": self.silent_failures,
                "exceptions": self.exceptions, "relaxed": self.relaxed, "relaxed_max": self.relaxed_max,
                "worst_residual": self.worst_residual,
                "tick_us_p50": float(np.median(t) * 1e6), "tick_us_max": float(t.max() * 1e6)}


def run(sources: Sequence[str], names: Sequence[str] = FORMULATIONS, cases: int = 10_000,
        seed: int = 0) -> dict[str, Any]:
    """``cases`` cases spread evenly over robots × formulations (one formulation object per
    pair, solved in sequence so warm starts carry over as in a controller); returns the
    per-pair tallies and the totals."""
    rng = np.random.default_rng(seed)
    loaded = [load_robot(s) for s in sources]
    pairs = [(r, name, make(name, r.model), Tally()) for r in loaded for name in names]
    for i in range(cases):
        robot, name, f, tally = pairs[i % len(pairs)]
        case = case_from_unit(robot, random_unit(robot, rng))
        try:
            result = solve(f, case)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            tally.add(f, None, robot.weight_n, type(exc).__name__)
            continue
        tally.add(f, result, robot.weight_n)
    per_pair = {f"{r.name}/{name}": {**t.summary(), "relaxations": f.relaxations()} for r, name, f, t in pairs}
    total: dict[str, Any] = {"cases": 0, "not_solved": 0, "silent_failures": 0, "exceptions": 0,
                             "dynamics_violations": 0, "relaxed": {}}
    for s in per_pair.values():
        for key in ("cases", "not_solved", "silent_failures", "exceptions"):
            total[key] += s[key]
        total["dynamics_violations"] += s["violations"].get("dynamics", 0)
        for key, n in s["relaxed"].items():
            total["relaxed"][key] = total["relaxed"].get(key, 0) + n
    return {"robots": [r.name for r in loaded], "formulations": list(names), "seed": seed,
            "total": total, "per_pair": per_pair}
