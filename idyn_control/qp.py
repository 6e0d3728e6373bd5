"""Quadratic programs: a persistent, warm-started ProxQP, or any installed qpsolvers backend.

Layer 4 of DESIGN.md §3. A formulation owns one :class:`QpSolver` per QP it solves. It
writes the problem data in place into ``H, g, A, b, C, l, u``::

    minimize ½ xᵀHx + gᵀx   subject to   A x = b,   l ≤ C x ≤ u

and calls :meth:`QpSolver.solve`. With ``solver="proxqp"`` (default) the ProxQP object is
``init``-ed once and then ``update``-d and warm-started from the previous result every
tick. Any other name hands the same problem to that :mod:`qpsolvers` backend, one-shot:
slower, there so users can compare solvers on their robot.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np
import proxsuite
from scipy.linalg import lapack

from .errors import UnknownNameError

#: bounds at or beyond this magnitude are treated as infinite
INF = 1e20
#: ProxQP's primal/dual infeasibility certificate tolerance, its default: an infeasible
#: problem stops early, but a feasible one can be declared infeasible (a one-foot wbc_qp
#: state, primal residual 3e-5, that ProxQP solves in 13 iterations at 1e-5 or tighter;
#: an LP confirms it is feasible)
PROXQP_INFEASIBILITY_TOLERANCE = 1e-4
#: the strict tolerance for QPs whose "infeasible" is a failure (wbc_qp): an infeasible
#: problem runs to max_iter instead. Where "infeasible" is an expected early exit (the
#: fast path of qp_coulomb's Stage II) the default stays: strict, its p99 tick went from
#: 0.6 to 10 ms
STRICT_INFEASIBILITY_TOLERANCE = 1e-9
#: weight of elastic rows (constraints a formulation turns into penalties as a last
#: resort, when no torque meets them all), relative to the largest weight of the cost:
#: they give way only as far as they must (wbc_qp, two points per foot on Go2: the
#: acceleration left at the feet is 5 % above its minimum at 1e4, 0.3 % at 1e6, where
#: ProxQP hit its iteration cap on 7 % of the ticks)
ELASTIC_WEIGHT = 1e4

#: active-set steps of the working-set guess (QpSolver ``guess``) before ProxQP takes over:
#: along the Solo12 trot (66 contact switches) every qp_coulomb stage settled within 4
GUESS_STEPS = 4
#: Tikhonov term of the guess's constraint Schur complement (scaled to a unit diagonal):
#: dependent rows (two feet's base-wrench rows have rank 5, an inactive contact's rows
#: are zero) keep it positive definite; its answer is checked, not trusted
GUESS_REGULARIZATION = 1e-12

#: accuracy settings per qpsolvers backend, so comparisons with ProxQP are like for like
BACKEND_SETTINGS = {
    "osqp": {"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iter": 200_000, "polish": True},
}

SOLVED = "solved"
MAX_ITER = "max_iter"
INFEASIBLE = "infeasible"
FAILED = "failed"

_PROXQP_STATUS = {
    proxsuite.proxqp.QPSolverOutput.PROXQP_SOLVED: SOLVED,
    proxsuite.proxqp.QPSolverOutput.PROXQP_MAX_ITER_REACHED: MAX_ITER,
    proxsuite.proxqp.QPSolverOutput.PROXQP_PRIMAL_INFEASIBLE: INFEASIBLE,
    proxsuite.proxqp.QPSolverOutput.PROXQP_DUAL_INFEASIBLE: INFEASIBLE,
    proxsuite.proxqp.QPSolverOutput.PROXQP_SOLVED_CLOSEST_PRIMAL_FEASIBLE: INFEASIBLE,
    proxsuite.proxqp.QPSolverOutput.PROXQP_NOT_RUN: FAILED,
}


def solver_names() -> tuple[str, ...]:
    """``proxqp`` (persistent) and every installed qpsolvers backend (qpsolvers is
    optional: without it, ProxQP only)."""
    try:
        import qpsolvers
    except ImportError:
        return ("proxqp",)
    return ("proxqp",) + tuple(s for s in qpsolvers.available_solvers if s != "proxqp")


@dataclass
class QpOutcome:
    """What one solve produced; ``x`` is a view valid until the next solve."""

    x: np.ndarray
    y: np.ndarray  # multipliers of A x = b
    z: np.ndarray  # multipliers of l ≤ C x ≤ u
    status: str
    iterations: int
    solve_time_s: float

    @property
    def ok(self) -> bool:
        return self.status == SOLVED


class QpSolver:
    """One QP of fixed size, solved repeatedly.

    Args:
        n, n_eq, n_in: number of variables, equality rows, inequality rows.
        solver: ``"proxqp"`` or a qpsolvers backend name (see :func:`solver_names`).
        warm_start: start each ProxQP solve from the previous result (default); when
            False every solve starts cold, which tests use to measure the gain.
        eps_abs: absolute accuracy of the primal/dual residuals.
        max_iter: iteration cap of a solve.
        infeasibility_tolerance: ProxQP's eps_primal_inf and eps_dual_inf.
        guess: before ProxQP, solve the equality-constrained QP with the inequality rows
            the last solution held at a bound (its working set) as equalities, and accept
            it when it is the optimum: every row within ``eps_abs`` of its bounds and every
            held row's multiplier of the right sign (the KKT conditions, checked, so the
            answer is ProxQP's to its tolerance; strictly convex QPs have one optimum). A
            few active-set steps follow a wrong guess. Needs H positive definite
            (otherwise ProxQP solves). ProxQP with ``warm_start`` only.
    """

    def __init__(self, n: int, n_eq: int, n_in: int, *, solver: str = "proxqp",
                 warm_start: bool = True, eps_abs: float = 1e-8, max_iter: int = 100,
                 infeasibility_tolerance: float = PROXQP_INFEASIBILITY_TOLERANCE, guess: bool = False):
        valid = ("proxqp",) if solver == "proxqp" else solver_names()  # qpsolvers only when asked for
        if solver not in valid:
            raise UnknownNameError("QP solver", solver, valid)
        self.solver = solver
        self.n, self.n_eq, self.n_in = n, n_eq, n_in
        self.H = np.zeros((n, n))
        self.g = np.zeros(n)
        self.A = np.zeros((n_eq, n))
        self.b = np.zeros(n_eq)
        self.C = np.zeros((n_in, n))
        self.l = np.full(n_in, -INF)
        self.u = np.full(n_in, INF)
        self.warm_start = warm_start
        self.eps_abs = eps_abs
        self.max_iter = max_iter
        self.infeasibility_tolerance = infeasibility_tolerance
        self._initialized = False
        self._x = np.zeros(n)
        self._y = np.zeros(n_eq)
        self._z = np.zeros(n_in)
        self._stale_z = False  # a row's bounds moved since the last solve (set_row_bounds)
        self.guess = guess and solver == "proxqp" and warm_start  # the working set is a warm start too
        #: per inequality row, the bound the last solution held it at: +1 upper, −1 lower, 0 none
        self.working = np.zeros(n_in, dtype=np.int8)
        #: the last solve was certified by the guess (ProxQP's own result is older)
        self.guessed = False
        self._qp = None
        if solver == "proxqp" and n > 0:
            self._qp = self._new_proxqp()

    def _new_proxqp(self):
        """A fresh ProxQP object: built once, and again for a cold retry (``init`` on a used
        object keeps its adapted proximal parameters and last result, which after a failed
        solve mislead the retry as much as the warm start did)."""
        # primal-dual LDLᵀ: fewer iterations than primal LDLᵀ on our sequences
        qp = proxsuite.proxqp.dense.QP(self.n, self.n_eq, self.n_in, False, proxsuite.proxqp.dense.HessianType.Dense,
                                       proxsuite.proxqp.dense.DenseBackend.PrimalDualLDLT)
        s = qp.settings
        s.eps_abs = self.eps_abs
        s.eps_rel = 1e-10  # large forces [N]: absolute accuracy alone is below round-off
        s.max_iter = self.max_iter
        s.max_iter_in = 20  # bounds the inner loop too: a tick must end
        s.verbose = False
        s.initial_guess = (proxsuite.proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT if self.warm_start
                           else proxsuite.proxqp.InitialGuess.NO_INITIAL_GUESS)
        return qp

    def reset(self) -> None:
        """Forget the previous result: the next solve starts cold and re-initializes."""
        self._initialized = False
        self.working[:] = 0
        self.guessed = False

    def set_row_bounds(self, row: int, lower: float, upper: float) -> None:
        """``l[row], u[row] = lower, upper``; when they move, the row's multiplier from the
        last solve is dropped from the warm start: ProxQP stops on residuals, not on
        complementarity, so a bound moved away from a solution it held would leave that
        solution "optimal" (a ramping force bound would never let go)."""
        if self.l[row] != lower or self.u[row] != upper:
            self.l[row], self.u[row] = lower, upper
            self._z[row] = 0.0
            self._stale_z = True

    def solve(self, x0: np.ndarray | None = None, *, guess_only: bool = False) -> QpOutcome:
        """Solve with the current problem data.

        ``x0``: a primal point to start from (e.g. a known feasible one) instead of the
        previous result; the previous multipliers are kept. ``guess_only``: with ``guess``,
        stop with status "failed" when the guess does not certify an optimum instead of
        running ProxQP (a QP that may be infeasible, whose caller has another way).
        """
        t0 = time.perf_counter()
        steps = 0
        if self.n and self.guess:
            steps = self._solve_guess()
            if steps > 0:
                self.guessed = True
                return QpOutcome(self._x, self._y, self._z, SOLVED, steps, time.perf_counter() - t0)
            if guess_only:
                return QpOutcome(self._x, self._y, self._z, FAILED, -steps, time.perf_counter() - t0)
        if self.n == 0:
            status, iters = SOLVED, 0
        elif self.solver == "proxqp":
            status, iters = self._solve_proxqp(x0)
            if status != SOLVED and self.warm_start:
                # a warm start from a bad previous tick can mislead ProxQP: retry cold,
                # on a fresh object (allocates, but only on a failed tick)
                self._qp = self._new_proxqp()
                self._initialized = False
                status, more = self._solve_proxqp(None)
                iters += more
        else:
            status, iters = self._solve_qpsolvers()
        if self.guess:
            self._hold_working_set(status)
        return QpOutcome(self._x, self._y, self._z, status, iters - steps, time.perf_counter() - t0)

    def _solve_guess(self) -> int:
        """The working-set guess (``guess``): the number of active-set steps it took (> 0)
        when its answer is the optimum (written to x, y, z as ProxQP would: H x + g + Aᵀy
        + Cᵀz = 0, z ≥ 0 on an upper bound, ≤ 0 on a lower one), else minus the steps spent
        (ProxQP then solves). Rows with l = u are equalities; every other row enters the
        equalities at the bound the working set names. Allocates (the reference; the
        compiled tick has the same steps in place)."""
        n_eq, tol = self.n_eq, self.eps_abs
        # triangular inverses and products: LAPACK's triangular solves with many right-hand
        # sides run multi-threaded on these sizes, and a starved BLAS thread under
        # SCHED_FIFO held a G1 tick for 10 ms
        L, info = lapack.dpotrf(self.H, lower=1)
        if info:
            return 0
        L_inv, _ = lapack.dtrtri(L, lower=1)
        w = L_inv @ self.g  # L⁻¹ g
        fixed = (self.l == self.u) & (np.abs(self.l) < INF)
        # a held row whose bound went to infinity since (a lifted foot's freed rows, torque
        # limits dropped) is free: held there it would only give NaN
        work = np.where(fixed | ((self.working > 0) & (self.u >= INF)) | ((self.working < 0) & (self.l <= -INF)),
                        0, self.working)
        for step in range(1, GUESS_STEPS + 1):
            rows = np.flatnonzero(fixed | (work != 0))
            E = np.vstack((self.A, self.C[rows]))
            e = np.concatenate((self.b, np.where(work[rows] < 0, self.l[rows], self.u[rows])))
            V = L_inv @ E.T  # L⁻¹ Eᵀ
            lam = np.zeros(E.shape[0])
            if E.shape[0]:  # (LAPACK rejects an empty matrix)
                S = V.T @ V  # E H⁻¹ Eᵀ, scaled to a unit diagonal (rows in newtons beside rows per unit mass)
                d = S.diagonal().copy()
                s_ = np.where(d > 0.0, 1.0 / np.sqrt(np.where(d > 0.0, d, 1.0)), 1.0)
                S *= s_[:, None] * s_[None, :]
                S[np.diag_indices_from(S)] += GUESS_REGULARIZATION
                L_S, info = lapack.dpotrf(S, lower=1)
                if info:
                    return -step
                L_S_inv, _ = lapack.dtrtri(L_S, lower=1)
                lam = -s_ * (L_S_inv.T @ (L_S_inv @ (s_ * (e + V.T @ w))))
                x = -L_inv.T @ (w + V @ lam)
                # one step of iterative refinement takes out what the Tikhonov term left on E x = e
                lam += s_ * (L_S_inv.T @ (L_S_inv @ (s_ * (E @ x - e))))
            x = -L_inv.T @ (w + V @ lam)
            Cx = self.C @ x
            z = np.zeros(self.n_in)
            z[rows] = lam[n_eq:]
            held = work != 0
            wrong = held & (work * z < -tol)  # an upper bound pulls (z < 0), a lower one pushes
            violated = ~held & ~fixed & ((Cx > self.u + tol) | (Cx < self.l - tol))
            if (np.abs(E @ x - e).max(initial=0.0) <= tol and not wrong.any() and not violated.any()):
                self._x[:] = x
                self._y[:] = lam[:n_eq]
                self._z[:] = z
                self.working[:] = work
                return step
            # active-set step: hold the rows crossed, release the one that pulls hardest (one
            # at a time: at a contact's zero force its five pyramid rows are held together
            # and dependent, and their least-norm multipliers need not all have the sign of
            # the ones that certify it)
            work[violated & (Cx > self.u + tol)] = 1
            work[violated & (Cx < self.l - tol)] = -1
            if wrong.any():
                work[np.argmin(np.where(wrong, work * z, 0.0))] = 0
        return -GUESS_STEPS

    def _hold_working_set(self, status: str) -> None:
        """After ProxQP: the rows its answer holds at a bound (within ``eps_abs``, with a
        multiplier of that bound's sign), the next guess. The sign alone is not enough:
        ProxQP leaves multipliers of ±1e-20 on rows far from their bounds (two thirds of the
        rows it named on G1 and the quadrupeds' switching sequences, 1 N away), whose sign
        is rounding noise, different in the compiled tick."""
        self.guessed = False
        self.working[:] = 0
        if status == SOLVED:
            bounded = (self.l != self.u)
            Cx = self.C @ self._x
            tol = self.eps_abs
            self.working[bounded & (self._z > 0.0) & (self.u < INF) & (Cx >= self.u - tol)] = 1
            self.working[bounded & (self._z < 0.0) & (self.l > -INF) & (Cx <= self.l + tol)] = -1

    def _solve_proxqp(self, x0: np.ndarray | None) -> tuple[str, int]:
        qp = self._qp
        qp.settings.eps_primal_inf = self.infeasibility_tolerance  # may change between solves
        qp.settings.eps_dual_inf = self.infeasibility_tolerance
        A = self.A if self.n_eq else None
        b = self.b if self.n_eq else None
        C = self.C if self.n_in else None
        if x0 is None and (self._stale_z or self.guessed) and self.warm_start and self._initialized:
            # the previous result, with the multipliers set_row_bounds dropped, or the
            # guess's (ProxQP's own is older)
            x0 = self._x
        self._stale_z = False
        if not self._initialized:
            qp.init(self.H, self.g, A, b, C, self.l if self.n_in else None, self.u if self.n_in else None)
            self._initialized = True
        else:
            # the preconditioner from init is kept: re-equilibrating costs more than it saves
            qp.update(self.H, self.g, A, b, C, self.l if self.n_in else None, self.u if self.n_in else None,
                      update_preconditioner=False)
        if x0 is not None and self.warm_start:
            qp.settings.initial_guess = proxsuite.proxqp.InitialGuess.WARM_START
            qp.solve(x0, self._y, self._z)
            qp.settings.initial_guess = proxsuite.proxqp.InitialGuess.WARM_START_WITH_PREVIOUS_RESULT
        else:
            qp.solve()
        r = qp.results
        status = _PROXQP_STATUS.get(r.info.status, FAILED)
        if not (np.isfinite(r.x).all() and np.isfinite(r.y).all() and np.isfinite(r.z).all()):
            # never warm-start from NaN: the next solve re-initializes
            self._initialized = False
            return FAILED, int(r.info.iter)
        self._x[:] = r.x
        self._y[:] = r.y
        self._z[:] = r.z
        return status, int(r.info.iter)

    def _solve_qpsolvers(self) -> tuple[str, int]:
        import qpsolvers

        finite_u = self.u < INF
        finite_l = self.l > -INF
        G = np.vstack((self.C[finite_u], -self.C[finite_l]))
        h = np.concatenate((self.u[finite_u], -self.l[finite_l]))
        problem = qpsolvers.Problem(
            self.H, self.g, G if G.size else None, h if h.size else None,
            self.A if self.n_eq else None, self.b if self.n_eq else None,
        )
        try:
            with warnings.catch_warnings():  # dense → sparse conversions: expected here
                warnings.simplefilter("ignore")
                solution = qpsolvers.solve_problem(problem, solver=self.solver,
                                                   **BACKEND_SETTINGS.get(self.solver, {}))
        except Exception:  # noqa: BLE001 - backends raise their own types on bad problems
            return FAILED, 0
        if not solution.found or solution.x is None:
            return INFEASIBLE, 0
        self._x[:] = solution.x
        if self.n_eq and solution.y is not None:
            self._y[:] = solution.y
        if self.n_in and solution.z is not None:
            zu = np.zeros(self.n_in)
            zu[finite_u] = solution.z[: finite_u.sum()]
            zu[finite_l] -= solution.z[finite_u.sum():]
            self._z[:] = zu
        return SOLVED, 0
