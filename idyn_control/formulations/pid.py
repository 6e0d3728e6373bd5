"""``pid``: the error-feedback baseline of seed 000 §7.3 (no model in the loop).

The controller layer turns tracking errors into q̈_des = Kp e + Kd ė (+ q̈_ref); this
formulation maps that to torque through a constant per-joint gain k [N·m/(rad/s²)]
and adds an integral term: τ = k ⊙ q̈_des,j + k ⊙ ki ⊙ ∫ q̈_des,j dt. ``k`` defaults to the
diagonal of M at the neutral configuration, computed once at construction; nothing
model-based runs per tick. The reported q̈ and forces are what τ would produce with the
active contacts held (constrained forward dynamics), for comparison only.

The integral is what carries the body's weight: with no model, the proportional term
alone holds a load only by sagging under it. Its anti-windup bound is a torque (the
integral term never asks a joint for more than ``integral_limit`` N·m), not a bound on
the integral state: a state bound of 1 rad/s capped the project quadruped's integral
term at 0.05 N·m, a tenth of a standing knee's load, and the robot sank 6 cm in 0.9 s
with its legs splaying until the feet slid on μ = 0.1.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from .base import Formulation


class Pid(Formulation):
    name = "pid"
    predicts_forces = False
    respects_torque_limits = True
    defaults = {
        "gain": None,  # per-joint k [N·m/(rad/s²)]; None = diag(M) at neutral
        "ki": 0.0,     # integral gain [1/s]
        "integral_limit": None,  # bound of each joint's integral term [N·m]; None = effort limit
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        gain = self.options["gain"]
        if gain is None:
            M = pin.crba(model.pin_model, model.pin_model.createData(), model.neutral())
            gain = np.diag(M)[model.n_base:].copy()
        self.gain = np.broadcast_to(np.asarray(gain, dtype=float), (model.na,)).copy()
        self.integral_limit = self._integral_limit()
        self.integral = np.zeros(model.na)  # k ⊙ ki ⊙ ∫ q̈_des,j dt [N·m]

    def _integral_limit(self) -> np.ndarray:
        """Per joint [N·m]: one value (a scalar, or a 1-element list as a ROS parameter) or na."""
        limit = self.options["integral_limit"]
        if limit is None:
            return self.model.tau_max.copy()
        return np.broadcast_to(np.asarray(limit, dtype=float).reshape(-1), (self.model.na,)).copy()

    def set_option(self, key, value) -> None:
        super().set_option(key, value)
        if key == "integral_limit":
            self.integral_limit = self._integral_limit()

    def reset(self):
        self.integral[:] = 0.0

    def _compute(self):
        nb = self.model.n_base
        limit = self.integral_limit
        self.integral += (self.gain * self.options["ki"] * self.dt) * self.qdd_des[nb:]
        np.clip(self.integral, -limit, limit, out=self.integral)
        tau = self.gain * self.qdd_des[nb:] + self.integral
        np.clip(tau, -self.model.tau_max, self.model.tau_max, out=self.tau)
        self.constrained_forward_dynamics(self.tau)
        return "solved", 0, 0.0
