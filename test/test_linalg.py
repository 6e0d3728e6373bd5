"""The 1 kHz linear-algebra helpers against numpy: same pseudo-inverses, solves and null
spaces on full-rank matrices, exactly numpy's answer on rank-deficient and ill-conditioned
ones (the SVD fallback), on the shapes the formulations use and on random ones."""

from __future__ import annotations

import numpy as np
import pytest

from idyn_control import linalg

RCOND = 1e-10
#: shapes of the formulations: stacked Jacobians (3k × nv), P B_m and (P B)_j in the
#: coordinates of null(J) (6 × 9, 6 × 12), tracked force maps (3 × 6, 12 × 6)
SHAPES = [(12, 18), (9, 18), (3, 7), (6, 9), (6, 12), (3, 6), (12, 6), (18, 12), (7, 7), (1, 5), (5, 1)]


def random_matrix(rng, shape, cond=10.0, rank=None):
    """Gaussian singular vectors, singular values log-spaced from 1 to 1/cond (rank of them)."""
    m, n = shape
    k = min(m, n)
    rank = k if rank is None else rank
    U, _ = np.linalg.qr(rng.normal(size=(m, m)))
    V, _ = np.linalg.qr(rng.normal(size=(n, n)))
    s = np.zeros(k)
    s[:rank] = np.logspace(0.0, -np.log10(cond), rank)
    return 3.0 * (U[:, :k] * s) @ V[:, :k].T


def assert_pinv_close(P, A, rcond=RCOND):
    expected = np.linalg.pinv(A, rcond=rcond)
    np.testing.assert_allclose(P, expected, rtol=0.0, atol=1e-11 * np.abs(expected).max())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_pinv_of_full_rank_matrices_matches_numpy(shape, seed):
    rng = np.random.default_rng(seed)
    for A in (rng.normal(size=shape), random_matrix(rng, shape, cond=1e3)):
        P = linalg.pinv(A, RCOND)
        assert_pinv_close(P, A)
        # Moore–Penrose conditions
        np.testing.assert_allclose(A @ P @ A, A, atol=1e-11 * np.abs(A).max())
        np.testing.assert_allclose(P @ A @ P, P, atol=1e-11 * np.abs(P).max())


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(3))
def test_pinv_and_null_space_of_full_rank_matrices(shape, seed):
    A = np.random.default_rng(seed).normal(size=shape)
    P, N = linalg.pinv_and_null_space(A, RCOND)
    m, n = shape
    assert_pinv_close(P, A)
    assert N.shape == (n, max(n - m, 0))
    np.testing.assert_allclose(N.T @ N, np.eye(N.shape[1]), atol=1e-13)
    np.testing.assert_allclose(A @ N, 0.0, atol=1e-13 * np.abs(A).max())
    # N spans the whole null space: N Nᵀ = I − A⁺A
    np.testing.assert_allclose(N @ N.T, np.eye(n) - np.linalg.pinv(A) @ A, atol=1e-12)


@pytest.mark.parametrize("shape", [(12, 18), (6, 9), (12, 6), (7, 7)])
@pytest.mark.parametrize("case", ["rank-deficient", "below the cut-off", "ill-conditioned", "zero"])
def test_pinv_falls_back_to_numpy_exactly(shape, case):
    """Where the SVD drops or could drop singular values, the answer is numpy's, bit for bit."""
    rng = np.random.default_rng(7)
    k = min(shape)
    A = {"rank-deficient": lambda: random_matrix(rng, shape, rank=k - 2),
         "below the cut-off": lambda: random_matrix(rng, shape, cond=1e12),  # σ_min < rcond σ_max
         "ill-conditioned": lambda: random_matrix(rng, shape, cond=1e9),     # near the cut-off
         "zero": lambda: np.zeros(shape)}[case]()
    np.testing.assert_array_equal(linalg.pinv(A, RCOND), np.linalg.pinv(A, rcond=RCOND))
    P, N = linalg.pinv_and_null_space(A, RCOND)
    U, s, Vt = np.linalg.svd(A)
    rank = int(np.count_nonzero(s > RCOND * s[0])) if s[0] > 0 else 0
    assert_pinv_close(P, A)
    assert N.shape == (shape[1], shape[1] - rank)
    np.testing.assert_allclose(N.T @ N, np.eye(N.shape[1]), atol=1e-12)
    np.testing.assert_allclose(A @ N, 0.0, atol=1e-10 * max(1.0, np.abs(A).max()))


def test_pinv_respects_a_large_rcond():
    """A well-conditioned matrix whose σ_min is below a user's (large) rcond is truncated."""
    A = random_matrix(np.random.default_rng(3), (6, 9), cond=50.0)
    for rcond in (1e-1, 1e-2, 1e-10):
        assert_pinv_close(linalg.pinv(A, rcond), A, rcond)
        assert_pinv_close(linalg.pinv_and_null_space(A, rcond)[0], A, rcond)


def test_empty_matrices():
    for shape in ((0, 5), (5, 0)):
        A = np.zeros(shape)
        assert linalg.pinv(A, RCOND).shape == shape[::-1]
        P, N = linalg.pinv_and_null_space(A, RCOND)
        assert P.shape == shape[::-1]
        np.testing.assert_array_equal(N, np.eye(shape[1]))


def test_non_finite_input_raises_as_numpy():
    A = np.ones((3, 5))
    A[0, 0] = np.nan
    with pytest.raises(np.linalg.LinAlgError):
        linalg.pinv(A, RCOND)
    with pytest.raises(np.linalg.LinAlgError):
        linalg.pinv_and_null_space(A, RCOND)


def spd(rng, n, cond=100.0):
    Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Q * np.logspace(0.0, -np.log10(cond), n)) @ Q.T


@pytest.mark.parametrize("n", [1, 6, 12, 18])
def test_cholesky_solves_match_numpy(n):
    rng = np.random.default_rng(n)
    A, B = spd(rng, n, cond=1e4), rng.normal(size=(n, 4))
    c = linalg.cholesky(A)
    assert c is not None
    for rhs in (B, B[:, 0]):
        expected = np.linalg.solve(A, rhs)
        np.testing.assert_allclose(linalg.chol_solve(c, rhs), expected, atol=1e-10 * np.abs(expected).max())
        np.testing.assert_allclose(linalg.solve_pd(A, rhs), expected, atol=1e-10 * np.abs(expected).max())
    assert linalg.cholesky_well_conditioned(A, RCOND) is not None


def test_cholesky_refuses_indefinite_and_ill_conditioned_matrices():
    rng = np.random.default_rng(2)
    indefinite = spd(rng, 6) - 0.5 * np.eye(6)
    assert linalg.cholesky(indefinite) is None
    assert linalg.cholesky_well_conditioned(indefinite, RCOND) is None
    # solve_pd is then numpy's LU solve
    b = rng.normal(size=6)
    np.testing.assert_array_equal(linalg.solve_pd(indefinite, b), np.linalg.solve(indefinite, b))
    ill = spd(rng, 6, cond=1e9)
    assert linalg.cholesky(ill) is not None
    assert linalg.cholesky_well_conditioned(ill, RCOND) is None
    assert linalg.cholesky_well_conditioned(spd(rng, 6, cond=50.0), 1e-1) is None  # σ_min < rcond σ_max


@pytest.mark.parametrize("case", ["definite", "semi-definite"])
def test_psd_pinv_solve_matches_hermitian_pinv(case):
    """The Delassus solve G⁺B: Cholesky when G is PD, numpy's hermitian pinv otherwise."""
    rng = np.random.default_rng(4)
    J = rng.normal(size=(12 if case == "definite" else 15, 18))
    M = spd(rng, 18, cond=1e3)
    Minv_JT = np.linalg.solve(M, J.T)
    G = J @ Minv_JT
    if case == "semi-definite":  # 15 contact rows on a rank-12 J: G is singular
        J[12:] = J[:3] + J[3:6]
        G = J @ np.linalg.solve(M, J.T)
    B = rng.normal(size=(G.shape[0], 13))
    expected = np.linalg.pinv(G, rcond=RCOND, hermitian=True) @ B
    X = linalg.psd_pinv_solve(G, B, RCOND)
    if case == "definite":
        np.testing.assert_allclose(X, expected, atol=1e-10 * np.abs(expected).max())
    else:
        np.testing.assert_array_equal(X, expected)
