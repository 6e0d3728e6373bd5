"""QpSolver's working-set guess: the optimum ProxQP finds, certified by its KKT conditions.

The guess (``QpSolver(guess=True)``, used by wbc_qp and both qp_coulomb stages, compiled
and Python alike) solves the QP with the last solution's active rows as equalities and
keeps that answer only when every row holds and every held row's multiplier has its sign.
Strictly convex QPs have one optimum, so with or without the guess the answer is the
same to the solver's tolerance; what changes is that ProxQP runs only when needed.
"""

from __future__ import annotations

import numpy as np
import pytest

from idyn_control import formulations
from idyn_control.qp import INF, QpSolver

from conftest import FLOATING, switching_sequence


def _kkt_residual(qp: QpSolver, x, y, z) -> float:
    return float(np.abs(qp.H @ x + qp.g + qp.A.T @ y + qp.C.T @ z).max())


@pytest.mark.parametrize("seed", range(4))
def test_guess_gives_proxqps_optimum_along_a_sequence(seed):
    """A slowly drifting QP whose active set changes: the same x as ProxQP alone, KKT
    conditions met, and most solves certified by the guess."""
    rng = np.random.default_rng(seed)
    n, n_eq, n_in = 10, 3, 14
    R = rng.normal(size=(n, n))
    H = R @ R.T + 0.1 * np.eye(n)
    A, C = rng.normal(size=(n_eq, n)), rng.normal(size=(n_in, n))
    g0, drift = 3.0 * rng.normal(size=n), rng.normal(size=n)
    with_guess, without = QpSolver(n, n_eq, n_in, guess=True), QpSolver(n, n_eq, n_in)
    certified, active_sets = 0, set()
    for t in range(60):
        for qp in (with_guess, without):
            qp.H[:], qp.A[:], qp.C[:] = H, A, C
            qp.g[:] = g0 + 0.1 * t * drift
            qp.b[:] = 0.1 * np.sin(0.1 * t + np.arange(n_eq))
            qp.l[:], qp.u[:] = -1.0, 1.0
            qp.l[::3] = -INF  # one-sided rows too
        out, ref = with_guess.solve(), without.solve()
        assert out.ok and ref.ok
        np.testing.assert_allclose(out.x, ref.x, atol=1e-6)
        Cx = C @ out.x
        assert np.all(Cx <= with_guess.u + 1e-8) and np.all(Cx >= with_guess.l - 1e-8)
        np.testing.assert_allclose(A @ out.x, with_guess.b, atol=1e-8)
        assert _kkt_residual(with_guess, out.x, out.y, out.z) <= 1e-6
        assert np.all(out.z[np.isclose(Cx, 1.0, atol=1e-7)] >= -1e-8)  # upper bounds push down
        certified += with_guess.guessed
        active_sets.add(tuple(np.flatnonzero(np.abs(out.z) > 1e-9)))
    assert len(active_sets) >= 3  # the sequence crosses bounds: the guess is not trivially right
    assert certified >= 45


def test_guess_refuses_an_infeasible_qp():
    """Rows that contradict each other: the guess certifies nothing (guess_only stops
    there), and ProxQP reports the QP infeasible."""
    qp = QpSolver(2, 0, 2, guess=True)
    qp.H[:] = np.eye(2)
    qp.C[:] = [[1.0, 0.0], [1.0, 0.0]]
    qp.l[:] = [1.0, -INF]
    qp.u[:] = [INF, 0.0]
    assert qp.solve(guess_only=True).status == "failed"
    assert not qp.guessed
    assert qp.solve().status != "solved"


@pytest.mark.parametrize("robot", FLOATING)
@pytest.mark.parametrize("name", ["wbc_qp", "qp_coulomb"])
def test_formulations_with_the_guess_answer_as_cold_proxqp(name, robot, load_robot):
    """wbc_qp and qp_coulomb (Python reference) with their warm start and guess give the
    torques, accelerations and forces of cold ProxQP solves, through contact switches."""
    model = load_robot(robot)
    warm = formulations.make(name, model, backend="python")
    cold = formulations.make(name, model, backend="python", warm_start=False)
    qps = [warm.qp] if name == "wbc_qp" else [warm.stage1, warm.stage2]
    certified = 0
    for q, v, a, active in switching_sequence(model, robot, np.random.default_rng(3), 30):
        r_warm, r_cold = warm.solve(q, v, a, active), cold.solve(q, v, a, active)
        assert r_warm.ok and r_cold.ok
        scale = max(1.0, float(np.abs(r_cold.forces).max(initial=0.0)), float(np.abs(r_cold.tau).max()))
        for got, want in ((r_warm.tau, r_cold.tau), (r_warm.qdd, r_cold.qdd)):
            assert np.abs(got - want).max(initial=0.0) <= 1e-4 * scale
        # wbc_qp: the forces' distribution among the feet is decided by its small force
        # regularization alone; on a facet of the inscribed pyramid that valley is flat to
        # ProxQP's tolerance, and warm and cold answers differ by up to 3e-4 of the largest force
        tol = 1e-3 if name == "wbc_qp" else 1e-4
        assert np.abs(r_warm.forces - r_cold.forces).max(initial=0.0) <= tol * scale
        assert warm.dynamics_residual(r_warm) <= 1e-6
        certified += any(qp.guessed for qp in qps)
    assert certified >= 20


@pytest.mark.parametrize("seed", range(4))
def test_the_working_set_after_proxqp_holds_only_rows_at_a_bound(seed):
    """ProxQP leaves multipliers of ±1e-20 on rows far from their bounds: the next guess
    holds only rows its answer puts at a bound (within eps_abs), whatever their sign."""
    rng = np.random.default_rng(seed)
    n, n_in = 8, 12
    R = rng.normal(size=(n, n))
    qp = QpSolver(n, 0, n_in, guess=True)
    qp.H[:], qp.C[:] = R @ R.T + 0.1 * np.eye(n), rng.normal(size=(n_in, n))
    qp.l[:], qp.u[:] = -1.0, 1.0
    held = 0
    for t in range(20):
        qp.g[:] = 5.0 * rng.normal(size=n)  # a new optimum each time: ProxQP solves
        qp.reset()
        out = qp.solve()
        assert out.ok and not qp.guessed
        Cx = qp.C @ out.x
        at = np.where(qp.working > 0, qp.u - Cx, np.where(qp.working < 0, Cx - qp.l, 0.0))
        assert np.all(at <= qp.eps_abs), at
        held += np.count_nonzero(qp.working)
    assert held >= 20  # active rows are held


def test_a_held_row_whose_bound_goes_to_infinity_is_released():
    """A row held at its upper bound, then freed (a lifted foot's pyramid rows, torque
    limits dropped): the guess releases it and certifies the new optimum, no NaN."""
    qp = QpSolver(2, 0, 2, guess=True)
    qp.H[:] = np.eye(2)
    qp.g[:] = [-2.0, 0.5]
    qp.C[:] = np.eye(2)
    qp.l[:], qp.u[:] = -INF, 1.0
    assert qp.solve().ok and qp.working.tolist() == [1, 0]
    qp.u[0] = INF
    out = qp.solve()
    assert out.ok and qp.guessed and out.iterations == 1  # released up front, not by a step at ±inf
    np.testing.assert_allclose(out.x, [2.0, -0.5], atol=1e-9)
