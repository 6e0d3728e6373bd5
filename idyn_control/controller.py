"""The ROS-free controller: references → desired accelerations → formulation → safety.

Layer 5 of DESIGN.md §3. The ROS node and the lock-step simulator both drive this class,
so the code path from a measured state to a torque command is the same everywhere::

    ctrl = Controller(model, ControllerConfig(formulation="qp_coulomb"))
    ctrl.reset(q, v)                       # activate: hold the measured posture
    cmd = ctrl.update(q, v, contact_mask)  # every tick → cmd.tau (Pinocchio joint order)

Desired accelerations come from a small weighted least-squares problem over q̈ (the
kinematic layer): stance feet keep zero acceleration, swing feet and the base follow
their references with PD feedback, the posture follows the joint reference. The chosen
formulation turns q̈_des into torques and contact forces. With ``stabilization: viip`` the
VIIP balance term of seed 000 §7.3 (:mod:`idyn_control.stabilization`) adds the base
acceleration of virtual compressive contact-normal forces to the base task (or their
torques to the command, ``viip_output: torque``). The safety layer then drops
non-finite or failed solutions (fallback per config), clamps to the effort limits and
optionally limits the torque rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pinocchio as pin

from . import formulations
from .contacts import ContactTransitions
from .errors import ConfigError, ShapeError
from .formulations.base import Result
from .linalg import solve_pd
from .model import RobotModel
from .stabilization import STABILIZATIONS, VIIP_OUTPUTS, ViipForces, ViipStabilizer

SAFE_OUTPUTS = ("zero", "damping", "gravity", "hold")


def trim_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim``); False where
    that does not exist. For after a formulation was replaced (never in a tick): the old and
    the new one coexisted for a moment, and without it the process keeps that high-water
    mark (~2.5 MB for the quadruped's compiled wbc_qp) as resident memory."""
    import ctypes

    try:
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):
        return False


@dataclass
class ControllerConfig:
    """Controller parameters (the YAML's ``controller`` section maps onto these).

    Gains are per joint or scalar; units: kp [1/s²], kd [1/s] (acceleration gains, i.e.
    the reference dynamics q̈ = kp e + kd ė, independent of the robot's inertia).
    """

    formulation: str = "qp_coulomb"
    formulation_options: dict[str, Any] = field(default_factory=dict)
    dt: float = 1e-3
    joint_kp: float | Sequence[float] = 400.0
    joint_kd: float | Sequence[float] = 40.0
    base_kp: float = 400.0     # base position/orientation [1/s²]
    base_kd: float = 40.0
    foot_kp: float = 900.0     # swing-foot tracking [1/s²]
    foot_kd: float = 60.0
    stance_weight: float = 100.0   # kinematic layer weights
    base_weight: float = 10.0
    swing_weight: float = 10.0
    posture_weight: float = 1.0
    damping: float = 1e-6          # Tikhonov term of the kinematic layer
    safe_output: str = "damping"   # zero | damping | gravity | hold
    safe_damping: float = 0.5      # N·m·s/rad, for safe_output = damping
    torque_rate_limit: float = 0.0  # N·m/s per joint, 0 = off
    effort_limit_scale: float = 1.0  # commanded |τ| ≤ scale · URDF effort limit
    contact_ramp_time: float = 0.0  # [s] contact make/break: force bounds ramped over it, 0 = switched
    # VIIP balance (seed 000 §7.3): gains per base axis x, y, z, roll, pitch, yaw (world)
    stabilization: str = "none"     # none | viip
    viip_kp: Sequence[float] = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)     # [1/s²]
    viip_kd: Sequence[float] = (0.0, 0.0, 0.0, 20.0, 20.0, 0.0)   # [1/s]
    viip_output: str = "acceleration"  # acceleration (into q̈_des) | torque (added to τ)

    def validate(self) -> None:
        if self.formulation not in formulations.names():
            formulations.get(self.formulation)  # raises UnknownNameError listing valid ones
        if self.safe_output not in SAFE_OUTPUTS:
            raise ConfigError("safe_output", self.safe_output, f"must be one of {SAFE_OUTPUTS}")
        if not (np.isfinite(self.dt) and 0.0 < self.dt <= 0.1):
            raise ConfigError("dt", self.dt, "must be in (0, 0.1] s")
        for key in ("base_kp", "base_kd", "foot_kp", "foot_kd", "stance_weight", "base_weight",
                    "swing_weight", "posture_weight", "safe_damping", "torque_rate_limit", "contact_ramp_time"):
            value = getattr(self, key)
            if not np.isfinite(value) or value < 0.0:
                raise ConfigError(key, value, "must be finite and ≥ 0")
        if self.stabilization not in STABILIZATIONS:
            raise ConfigError("stabilization", self.stabilization, f"must be one of {STABILIZATIONS}")
        if self.viip_output not in VIIP_OUTPUTS:
            raise ConfigError("viip_output", self.viip_output, f"must be one of {VIIP_OUTPUTS}")
        for key in ("viip_kp", "viip_kd"):
            value = np.asarray(getattr(self, key), dtype=float)
            if value.size not in (1, 6) or not np.isfinite(value).all() or (value < 0).any():
                raise ConfigError(key, list(np.atleast_1d(getattr(self, key))),
                                  "needs 1 or 6 finite values ≥ 0 (x, y, z, roll, pitch, yaw)")
        if not (0.0 < self.effort_limit_scale <= 1.0):
            raise ConfigError("effort_limit_scale", self.effort_limit_scale, "must be in (0, 1]")
        for key in ("joint_kp", "joint_kd"):
            value = np.asarray(getattr(self, key), dtype=float)
            if not np.isfinite(value).all() or (value < 0).any():
                raise ConfigError(key, getattr(self, key), "must be finite and ≥ 0")


@dataclass(frozen=True)
class Command:
    """One controller output.

    Attributes:
        tau: torque command [N·m], Pinocchio joint order, finite and within limits.
        result: the formulation's result (None when the formulation was not run).
        source: "formulation", or the safe output used instead ("zero", "damping", ...).
        saturated: number of joints clamped to their effort limit this tick.
    """

    tau: np.ndarray
    result: Result | None
    source: str
    saturated: int


class Controller:
    """References, kinematic layer, formulation and safety for one robot."""

    def __init__(self, model: RobotModel, config: ControllerConfig | None = None):
        self.model = model
        self.config = config or ControllerConfig()
        self.config.validate()
        c = self.config
        formulation = formulations.make(c.formulation, model, dt=c.dt, **c.formulation_options)
        nv, na, k = model.nv, model.na, len(model.contacts)
        self.tau_limit = model.tau_max * c.effort_limit_scale
        self.joint_kp = np.broadcast_to(np.asarray(c.joint_kp, dtype=float), (na,)).copy()
        self.joint_kd = np.broadcast_to(np.asarray(c.joint_kd, dtype=float), (na,)).copy()
        # references (world frame for the base and feet)
        self.q_ref = model.neutral()[model.joint_q_index].copy()
        self.v_ref = np.zeros(na)
        self.a_ref = np.zeros(na)
        self.base_position_ref = np.zeros(3)
        self.base_rotation_ref = np.eye(3)
        self.base_velocity_ref = np.zeros(3)   # world [m/s]
        self.base_angular_ref = np.zeros(3)    # world [rad/s]
        self.foot_position_ref = np.zeros((k, 3))
        self.foot_velocity_ref = np.zeros((k, 3))
        self.foot_acceleration_ref = np.zeros((k, 3))
        self.swing = np.zeros(k, dtype=bool)   # feet that follow foot references
        # make and break ramp the contacts' force bounds (contact_ramp_time), from nothing
        # up to the robot's weight, from the carried force down to nothing
        self.transitions = ContactTransitions(k, 9.81 * pin.computeTotalMass(model.pin_model))
        # kinematic layer buffer: right-hand side of its normal equations
        self._rhs = np.zeros(nv)
        self.qdd_des = np.zeros(nv)
        self._tau_prev = np.zeros(na)
        self._gravity = None  # lazily built fallback formulation
        self._J6 = np.zeros((6, nv))
        self.counters = {"fallback": 0, "saturated_ticks": 0, "nonfinite_solution": 0, "failed_solve": 0}
        self.last_source = "none"
        self._native_layer = None
        self.stabilizer = ViipStabilizer(model, c.viip_kp, c.viip_kd) if model.floating_base else None
        if c.stabilization != "none" and self.stabilizer is None:
            raise ConfigError("stabilization", c.stabilization, "needs a floating-base robot")
        self.last_viip: ViipForces | None = None  # the last tick's virtual forces (stabilization viip)
        self.formulation = formulation  # after the buffers: binds the compiled kinematic layer

    @property
    def formulation(self):
        """The inverse-dynamics formulation; assigning one (e.g. rebuilt with new options)
        rebinds the compiled kinematic layer to it."""
        return self._formulation

    @formulation.setter
    def formulation(self, formulation) -> None:
        self._formulation = formulation
        # the kinematic layer runs compiled when the formulation does (same equations); the
        # VIIP stabilization exists in Python only, so with it the whole tick stays in Python
        self._native_layer = None
        engine = getattr(formulation, "_engine", None)
        if engine is not None and self.config.stabilization == "none":
            from .native import KinematicLayer

            self._native_layer = KinematicLayer(engine, self)

    # ------------------------------------------------------------------ references
    def reset(self, q: np.ndarray, v: np.ndarray) -> None:
        """Take the measured state as the reference (lifecycle activate)."""
        m = self.model
        self.q_ref[:] = q[m.joint_q_index]
        self.v_ref[:] = 0.0
        self.a_ref[:] = 0.0
        if m.floating_base:
            self.base_position_ref[:] = q[:3]
            self.base_rotation_ref[:] = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        self.base_velocity_ref[:] = 0.0
        self.base_angular_ref[:] = 0.0
        self.swing[:] = False
        self.transitions.reset()
        self.formulation.reset()
        self._tau_prev[:] = 0.0

    def set_joint_reference(self, q_ref, v_ref=None, a_ref=None) -> None:
        """Joint position [rad], velocity [rad/s], acceleration [rad/s²] references."""
        na = self.model.na
        for name, value, target in (("q_ref", q_ref, self.q_ref), ("v_ref", v_ref, self.v_ref),
                                    ("a_ref", a_ref, self.a_ref)):
            if value is None:
                if target is not self.q_ref:
                    target[:] = 0.0
                continue
            arr = np.asarray(value, dtype=float)
            if arr.shape != (na,):
                raise ShapeError(name, arr.shape, (na,))
            target[:] = arr

    def set_base_reference(self, position, rotation=None, velocity=(0, 0, 0), angular=(0, 0, 0)) -> None:
        """Base pose (world position [m], rotation matrix) and world twist references."""
        self.base_position_ref[:] = position
        if rotation is not None:
            self.base_rotation_ref[:] = rotation
        self.base_velocity_ref[:] = velocity
        self.base_angular_ref[:] = angular

    def set_foot_reference(self, index: int, position, velocity=(0, 0, 0), acceleration=(0, 0, 0),
                           swing: bool = True) -> None:
        """World-frame reference of contact frame ``index`` while it swings."""
        self.foot_position_ref[index] = position
        self.foot_velocity_ref[index] = velocity
        self.foot_acceleration_ref[index] = acceleration
        self.swing[index] = swing

    def set_measured_forces(self, forces_world) -> bool:
        """Hand measured contact forces [N, world frame] to a formulation that uses them.

        ``forces_world``: (k, 3) in the order of the configured contacts (or the
        ``{frame: force}`` mapping the formulation accepts): the forces of the control
        period that just ended. The ``sensed`` formulation (ID(t_{i−1}), ID(t_{i−2}), seed
        000 §7.3) delays them by its ``delay_ticks``; with ID(t_{i−1}) a contact not active
        at the solve keeps its entry but contributes nothing, ID(t_{i−2}) applies its older
        measurement whole (``Sensed._activate_measured_contacts``). Returns False (and
        ignores them) when the formulation takes no measurements.
        """
        setter = getattr(self._formulation, "set_measured_forces", None)
        if setter is None:
            return False
        setter(forces_world)
        return True

    def set_desired_forces(self, forces_world) -> bool:
        """Hand desired contact forces [N, world frame] to a formulation that takes them.

        ``forces_world``: ``{frame: force}`` for some force contacts (the others keep their
        value), or (k, 3) in the order of the configured contacts, of which the rows of the
        force contacts are used (``pidc_qp`` and its baselines: ``force_contacts``). The
        force is the ground's on the foot (F_z > 0 presses). Returns False (and ignores them)
        when the formulation takes no desired forces.
        """
        setter = getattr(self._formulation, "set_desired_forces", None)
        if setter is None:
            return False
        setter(forces_world)
        return True

    def set_contact_surface(self, index: int, normal_world, mu: float) -> bool:
        """Local ground normal (world, unit) and Coulomb μ under contact frame ``index``
        (terrain data, seed 000 §7.4–7.5). Friction blocks are rebuilt only when they
        change; returns whether they did."""
        return self.formulation.contacts.set_surface(index, normal_world, mu)

    def set_gains(self, **gains: Any) -> None:
        """Change gains/weights at run time (validated; effective next tick)."""
        trial = ControllerConfig(**{**self.config.__dict__, **gains})
        trial.validate()
        if trial.stabilization != "none" and self.stabilizer is None:
            raise ConfigError("stabilization", trial.stabilization, "needs a floating-base robot")
        rebind = trial.stabilization != self.config.stabilization
        self.config = trial
        if self.stabilizer is not None:
            self.stabilizer.set_gains(trial.viip_kp, trial.viip_kd)
        if rebind:  # the compiled kinematic layer is bound (or unbound) with the stabilization
            self.formulation = self._formulation
        na = self.model.na
        self.joint_kp[:] = np.broadcast_to(np.asarray(trial.joint_kp, dtype=float), (na,))
        self.joint_kd[:] = np.broadcast_to(np.asarray(trial.joint_kd, dtype=float), (na,))
        self.tau_limit[:] = self.model.tau_max * trial.effort_limit_scale

    # ------------------------------------------------------------------ tick
    def desired_acceleration(self, q: np.ndarray, v: np.ndarray, contact_mask: np.ndarray) -> np.ndarray:
        """q̈_des from the references (kinematic layer).

        Reads the formulation's ``terms``/``contacts``, which must be prepared for
        (q, v) — :meth:`update` does that. Runs compiled (idyn_control.native) when the
        formulation does and (q, v) are its prepared state.
        """
        m, c = self.model, self.config
        f = self.formulation
        layer = self._native_layer
        if layer is not None and q is f.terms.q and v is f.terms.v and layer.valid():
            return layer.compute(contact_mask)
        nv, nb = m.nv, m.n_base
        joints = m.joint_q_index
        qdd = self.qdd_des
        a_joint = self.a_ref + self.joint_kp * (self.q_ref - q[joints]) + self.joint_kd * (self.v_ref - v[nb:])
        if not m.floating_base:
            qdd[:] = a_joint
            return qdd
        # weighted least squares over rows: base (6, identity), feet (3 each, J_i),
        # posture (na, identity); the identity blocks only add to H's diagonal
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        v_lin, w_ang = v[:3], v[3:6]
        # base: PD on pose in the world frame, expressed as the free-flyer's local
        # spatial acceleration (linear part: Rᵀ p̈ − ω × v)
        p_dd = c.base_kp * (self.base_position_ref - q[:3]) + c.base_kd * (self.base_velocity_ref - R @ v_lin)
        rot_err = pin.log3(self.base_rotation_ref @ R.T)
        w_dd = c.base_kp * rot_err + c.base_kd * (self.base_angular_ref - R @ w_ang)
        rhs = self._rhs
        wx, wy, wz = w_ang
        vx, vy, vz = v_lin
        # ω × v written out: np.cross costs ~20 µs per call in numpy 2
        rhs[:3] = c.base_weight * (R.T @ p_dd - (wy * vz - wz * vy, wz * vx - wx * vz, wx * vy - wy * vx))
        rhs[3:6] = c.base_weight * (R.T @ w_dd)
        if c.stabilization == "viip":
            viip = self.stabilize(q, v)
            if c.viip_output == "acceleration":  # seed 000 §7.3: accumulated into q̈_des (base task)
                rhs[:6] += c.base_weight * viip.qdd_base
        rhs[6:] = c.posture_weight * a_joint
        # feet: stance → zero acceleration, damping what velocity a planted foot has
        # (touchdown, slip) as TSID's contact task does; swing → PD on the reference
        cs = f.contacts
        J = cs.J.reshape(-1, nv)
        vel = (J @ v).reshape(-1, 3)
        b_feet = np.where(self.swing[:, None],
                          self.foot_acceleration_ref + c.foot_kp * (self.foot_position_ref - cs.position)
                          + c.foot_kd * (self.foot_velocity_ref - vel),
                          -c.foot_kd * vel) - cs.drift
        w_feet = np.where(self.swing, c.swing_weight, np.where(contact_mask, c.stance_weight, 0.0))
        WJ = J * np.repeat(w_feet, 3)[:, None]
        H = J.T @ WJ
        diag = np.einsum("ii->i", H)
        diag[:6] += c.base_weight + c.damping
        diag[6:] += c.posture_weight + c.damping
        rhs += WJ.T @ b_feet.reshape(-1)
        qdd[:] = solve_pd(H, rhs)
        return qdd

    def stabilize(self, q: np.ndarray, v: np.ndarray) -> ViipForces:
        """The VIIP virtual compressive forces of this tick (seed 000 §7.3,
        :class:`~idyn_control.stabilization.ViipStabilizer`) on the feet the formulation holds,
        from the base's pose error against its reference; kept in :attr:`last_viip`.
        Reads the formulation's prepared ``terms``/``contacts``, as :meth:`desired_acceleration`."""
        f = self.formulation
        cs = f.contacts
        self.last_viip = self.stabilizer.compute(
            q, v, f.terms.M, cs, cs.active & ~cs.released, self.base_position_ref, self.base_rotation_ref,
            self.base_velocity_ref, self.base_angular_ref)
        return self.last_viip

    def update(self, q: np.ndarray, v: np.ndarray, contact_mask: Sequence[bool]) -> Command:
        """One control tick: state + contact estimates → safe torque command."""
        m, f = self.model, self.formulation
        mask = np.asarray(contact_mask, dtype=bool)
        if mask.shape != (len(m.contacts),):
            raise ShapeError("contact_mask", mask.shape, (len(m.contacts),))
        # a foot the gait swings is lifted, not held, even while it still touches: the
        # kinematic layer tracks its swing reference, so the formulation must not also
        # hold it as a contact (bilateral formulations would pin it to the ground); a
        # contact that makes or breaks is held with a ramped force bound (contact_ramp_time)
        held = self.transitions.update(mask & ~self.swing, f.contacts, f.forces, self.config.contact_ramp_time,
                                       self.config.dt)
        active = tuple(frame for frame, on in zip(m.contact_frames, held) if on)
        f.prepare(q, v, active)  # one Pinocchio pass serves the kinematic layer and the solve
        try:
            result = f.solve_prepared(self.desired_acceleration(f.terms.q, f.terms.v, mask))
        except (ValueError, np.linalg.LinAlgError):
            result = None
        if result is None or not result.ok:
            self.counters["failed_solve"] += 1
            return self._finish(self.safe_torque(q, v, mask), result, self.config.safe_output)
        if not np.isfinite(result.tau).all():
            self.counters["nonfinite_solution"] += 1
            return self._finish(self.safe_torque(q, v, mask), result, self.config.safe_output)
        tau = result.tau
        if self.config.stabilization == "viip" and self.config.viip_output == "torque":
            tau = tau + self.last_viip.tau  # Pacer's experiments: legs press the virtual forces
        return self._finish(tau, result, "formulation")

    def safe_command(self, q: np.ndarray, v: np.ndarray, contact_mask: Sequence[bool]) -> Command:
        """A tick of the safe output instead of the formulation (stale inputs: the node's
        watchdog), clamped and recorded like any command."""
        return self._finish(self.safe_torque(q, v, contact_mask), None, self.config.safe_output)

    def safe_torque(self, q: np.ndarray, v: np.ndarray, contact_mask: Sequence[bool]) -> np.ndarray:
        """The configured safe output at (q, v) [N·m]."""
        mode = self.config.safe_output
        nb = self.model.n_base
        if mode == "zero":
            return np.zeros(self.model.na)
        if mode == "hold":
            return self._tau_prev.copy()
        if mode == "damping":
            return -self.config.safe_damping * v[nb:]
        if self._gravity is None:
            self._gravity = formulations.make("contact_lstsq", self.model, dt=self.config.dt)
        active = [fr for fr, on in zip(self.model.contact_frames, contact_mask) if on]
        try:
            tau = self._gravity.solve(q, np.zeros(self.model.nv), np.zeros(self.model.nv), active).tau
        except (ValueError, np.linalg.LinAlgError):
            tau = np.zeros(self.model.na)
        return tau if np.isfinite(tau).all() else np.zeros(self.model.na)

    def _finish(self, tau: np.ndarray, result: Result | None, source: str) -> Command:
        """Clamp, rate-limit and record a command."""
        if source != "formulation":
            self.counters["fallback"] += 1
        tau = np.where(np.isfinite(tau), tau, 0.0)
        rate = self.config.torque_rate_limit
        if rate > 0.0:
            step = rate * self.config.dt
            tau = np.minimum(np.maximum(tau, self._tau_prev - step), self._tau_prev + step)  # np.clip: 3× slower
        saturated = int((np.abs(tau) > self.tau_limit).sum())
        if saturated:
            self.counters["saturated_ticks"] += 1
            tau = np.minimum(np.maximum(tau, -self.tau_limit), self.tau_limit)
        self._tau_prev[:] = tau
        self.last_source = source
        return Command(tau=tau, result=result, source=source, saturated=saturated)
