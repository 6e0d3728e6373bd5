"""``sensed``: reference inverse dynamics with sensed contact forces, ID(t_{i−1}) and
ID(t_{i−2}) of seed 000 §7.3, and partial force measurements (seed 002 §VI).

Full sensing (``measured_components=None``): τ = (M q̈ + h − Jᵀ f_meas)[joints], with the
joint accelerations of q̈_des and the base acceleration that makes the base rows hold
with the measured forces (the base is unactuated: the forces decide how it moves).

Partial sensing: load cells measure only some components of a contact force. Each
component (t1, t2, n: rows of the contact's tangent basis) is *measured*, *assumed zero*
(``slippery_ground``: unmeasured tangential components vanish) or *unknown*. Only the
unactuated base rows can determine the unknowns z (in the joint rows τ absorbs them), so
z, τ and the base acceleration solve the joint-space form of seed 002 eq. (21)–(22):

    minimize ½ ‖q̈_b − q̈_des,b‖²_{M_bb}
    subject to  M_:b q̈_b − Sᵀ τ − J_uᵀ z = −h − M_:j q̈_des,j + J_kᵀ f_k,

a square sparse KKT system (the joint-space form Nori's §VI analysis uses, not his
per-link Newton–Euler system). It is non-singular exactly when the base-row part of J_uᵀ
has full column rank, seed 002 eq. (23): the layout is then well posed. With six
independent unknowns the base keeps q̈_des,b; with none (all measured or assumed) the
base acceleration follows from the base rows as in ID(t_{i−1}); in between it is the one
nearest to q̈_des,b (metric M_bb) that the measured forces allow. The KKT system is
factorized with SuperLU; its row and column permutations are computed once per layout
(at construction, or when the set of active contacts changes), as Nori proposes, and
reused every tick without pivot search; the sparse matrix is built once per layout and its
values refilled in place. A tick whose factorization is then inaccurate is
refactorized with partial pivoting (counted in ``refactorizations``); at a pose where the
system is singular the minimum-norm solution is returned with status ``"failed"``.

An ill-posed layout raises :class:`IllPosedLayoutError`, naming the layout and the rank
deficiency: more unknown components than base rows, or components the base rows cannot
tell apart (e.g. the tangential forces of two feet on flat ground, seed 002 Property 3),
checked at the neutral configuration and at a generic one.

Measurements are delayed by ``delay_ticks`` solves: :meth:`set_measured_forces` stores
the latest measurement (already one tick old: the forces of the last control period);
each solve pushes it into a ring buffer and uses the entry ``delay_ticks − 1`` solves
back. Until a measurement arrives, forces are zero and the status is ``"failed"``. With
full sensing, a force of an older measurement (ID(t_{i−2})) on a contact the caller no
longer passes as active still enters, at that contact: see
:meth:`Sensed._activate_measured_contacts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from ..contacts import ContactSet
from ..dynamics import DynamicsTerms
from ..errors import ConfigError, ShapeError
from ..linalg import solve_pd
from ..qp import FAILED, SOLVED
from .base import Formulation, check_vector

#: names of the force components, rows of ContactSet.basis
COMPONENTS = ("t1", "t2", "n")
_MAX_DELAY = 2
#: relative KKT residual above which the offline-ordered factorization is redone
_REFACTOR_TOL = 1e-9
#: smallest |pivot| / largest |pivot| of a non-singular KKT factorization
_SINGULAR_PIVOT = 1e-12


class IllPosedLayoutError(ConfigError):
    """The force-sensor layout leaves the joint torques undetermined (seed 002 §VI)."""

    def __init__(self, layout: str, reason: str):
        self.layout = layout
        super().__init__("measured_components", layout, f"ill-posed sensor layout: {reason}")


@dataclass
class _Layout:
    """The sparse KKT system of one set of active contacts, ordered once offline."""

    unknown: np.ndarray      # (n_u, 2): contact index, component index
    nx: int                  # primal size: n_base + na + n_u
    size: int                # nx + nv
    inv_r: np.ndarray        # offline row permutation (inverse)
    inv_c: np.ndarray        # offline column permutation (inverse)
    perm_c: np.ndarray
    gather: np.ndarray       # flat index in the dense buffer of each CSC entry
    A: scipy.sparse.csc_matrix  # the permuted KKT matrix; its data refilled every tick
    K: np.ndarray            # dense buffer, refilled every tick
    rhs: np.ndarray


class Sensed(Formulation):
    name = "sensed"
    defaults = {
        "delay_ticks": 1,              # 1: ID(t_{i−1}), 2: ID(t_{i−2})
        # None: all; or {frame: "n" | "t1 t2 n" | ("t1", ...) | ""}, or ["frame: n", ...] (a ROS parameter)
        "measured_components": None,
        "slippery_ground": False,      # unmeasured tangential components are zero
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        k = self.contacts.size
        self._latest = np.zeros((k, 3))
        self._have_latest = False
        self._history = np.zeros((_MAX_DELAY, k, 3))
        self._filled = np.zeros(_MAX_DELAY, dtype=bool)
        self.forces_used = np.zeros((k, 3))  # measurement used by the last solve [N, world]
        #: ticks whose offline-ordered factorization had to be redone with pivoting
        self.refactorizations = 0
        # rows of M and J that can be non-zero for each contact (kinematic chain)
        pm, nb = model.pin_model, model.n_base
        self._chain_rows = []
        for fid in model.contact_frame_ids:
            rows = set(range(nb))
            for jid in pm.supports[pm.frames[fid].parentJoint]:
                if jid > 0 and pm.joints[jid].idx_v >= nb:
                    rows.add(pm.joints[jid].idx_v)
            self._chain_rows.append(np.array(sorted(rows), dtype=int))
        self._checker: tuple[DynamicsTerms, ContactSet] | None = None
        self._active_layout: tuple[int, _Layout] | None = None  # (contacts.version, layout)
        self._configure()

    # ------------------------------------------------------------------ options
    def set_option(self, key: str, value: Any) -> None:
        previous = self.options.get(key)
        super().set_option(key, value)
        try:
            self._configure()
        except ConfigError:
            self.options[key] = previous
            self._configure()
            raise

    def _configure(self) -> None:
        """Validate the options, build the component masks, check the layout."""
        delay = self.options["delay_ticks"]
        if delay not in range(1, _MAX_DELAY + 1):
            raise ConfigError("delay_ticks", delay, "must be 1 (ID(t_i-1)) or 2 (ID(t_i-2))")
        k = self.contacts.size
        spec = self.options["measured_components"]
        self.full_sensing = spec is None
        self.measured = np.ones((k, 3), dtype=bool)
        if spec is not None and not isinstance(spec, Mapping) and isinstance(spec, (list, tuple)) \
                and all(isinstance(e, str) for e in spec):
            entries = [e.partition(":") for e in spec]  # the ROS parameter: "frame: components" each
            if any(not sep or not frame.strip() for frame, sep, _ in entries):
                raise ConfigError("measured_components", list(spec), "entries must read '<frame>: <components>'")
            spec = {frame.strip(): comps for frame, _, comps in entries}
        if spec is not None:
            if not isinstance(spec, Mapping):
                raise ConfigError("measured_components", spec,
                                  "must be None, a mapping frame → components or '<frame>: <components>' entries")
            self.contacts.check_frames(tuple(spec))
            self.measured[:] = False
            for frame, comps in spec.items():
                self.measured[self.model.contact_index(frame)] = self._parse_components(frame, comps)
        self.assumed_zero = np.zeros((k, 3), dtype=bool)
        if self.options["slippery_ground"]:
            self.assumed_zero[:, :2] = ~self.measured[:, :2]
        self.known = self.measured | self.assumed_zero
        self._layouts: dict[bytes, _Layout] = {}
        self._active_layout = None
        if not self.full_sensing:
            self._layout(np.ones(k, dtype=bool))  # the configured layout, all contacts touching

    @staticmethod
    def _parse_components(frame: str, comps) -> np.ndarray:
        names = comps.replace(",", " ").split() if isinstance(comps, str) else list(comps)
        if names in (["all"], ["xyz"]):
            names = list(COMPONENTS)
        mask = np.zeros(3, dtype=bool)
        for c in names:
            if c not in COMPONENTS:
                raise ConfigError(f"measured_components[{frame!r}]", comps,
                                  f"unknown component {c!r}; valid: {', '.join(COMPONENTS)}, all")
            mask[COMPONENTS.index(c)] = True
        return mask

    def describe_layout(self, mask: np.ndarray | None = None) -> str:
        """Per contact ('; '-separated): which components are measured, assumed zero, unknown."""
        frames = self.model.contact_frames
        idx = range(len(frames)) if mask is None else np.flatnonzero(mask)
        parts = []
        for i in idx:
            groups = []
            for label, sel in (("measured", self.measured[i]), ("assumed zero", self.assumed_zero[i]),
                               ("unknown", ~self.known[i])):
                if sel.any():
                    groups.append(" ".join(c for c, s in zip(COMPONENTS, sel) if s) + " " + label)
            parts.append(f"{frames[i]}: {', '.join(groups)}")
        return "; ".join(parts)

    # ------------------------------------------------------------------ inputs
    def set_measured_forces(self, forces) -> None:
        """Latest measured contact forces [N, world frame].

        ``forces``: ``{frame: f_world (3,)}`` (frames not given measured zero), or an
        array (k, 3) or (3k,) in the order of the configured contacts. Only the measured
        components of each force are used.
        """
        k = self.contacts.size
        if isinstance(forces, Mapping):
            self.contacts.check_frames(tuple(forces))
            arr = np.zeros((k, 3))
            for frame, f in forces.items():
                arr[self.model.contact_index(frame)] = check_vector(f"measured force of {frame!r}", f, 3)
        else:
            arr = np.asarray(forces, dtype=float)
            if arr.shape not in ((k, 3), (3 * k,)):
                raise ShapeError("measured forces", arr.shape, (k, 3))
            arr = check_vector("measured forces", arr.reshape(-1), 3 * k).reshape(k, 3)
        self._latest[:] = arr
        self._have_latest = True

    def reset(self):
        self._history[:] = 0.0
        self._filled[:] = False
        self._have_latest = False

    # ------------------------------------------------------------------ per tick
    def _compute(self):
        self._history[1:] = self._history[:-1]
        self._filled[1:] = self._filled[:-1]
        self._history[0] = self._latest
        self._filled[0] = self._have_latest
        slot = self.options["delay_ticks"] - 1
        if not self._filled[slot]:  # start-up: the oldest measurement there is
            slot = int(np.flatnonzero(self._filled)[-1]) if self._filled.any() else 0
        self.forces_used[:] = self._history[slot]
        status = SOLVED if self._filled.any() else FAILED
        if self.full_sensing:
            if slot > 0:  # older than the caller's contact estimate
                self._activate_measured_contacts()
            self._solve_full()
            return status, 0, 0.0
        return self._solve_partial(status)

    def _solve_full(self) -> None:
        """ID(t_{i−1}): base rows give q̈_b, joint rows give τ (seed 000 §7.3)."""
        m, M, h = self.model, self.terms.M, self.terms.h
        nb = m.n_base
        f = self.forces_used[self.contacts.order].reshape(-1)
        J = self.stacked_jacobian()
        self.qdd[:] = self.qdd_des
        if nb:
            rhs = J[:, :nb].T @ f - h[:nb] - M[:nb, nb:] @ self.qdd[nb:]
            self.qdd[:nb] = solve_pd(M[:nb, :nb], rhs)
        self.torque_from_dynamics(self.qdd, f)
        self.set_forces(f)

    def _activate_measured_contacts(self) -> None:
        """Add to this solve the contacts the used (older) measurement has a force on.

        The caller's contacts are its estimate for the latest period (in the lock-step
        loop: normal force > 0.1 N then, minus the feet the gait swings); ID(t_{i−2})'s
        forces are a period older. A force of that measurement on a contact outside the
        caller's set (a foot lifted since, or one the gait began to swing while it still
        carried load) balanced the robot together with the others: dropping it leaves the
        base rows a partial wrench, a base-acceleration error of that force over the mass
        at every contact switch. The result lists these contacts too; the next solve
        starts again from the caller's set. Full sensing only (partial layouts are built
        per set of active contacts).
        """
        c = self.contacts
        extra = np.any(self.forces_used != 0.0, axis=1) & ~c.active
        if extra.any():
            c.set_active_mask(c.active | extra)
            self._last_names = c.frame_names()
            self._last_active = None  # the next prepare() restores the caller's set

    def _solve_partial(self, status: str) -> tuple[str, int, float]:
        """The sparse KKT system of the current layout (seed 002 §VI)."""
        m, M, h, c = self.model, self.terms.M, self.terms.h, self.contacts
        nb, na = m.n_base, m.na
        if self._active_layout is None or self._active_layout[0] != c.version:
            self._active_layout = (c.version, self._layout(c.active))
        lay = self._active_layout[1]
        self._fill_kkt(lay, self.terms, c)
        # known part of the forces: measured components, assumed zeros excluded
        f_known = np.einsum("kij,kj->ki", c.basis, self.forces_used)
        f_known *= self.measured
        f_known = np.einsum("kij,ki->kj", c.basis, f_known)
        order = c.order
        J = self.stacked_jacobian()
        rhs = lay.rhs
        rhs[:nb] = M[:nb, :nb] @ self.qdd_des[:nb]
        rhs[nb: lay.nx] = 0.0
        rhs[lay.nx:] = -h - M[:, nb:] @ self.qdd_des[nb:] + J.T @ f_known[order].reshape(-1)
        sol, ok = self._factor_solve(lay)
        if not ok:
            status = FAILED
        self.qdd[:] = self.qdd_des
        self.qdd[:nb] = sol[:nb]
        self.tau[:] = sol[nb: nb + na]
        forces = f_known
        for (i, comp), z in zip(lay.unknown, sol[nb + na: lay.nx]):
            forces[i] += z * c.basis[i, comp]
        self.forces[order] = forces[order]
        return status, 0, 0.0

    def _factor_solve(self, lay: _Layout) -> tuple[np.ndarray, bool]:
        """Sparse LU with the offline permutations; pivoting, then least squares, as fallbacks.

        Returns the solution and False when the system is singular at this pose (the
        minimum-norm solution still satisfies the dynamics, but τ is not determined).
        """
        b = lay.rhs
        for offline in (True, False):
            try:
                if offline:
                    np.take(lay.K, lay.gather, out=lay.A.data)
                    lu = scipy.sparse.linalg.splu(lay.A, permc_spec="NATURAL", diag_pivot_thresh=0.0)
                    x = lu.solve(b[lay.inv_r])[lay.perm_c]
                else:
                    self.refactorizations += 1
                    lu = scipy.sparse.linalg.splu(scipy.sparse.csc_matrix(lay.K))
                    x = lu.solve(b)
            except RuntimeError:  # an exactly zero pivot
                continue
            pivots = np.abs(lu.U.diagonal())
            if (pivots.min() > _SINGULAR_PIVOT * pivots.max()
                    and np.linalg.norm(lay.K @ x - b) <= _REFACTOR_TOL * max(1.0, np.linalg.norm(b))):
                return x, True
        return np.linalg.lstsq(lay.K, b, rcond=None)[0], False

    # ------------------------------------------------------------------ layouts
    def _layout(self, mask: np.ndarray) -> _Layout:
        """The (cached) KKT system of the contacts in ``mask``; checked and ordered once."""
        key = mask.tobytes()
        lay = self._layouts.get(key)
        if lay is not None:
            return lay
        m = self.model
        nb, na, nv = m.n_base, m.na, m.nv
        unknown = np.array([(i, comp) for i in np.flatnonzero(mask) for comp in range(3)
                            if not self.known[i, comp]], dtype=int).reshape(-1, 2)
        n_u = len(unknown)
        desc = self.describe_layout(mask)
        terms, contacts = self._check_terms()
        q_generic = m.random_configuration(np.random.default_rng(0))
        for label, q in (("the neutral configuration", m.neutral()),
                         ("a generic configuration", q_generic)):
            if n_u == 0:
                break
            terms.update(q, np.zeros(nv))
            contacts.update(terms)
            Ju = np.array([contacts.basis[i, comp] @ contacts.J[i] for i, comp in unknown])
            rank_base = int(np.linalg.matrix_rank(Ju[:, :nb])) if nb else 0
            if rank_base == n_u:
                continue
            rank_all = int(np.linalg.matrix_rank(Ju))
            why = (f"{n_u} force components are neither measured nor assumed, more than the {nb} "
                   f"unactuated base rows that must determine them" if n_u > nb else
                   f"at {label} the base rows distinguish only {rank_base} of the {n_u} unknown "
                   f"force components (seed 002 eq. 23 is singular)")
            consequence = ("so the joint torques are not determined either" if rank_all > rank_base else
                           "the joint torques would be, but not the individual forces")
            raise IllPosedLayoutError(
                desc, f"{why}; at {label} their generalized forces span {rank_all} dimensions, "
                      f"the base rows see {rank_base}: {consequence} "
                      f"(measure more components, or assume slippery_ground if the ground is slippery)")
        nx = nb + na + n_u
        size = nx + nv
        # structural pattern: W = M_bb, A = [M_:b, −Sᵀ, −J_uᵀ] and Aᵀ
        pattern = np.zeros((size, size), dtype=bool)
        pattern[:nb, :nb] = True
        pattern[nx:, :nb] = True
        j = np.arange(na)
        pattern[nx + nb + j, nb + j] = True
        for u, (i, comp) in enumerate(unknown):
            pattern[nx + self._chain_rows[i], nb + na + u] = True
        pattern[:nx, nx:] = pattern[nx:, :nx].T
        lay = _Layout(unknown=unknown, nx=nx, size=size, inv_r=np.zeros(0, int), inv_c=np.zeros(0, int),
                      perm_c=np.zeros(0, int), gather=np.zeros(0, int), A=scipy.sparse.csc_matrix((size, size)),
                      K=np.zeros((size, size)), rhs=np.zeros(size))
        lay.K[nx + nb + j, nb + j] = -1.0  # −Sᵀ, constant
        lay.K[nb + j, nx + nb + j] = -1.0
        # offline ordering (seed 002 §V-D): factorize once at the generic state
        terms.update(q_generic, np.zeros(nv))
        contacts.update(terms)
        self._fill_kkt(lay, terms, contacts)
        sample = scipy.sparse.csc_matrix(np.where(pattern, lay.K, 0.0))
        lu = scipy.sparse.linalg.splu(sample, permc_spec="COLAMD")
        lay.inv_r = np.argsort(lu.perm_r)
        lay.inv_c = np.argsort(lu.perm_c)
        lay.perm_c = lu.perm_c.copy()
        permuted = pattern[lay.inv_r][:, lay.inv_c]
        cols, rows = np.nonzero(permuted.T)  # CSC order: by column, then row
        lay.gather = np.ravel_multi_index((lay.inv_r[rows], lay.inv_c[cols]), (size, size))
        indptr = np.concatenate(([0], np.cumsum(permuted.sum(axis=0))))
        lay.A = scipy.sparse.csc_matrix((lay.K.flat[lay.gather], rows.astype(np.int32), indptr.astype(np.int32)),
                                        shape=(size, size))
        self._layouts[key] = lay
        return lay

    def _fill_kkt(self, lay: _Layout, terms: DynamicsTerms, contacts: ContactSet) -> None:
        """Write the state-dependent blocks of the KKT matrix into ``lay.K``."""
        nb, na, nx = self.model.n_base, self.model.na, lay.nx
        K, M = lay.K, terms.M
        K[:nb, :nb] = M[:nb, :nb]
        K[nx:, :nb] = M[:, :nb]
        K[:nb, nx:] = M[:nb, :]
        for u, (i, comp) in enumerate(lay.unknown):
            col = -(contacts.basis[i, comp] @ contacts.J[i])
            K[nx:, nb + na + u] = col
            K[nb + na + u, nx:] = col

    def _check_terms(self) -> tuple[DynamicsTerms, ContactSet]:
        """Private dynamics terms for layout checks (the tick's own stay untouched)."""
        if self._checker is None:
            self._checker = (DynamicsTerms(self.model), ContactSet(self.model))
        return self._checker
