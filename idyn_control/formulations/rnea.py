"""``rnea``: plain inverse dynamics, no contact (seed 003, "plain vanilla").

Fixed base: τ = M q̈_des + h, identical to ``pinocchio.rnea``. Floating base without
contacts the base is unactuated, so the base acceleration is the one that makes the
base wrench zero (a free-flying robot) and τ follows from the joint rows.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from .base import Formulation


class Rnea(Formulation):
    name = "rnea"
    predicts_forces = False

    def _compute(self):
        m, terms = self.model, self.terms
        self.qdd[:] = self.qdd_des
        if m.floating_base:
            nb = m.n_base
            M, h = terms.M, terms.h
            # base rows: M_bb q̈_b + M_bj q̈_j + h_b = 0
            self.qdd[:nb] = np.linalg.solve(M[:nb, :nb], -(M[:nb, nb:] @ self.qdd[nb:] + h[:nb]))
        gen = pin.rnea(m.pin_model, terms.data, terms.q, terms.v, self.qdd)
        self.tau[:] = gen[m.n_base:]
        return "solved", 0, 0.0
