"""``projected``: projected inverse dynamics (seed 004 §II; Aghili, Mistry & Righetti).

With the stacked contact Jacobian J and P = I − J⁺J the projector onto the motion
space, the desired acceleration is made consistent with the contacts,
q̈ = P q̈_des − J⁺ J̇v, and the torque is the minimum-norm one that produces it in the
motion space: τ = (P Sᵀ)⁺ P (M q̈ + h). Contact forces are implicit (τ_c = 0); they and
the resulting q̈ are recovered by constrained forward dynamics, so the dynamics hold
exactly even when the contacts cannot balance the base (then q̈ differs from the
projected desired one).

Computation: one QR of Jᵀ gives J⁺ and an orthonormal basis N of null(J), P = N Nᵀ, so
P Sᵀ = N N_jᵀ (N_j the joint rows of N) and τ = (N_jᵀ)⁺ Nᵀ (M q̈ + h): the pseudo-inverse
of a d × na matrix (d = dim null(J)) instead of an nv × na least-squares problem.
:mod:`idyn_control.linalg` falls back to the SVD when a matrix is rank-deficient or
ill-conditioned, so the rank decisions (``rcond``) are those of the SVD.
"""

from __future__ import annotations


from ..linalg import pinv, pinv_and_null_space
from .base import Formulation

class Projected(Formulation):
    name = "projected"
    defaults = {"rcond": 1e-10}  # cut-off of small singular values in the pseudo-inverses

    def _compute(self):
        m, M, h = self.model, self.terms.M, self.terms.h
        nb = m.n_base
        rcond = self.options["rcond"]
        J = self.stacked_jacobian()
        qdd = self.qdd_des.copy()
        if J.shape[0]:
            J_pinv, N = pinv_and_null_space(J, rcond)  # P = N Nᵀ
            qdd = N @ (N.T @ qdd) - J_pinv @ self.stacked_drift()
            # (P Sᵀ)⁺ P = (N_jᵀ)⁺ Nᵀ since NᵀN = I
            self.tau[:] = pinv(N[nb:].T, rcond) @ (N.T @ (M @ qdd + h))
        else:
            self.balance_base(qdd)
            self.tau[:] = (M @ qdd + h)[nb:]
        self.constrained_forward_dynamics(self.tau)
        return "solved", 0, 0.0
