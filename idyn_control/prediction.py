"""Dead reckoning over an input gap: the state the controller predicts for itself.

When the state input stops for a short while (a lost /joint_states sample, a stalled
driver, a network hiccup), a controller that only holds its last torque or switches to a
safe output throws a trotting robot: its feet keep the swing or stance of the instant
the input stopped while the body falls on. Instead, for at most ``horizon_s`` after its
last accepted input, the controller keeps controlling on the state its own model says
the robot reached: the last accepted (q, v) integrated forward with the generalized
acceleration q̈ of each tick's solve (the formulation's, which satisfies the dynamics
and holds the stance contacts' acceleration), semi-implicit Euler as the velocity-level
formulations discretize it (seed 000 §3.2: q̈ = (v⁺ − v)/Δt), the planned stance points
stopped as an inelastic impact would (:meth:`StatePredictor.hold_stance`)::

    predictor = StatePredictor(model, horizon_s=0.25)
    predictor.start(q_last, v_last)              # the first tick without input
    q, v = predictor.step(formulation.qdd, dt, stance=planned_stance)  # every such tick
                                                 # (None once past the horizon)

The prediction is bounded: never longer than ``horizon_s`` (then :meth:`step` returns
None and the caller gives the safe output), never non-finite (a non-finite q̈ counts as
zero), joint positions kept inside the URDF limits and velocities within ``v_max``. The
commands computed on it go through the controller's usual clamps.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
from scipy import linalg

from .errors import ConfigError
from .model import RobotModel

#: the longest prediction anyone may ask for [s]: beyond a second the model alone says little
MAX_HORIZON_S = 1.0


class StatePredictor:
    """The controller's own estimate of (q, v) while its state input is missing.

    Attributes:
        q, v: the predicted configuration (Pinocchio conventions) and velocity [rad, m, /s].
        age_s: time since the last accepted input [s] (0 before :meth:`start`).
        active: a prediction runs (between :meth:`start` and :meth:`stop`).
        ticks: predicted ticks since construction; gaps: predictions started.
    """

    def __init__(self, model: RobotModel, horizon_s: float):
        self.model = model
        self.set_horizon(horizon_s)
        self.q = model.neutral()
        self.v = np.zeros(model.nv)
        self._dq = np.zeros(model.nv)
        self._qdd = np.zeros(model.nv)
        self._data = model.pin_model.createData()  # its own: the tick's kinematics stay untouched
        self._J = np.zeros((3 * len(model.contact_frame_ids), model.nv))  # stance points' Jacobian
        self._held = np.zeros(len(model.contact_frame_ids), dtype=bool)  # the points stopped so far
        nb = model.n_base
        joints = model.joint_q_index
        self._joints = joints
        self._q_low = np.where(np.isfinite(model.q_lower), model.q_lower, -np.inf)
        self._q_high = np.where(np.isfinite(model.q_upper), model.q_upper, np.inf)
        v_max = np.abs(model.v_max)
        self._v_max = np.where(np.isfinite(v_max) & (v_max > 0), v_max, np.inf)
        self._nb = nb
        self.age_s = 0.0
        self.active = False
        self.ticks = 0
        self.gaps = 0

    def set_horizon(self, horizon_s: float) -> None:
        """The longest prediction [s], in [0, MAX_HORIZON_S]; 0 = never predict."""
        if not (np.isfinite(horizon_s) and 0.0 <= horizon_s <= MAX_HORIZON_S):
            raise ConfigError("prediction_horizon", horizon_s, f"must be in [0, {MAX_HORIZON_S:g}] s")
        self.horizon_s = float(horizon_s)

    def start(self, q: np.ndarray, v: np.ndarray, age_s: float = 0.0) -> None:
        """Start from the last accepted state, ``age_s`` [s] old now."""
        self.q[:] = q
        self.v[:] = v
        self.age_s = float(age_s)
        self._held[:] = False
        self.active = True
        self.gaps += 1

    def stop(self) -> None:
        """Fresh input again (or the safe output): the next gap starts anew."""
        self.active = False

    def step(self, qdd: np.ndarray, dt: float, stance=None) -> tuple[np.ndarray, np.ndarray] | None:
        """Advance by ``dt`` [s] with the generalized acceleration ``qdd`` of the last solve
        (v ← v + q̈ dt, q ← q ⊕ v dt); None when that would pass the horizon.

        ``stance``: the contacts (model order, bool) that hold the ground now. Their points
        get zero velocity (:meth:`hold_stance`) when the prediction starts and when one
        comes down: the solve's q̈ holds a stance contact's *acceleration* at zero, so a
        velocity it had when the input stopped (a foot that had just touched down, a
        slipping one) would persist for the whole gap, and a foot the schedule puts down is
        stopped by the ground, not by q̈."""
        if not self.active or self.age_s + dt > self.horizon_s + 1e-9:
            return None
        qdd_ = self._qdd
        np.copyto(qdd_, qdd)
        qdd_[~np.isfinite(qdd_)] = 0.0
        v = self.v
        v += qdd_ * dt
        joints_v = v[self._nb:]
        np.clip(joints_v, -self._v_max, self._v_max, out=joints_v)
        if stance is not None:
            stance = np.asarray(stance, dtype=bool)
            if (stance & ~self._held).any():  # the prediction starts or a point comes down: stop
                self.hold_stance(stance)      # it (the next solves' q̈ keep it still)
            self._held[:] = stance
        np.multiply(v, dt, out=self._dq)
        self.q[:] = pin.integrate(self.model.pin_model, self.q, self._dq)
        qj = self.q[self._joints]
        np.clip(qj, self._q_low, self._q_high, out=qj)
        self.q[self._joints] = qj
        self.age_s += dt
        self.ticks += 1
        return self.q, self.v

    def hold_stance(self, stance) -> None:
        """Stop the ``stance`` contact points: v ← v − M⁻¹Jᵀ(J M⁻¹Jᵀ)⁺ J v, the velocity
        after a perfectly inelastic impact at those points (J: their translational
        Jacobians at q; the smallest change of v in the kinetic-energy metric that zeroes J v)."""
        idx = np.flatnonzero(np.asarray(stance, dtype=bool))
        if idx.size == 0:
            return
        pm, data, ids = self.model.pin_model, self._data, self.model.contact_frame_ids
        pin.computeJointJacobians(pm, data, self.q)
        M = pin.crba(pm, data, self.q)  # its upper triangle: what the factorization reads
        J = self._J[: 3 * idx.size]
        for row, i in enumerate(idx):
            J[3 * row: 3 * row + 3] = pin.getFrameJacobian(pm, data, ids[i], pin.LOCAL_WORLD_ALIGNED)[:3]
        Minv_Jt = linalg.cho_solve(linalg.cho_factor(M, check_finite=False), J.T, check_finite=False)
        A = J @ Minv_Jt
        # redundant points (a sole's corners) make J M⁻¹Jᵀ singular: a relative 1e-12 ridge
        # (J v then vanishes to that relative accuracy)
        A.flat[:: A.shape[0] + 1] += 1e-12 * np.trace(A) + 1e-300
        impulse = linalg.cho_solve(linalg.cho_factor(A, check_finite=False), J @ self.v, check_finite=False)
        self.v -= Minv_Jt @ impulse
