"""``rnea``: plain inverse dynamics, no contact (seed 003, "plain vanilla").

Fixed base: τ = M q̈_des + h, identical to ``pinocchio.rnea``. Floating base without
contacts the base is unactuated, so the base acceleration is the one that makes the
base wrench zero (a free-flying robot) and τ follows from the joint rows.

With ``backend`` "auto" (default) a fixed base runs compiled (idyn_control.native: the
Pinocchio pass in C++, then τ = M q̈_des + h, which is what RNEA computes, to round-off);
the controller node's compiled loop then runs the whole tick.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from .. import native
from .base import Formulation


class Rnea(Formulation):
    name = "rnea"
    predicts_forces = False
    defaults = {
        "backend": "auto",  # "auto" | "native" | "python": the compiled tick (fixed base only)
    }

    def __init__(self, model, dt: float = 1e-3, **options):
        super().__init__(model, dt=dt, **options)
        self._Mqdd = np.zeros(model.nv)
        self._native = self._native_backend(native.Rnea)

    def _compute(self):
        m, terms = self.model, self.terms
        self.qdd[:] = self.qdd_des
        if self._native is not None:  # fixed base; terms.M and h are the engine's
            np.dot(terms.M, self.qdd, out=self._Mqdd)
            np.add(self._Mqdd, terms.h, out=self.tau)
            return "solved", 0, 0.0
        self.balance_base(self.qdd)  # floating base without contact: free flight
        gen = pin.rnea(m.pin_model, terms.data, terms.q, terms.v, self.qdd)
        self.tau[:] = gen[m.n_base:]
        return "solved", 0, 0.0
