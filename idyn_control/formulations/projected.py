"""``projected``: projected inverse dynamics (seed 004 §II; Aghili, Mistry & Righetti).

With the stacked contact Jacobian J and P = I − J⁺J the projector onto the motion
space, the desired acceleration is made consistent with the contacts,
q̈ = P q̈_des − J⁺ J̇v, and the torque is chosen in two steps, as in the paper's
hierarchy (motion space first, then constraint space). Contact forces are implicit
(τ_c = 0); they and the resulting q̈ are recovered by constrained forward dynamics, so
the dynamics hold exactly even when the contacts cannot balance the base (then q̈
differs from the projected desired one).

1. Motion space: the τ whose constrained motion comes nearest the projected q̈ in the
   kinetic-energy metric (Gauss's principle), min ‖P(M q̈ + h − Sᵀτ)‖ weighted by M⁻¹.
   With three or more non-collinear contacts on a quadruped every motion-space force is
   actuated (rank N_j = dim null J), the nearest is exact and this is seed 004's τ_m
   whatever the metric. With fewer (a touchdown, trot's diagonal pair) it is not: the
   unweighted residual, which adds newtons of the base to newton-metres of the joints,
   flung ANYmal C's legs on its first foot down (τ 91 N·m, predicted base roll
   −240 rad/s² against 0 desired; it rolled onto its right feet and fell, also on μ ∞).
2. Constraint space (``internal_forces``): the torques left free by step 1 only change
   the internal forces between the feet. ``"min_force"`` takes the smallest contact
   forces, ‖λ‖ minimal (Righetti et al., "Optimal distribution of contact forces with
   inverse dynamics control", 2013): the least tangential force, what friction can hold.
   ``"min_torque"`` takes the minimum-norm τ (Mistry's τ = (P Sᵀ)⁺ P (M q̈ + h)): on
   ANYmal C standing the feet pull apart, |f_t|/f_n ≈ 0.6; at μ 0.7 the predicted forces
   are then off the measured ones by 113 % and 45 % of the ticks saturate a joint.

Computation: one QR of Jᵀ gives J⁺ and an orthonormal basis N of null(J), P = N Nᵀ; with
L Lᵀ = Nᵀ M N, step 1 is the pseudo-inverse (an SVD) of the d × na matrix L⁻¹N_jᵀ
(d = dim null J, N_j the joint rows of N) instead of an nv × na least-squares problem;
its null space Z is step 2's freedom, λ(τ) = (Jᵀ)⁺(M q̈ + h − Sᵀτ) affine in τ.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from ..errors import ConfigError
from ..linalg import cholesky, pinv_and_null_space
from .base import Formulation

#: values of the ``internal_forces`` option
INTERNAL_FORCES = ("min_force", "min_torque")


class Projected(Formulation):
    name = "projected"
    defaults = {
        "rcond": 1e-10,                 # cut-off of small singular values in the pseudo-inverses
        "internal_forces": "min_force",  # constraint-space choice: see the module docstring
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        if self.options["internal_forces"] not in INTERNAL_FORCES:
            raise ConfigError("internal_forces", self.options["internal_forces"],
                              f"must be one of {INTERNAL_FORCES}")
        self._all_torques = np.eye(model.na)  # step 2's freedom when nothing moves (null J = {0})

    def _compute(self):
        m, M, h = self.model, self.terms.M, self.terms.h
        nb = m.n_base
        rcond = self.options["rcond"]
        J = self.stacked_jacobian()
        qdd = self.qdd_des.copy()
        if not J.shape[0]:
            self.balance_base(qdd)
            self.tau[:] = (M @ qdd + h)[nb:]
            self.constrained_forward_dynamics(self.tau)
            return "solved", 0, 0.0
        J_pinv, N = pinv_and_null_space(J, rcond)  # P = N Nᵀ
        qdd = N @ (N.T @ qdd) - J_pinv @ self.stacked_drift()
        gen = M @ qdd + h  # the generalized force the projected q̈ needs
        tau = np.zeros(m.na)
        free = self._all_torques  # torques that leave the motion unchanged (step 2's freedom)
        if N.shape[1]:
            # step 1 in the metric M⁻¹: ‖L⁻¹Nᵀ(gen − Sᵀτ)‖ = ‖q̈(τ) − q̈‖ in Nᵀ M N
            L = cholesky(N.T @ M @ N)  # PD when M is (N has independent columns)
            W = N.T if L is None else blas.dtrsm(1.0, L, N.T, lower=1)  # L⁻¹ Nᵀ; None: a broken model
            U, s, Vt = np.linalg.svd(W[:, nb:])
            rank = int(np.count_nonzero(s > rcond * s[0])) if s.size else 0
            tau = Vt[:rank].T @ ((U[:, :rank].T @ (W @ gen)) / s[:rank])
            free = Vt[rank:].T
        if self.options["internal_forces"] == "min_force" and free.shape[1]:
            C = J_pinv[nb:].T  # λ(τ) = (Jᵀ)⁺ gen − C τ
            lam = J_pinv.T @ gen - C @ tau
            tau += free @ np.linalg.lstsq(C @ free, lam, rcond=rcond)[0]
        self.tau[:] = tau
        self.constrained_forward_dynamics(self.tau)
        return "solved", 0, 0.0
