"""The formulation base class and the result every formulation returns.

A formulation turns (q, v, q̈_des, active contacts) into joint torques, the resulting
generalized acceleration and the predicted contact forces. Subclasses implement
:meth:`Formulation._compute`; input checks, the per-tick Pinocchio pass and timing are
done here once for all of them.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..contacts import ContactSet
from ..dynamics import DynamicsTerms
from ..errors import ConfigError, NonFiniteError, ShapeError
from ..linalg import chol_solve, cholesky, cholesky_well_conditioned, solve_pd
from ..model import RobotModel
from ..qp import SOLVED

#: values of the ``backend`` option of formulations with a compiled tick
BACKENDS = ("auto", "native", "python")

#: options read once, when the solvers are built
CONSTRUCTION_OPTIONS = frozenset({"backend", "solver", "warm_start", "eps_abs", "friction_cone"})

#: relative cut-off on the Delassus matrix J M⁻¹ Jᵀ (redundant contact constraints)
_DELASSUS_RCOND = 1e-10

#: ``Result.relaxed`` of a solve that relaxed nothing (shared, immutable)
NO_RELAXATION: Mapping[str, float] = MappingProxyType({})

#: what ``Result.relaxed`` may name, and the unit of its amount
RELAXED_CONSTRAINTS = {
    "torque_limits": "largest |τ| − τ_max over the joints [N·m] (the controller clamps it)",
    "contact_acceleration": "largest acceleration left at a held contact point [m/s²]",
    "non_penetration": "largest normal approach speed beyond the Baumgarte bound [m/s]",
    "friction": "largest violation of a friction-pyramid row, i.e. how far a force is outside [N]",
}


@dataclass(frozen=True)
class Result:
    """One inverse-dynamics solution.

    Invariant (checked in tests): ``M qdd + h = Sᵀ tau + Σ_i J_iᵀ forces[i]``.

    Attributes:
        tau: actuated joint torques [N·m], Pinocchio velocity order, shape (na,).
        qdd: generalized acceleration [m/s², rad/s²], shape (nv,).
        forces: predicted contact forces, world frame [N], shape (n_active, 3), one row
            per active contact in the order given to :meth:`Formulation.solve`.
        contact_frames: names of the rows of ``forces``.
        status: "solved", "max_iter", "infeasible" or "failed".
        iterations: solver iterations (0 for closed-form formulations; a QP's working-set
            guess counts its active-set steps).
        solve_time_s: time spent in the QP/LCP solver(s) [s].
        compute_time_s: time of the whole tick: model, contacts, assembly, solve [s].
        relaxed: constraints this answer relaxed to exist (no torque meets them all) →
            by how much (keys and units: ``RELAXED_CONSTRAINTS``); empty for an exact
            answer. The dynamics hold either way.
    """

    tau: np.ndarray
    qdd: np.ndarray
    forces: np.ndarray
    contact_frames: tuple[str, ...]
    status: str
    iterations: int
    solve_time_s: float
    compute_time_s: float
    relaxed: Mapping[str, float] = field(default_factory=lambda: NO_RELAXATION)

    @property
    def ok(self) -> bool:
        return self.status == SOLVED


def check_vector(name: str, x: Any, size: int) -> np.ndarray:
    """Return ``x`` as a float vector of ``size`` or raise a clear error."""
    arr = np.asarray(x, dtype=float)
    if arr.shape != (size,):
        raise ShapeError(name, arr.shape, (size,))
    # one dot product screens for NaN/inf (a non-finite entry makes it non-finite); the
    # exact check runs only then (a finite vector whose squares overflow passes)
    if not math.isfinite(arr @ arr):
        bad = np.flatnonzero(~np.isfinite(arr))
        if bad.size:
            raise NonFiniteError(name, bad)
    return arr


class Formulation(ABC):
    """Base class: owns the per-tick dynamics terms, the contact set and the options.

    Subclasses declare ``name`` and ``defaults`` (option name → default value, the
    documented options) and implement :meth:`_compute`.
    """

    name: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: True when the formulation predicts contact forces (so the invariants apply)
    predicts_forces: ClassVar[bool] = True
    #: True when returned torques respect the model's effort limits
    respects_torque_limits: ClassVar[bool] = False
    #: True when returned forces satisfy the friction pyramid
    respects_friction: ClassVar[bool] = False

    def __init__(self, model: RobotModel, *, dt: float = 1e-3, **options: Any):
        if not np.isfinite(dt) or dt <= 0.0:
            raise ConfigError("dt", dt, "must be a finite time step > 0 [s]")
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise ConfigError("options", sorted(unknown),
                              f"not options of {self.name!r}; valid: {sorted(self.defaults) or 'none'}")
        self.model = model
        self.dt = float(dt)
        self.options = {**self.defaults, **options}
        self.terms = DynamicsTerms(model)
        self.contacts = ContactSet(model)
        nv, na = model.nv, model.na
        # outputs of _compute, written in place
        self.tau = np.zeros(na)
        self.qdd = np.zeros(nv)
        self.forces = np.zeros((self.contacts.size, 3))  # per configured contact
        self.qdd_des = np.zeros(nv)
        self._q = np.zeros(model.nq)
        self._last_active: tuple | None = None  # contact names of the previous solve
        self._last_names: tuple[str, ...] = ()
        self._prepared = False
        self._t0 = 0.0
        self._relaxed: Mapping[str, float] = NO_RELAXATION  # this tick's, see relax()
        self._engine = None  # native.Engine when the compiled tick serves this formulation
        #: why the native tick is not used (None when it is, or was not asked for)
        self.native_unavailable: str | None = None

    # ------------------------------------------------------------------ public API
    def solve(self, q, v, qdd_des, active_contacts: Sequence[str] = (), *,
              phi: Sequence[float] | None = None) -> Result:
        """One inverse-dynamics solve.

        Args:
            q: configuration (nq); a floating base's quaternion is normalized.
            v: generalized velocity (nv) [m/s, rad/s].
            qdd_des: desired generalized acceleration (nv); formulations that decide
                the base acceleration ignore its first 6 entries (or treat them as a task).
            active_contacts: names of the contact frames touching now.
            phi: optional signed distances of the active contacts [m] (Baumgarte term).
        """
        self.prepare(q, v, active_contacts, phi=phi)
        return self.solve_prepared(qdd_des)

    def prepare(self, q, v, active_contacts: Sequence[str] = (), *,
                phi: Sequence[float] | None = None) -> None:
        """First half of :meth:`solve`: validate the state, refresh dynamics and contacts.

        A controller that needs M, h or contact Jacobians to build q̈_des calls this,
        reads ``terms``/``contacts``, then calls :meth:`solve_prepared`: one Pinocchio
        pass per tick.
        """
        self._t0 = time.perf_counter()
        m = self.model
        self._q[:] = check_vector("q", q, m.nq)
        v = check_vector("v", v, m.nv)
        if m.floating_base:
            quat = self._q[3:7]
            norm = math.sqrt(quat @ quat)
            if norm < 1e-9:
                raise ConfigError("q[3:7]", quat.tolist(), "base quaternion has zero norm")
            quat /= norm
        active_contacts = tuple(active_contacts)
        if active_contacts != self._last_active:
            self.contacts.set_active(active_contacts)
            self._last_active = active_contacts
            self._last_names = self.contacts.frame_names()
        self.contacts.phi[:] = 0.0
        if phi is not None:
            phi = check_vector("phi", phi, self.contacts.n_active)
            self.contacts.phi[self.contacts.order] = phi
        if self._engine is not None:
            self.terms.q[:] = self._q
            self.terms.v[:] = v
            self._engine.update()
        else:
            self.terms.update(self._q, v)
            self.contacts.update(self.terms)
        self._prepared = True

    def solve_prepared(self, qdd_des) -> Result:
        """Second half of :meth:`solve`, at the state given to :meth:`prepare`."""
        if not self._prepared:
            raise RuntimeError("solve_prepared() needs prepare() first")
        self._prepared = False
        self.qdd_des[:] = check_vector("qdd_des", qdd_des, self.model.nv)
        self.forces[:] = 0.0
        self._relaxed = NO_RELAXATION
        status, iterations, solve_time = self._compute()
        order = self.contacts.order
        relaxed = self._relaxed if self._relaxed is NO_RELAXATION else MappingProxyType(self._relaxed)
        return Result(
            tau=self.tau.copy(),
            qdd=self.qdd.copy(),
            forces=self.forces[order],  # fancy indexing copies
            contact_frames=self._last_names,
            status=status,
            iterations=int(iterations),
            solve_time_s=float(solve_time),
            compute_time_s=time.perf_counter() - self._t0,
            relaxed=relaxed,
        )

    def reset(self) -> None:
        """Forget internal state (warm starts, previous solutions, integrators)."""

    def relaxations(self) -> dict[str, int]:
        """Constraints this formulation dropped to stay solvable, as counts of ticks since it
        was made (e.g. ``torque_limits_dropped``); published in /diagnostics as
        ``relaxed.<name>``. None by default."""
        return {}

    def relax(self, constraint: str, amount: float) -> None:
        """Record in this tick's result that ``constraint`` (a key of ``RELAXED_CONSTRAINTS``)
        was relaxed by ``amount``; allocates only on such ticks."""
        if self._relaxed is NO_RELAXATION:
            self._relaxed = {}
        self._relaxed[constraint] = float(amount)

    def set_option(self, key: str, value: Any) -> None:
        """Change an option at run time (takes effect on the next solve)."""
        if key not in self.defaults:
            raise ConfigError(key, value, f"not an option of {self.name!r}; valid: {sorted(self.defaults)}")
        if key in CONSTRUCTION_OPTIONS and value != self.options[key]:
            raise ConfigError(key, value, "fixed when the formulation is made; make a new one to change it")
        self.options[key] = value

    @property
    def backend(self) -> str:
        """``"native"`` when the compiled tick runs this formulation, else ``"python"``."""
        return "python" if self._engine is None else "native"

    # ------------------------------------------------------------------ subclass hook
    @abstractmethod
    def _compute(self) -> tuple[str, int, float]:
        """Fill ``self.tau``, ``self.qdd`` and ``self.forces`` (rows of active contacts).

        ``self.terms`` and ``self.contacts`` are up to date, ``self.qdd_des`` holds the
        desired acceleration. Returns (status, iterations, solver time [s]).
        """

    # ------------------------------------------------------------------ shared helpers
    def _native_backend(self, solver_class: Callable[[Any, "Formulation"], Any]) -> Any:
        """Set up the compiled tick as option ``backend`` asks; returns its solver or None.

        ``solver_class(engine, self)`` builds the formulation's native solver (one of
        :mod:`idyn_control.native`'s). Only ProxQP runs natively: another ``solver`` has no
        native version. ``"auto"`` falls back to Python and records the reason in
        ``native_unavailable``; ``"native"`` raises it.
        """
        backend = self.options["backend"]
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, f"must be one of {BACKENDS}")
        if backend == "python":
            return None
        from .. import native

        solver_option = self.options.get("solver", "proxqp")
        try:
            if solver_option != "proxqp":
                raise native.NativeUnavailable(f"solver {solver_option!r}: only proxqp runs natively")
            engine = native.Engine(self.model, self.terms, self.contacts)
            solver = solver_class(engine, self)
        except native.NativeUnavailable as err:
            if backend == "native":
                raise ConfigError("backend", backend, str(err)) from None
            self.native_unavailable = str(err)
            return None
        self._engine = engine
        return solver

    def stacked_jacobian(self) -> np.ndarray:
        """Jacobians of the active contacts stacked in result order, (3·n_active, nv)."""
        return self.contacts.J[self.contacts.order].reshape(-1, self.model.nv)

    def stacked_drift(self) -> np.ndarray:
        """Drift J̇v of the active contacts stacked in result order, (3·n_active,)."""
        return self.contacts.drift[self.contacts.order].reshape(-1)

    def balance_base(self, qdd: np.ndarray, base_wrench: np.ndarray | None = None) -> None:
        """Set the base part of ``qdd`` so the unactuated rows hold: M_b q̈ + h_b = w.

        ``base_wrench`` w is the contacts' generalized force on the base rows (J_bᵀ f);
        None means no contact (free flight). No-op for a fixed base.
        """
        nb = self.model.n_base
        if not nb:
            return
        M, h = self.terms.M, self.terms.h
        rhs = -(M[:nb, nb:] @ qdd[nb:] + h[:nb])
        if base_wrench is not None:
            rhs += base_wrench
        qdd[:nb] = solve_pd(M[:nb, :nb], rhs)

    def torque_from_dynamics(self, qdd: np.ndarray, f_stacked: np.ndarray) -> None:
        """τ = (M q̈ + h − Jᵀ f)[actuated] for the active contacts; writes ``self.tau``."""
        gen = self.terms.M @ qdd + self.terms.h
        if f_stacked.size:
            gen -= self.stacked_jacobian().T @ f_stacked
        self.tau[:] = gen[self.model.n_base:]

    def set_forces(self, f_stacked: np.ndarray) -> None:
        """Store stacked active forces (result order) into ``self.forces``."""
        self.forces[self.contacts.order] = f_stacked.reshape(-1, 3)

    def constrained_forward_dynamics(self, tau: np.ndarray) -> None:
        """q̈ and f that ``tau`` produces with the active contacts held (bilateral).

        Solves [M −Jᵀ; J 0][q̈; f] = [Sᵀτ − h; −J̇v]; writes ``self.qdd`` and
        ``self.forces``. M and the Delassus matrix G = J M⁻¹ Jᵀ are factorized by
        Cholesky; redundant or ill-conditioned contact constraints (G singular) fall
        back to least squares.
        """
        m, M, h = self.model, self.terms.M, self.terms.h
        rhs = -h
        rhs[m.n_base:] += tau
        J = self.stacked_jacobian()
        M_chol = cholesky(M)
        if M_chol is None:  # not positive definite: only a broken model gets here
            solve = lambda b: np.linalg.lstsq(M, b, rcond=None)[0]  # noqa: E731
        else:
            solve = lambda b: chol_solve(M_chol, b)  # noqa: E731
        if J.shape[0] == 0:
            self.qdd[:] = solve(rhs)
            return
        Minv_JT = solve(J.T)
        Minv_rhs = solve(rhs)
        G = J @ Minv_JT
        b = -self.stacked_drift() - J @ Minv_rhs
        G_chol = cholesky_well_conditioned(G, _DELASSUS_RCOND)
        f = chol_solve(G_chol, b) if G_chol is not None else np.linalg.lstsq(G, b, rcond=_DELASSUS_RCOND)[0]
        self.qdd[:] = Minv_rhs + Minv_JT @ f
        self.set_forces(f)

    def dynamics_residual(self, result: Result) -> float:
        """Relative residual ‖M q̈ + h − Sᵀτ − Σ Jᵀf‖ / max(1, ‖M q̈ + h‖) at the last state."""
        m = self.model
        gen = self.terms.M @ result.qdd + self.terms.h
        scale = max(1.0, float(np.linalg.norm(gen)))
        gen[m.n_base:] -= result.tau
        for frame, f in zip(result.contact_frames, result.forces):
            gen -= self.contacts.J[m.contact_index(frame)].T @ f
        return float(np.linalg.norm(gen)) / scale
