"""Small dense linear algebra for the 1 kHz path: Cholesky and QR instead of the SVD.

LAPACK is called directly (``scipy.linalg.lapack``): no argument checks, ~2–5 µs per
call for the 6–18-sized matrices of a tick, where ``np.linalg.pinv`` (an SVD) costs
~50 µs and ``scipy.linalg.cho_factor``/``cho_solve`` ~10–60 µs with their checks.

The pseudo-inverses take the fast route only when it gives the SVD's answer: the matrix
has full rank and LAPACK's condition estimate is far from the ``rcond`` cut-off (no
singular value is dropped) and below :data:`COND_MAX` (the two routes then agree to
~``COND_MAX``·eps). Otherwise they fall back to the SVD with the same ``rcond``
(``np.linalg.pinv`` itself where only A⁺ is asked for), so rank-deficient and
ill-conditioned inputs behave as before.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack

#: largest condition number (LAPACK's 1-norm estimate) taken by the Cholesky/QR route
COND_MAX = 1e8
#: the estimate must also be this far below 1/rcond: it is a lower bound of the
#: 1-norm condition, which bounds the 2-norm one only up to a factor of the size
_RCOND_MARGIN = 1e-3


def _cond_limit(rcond: float) -> float:
    return min(COND_MAX, _RCOND_MARGIN / rcond) if rcond > 0.0 else COND_MAX


def cholesky(A: np.ndarray) -> np.ndarray | None:
    """Lower Cholesky factor of the symmetric ``A`` (lower triangle read), None unless PD."""
    c, info = lapack.dpotrf(A, lower=1)
    return c if info == 0 else None


def cholesky_well_conditioned(A: np.ndarray, rcond: float) -> np.ndarray | None:
    """Cholesky factor of symmetric PD ``A`` if its condition is below the limit for ``rcond``.

    None means: not PD, or close enough to singular that an eigenvalue could fall
    below ``rcond`` × the largest (use a pseudo-inverse then).
    """
    c, info = lapack.dpotrf(A, lower=1)
    if info != 0:
        return None
    rc, info = lapack.dpocon(c, lapack.dlange("1", A), uplo="L")
    return c if info == 0 and rc * _cond_limit(rcond) >= 1.0 else None


def chol_solve(c: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A⁻¹B from the lower factor ``c`` of A (:func:`cholesky`); B (n,) or (n, r)."""
    x, _ = lapack.dpotrs(c, B, lower=1)
    return x


def solve_pd(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A⁻¹B for symmetric ``A`` expected PD: by Cholesky, else ``np.linalg.solve``."""
    c = cholesky(A)
    return chol_solve(c, B) if c is not None else np.linalg.solve(A, B)


def psd_pinv_solve(G: np.ndarray, B: np.ndarray, rcond: float) -> np.ndarray:
    """G⁺B for symmetric PSD ``G`` (e.g. a Delassus matrix J M⁻¹ Jᵀ).

    Cholesky when G is well conditioned, else ``np.linalg.pinv(G, rcond, hermitian=True) @ B``.
    """
    c = cholesky_well_conditioned(G, rcond)
    if c is not None:
        return chol_solve(c, B)
    return np.linalg.pinv(G, rcond=rcond, hermitian=True) @ B


def _qr_pinv(A: np.ndarray, rcond: float, with_null_space: bool):
    """(A⁺, orthonormal basis of null(A)) by a QR of the tall one of A, Aᵀ; None if not full rank."""
    m, n = A.shape
    wide = m <= n
    qr, tau, _, _ = lapack.dgeqrf(A.T if wide else A)  # B = Q R, B (p × r), p ≥ r
    p, r = qr.shape
    R = qr[:r]
    rc, info = lapack.dtrcon(R, norm="1", uplo="U")
    if info != 0 or not rc * _cond_limit(rcond) >= 1.0:
        return None
    if wide and with_null_space and p > r:
        full = np.zeros((p, p), order="F")  # columns r.. are set to unit vectors by dorgqr
        full[:, :r] = qr
        Q, _, _ = lapack.dorgqr(full, tau)
    else:
        Q, _, _ = lapack.dorgqr(qr, tau)
    # R⁻¹ Q₁ᵀ (r × p) by BLAS dtrsm: OpenBLAS's LAPACK dtrtrs spreads even 6 × 9 solves
    # over threads and spin-waits for them on a loaded machine
    Y = blas.dtrsm(1.0, R, Q[:, :r].T)
    if wide:  # A = Rᵀ Q₁ᵀ: A⁺ = Q₁ R⁻ᵀ, null(A) = Q₂
        return Y.T, (Q[:, r:] if with_null_space else None)
    return Y, np.zeros((n, 0))  # A = Q₁ R: A⁺ = R⁻¹ Q₁ᵀ, null(A) = {0}


def pinv(A: np.ndarray, rcond: float) -> np.ndarray:
    """Moore–Penrose pseudo-inverse, as ``np.linalg.pinv(A, rcond)``.

    Full-rank, well-conditioned A (the usual stacked contact Jacobian): from a QR of
    A or Aᵀ (A⁺ = Q₁R⁻ᵀ for full row rank, R⁻¹Q₁ᵀ for full column rank).
    """
    if A.size and (fast := _qr_pinv(A, rcond, with_null_space=False)) is not None:
        return fast[0]
    return np.linalg.pinv(A, rcond=rcond)


def pinv_and_null_space(A: np.ndarray, rcond: float) -> tuple[np.ndarray, np.ndarray]:
    """(A⁺, an orthonormal basis of null(A) as columns).

    A full-rank, well-conditioned A: from one complete QR of Aᵀ (or of A when tall).
    Otherwise one SVD: singular values below ``rcond`` × the largest count as zero, as
    in ``np.linalg.pinv``.
    """
    m, n = A.shape
    if A.size == 0:
        return np.zeros((n, m)), np.eye(n)
    fast = _qr_pinv(A, rcond, with_null_space=True)
    if fast is not None:
        return fast
    U, s, Vt = np.linalg.svd(A, full_matrices=True)
    tol = rcond * (s[0] if s.size else 0.0)
    r = int(np.count_nonzero(s > tol))
    return (Vt[:r].T / s[:r]) @ U[:, :r].T, Vt[r:].T
