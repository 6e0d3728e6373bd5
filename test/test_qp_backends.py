"""The ``solver`` option: the same QP handed to any installed qpsolvers backend."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from idyn_control import formulations, robots
from idyn_control.errors import UnknownNameError
from idyn_control.qp import QpSolver, solver_names

BACKENDS = [s for s in solver_names() if s != "proxqp"]
# first-order methods stop at ~1e-4..1e-3 accuracy by default
TOLERANCE = {"osqp": 5e-2}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["wbc_qp", "qp_coulomb"])
def test_backends_agree_with_proxqp(name, backend, load_robot):
    model = load_robot("solo12")
    q = robots.standing_configuration(model, "solo12")
    q[model.joint_q_index] += 0.05
    v, a = np.zeros(model.nv), np.zeros(model.nv)
    reference = formulations.make(name, model).solve(q, v, a, model.contact_frames)
    result = formulations.make(name, model, solver=backend).solve(q, v, a, model.contact_frames)
    if not result.ok:
        # e.g. quadprog needs a positive-definite Hessian; Stage I's is only semi-definite
        pytest.skip(f"{backend} cannot solve this {name} QP: {result.status}")
    tol = TOLERANCE.get(backend, 1e-4)
    scale = max(1.0, np.abs(reference.forces).max())
    np.testing.assert_allclose(result.forces, reference.forces, atol=tol * scale)
    np.testing.assert_allclose(result.tau, reference.tau, atol=tol * max(1.0, np.abs(reference.tau).max()))


def test_a_positive_definite_qp_is_solved_by_every_backend():
    rng = np.random.default_rng(0)
    n = 6
    L = rng.normal(size=(n, n))
    solutions = {}
    for backend in solver_names():
        qp = QpSolver(n, 1, 2, solver=backend)
        qp.H[:] = L @ L.T + n * np.eye(n)
        qp.g[:] = rng.normal(size=n) if backend == "proxqp" else solutions["g"]
        solutions.setdefault("g", qp.g.copy())
        qp.A[0] = 1.0
        qp.b[0] = 1.0
        qp.C[0, 0], qp.C[1, 1] = 1.0, 1.0
        qp.l[:], qp.u[:] = -0.1, 0.1
        out = qp.solve()
        assert out.ok, backend
        solutions[backend] = out.x.copy()
    for backend in solver_names():
        np.testing.assert_allclose(solutions[backend], solutions["proxqp"], atol=1e-4)


def test_unknown_solver_lists_installed_ones(load_robot):
    with pytest.raises(UnknownNameError, match="gurobi.*proxqp"):
        formulations.make("wbc_qp", load_robot("solo12"), solver="gurobi")


def test_proxqp_needs_no_qpsolvers(monkeypatch, load_robot):
    """On a ROS machine qpsolvers may be absent (no rosdep key): the default ProxQP path
    must configure and solve without it, and asking for another backend says what exists."""
    monkeypatch.setitem(sys.modules, "qpsolvers", None)  # import qpsolvers -> ImportError
    assert solver_names() == ("proxqp",)
    model = load_robot("solo12")
    q = robots.standing_configuration(model, "solo12")
    f = formulations.make("qp_coulomb", model, dt=1e-3, backend="python")
    result = f.solve(q, np.zeros(model.nv), np.zeros(model.nv), active_contacts=model.contact_frames)
    assert result.status == "solved"
    with pytest.raises(UnknownNameError, match="proxqp"):
        QpSolver(2, 0, 0, solver="osqp")
