"""Linear complementarity problems in numpy: Lemke's algorithm and a warm-started PPM.

Both solve the LCP (q, M)::

    w = M z + q,   z ≥ 0,   w ≥ 0,   zᵀ w = 0

- :class:`Lemke` — complementary pivoting with a covering vector (Cottle et al. 1992),
  for any copositive(-plus) M, e.g. the Coulomb-friction LCP of seed 000 §5.2.1. When it
  ends on a ray, or its answer does not satisfy the LCP to tolerance, it retries with
  Tikhonov regularization M + εI for increasing ε (as seed 000's implementation does);
  a regularized answer is only accepted when it satisfies the *original* LCP.
- :class:`PrincipalPivoting` — the principal pivoting method of seed 000 §4.6–4.7
  (Alg. 2, App. D) for symmetric positive semi-definite M, warm-started from a previous
  basis so that an indeterminate problem keeps its previous solution. M may be given
  factored as M = H Hᵀ (H: n×d, d ≪ n), which is how the no-slip contact LCP is built:
  M itself is then never formed (§4.7, cost linear in n).

Both return a frozen :class:`LcpResult`. Solver objects own their work buffers, sized at
construction for problems up to ``n_max``; a solve allocates only O(n) result arrays
(and small O(p²) factors in PPM). Module functions :func:`lemke` and :func:`ppm` are the
one-shot convenience versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.linalg.blas import dtrsm, dtrsv
from scipy.linalg.lapack import dpotrf

from .qp import FAILED, MAX_ITER, SOLVED

#: default Tikhonov regularizations tried after a failed Lemke solve, relative to max|M_ii|
REGULARIZATION = (1e-12, 1e-10, 1e-8, 1e-6)


# ---------------------------------------------------------------- small dense linear algebra
# Direct LAPACK/BLAS calls: scipy.linalg's wrappers cost ~20 µs of checks per call, more
# than the 6×6 solves they wrap. Triangular solves go through BLAS (dtrsv/dtrsm), not
# LAPACK's dtrtrs/dpotrs: OpenBLAS spreads even a 6 × 24 dtrtrs over threads and
# spin-waits for them, 3–4 ms per call on a loaded 2-core machine (it made lcp_noslip's
# tick 9–23 ms on Solo12). Callers guarantee finite inputs and non-empty shapes.
def cholesky_lower(A: np.ndarray) -> np.ndarray | None:
    """Lower Cholesky factor of the SPD matrix ``A``, or None when it is not SPD."""
    L, info = dpotrf(A, lower=1, clean=1)
    return L if info == 0 else None


def cholesky_solve(L: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x with L Lᵀ x = b (b: vector or matrix)."""
    return triangular_solve(L, triangular_solve(L, b), transpose=True)


def triangular_solve(L: np.ndarray, b: np.ndarray, *, transpose: bool = False) -> np.ndarray:
    """x with L x = b (or Lᵀ x = b), L lower triangular (b: vector or matrix)."""
    trans = 1 if transpose else 0
    if b.ndim == 1:
        return dtrsv(L, b, lower=1, trans=trans)
    return dtrsm(1.0, L, b, lower=1, trans_a=trans)


@dataclass(frozen=True)
class LcpResult:
    """One LCP solution.

    Attributes:
        z: the complementary variable (n,), ≥ 0 when ``ok``.
        w: M z + q recomputed from ``z`` with the original M (not the regularized one).
        status: "solved", "max_iter" or "failed" (no solution found: infeasible LCP, or
            ray termination even with regularization). On failure z = 0 and w = q.
        iterations: pivots (Lemke, all attempts) or PPM iterations.
        basis: bool (n,), True where z_i is the computed variable of the pair and
            w_i = 0. This is the set seed 000 App. D / Alg. 2 calls the *non-basic* set
            β̄ (its naming is the opposite of the textbook one); pass it back as ``warm``.
        regularization: ε of the M + εI that produced the answer (0 when none).
    """

    z: np.ndarray
    w: np.ndarray
    status: str
    iterations: int
    basis: np.ndarray
    regularization: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == SOLVED

    def complementarity(self) -> float:
        """max_i |z_i w_i|, the complementarity gap."""
        return float(np.max(np.abs(self.z * self.w), initial=0.0))


def _failed(q: np.ndarray, iterations: int, status: str = FAILED) -> LcpResult:
    n = q.size
    return LcpResult(np.zeros(n), q.copy(), status, iterations, np.zeros(n, dtype=bool))


def _satisfies(z: np.ndarray, w: np.ndarray, basis: np.ndarray, q: np.ndarray, tol: float) -> bool:
    """True when (z, w) solve the LCP to ``tol`` (relative to the size of q and w)."""
    scale = 1.0 + float(np.max(np.abs(q), initial=0.0))
    tol_w = tol * scale
    if w.size == 0:
        return True
    if w.min() < -tol_w:
        return False
    # computed z's must have w ≈ 0 (complementarity); z's at zero need only w ≥ 0
    return not basis.any() or float(np.max(np.abs(w[basis]))) <= tol_w


# ============================================================================ Lemke
class Lemke:
    """Lemke's complementary pivoting algorithm on a preallocated tableau.

    The tableau holds ``[I | −M | −d | q]`` for ``w − M z − d z₀ = q`` (covering vector
    d = 1). Ties in the ratio test are broken lexicographically (Cottle et al. 1992,
    §4.9), so degenerate problems — the friction LCP at rest is one — do not cycle.

    Args:
        n_max: largest problem size expected (a larger one reallocates the buffers).
        max_iter: pivot cap per attempt; ``None`` means 50 + 10 n.
        pivot_tol: entries at or below this are not pivots (relative to the column).
        tol: acceptance tolerance of a solution (relative, see :func:`_satisfies`).
        regularization: ε values tried in turn after a failure (relative to max|M_ii|);
            ``()`` disables the retry.
    """

    def __init__(self, n_max: int, *, max_iter: int | None = None, pivot_tol: float = 1e-12,
                 tol: float = 1e-8, regularization: Sequence[float] = REGULARIZATION):
        self.n_max = int(n_max)
        self.max_iter = max_iter
        self.pivot_tol = float(pivot_tol)
        self.tol = float(tol)
        self.regularization = tuple(float(e) for e in regularization)
        self._allocate(self.n_max)

    def _allocate(self, n: int) -> None:
        self.n_max = n
        self._T = np.zeros((n, 2 * n + 2))
        self._tmp = np.zeros((n, 2 * n + 2))
        self._col = np.zeros(n)
        self._basic = np.zeros(n, dtype=int)  # variable index per row: w_i = i, z_i = n+i, z₀ = 2n

    def solve(self, M: np.ndarray, q: np.ndarray) -> LcpResult:
        """Solve the LCP (q, M); see the class docstring for the retry policy.

        A problem larger than ``n_max`` reallocates the buffers (once, not per tick).
        """
        q = np.asarray(q, dtype=float)
        n = q.size
        if n > self.n_max:
            self._allocate(n)
        if n == 0 or q.min() >= 0.0:
            return LcpResult(np.zeros(n), q.copy(), SOLVED, 0, np.zeros(n, dtype=bool))
        M = np.asarray(M, dtype=float)
        total = 0
        z, basis, status, iters = self._pivot(M, q, 0.0)
        total += iters
        if status == SOLVED:
            w = M @ z + q
            if _satisfies(z, w, basis, q, self.tol):
                return LcpResult(z, w, SOLVED, total, basis)
        last = status
        scale = max(1.0, float(np.max(np.abs(np.diag(M)), initial=0.0)))
        for eps in self.regularization:
            z, basis, status, iters = self._pivot(M, q, eps * scale)
            total += iters
            last = status
            if status != SOLVED:
                continue
            # polish: re-solve the original M on the basis found with the regularized one
            polished = self._polish(M, q, basis)
            if polished is not None:
                return LcpResult(polished[0], polished[1], SOLVED, total, basis, eps * scale)
            w = M @ z + q  # judged against the original problem
            if _satisfies(z, w, basis, q, self.tol):
                return LcpResult(z, w, SOLVED, total, basis, eps * scale)
            last = FAILED
        return _failed(q, total, MAX_ITER if last == MAX_ITER else FAILED)

    def _polish(self, M, q, basis):
        """(z, w) from M_bb z_b = −q_b (least squares) on ``basis``, if it solves the LCP."""
        z = np.zeros(q.size)
        if basis.any():
            z[basis] = np.linalg.lstsq(M[np.ix_(basis, basis)], -q[basis], rcond=1e-12)[0]
        if z.min() < -self.tol * max(1.0, float(np.abs(z).max())):
            return None
        np.maximum(z, 0.0, out=z)
        w = M @ z + q
        return (z, w) if _satisfies(z, w, basis, q, self.tol) else None

    # ------------------------------------------------------------------ internals
    def _pivot(self, M: np.ndarray, q: np.ndarray, eps: float):
        n = q.size
        width = 2 * n + 2
        T = self._T[:n, :width]
        tmp = self._tmp[:n, :width]
        col = self._col[:n]
        basic = self._basic[:n]
        rhs = width - 1
        z0 = 2 * n
        T[:] = 0.0
        np.fill_diagonal(T[:, :n], 1.0)
        np.negative(M, out=T[:, n:2 * n])
        if eps:
            T[:, n:2 * n].flat[:: n + 1] -= eps
        T[:, z0] = -1.0
        T[:, rhs] = q
        basic[:] = np.arange(n)
        max_iter = self.max_iter if self.max_iter is not None else 50 + 10 * n

        row = int(np.argmin(q))
        self._do_pivot(T, tmp, col, row, z0)
        leaving = basic[row]
        basic[row] = z0
        entering = leaving + n  # complement of w_row is z_row
        iters = 1
        while iters < max_iter:
            iters += 1
            col[:] = T[:, entering]
            cand = np.flatnonzero(col > self.pivot_tol * max(1.0, float(np.abs(col).max())))
            if cand.size == 0:
                return np.zeros(n), np.zeros(n, dtype=bool), FAILED, iters  # ray termination
            row = self._ratio_test(T, col, cand, basic, n, z0)
            self._do_pivot(T, tmp, col, row, entering)
            leaving = basic[row]
            basic[row] = entering
            if leaving == z0:
                z = np.zeros(n)
                is_z = (basic >= n) & (basic < z0)
                z[basic[is_z] - n] = T[is_z, rhs]
                np.maximum(z, 0.0, out=z)
                basis = np.zeros(n, dtype=bool)
                basis[basic[is_z] - n] = True
                return z, basis, SOLVED, iters
            entering = leaving + n if leaving < n else leaving - n
        return np.zeros(n), np.zeros(n, dtype=bool), MAX_ITER, iters

    @staticmethod
    def _ratio_test(T, col, cand, basic, n, z0) -> int:
        ratios = T[cand, -1] / col[cand]
        rmin = ratios.min()
        ties = cand[ratios <= rmin + 1e-12 * max(1.0, abs(rmin))]
        if ties.size == 1:
            return int(ties[0])
        z0_rows = ties[basic[ties] == z0]
        if z0_rows.size:
            return int(z0_rows[0])  # z₀ leaving ends the algorithm
        for k in range(n):  # lexicographic rule on the rows of B⁻¹ (the w columns)
            vals = T[ties, k] / col[ties]
            vmin = vals.min()
            ties = ties[vals <= vmin + 1e-12 * max(1.0, abs(vmin))]
            if ties.size == 1:
                break
        return int(ties[0])

    @staticmethod
    def _do_pivot(T, tmp, col, row, c) -> None:
        col[:] = T[:, c]
        T[row] /= col[row]
        col[row] = 0.0
        np.multiply(col[:, None], T[row][None, :], out=tmp)
        T -= tmp


# ============================================================================ PPM
class PrincipalPivoting:
    """Warm-started principal pivoting for symmetric PSD LCPs (seed 000 §4.6, Alg. 2, App. D).

    The state is the set P of indices whose z is computed (w_P = 0; Alg. 2's β̄); all
    other z are 0. Each iteration solves M_PP z_P = −q_P with a Cholesky factor of M_PP
    that grows by one bordered row when an index enters, then makes Alg. 2's two moves:
    the index with the most negative w enters P; an index whose z would turn negative
    leaves P. Unlike the plain PPM I, the leaving move takes a ratio-test step so that z
    stays ≥ 0 and the objective ½zᵀMz + qᵀz never increases (Lawson–Hanson style); this
    makes the method terminate on singular PSD matrices, where plain PPM may cycle.

    When the entering index makes M_PP singular (its row of H lies in the span of P's —
    four feet on flat ground, seed 000 Fig. 5), z moves along the zero-curvature
    direction e_i − M_PP⁻¹M_Pi until an index of P reaches zero and is exchanged; if no
    index blocks, the LCP is infeasible (the equivalent QP is unbounded) → "failed".

    Warm start: P starts as the given basis (dependent indices dropped in order), so if
    the previous solution's index set still solves the problem it is returned as is —
    seed 000 §4.6: equivalent solutions do not switch from one tick to the next.

    Args:
        n_max: largest problem size expected (a larger one reallocates the buffers).
        max_iter: iteration cap; ``None`` means 50 + 4 n.
        tol: relative tolerance on w ≥ 0 and z ≥ 0.
        dependence_tol: relative Cholesky pivot below which an entering index is
            linearly dependent on P.
    """

    def __init__(self, n_max: int, *, max_iter: int | None = None, tol: float = 1e-9,
                 dependence_tol: float = 1e-9):
        self.n_max = int(n_max)
        self.max_iter = max_iter
        self.tol = float(tol)
        self.dependence_tol = float(dependence_tol)
        self._allocate(self.n_max)

    def _allocate(self, n: int) -> None:
        self.n_max = n
        self._z = np.zeros(n)
        self._in_p = np.zeros(n, dtype=bool)

    # ------------------------------------------------------------------ public API
    def solve(self, q: np.ndarray, *, M: np.ndarray | None = None, H: np.ndarray | None = None,
              warm: np.ndarray | Sequence[int] | None = None, tol: float | None = None) -> LcpResult:
        """Solve the LCP (q, M) with M given explicitly or as M = H Hᵀ.

        Args:
            q: (n,).
            M: (n, n) symmetric positive semi-definite; or
            H: (n, d) with M = H Hᵀ (M is then never formed).
            warm: starting basis — a bool mask (n,) like :attr:`LcpResult.basis`, or
                indices. ``None`` starts cold (Alg. 2 line 8: the most negative q_i).
            tol: absolute tolerance on w ≥ 0 for this solve, when the caller knows the
                accuracy of q better (default: the relative ``tol`` × max(1, |q|∞)).
        """
        q = np.asarray(q, dtype=float)
        n = q.size
        if n > self.n_max:
            self._allocate(n)  # once, not per tick
        if (M is None) == (H is None):
            raise ValueError("give exactly one of M or H")
        tol_w = self.tol * max(1.0, float(np.abs(q).max(initial=0.0))) if tol is None else float(tol)
        if n == 0 or q.min() >= -tol_w:
            return LcpResult(np.zeros(n), q.copy(), SOLVED, 0, np.zeros(n, dtype=bool))
        ops = _Factored(H) if H is not None else _Explicit(M)
        return self._run(ops, q, warm, tol_w)

    # ------------------------------------------------------------------ internals
    def _run(self, ops, q, warm, tol_w) -> LcpResult:
        n = q.size
        z = self._z[:n]
        in_p = self._in_p[:n]
        z[:] = 0.0
        in_p[:] = False
        P: list[int] = []
        L = np.zeros((0, 0))
        if warm is not None:
            warm_idx = np.flatnonzero(warm) if np.asarray(warm).dtype == bool else np.asarray(warm, dtype=int)
            for i in warm_idx:
                grown = self._grow(ops, L, P, int(i))
                if grown is not None:
                    L = grown
                    P.append(int(i))
        in_p[P] = True
        max_iter = self.max_iter if self.max_iter is not None else 50 + 4 * n
        it = 0
        # warm phase (Alg. 2 lines 6 and 18–23): while the warm set gives some z < 0,
        # the most negative index leaves; the rest of the previous set is kept
        while P and it < max_iter:
            it += 1
            s = cholesky_solve(L, -q[np.array(P)])
            j = int(np.argmin(s))
            if s[j] >= -self.tol * max(1.0, float(np.abs(s).max())):
                z[np.array(P)] = np.maximum(s, 0.0)
                break
            L, P = self._remove(ops, P, {P[j]}, z, in_p)
        while it < max_iter:
            it += 1
            if P:
                p_idx = np.array(P)
                s = cholesky_solve(L, -q[p_idx])
                z_p = z[p_idx]
                if s.min() < -self.tol * max(1.0, float(np.abs(s).max())):
                    # Alg. 2 line 18–22 with a ratio test: step from z_P toward s until
                    # the first z_k reaches 0; that k leaves P (becomes "basic")
                    neg = np.flatnonzero(s < 0.0)
                    steps = z_p[neg] / (z_p[neg] - s[neg])
                    j = int(np.argmin(steps))
                    z[p_idx] = z_p + steps[j] * (s - z_p)
                    leave = {P[neg[j]]} | {P[k] for k in np.flatnonzero(z[p_idx] <= 0.0)}
                    L, P = self._remove(ops, P, leave, z, in_p)
                    continue
                z[p_idx] = np.maximum(s, 0.0)
            w = ops.w(z, P, q)
            w_out = np.where(in_p, np.inf, w)
            i = int(np.argmin(w_out))
            if w_out[i] >= -tol_w:  # Alg. 2 line 17/25: no index to move → solution
                w_final = w.copy()
                w_final[in_p] = np.where(np.abs(w_final[in_p]) <= tol_w, 0.0, w_final[in_p])
                return LcpResult(z.copy(), w_final, SOLVED, it, in_p.copy())
            grown = self._grow(ops, L, P, i)
            if grown is not None:  # Alg. 2 line 31: i enters the non-basic set
                L = grown
                P.append(i)
                in_p[i] = True
                continue
            # i depends on P: move along d = e_i − M_PP⁻¹ M_Pi (M d = 0, slope w_i < 0)
            if not P:
                return _failed(q, it)  # M_ii = 0 and w_i < 0: infeasible
            p_idx = np.array(P)
            alpha = cholesky_solve(L, ops.cross(P, i))
            pos = np.flatnonzero(alpha > self.dependence_tol * max(1.0, float(np.abs(alpha).max())))
            if pos.size == 0:
                return _failed(q, it)  # unbounded descent: the LCP has no solution
            steps = z[p_idx[pos]] / alpha[pos]
            j = int(np.argmin(steps))
            t = steps[j]
            z[p_idx] -= t * alpha
            z[i] = t
            leave = {P[pos[j]]} | {P[k] for k in np.flatnonzero(z[p_idx] <= 0.0)}
            L, P = self._remove(ops, P, leave, z, in_p)
            grown = self._grow(ops, L, P, i)
            if grown is None:  # numerically still dependent: give up on this index
                z[i] = 0.0
                continue
            L = grown
            P.append(i)
            in_p[i] = True
        return _failed(q, it, MAX_ITER)

    def _grow(self, ops, L, P, i):
        """Cholesky factor of M_PP bordered by index i, or None when i depends on P."""
        d = ops.diag(i)
        if d <= 0.0:
            return None
        if not P:
            return np.array([[np.sqrt(d)]])
        l = triangular_solve(L, ops.cross(P, i))
        pivot = d - float(l @ l)
        if pivot <= self.dependence_tol * d:
            return None
        p = len(P)
        out = np.zeros((p + 1, p + 1))
        out[:p, :p] = L
        out[p, :p] = l
        out[p, p] = np.sqrt(pivot)
        return out

    def _remove(self, ops, P, leave, z, in_p):
        keep = [k for k in P if k not in leave]
        for k in leave:
            z[k] = 0.0
            in_p[k] = False
        L = np.zeros((0, 0))
        kept = []
        for k in keep:  # refactor (P has at most rank(M) entries: small)
            grown = self._grow(ops, L, kept, k)
            if grown is None:
                z[k] = 0.0
                in_p[k] = False
                continue
            L = grown
            kept.append(k)
        return L, kept


class _Explicit:
    """Access to an explicit symmetric M."""

    def __init__(self, M):
        self.M = np.asarray(M, dtype=float)

    def diag(self, i):
        return float(self.M[i, i])

    def cross(self, P, i):
        return self.M[P, i]

    def w(self, z, P, q):
        return self.M[:, P] @ z[P] + q if P else q.copy()


class _Factored:
    """Access to M = H Hᵀ without forming M (seed 000 §4.7)."""

    def __init__(self, H):
        self.H = np.asarray(H, dtype=float)

    def diag(self, i):
        h = self.H[i]
        return float(h @ h)

    def cross(self, P, i):
        return self.H[P] @ self.H[i]

    def w(self, z, P, q):
        if not P:
            return q.copy()
        return self.H @ (self.H[P].T @ z[P]) + q


# ============================================================================ one-shot helpers
def lemke(M: np.ndarray, q: np.ndarray, **options) -> LcpResult:
    """Solve the LCP (q, M) with :class:`Lemke` (options: see its constructor)."""
    q = np.asarray(q, dtype=float)
    return Lemke(max(q.size, 1), **options).solve(M, q)


def ppm(q: np.ndarray, *, M: np.ndarray | None = None, H: np.ndarray | None = None,
        warm=None, **options) -> LcpResult:
    """Solve a symmetric PSD LCP with :class:`PrincipalPivoting` (options: its constructor)."""
    q = np.asarray(q, dtype=float)
    return PrincipalPivoting(max(q.size, 1), **options).solve(q, M=M, H=H, warm=warm)


__all__ = ["LcpResult", "Lemke", "PrincipalPivoting", "lemke", "ppm", "REGULARIZATION",
           "cholesky_lower", "cholesky_solve", "triangular_solve"]
