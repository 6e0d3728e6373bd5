"""The contact set: Jacobians, drift terms, tangent bases and friction rows of point contacts.

Layer 2 of DESIGN.md §3. Buffers are sized for every configured contact; an ``active``
mask says which touch now, so QPs keep their size (and warm start) across switches.
All vectors are in the world frame (Pinocchio's LOCAL_WORLD_ALIGNED at the contact point).

A contact against a free body of the model (a grasped box, seed 000 §7.2.2) has the
Jacobian of the point's velocity relative to the body's material point under it, the drift
of that relative acceleration, and the body's surface normal rotated into the world:
its tangent basis and pyramid rows follow the body every tick.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pinocchio as pin

from .dynamics import DynamicsTerms
from .errors import ConfigError, UnknownNameError
from .model import RobotModel
from .qp import INF

#: rows of the friction pyramid per contact: four facets and the unilateral row
PYRAMID_ROWS = 5
#: held points of one body whose pairwise cross products stay below this [m²] lie on a
#: line (ContactSet.held_rows)
COLLINEAR_M2 = 1e-8


def tangent_basis(normal: np.ndarray) -> np.ndarray:
    """Rows (t1, t2, n): an orthonormal, right-handed basis with n = ``normal``."""
    n = normal / np.linalg.norm(normal)
    helper = np.array([1.0, 0.0, 0.0]) if abs(n[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    t1 = np.cross(helper, n)
    t1 /= np.linalg.norm(t1)
    t2 = np.cross(n, t1)
    return np.vstack((t1, t2, n))


#: the largest μ a friction pyramid gets: a larger one (a node's ``contacts.friction`` or
#: ``~/contact_ground`` may say up to 1000; the lock-step loop tells a μ = ∞ ground as 1000)
#: is clamped to it. No ground grips harder than μ ≈ 2, and the pyramid must still bound
#: the tangential forces: with μ 1000, Stage I of ``qp_coulomb`` met its base wrench with
#: equal and opposite forces of 10³–10⁶ N along the line between two stance feet (the null
#: direction of the wrench map, tilted by the feet's few millimetres of height difference,
#: so they shift normal force between the feet): on compliant μ∞ ground Go1 fell from 6 of
#: 8 trot starts, HyQ from 1 (and predicted 12 % off from another). Seed 000's μ∞ cells
#: give the same results with 2, 10 and 100 (and QP,μ's E|Δτ| on compliant μ∞ falls from
#: 56 to 17 N·m/s).
MU_MAX = 10.0


def pyramid_rows(basis: np.ndarray, mu: float) -> np.ndarray:
    """Rows ``D`` with ``D f ≤ 0`` ⇔ f (world) inside the friction pyramid.

    Facets |t1·f| ≤ μ n·f and |t2·f| ≤ μ n·f, plus unilateral n·f ≥ 0.
    """
    t1, t2, n = basis
    return np.vstack((t1 - mu * n, -t1 - mu * n, t2 - mu * n, -t2 - mu * n, -n))


def inscribed_pyramid_rows(basis: np.ndarray, mu: float) -> np.ndarray:
    """Rows like :func:`pyramid_rows` for the pyramid of seed 000 eq. 72: four edges
    n ± μ t1, n ± μ t2, the friction force the sum of the edge forces (1ᵀ f_F ≤ μ f_N):
    facets |t1·f| + |t2·f| ≤ μ n·f, plus n·f ≥ 0.

    It is inscribed in the Coulomb cone (every force it admits, the ground can apply; it
    is also MuJoCo's pyramidal cone), where the square of :func:`pyramid_rows` admits up
    to √2 μ n·f along its diagonals.
    """
    t1, t2, n = basis
    return np.vstack((t1 + t2 - mu * n, t1 - t2 - mu * n, -t1 + t2 - mu * n, -t1 - t2 - mu * n, -n))


class ContactSet:
    """Point contacts of a :class:`RobotModel`, refreshed in place every tick.

    Attributes (``k`` = number of configured contacts):
        J: (k, 3, nv) translational Jacobians of the contact points, world frame.
        drift: (k, 3) J̇v, the contact-point acceleration at zero q̈ [m/s²].
        position: (k, 3) contact-point positions [m].
        rotation: (k, 3, 3) orientations of the contact frames in the world.
        basis: (k, 3, 3) rows (t1, t2, n) per contact.
        friction_rows: (k, 5, 3) pyramid rows, ``friction_rows[i] @ f_i ≤ 0``.
        inscribed_rows: (k, 5, 3) the same for the pyramid inscribed in the Coulomb cone
            (:func:`inscribed_pyramid_rows`), kept in step with ``friction_rows``.
        phi: (k,) signed distances [m] (0 unless set: estimates say "touching").
        active: (k,) bool mask of contacts touching now.
        max_normal_force: (k,) upper bound of each active contact's normal force n·f [N]
            (``INF``: none), ramped by :class:`ContactTransitions` while a contact makes or
            breaks; the QP formulations honour it (it is the upper side of the pyramid's
            unilateral row).
        released: (k,) bool, active contacts held only by a breaking transition: their
            force is bounded and ramps to zero, but they no longer constrain the motion.
        J_angular, drift_angular: (k, 3, nv), (k, 3): angular Jacobian and angular drift
            J̇_ω v [rad/s²] of each contact frame's body (world frame): with
            :meth:`held_rows`, the one rigid-body constraint of a flat foot.
        body: (k,) the joint id of each contact's rigid body (contacts against the
            environment; −1 for a contact against a free body): points with the same id
            move as one body.
    """

    def __init__(self, model: RobotModel):
        self.model = model
        k, nv = len(model.contacts), model.nv
        self.size = k
        self.J = np.zeros((k, 3, nv))
        self.drift = np.zeros((k, 3))
        self.position = np.zeros((k, 3))
        self.rotation = np.zeros((k, 3, 3))
        self.phi = np.zeros(k)
        self.active = np.zeros(k, dtype=bool)
        self.max_normal_force = np.full(k, INF)
        self.released = np.zeros(k, dtype=bool)
        self.basis = np.zeros((k, 3, 3))
        self.friction_rows = np.zeros((k, PYRAMID_ROWS, 3))
        self.inscribed_rows = np.zeros((k, PYRAMID_ROWS, 3))
        self.mu = np.zeros(k)
        self._surface_normal = np.full((k, 3), np.nan)  # last set_surface normal per contact
        #: incremented whenever the active set, a contact's μ or its normal changes: QP
        #: blocks that depend on them are rebuilt only when this changes
        self.version = 0
        for i, c in enumerate(model.contacts):
            self.basis[i] = tangent_basis(c.normal_world)
            self.set_friction(i, c.friction)
        self.J_angular = np.zeros((k, 3, nv))
        self.drift_angular = np.zeros((k, 3))
        self.body = np.array([pm_frame.parentJoint if jid == 0 else -1
                              for pm_frame, jid in zip((model.pin_model.frames[f] for f in model.contact_frame_ids),
                                                       model.contact_body_joint_ids)], dtype=int)
        self._J6 = np.zeros((6, nv))
        self._Jb = np.zeros((6, nv))
        # contacts against a free body: (index, body joint id, body frame id, normal in the body frame)
        pm = model.pin_model
        self._relative = [(i, jid, int(pm.getFrameId(pm.names[jid], pin.FrameType.JOINT)),
                           np.asarray(c.normal_body, dtype=float))
                          for i, (c, jid) in enumerate(zip(model.contacts, model.contact_body_joint_ids)) if jid]
        self._order = np.zeros(k, dtype=int)  # active contacts, in the caller's order
        self.n_active = 0

    def set_friction(self, index: int, mu: float) -> None:
        """Change μ of one contact: rebuilds its pyramid rows and bumps :attr:`version`, so
        the formulations rebuild their friction blocks on the next solve (not a per-tick
        operation). μ above :data:`MU_MAX` is clamped to it."""
        if not (math.isfinite(mu) and mu > 0.0):
            raise ConfigError("mu", mu, "must be finite and > 0")
        mu = min(mu, MU_MAX)
        self.mu[index] = mu
        self.friction_rows[index] = pyramid_rows(self.basis[index], mu)
        self.inscribed_rows[index] = inscribed_pyramid_rows(self.basis[index], mu)
        self.version += 1

    def set_surface(self, index: int, normal_world: np.ndarray, mu: float) -> bool:
        """Set the ground under contact ``index``: unit normal (world) and Coulomb μ.

        The controller gets each stance foot's local normal and friction from the terrain
        (seed 000 §7.4: "friction coefficients at points of contact"; §7.5 height map).
        Rewrites ``basis[index]`` and its pyramid rows in place and bumps :attr:`version`
        so that friction blocks are rebuilt, but only when something changed (μ compared
        with the contact's current one, which :meth:`set_friction` may also have set):
        returns whether it did. Not a per-tick operation on a rough terrain's cells.
        """
        normal = np.asarray(normal_world, dtype=float)
        if normal.shape != (3,) or not np.isfinite(normal).all() or normal @ normal < 1e-12:
            raise ConfigError("normal_world", normal.tolist(), "must be a finite non-zero 3-vector")
        if not (math.isfinite(mu) and mu > 0.0):
            raise ConfigError("mu", mu, "must be finite and > 0")
        last = self._surface_normal[index]
        if min(mu, MU_MAX) == self.mu[index] and normal[0] == last[0] and normal[1] == last[1] and normal[2] == last[2]:
            return False
        last[:] = normal
        self.basis[index] = tangent_basis(normal)
        self.set_friction(index, mu)  # bumps the version
        return True

    def set_active(self, frames: Sequence[str]) -> None:
        """Mark the named contacts active; remember their order for the results."""
        self.active[:] = False
        n = 0
        for frame in frames:
            i = self.model.contact_index(frame)
            if self.active[i]:
                continue
            self.active[i] = True
            self._order[n] = i
            n += 1
        self.n_active = n
        self.version += 1

    def set_active_mask(self, mask: np.ndarray) -> None:
        """Mark contacts active from a boolean mask in configuration order."""
        self.active[:] = mask
        idx = np.flatnonzero(self.active)
        self.n_active = idx.size
        self._order[: idx.size] = idx
        self.version += 1

    @property
    def order(self) -> np.ndarray:
        """Indices of the active contacts, in the order they were activated."""
        return self._order[: self.n_active]

    def update(self, terms: DynamicsTerms) -> None:
        """Refresh Jacobians, drift, positions and orientations of all contacts from ``terms``."""
        pm, data = self.model.pin_model, terms.data
        lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        for i, fid in enumerate(self.model.contact_frame_ids):
            self._J6[:] = pin.getFrameJacobian(pm, data, fid, lwa)
            self.J[i] = self._J6[:3]
            self.J_angular[i] = self._J6[3:]
            acc = pin.getFrameClassicalAcceleration(pm, data, fid, lwa)
            self.drift[i] = acc.linear
            self.drift_angular[i] = acc.angular
            oMf = data.oMf[fid]
            self.position[i] = oMf.translation
            self.rotation[i] = oMf.rotation
        if self._relative:
            self._update_relative(pm, data)

    def _update_relative(self, pm, data) -> None:
        """Subtract the body's point motion from contacts against a free body; turn their
        normals with the body (the pyramid rows change, so :attr:`version` moves on)."""
        lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        for i, jid, bid, normal_body in self._relative:
            oMb = data.oMf[bid]
            r = self.position[i] - oMb.translation  # body origin → contact point [m]
            self._Jb[:] = pin.getFrameJacobian(pm, data, bid, lwa)
            # v_point = v_origin + ω × r = v_origin − [r]× ω
            self.J[i] -= self._Jb[:3] + np.cross(self._Jb[3:].T, r).T
            twist = pin.getFrameVelocity(pm, data, bid, lwa)
            w = twist.angular
            alpha = pin.getFrameAcceleration(pm, data, bid, lwa).angular
            a_origin = pin.getFrameClassicalAcceleration(pm, data, bid, lwa).linear
            # classical acceleration of the body's material point at r (zero q̈)
            self.drift[i] -= a_origin + np.cross(alpha, r) + np.cross(w, np.cross(w, r))
            self.basis[i] = tangent_basis(oMb.rotation @ normal_body)
            self.friction_rows[i] = pyramid_rows(self.basis[i], self.mu[i])
            self.inscribed_rows[i] = inscribed_pyramid_rows(self.basis[i], self.mu[i])
        self.version += 1

    def fill_friction_rows(self, C: np.ndarray, lo: np.ndarray, hi: np.ndarray, *,
                           unilateral_only: bool = False, rows: np.ndarray | None = None) -> None:
        """Write lo ≤ C f ≤ hi rows for the stacked forces f of all contacts (3k columns).

        Rows 5i..5i+4 hold the pyramid of active contact i (only n·f ≥ 0 with
        ``unilateral_only``, i.e. infinite friction) and pin f_i = 0 for inactive ones.
        Not per tick: call it when the active set changes. ``rows``: (k, 5, 3) pyramid
        rows to use instead of ``friction_rows`` (e.g. :func:`inscribed_pyramid_rows`).
        """
        rows = self.friction_rows if rows is None else rows
        C[:] = 0.0
        for i in range(self.size):
            r, c = PYRAMID_ROWS * i, 3 * i
            if self.active[i] and unilateral_only:
                C[r + 4, c:c + 3] = rows[i, 4]
                lo[r:r + 5], hi[r:r + 5] = -INF, INF
                hi[r + 4] = 0.0
            elif self.active[i]:
                C[r:r + 5, c:c + 3] = rows[i]
                lo[r:r + 5], hi[r:r + 5] = -INF, 0.0
            else:
                C[r:r + 3, c:c + 3] = np.identity(3)
                lo[r:r + 3], hi[r:r + 3] = 0.0, 0.0
                lo[r + 3:r + 5], hi[r + 3:r + 5] = -INF, INF

    def held_rows(self, held: np.ndarray) -> list[tuple[int, int, int, int]]:
        """How the held contacts of each rigid body constrain its motion: (reference point,
        second point, angular rows, farthest point) per body with two or more held points,
        for a flat foot (the angular rows go where the second point's rows were; with 2 the
        line is the reference point → the farthest point).

        Held points on one body cannot all keep zero acceleration while the body turns (their
        centripetal terms disagree: no q̈ meets the rows, seed 000's rigid points over-
        constrain a rigid foot). One body constraint replaces them: the reference point's
        three translation rows plus the body's angular acceleration, 3 rows, or 2 when the
        points lie on a line (the rotation about it is free: the points cannot resist it).
        Bodies with one held point keep its rows. Not per tick: when the held set changes.
        """
        out = []
        for body in np.unique(self.body[held & (self.body >= 0)]):
            members = np.flatnonzero(held & (self.body == body))
            if members.size < 2:
                continue
            rel = self.position[members[1:]] - self.position[members[0]]
            far = int(np.argmax(np.einsum("ij,ij->i", rel, rel)))
            planar = bool((np.linalg.norm(np.cross(rel[far], rel), axis=1) > COLLINEAR_M2).any())
            out.append((int(members[0]), int(members[1]), 3 if planar else 2, int(members[1 + far])))
        return out

    def frame_names(self) -> tuple[str, ...]:
        """Names of the active contacts in result order."""
        frames = self.model.contact_frames
        return tuple(frames[i] for i in self.order)

    def check_frames(self, frames: Sequence[str]) -> None:
        for frame in frames:
            if frame not in self.model.contact_frames:
                raise UnknownNameError("contact frame", frame, self.model.contact_frames)


#: a breaking contact carrying less than this fraction of the robot's weight is released at
#: once (far above the QP accuracy, so both backends release it on the same tick)
NEGLIGIBLE_FORCE = 1e-6


class ContactTransitions:
    """Smooth contact make and break: normal-force bounds ramped over ``ramp_time`` [s].

    A contact the controller starts to hold (make: touchdown) gets the bound
    n·f ≤ ``force_scale`` · (time held) / ``ramp_time``, lifted once it reaches
    ``force_scale`` (the robot's weight). A contact it stops holding (break: lift-off, or its
    estimate lost) stays in the formulation for ``ramp_time``, released (it no longer
    constrains the motion), its bound falling from the normal force it carried to zero.
    Predicted forces, and the torques built on them, then move at most at the ramp's rate:
    a switch never steps the torque (as TSID's contact transitions). ``ramp_time`` 0:
    switched (no bound; held = requested).

    The bounds and the released flags are written into the formulation's
    :class:`ContactSet` (``max_normal_force``, ``released``); a change of what is released
    moves its ``version`` on, like a change of the active set.
    """

    def __init__(self, k: int, force_scale: float):
        self.force_scale = float(force_scale)  # [N]
        self.bound = np.full(k, INF)           # [N]; INF: held without bound, 0: not held
        self.rate = np.zeros(k)                # ramp-out rate of a breaking contact [N/s]
        self.requested = np.zeros(k, dtype=bool)  # the last tick's request
        self.held = np.zeros(k, dtype=bool)
        self._fresh = True

    def reset(self) -> None:
        """The next tick takes its request as it is (activation: no ramp from nothing)."""
        self._fresh = True

    def update(self, requested: np.ndarray, contacts: ContactSet, forces_world: np.ndarray, ramp_time: float,
               dt: float) -> np.ndarray:
        """The contacts to hold this tick ((k,) bool, a view kept by this object).

        ``requested``: the contacts the controller holds without transitions (touching and
        not swinging); ``forces_world``: (k, 3) the last tick's predicted forces [N] (a
        break ramps down from the normal force its contact carried).
        """
        b = self.bound
        if ramp_time <= 0.0 or self._fresh:
            b[:] = np.where(requested, INF, 0.0)
            self.rate[:] = 0.0
        else:
            for i in range(b.size):
                if requested[i]:
                    if b[i] < INF:  # making (or re-making while breaking): ramp up
                        b[i] += self.force_scale * dt / ramp_time
                        if b[i] >= self.force_scale:
                            b[i] = INF
                    continue
                if self.requested[i]:  # breaks now: ramp down from the force it carries
                    normal = float(contacts.basis[i, 2] @ forces_world[i])
                    b[i] = min(b[i], max(normal, 0.0))
                    if b[i] <= NEGLIGIBLE_FORCE * self.force_scale:  # carries nothing (to QP accuracy): off now
                        b[i] = 0.0
                    self.rate[i] = b[i] / ramp_time
                b[i] = max(b[i] - self.rate[i] * dt, 0.0)
                if b[i] <= 1e-9 * self.rate[i] * ramp_time:  # what round-off leaves of the ramp: over
                    b[i] = 0.0
        self._fresh = False
        self.requested[:] = requested
        np.logical_or(requested, b > 0.0, out=self.held)
        contacts.max_normal_force[:] = b
        released = self.held & ~self.requested
        if (released != contacts.released).any():
            contacts.released[:] = released
            contacts.version += 1
        return self.held
