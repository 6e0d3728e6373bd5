"""Per-tick rigid-body terms: one Pinocchio pass fills M, h and the kinematics.

Buffers are allocated once; :meth:`DynamicsTerms.update` refreshes them in place.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from .model import RobotModel


class DynamicsTerms:
    """Mass matrix ``M`` (nv×nv, symmetric), bias ``h = C v + g`` (nv) at (q, v).

    After :meth:`update`, ``data`` holds joint placements, velocities, joint Jacobians
    and the zero-acceleration kinematics needed for contact drift terms.
    """

    def __init__(self, model: RobotModel):
        self.model = model
        self.data = model.pin_model.createData()
        nv = model.nv
        self.M = np.zeros((nv, nv))
        self.h = np.zeros(nv)
        self.q = np.zeros(model.nq)
        self.v = np.zeros(nv)
        self._zero_a = np.zeros(nv)
        self._lower = np.tril_indices(nv, -1)
        self._upper_only = not self._mass_matrix_is_full()

    def update(self, q: np.ndarray, v: np.ndarray) -> None:
        """Compute M, h, joint Jacobians and frame kinematics at (q, v)."""
        pm, data = self.model.pin_model, self.data
        self.q[:] = q
        self.v[:] = v
        pin.computeAllTerms(pm, data, self.q, self.v)
        self.M[:] = data.M
        if self._upper_only:  # older Pinocchio fills the upper triangle only
            self.M[self._lower] = self.M.T[self._lower]
        self.h[:] = data.nle
        # zero-acceleration pass: frame classical accelerations are then the drift J̇v
        pin.forwardKinematics(pm, data, self.q, self.v, self._zero_a)
        pin.updateFramePlacements(pm, data)

    def _mass_matrix_is_full(self) -> bool:
        """Whether this Pinocchio fills both triangles of M (4.x does, 2.x/3.x did not)."""
        pm = self.model.pin_model
        data = pm.createData()
        q = pin.randomConfiguration(pm, -np.ones(pm.nq), np.ones(pm.nq))
        pin.computeAllTerms(pm, data, q, np.zeros(pm.nv))
        return bool(np.allclose(data.M, data.M.T, atol=0.0, rtol=1e-12)) and bool(np.tril(data.M, -1).any())
