"""``contact_lstsq``: floating base, contact forces by least squares (seed 003).

The base is unactuated, so its rows of the dynamics, M_b q̈ + h_b = J_bᵀ f, fix the
contact forces. With several contacts they are indeterminate: take the minimum-norm
solution, or (``nearest_to_guess``) the one nearest to the previous tick's forces,
which smooths them over time. When the base rows cannot be met exactly (fewer than
three non-collinear contacts) the base acceleration is corrected so that the dynamics
hold with the forces found. Torques follow from the joint rows.
"""

from __future__ import annotations

import numpy as np

from .base import Formulation


class ContactLstsq(Formulation):
    name = "contact_lstsq"
    defaults = {
        "nearest_to_guess": False,  # False: minimum norm; True: nearest to the previous forces
        "rcond": 1e-10,             # cut-off of small singular values
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        self._previous = np.zeros((self.contacts.size, 3))

    def reset(self):
        self._previous[:] = 0.0

    def _compute(self):
        m, M, h = self.model, self.terms.M, self.terms.h
        nb = m.n_base
        self.qdd[:] = self.qdd_des
        J = self.stacked_jacobian()
        if nb == 0 or J.shape[0] == 0:
            self.balance_base(self.qdd)  # free-flying base (no-op for a fixed one)
            self.torque_from_dynamics(self.qdd, np.zeros(0))
            return "solved", 0, 0.0
        base_wrench = M[:nb] @ self.qdd + h[:nb]
        Jb_T = J[:, :nb].T  # (6, 3k)
        guess = self._previous[self.contacts.order].reshape(-1)
        if not self.options["nearest_to_guess"]:
            guess = np.zeros_like(guess)
        f = guess + np.linalg.lstsq(Jb_T, base_wrench - Jb_T @ guess, rcond=self.options["rcond"])[0]
        # make the base rows hold exactly with these forces
        self.balance_base(self.qdd, Jb_T @ f)
        self.set_forces(f)
        self._previous[:] = self.forces
        self.torque_from_dynamics(self.qdd, f)
        return "solved", 0, 0.0
