"""``pid``: the error-feedback baseline of seed 000 §7.3 (no model in the loop).

The controller layer turns tracking errors into q̈_des = Kp e + Kd ė (+ q̈_ref); this
formulation maps that to torque through a constant per-joint gain k [N·m/(rad/s²)]
and adds an integral term: τ = k ⊙ q̈_des,j + ki ⊙ ∫ q̈_des,j dt. ``k`` defaults to the
diagonal of M at the neutral configuration, computed once at construction; nothing
model-based runs per tick. The reported q̈ and forces are what τ would produce with the
active contacts held (constrained forward dynamics), for comparison only.
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
        "integral_limit": 1.0,  # clamp of each integral state [rad/s]
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        gain = self.options["gain"]
        if gain is None:
            M = pin.crba(model.pin_model, model.pin_model.createData(), model.neutral())
            gain = np.diag(M)[model.n_base:].copy()
        self.gain = np.broadcast_to(np.asarray(gain, dtype=float), (model.na,)).copy()
        self.integral = np.zeros(model.na)

    def reset(self):
        self.integral[:] = 0.0

    def _compute(self):
        nb = self.model.n_base
        lim = self.options["integral_limit"]
        self.integral += self.qdd_des[nb:] * self.dt
        np.clip(self.integral, -lim, lim, out=self.integral)
        tau = self.gain * (self.qdd_des[nb:] + self.options["ki"] * self.integral)
        np.clip(tau, -self.model.tau_max, self.model.tau_max, out=self.tau)
        self.constrained_forward_dynamics(self.tau)
        return "solved", 0, 0.0
