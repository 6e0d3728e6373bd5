"""``projected``: projected inverse dynamics (seed 004 §II; Aghili, Mistry & Righetti).

With the stacked contact Jacobian J and P = I − J⁺J the projector onto the motion
space, the desired acceleration is made consistent with the contacts,
q̈ = P q̈_des − J⁺ J̇v, and the torque is the minimum-norm one that produces it in the
motion space: τ = (P Sᵀ)⁺ P (M q̈ + h). Contact forces are implicit (τ_c = 0); they and
the resulting q̈ are recovered by constrained forward dynamics, so the dynamics hold
exactly even when the contacts cannot balance the base (then q̈ differs from the
projected desired one).
"""

from __future__ import annotations

import numpy as np

from .base import Formulation


class Projected(Formulation):
    name = "projected"
    defaults = {"rcond": 1e-10}  # cut-off of small singular values in the pseudo-inverses

    def _compute(self):
        m, M, h = self.model, self.terms.M, self.terms.h
        nv, nb = m.nv, m.n_base
        rcond = self.options["rcond"]
        J = self.stacked_jacobian()
        qdd = self.qdd_des.copy()
        if J.shape[0]:
            J_pinv = np.linalg.pinv(J, rcond=rcond)
            P = np.eye(nv) - J_pinv @ J
            qdd = P @ qdd - J_pinv @ self.stacked_drift()
            PST = P[:, nb:]
            self.tau[:] = np.linalg.lstsq(PST, P @ (M @ qdd + h), rcond=rcond)[0]
        else:
            if nb:
                qdd[:nb] = np.linalg.solve(M[:nb, :nb], -(M[:nb, nb:] @ qdd[nb:] + h[:nb]))
            self.tau[:] = (M @ qdd + h)[nb:]
        self.constrained_forward_dynamics(self.tau)
        return "solved", 0, 0.0
