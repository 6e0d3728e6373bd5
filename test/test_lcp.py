"""LCP solvers (Lemke, warm-started PPM) and the LCP formulations of seed 000 §4–5.

Physics and algebra only, no timing assertions: complementarity, agreement between
solvers, the dynamics invariant, unilateral/friction/no-slip constraints, the net
contact wrench, warm-start behaviour on an indeterminate stance (seed 000 Fig. 5).
"""

from __future__ import annotations

import functools

import json
import math

import numpy as np
import pinocchio as pin
import pytest
from conftest import FIXED, FLOATING, random_state, standing_state

from idyn_control import formulations, robots
from idyn_control.errors import ConfigError
from idyn_control.bench_contacts import contact_scaling, multi_contact_model
from idyn_control.formulations.lcp_noslip import CONTACT_TARGETS, find_indices
from idyn_control.lcp import Lemke, PrincipalPivoting, lemke, ppm

LCP_FORMULATIONS = ("lcp_noslip", "lcp_coulomb")
RESIDUAL_TOL = 1e-6


def _load(load_robot, name):
    try:
        return load_robot(name)
    except Exception as exc:  # noqa: BLE001 - the project's quadruped may not exist yet
        pytest.skip(f"robot {name!r} not loadable: {exc}")


# ============================================================================ LCP problems
def paper_lcp(rng, n, d, *, separating=0.3):
    """A PSD LCP of seed 000's form: M = J X⁻¹ Jᵀ (rank ≤ d), q = J X⁻¹ g + slack.

    Returns (M, q, H) with M = H Hᵀ. q in the range of H is solvable (Baraff, §4.7);
    adding non-negative slack (contacts already separating) keeps it solvable.
    """
    J = rng.normal(size=(n, d))
    A = rng.normal(size=(d, d))
    X = A @ A.T + 0.1 * np.eye(d)
    H = np.linalg.solve(np.linalg.cholesky(X), J.T).T  # H Hᵀ = J X⁻¹ Jᵀ
    q = H @ rng.normal(size=d) + np.abs(rng.normal(size=n)) * (rng.random(n) < separating)
    return H @ H.T, q, H


def coulomb_lcp(rng, n_contacts, dof=6, mu=0.5):
    """The Coulomb-friction LCP of seed 000 eq. 64 for random contact rows (copositive)."""
    N = rng.normal(size=(n_contacts, dof))
    F = rng.normal(size=(4 * n_contacts, dof))
    G = np.vstack((N, F))
    n = n_contacts
    M = np.zeros((6 * n, 6 * n))
    M[:5 * n, :5 * n] = G @ G.T
    rows = np.arange(4 * n)
    M[n + rows, 5 * n + rows // 4] = 1.0
    M[5 * n + np.arange(n), np.arange(n)] = mu
    M[5 * n + rows // 4, n + rows] = -1.0
    u = rng.normal(size=dof)  # velocities in the range of the contact rows
    q = np.concatenate((N @ u, F @ u, np.zeros(n)))
    return M, q


def assert_lcp_solution(M, q, result, tol=1e-7):
    scale = max(1.0, float(np.abs(q).max()))
    assert result.ok, result.status
    z, w = result.z, result.w
    assert np.all(np.isfinite(z)) and np.all(np.isfinite(w))
    np.testing.assert_allclose(w, M @ z + q, atol=1e-9 * scale * max(1.0, float(np.abs(z).max())))
    assert z.min() >= 0.0
    assert w.min() >= -tol * scale
    assert float(np.abs(z * w).max()) <= tol * scale * max(1.0, float(np.abs(z).max()))


SIZES = [(n, d) for n in (1, 4, 12, 30) for d in (2, 6)]


@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("solver", ["lemke", "ppm_factored", "ppm_explicit"])
def test_lcp_complementarity_on_rank_deficient_psd(solver, n, d):
    rng = np.random.default_rng(100 * n + d)
    for _ in range(15):
        M, q, H = paper_lcp(rng, n, d)
        if solver == "lemke":
            res = lemke(M, q)
        elif solver == "ppm_factored":
            res = ppm(q, H=H)
        else:
            res = ppm(q, M=M)
        assert_lcp_solution(M, q, res)
        # the basis mask says which z are computed; the others are zero
        assert np.all(res.z[~res.basis] == 0.0)


@pytest.mark.parametrize("n,d", [(4, 3), (8, 6), (20, 6), (40, 6)])
def test_ppm_agrees_with_lemke(n, d):
    """Symmetric PSD LCPs: w is unique and every solution has the same ½zᵀMz + qᵀz."""
    rng = np.random.default_rng(7 + n)
    for _ in range(20):
        M, q, H = paper_lcp(rng, n, d)
        a, b = lemke(M, q), ppm(q, H=H)
        scale = max(1.0, float(np.abs(q).max()))
        np.testing.assert_allclose(a.w, b.w, atol=1e-6 * scale)
        obj_a = 0.5 * a.z @ M @ a.z + q @ a.z
        obj_b = 0.5 * b.z @ M @ b.z + q @ b.z
        assert obj_a == pytest.approx(obj_b, rel=1e-6, abs=1e-8 * scale)


@pytest.mark.parametrize("n_contacts", [1, 3, 8])
def test_lemke_solves_coulomb_lcp(n_contacts):
    """Seed 000 eq. 64 (copositive, not symmetric): Lemke finds a complementary solution
    and the friction forces stay in their cone (μ f_N ≥ Σ f_F)."""
    rng = np.random.default_rng(n_contacts)
    solver = Lemke(6 * n_contacts)
    for _ in range(10):
        M, q = coulomb_lcp(rng, n_contacts)
        res = solver.solve(M, q)
        assert_lcp_solution(M, q, res)
        n = n_contacts
        f_n, f_f = res.z[:n], res.z[n:5 * n].reshape(n, 4)
        assert np.all(0.5 * f_n - f_f.sum(axis=1) >= -1e-9 * max(1.0, f_n.max()))


@pytest.mark.parametrize("make", [lambda M, q: lemke(M, q), lambda M, q: ppm(q, M=M)])
def test_infeasible_lcp_reports_failed(make):
    """w = 0·z − 1 can never be ≥ 0: a clear failure, z = 0, w = q, finite."""
    M, q = np.zeros((2, 2)), np.array([-1.0, 0.5])
    res = make(M, q)
    assert res.status == "failed" and not res.ok
    np.testing.assert_array_equal(res.z, 0.0)
    np.testing.assert_array_equal(res.w, q)


def test_solvers_grow_beyond_n_max():
    rng = np.random.default_rng(3)
    M, q, H = paper_lcp(rng, 10, 4)
    assert_lcp_solution(M, q, Lemke(2).solve(M, q))
    assert_lcp_solution(M, q, PrincipalPivoting(2).solve(q, H=H))


def test_warm_ppm_returns_previous_basis_when_it_still_solves():
    """Alg. 2 from the previous non-basic set: no pivots, the same vertex."""
    rng = np.random.default_rng(11)
    M, q, H = paper_lcp(rng, 12, 6, separating=0.0)
    solver = PrincipalPivoting(12)
    cold = solver.solve(q, H=H)
    warm = solver.solve(q + 1e-9 * rng.normal(size=12), H=H, warm=cold.basis)
    np.testing.assert_array_equal(warm.basis, cold.basis)
    np.testing.assert_allclose(warm.z, cold.z, rtol=1e-6, atol=1e-9)
    assert warm.iterations <= 2


def test_find_indices_keeps_a_maximal_independent_set_in_order():
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(10, 3)) @ rng.normal(size=(3, 6))  # rank 3
    rows[1] = 2.0 * rows[0]                                       # dependent on row 0
    kept, L = find_indices(rows)
    assert kept.size == np.linalg.matrix_rank(rows) == 3
    assert kept[0] == 0 and 1 not in kept
    np.testing.assert_allclose(L @ L.T, rows[kept] @ rows[kept].T, atol=1e-10)
    # every row is in the span of the kept ones
    coeff = np.linalg.lstsq(rows[kept].T, rows.T, rcond=None)[0]
    np.testing.assert_allclose(rows[kept].T @ coeff, rows.T, atol=1e-9)


# ============================================================================ formulations
ROBOTS = FLOATING + FIXED


def _states(name, model, rng, n_random=3):
    states = [random_state(model, rng) for _ in range(n_random)]
    if model.floating_base:
        states.append(standing_state(name, model))
    return states


def _normal_forces(form, result):
    basis = form.contacts.basis[form.contacts.order]
    return np.einsum("ni,ni->n", basis[:, 2], result.forces)


@pytest.mark.parametrize("robot", ROBOTS)
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_dynamics_invariant_and_unilateral_forces(load_robot, rng, name, robot):
    """M q̈ + h = Sᵀτ + Σ Jᵀf on random and standing states; n·f ≥ 0."""
    model = _load(load_robot, robot)
    form = formulations.make(name, model)
    for q, v, a in _states(robot, model, rng):
        result = form.solve(q, v, a, model.contact_frames)
        assert result.status == "solved"
        assert np.all(np.isfinite(result.tau)) and np.all(np.isfinite(result.forces))
        assert form.dynamics_residual(result) <= RESIDUAL_TOL
        scale = max(1.0, float(np.abs(result.forces).max(initial=0.0)))
        assert np.all(_normal_forces(form, result) >= -1e-9 * scale)


@pytest.mark.parametrize("robot", FLOATING)
def test_lcp_coulomb_forces_in_friction_pyramid(load_robot, rng, robot):
    model = _load(load_robot, robot)
    for cone in ("pyramid", "inscribed"):
        form = formulations.make("lcp_coulomb", model, friction_cone=cone)
        assert form.respects_friction
        for q, v, a in _states(robot, model, rng):
            result = form.solve(q, v, a, model.contact_frames)
            assert result.status == "solved"
            for frame, f in zip(result.contact_frames, result.forces):
                i = model.contact_index(frame)
                assert np.all(form.contacts.friction_rows[i] @ f <= 1e-9 * max(1.0, np.linalg.norm(f)))


@pytest.mark.parametrize("robot", FIXED)
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_fixed_base_without_contacts_is_plain_inverse_dynamics(load_robot, rng, name, robot):
    model = _load(load_robot, robot)
    form = formulations.make(name, model)
    for q, v, a in _states(robot, model, rng):
        result = form.solve(q, v, a)
        np.testing.assert_allclose(result.qdd, a)
        expected = pin.rnea(model.pin_model, model.pin_model.createData(), q, v, a)
        np.testing.assert_allclose(result.tau, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("robot", FLOATING)
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_standing_still_holds_the_weight(load_robot, name, robot):
    """v = 0, q̈_des = 0 on four feet: the base stays put and Σf = m g upward."""
    model = _load(load_robot, robot)
    form = formulations.make(name, model)
    q, v, a = standing_state(robot, model)
    result = form.solve(q, v, a, model.contact_frames)
    assert result.status == "solved"
    np.testing.assert_allclose(result.qdd, 0.0, atol=1e-9)
    weight = 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias)
    np.testing.assert_allclose(result.forces.sum(axis=0), [0.0, 0.0, weight], atol=1e-6 * weight)


@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_baumgarte_gap_and_penetration(load_robot, name):
    """Seed 000 §3.2, eq. 35: n·J v⁺ ≥ −φ/Δt. With the feet 1 cm above the ground the
    robot falls freely (no force yet); 1 mm into the ground, the loaded feet leave it at
    exactly −φ/Δt = 1 m/s over the next period."""
    model = _load(load_robot, "solo12")
    form = formulations.make(name, model)
    q, v, a = standing_state("solo12", model)
    frames = model.contact_frames
    gap = form.solve(q, v, a, frames, phi=[0.01] * 4)
    assert gap.status == "solved"
    np.testing.assert_allclose(gap.forces, 0.0, atol=1e-9)
    pen = form.solve(q, v, a, frames, phi=[-1e-3] * 4)
    assert pen.status == "solved" and form.dynamics_residual(pen) <= RESIDUAL_TOL
    basis = form.contacts.basis[form.contacts.order]
    J = form.contacts.J[form.contacts.order]
    v_n = np.einsum("ni,nik,k->n", basis[:, 2], J, v + form.dt * pen.qdd)
    f_n = _normal_forces(form, pen)
    assert np.all(v_n >= 1.0 - 1e-6)
    np.testing.assert_allclose(v_n[f_n > 0.0], 1.0, rtol=1e-6)
    assert f_n.sum() > 10 * 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias)


def _contact_velocity_after_step(form, v, qdd, qdd_des, target):
    """Active contacts' velocities v⁺ = v + Δt q̈ in their bases (t1, t2, n), minus the
    ``contact_target`` they are held to: 0 ("rest", seed 000 §4 with φ = 0) or the desired
    motion's velocity J (v + Δt q̈_des) ("desired")."""
    basis = form.contacts.basis[form.contacts.order]
    J = form.contacts.J[form.contacts.order]
    vel = np.einsum("nij,njk,k->ni", basis, J, v + form.dt * qdd)
    if target == "desired":
        vel -= np.einsum("nij,njk,k->ni", basis, J, v + form.dt * qdd_des)
    return vel


@pytest.mark.parametrize("target", CONTACT_TARGETS)
@pytest.mark.parametrize("robot", ["solo12", "anymal_c", "go2"])
def test_noslip_velocity_level_constraints_hold(load_robot, rng, robot, target):
    """Seed 000 eq. 35–41 on v⁺ = v + Δt q̈: no slip, no penetration, and complementarity
    between normal force and separating velocity — also when q̈_des was inconsistent and
    the consistency step (§4.5) had to change it. With ``contact_target="desired"`` the
    same hold relative to the desired motion's contact velocity. No slip binds the
    contacts that carry normal force; one that carries none either holds too (§4's
    answer) or, released, carries no friction and may slide — never both."""
    model = _load(load_robot, robot)
    form = formulations.make("lcp_noslip", model, contact_target=target)
    adjusted = 0
    for q, v, a in _states(robot, model, rng, n_random=4):
        result = form.solve(q, v, a, model.contact_frames)
        assert result.status == "solved"
        adjusted += form.adjusted
        vel = _contact_velocity_after_step(form, v, result.qdd, a, target)
        scale = max(1.0, float(np.abs(form.contacts.J[form.contacts.order] @ v).max()))
        f_n = _normal_forces(form, result)
        f_scale = max(1.0, float(np.abs(result.forces).max()))
        loaded = f_n > 1e-9 * f_scale
        assert np.abs(vel[loaded, :2]).max(initial=0.0) <= 1e-5 * scale
        assert vel[:, 2].min() >= -1e-6 * scale
        assert float(np.abs(f_n * vel[:, 2]).max()) <= 1e-5 * scale * max(1.0, f_n.max())
        basis = form.contacts.basis[form.contacts.order]
        f_t = np.abs(np.einsum("nij,nj->ni", basis[:, :2], result.forces)).max(axis=1)
        slip = np.abs(vel[:, :2]).max(axis=1)
        assert np.all((slip <= 1e-5 * scale) | (f_t <= 1e-9 * f_scale))
    if target == "rest":
        assert adjusted >= 1  # random joint accelerations splay the legs: §4.5 was exercised
    else:  # the feet move as the desired motion has them: nothing to make consistent
        assert adjusted == 0


@pytest.mark.parametrize("target", CONTACT_TARGETS)
@pytest.mark.parametrize("robot", ["solo12", "anymal_c"])
def test_coulomb_friction_does_no_positive_work(load_robot, rng, robot, target):
    """Maximal dissipation (seed 000 eq. 55–56): sliding contacts get friction opposing
    the tangential velocity v⁺ (relative to the contact target); contacts never penetrate."""
    model = _load(load_robot, robot)
    form = formulations.make("lcp_coulomb", model, contact_target=target)
    for q, v, a in _states(robot, model, rng, n_random=4):
        result = form.solve(q, v, a, model.contact_frames)
        basis = form.contacts.basis[form.contacts.order]
        vel = _contact_velocity_after_step(form, v, result.qdd, a, target)
        f_loc = np.einsum("nij,nj->ni", basis, result.forces)
        scale = max(1.0, float(np.abs(vel).max())) * max(1.0, float(np.abs(f_loc).max()))
        assert np.all(np.einsum("ni,ni->n", f_loc[:, :2], vel[:, :2]) <= 1e-6 * scale)
        assert vel[:, 2].min() >= -1e-6 * max(1.0, float(np.abs(vel).max()))


@pytest.mark.parametrize("robot", ["solo12", "anymal_c"])
def test_warm_start_keeps_the_loaded_feet_where_cold_start_jumps(load_robot, robot):
    """Seed 000 §4.6, Fig. 5: standing on four feet the no-slip LCP is indeterminate
    (three feet suffice).

    Encoder-size noise (1 mrad) on the joints changes which foot a cold-started pivoting
    solver loads first, so the load jumps between diagonals from tick to tick; warm-started
    from the previous non-basic set, the same feet stay loaded (> 10 % of the weight each)
    and forces move smoothly. Both are valid: the net contact force is the weight.
    (The pivoting basis alone decides here: ``spread_forces`` off.)
    """
    model = _load(load_robot, robot)
    q0, v, a = standing_state(robot, model)
    weight = 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias)
    runs = {}
    for warm in (True, False):
        form = formulations.make("lcp_noslip", model, warm_start=warm, spread_forces=False)
        rng = np.random.default_rng(3)
        loaded, forces, taus = [], [], []
        for _ in range(30):
            q = q0.copy()
            q[model.joint_q_index] += rng.normal(0.0, 1e-3, model.na)
            result = form.solve(q, v, a, model.contact_frames)
            assert result.status == "solved" and not form.adjusted
            np.testing.assert_allclose(result.forces.sum(axis=0)[2], weight, rtol=1e-6)
            loaded.append(tuple(np.flatnonzero(_normal_forces(form, result) > 0.1 * weight)))
            forces.append(result.forces)
            taus.append(result.tau)
        runs[warm] = (loaded, np.array(forces), np.array(taus))
    warm_loaded, warm_f, warm_tau = runs[True]
    cold_loaded, cold_f, cold_tau = runs[False]
    assert len(set(warm_loaded)) == 1
    assert len(set(cold_loaded)) > 1
    jump_warm = np.abs(np.diff(warm_f, axis=0)).max()
    jump_cold = np.abs(np.diff(cold_f, axis=0)).max()
    assert jump_warm < 0.05 * weight and jump_cold > 0.25 * weight
    assert np.abs(np.diff(warm_tau, axis=0)).max() < 0.2 * np.abs(np.diff(cold_tau, axis=0)).max()


@pytest.mark.parametrize("robot", FLOATING)
def test_lcp_noslip_and_qp_noslip_predict_the_same_net_wrench(load_robot, robot):
    """Indeterminate forces, determinate sum: Σf and Σ(p − p̄)×f agree (seed 000 §4 vs §6)."""
    try:
        formulations.get("qp_noslip")
    except Exception as exc:  # noqa: BLE001 - written concurrently; skip until it exists
        pytest.skip(f"qp_noslip not available: {exc}")
    model = _load(load_robot, robot)
    q, v, a = standing_state(robot, model)
    wrenches = []
    for name in ("lcp_noslip", "qp_noslip"):
        form = formulations.make(name, model)
        result = form.solve(q, v, a, model.contact_frames)
        assert result.ok
        p = form.contacts.position[form.contacts.order]
        moment = np.cross(p - p.mean(axis=0), result.forces).sum(axis=0)
        wrenches.append(np.r_[result.forces.sum(axis=0), moment])
    scale = max(1.0, float(np.abs(wrenches[0]).max()))
    np.testing.assert_allclose(wrenches[0], wrenches[1], atol=1e-6 * scale)


@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_redundant_contact_patches(name):
    """Three points per foot (12 contacts, many dependent rows): Find-Indices keeps a
    basis of the tangent rows, at most 6 normal forces are needed (seed 000 App. F), the
    dynamics hold and the weight is carried."""
    model, q = multi_contact_model(3)
    form = formulations.make(name, model)
    v, a = np.zeros(model.nv), np.zeros(model.nv)
    result = form.solve(q, v, a, model.contact_frames)
    assert result.status == "solved"
    assert form.dynamics_residual(result) <= RESIDUAL_TOL
    weight = 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias)
    np.testing.assert_allclose(result.forces.sum(axis=0), [0.0, 0.0, weight], atol=1e-6 * weight)
    assert np.all(_normal_forces(form, result) >= -1e-9 * weight)
    if name == "lcp_noslip":
        assert form.tangent_rows.size == 3  # flat ground: tangent rows span x, y, yaw
        assert np.count_nonzero(form.lcp_result.z > 0.0) <= 6


def _panda_touching():
    """Panda whose hand TCP touches a table (fixed base: no free motion)."""
    model = robots.load("panda", contact_frames=["panda_hand_tcp"])
    q = model.neutral()
    q[model.joint_q_index] = [0.0, 0.3, 0.0, -2.0, 0.0, 2.3, 0.8, 0.02, 0.02]
    return model, q


def test_lcp_coulomb_fails_safely_when_no_contact_solution_exists():
    """Desired motion pushes a fixed-base arm's TCP into the table: no forces can stop
    it, the LCP has no solution → "failed" and gravity compensation (documented)."""
    model, q = _panda_touching()
    form = formulations.make("lcp_coulomb", model)
    form.solve(q, np.zeros(model.nv), np.zeros(model.nv), model.contact_frames)
    n_row = form.contacts.basis[0, 2] @ form.contacts.J[0]
    qdd_des = -5.0 * n_row / np.linalg.norm(n_row)  # TCP accelerates into the surface
    result = form.solve(q, np.zeros(model.nv), qdd_des, model.contact_frames)
    assert result.status == "failed"
    assert np.all(np.isfinite(result.tau))
    np.testing.assert_array_equal(result.forces, 0.0)
    gravity = pin.computeGeneralizedGravity(model.pin_model, model.pin_model.createData(), q)
    np.testing.assert_allclose(result.tau, gravity, rtol=1e-9, atol=1e-9)
    assert form.dynamics_residual(result) <= RESIDUAL_TOL


def test_lcp_noslip_makes_inconsistent_motion_consistent():
    """Same push into the table with no-slip contact: the consistency QP (seed 000 §4.5)
    replaces q̈_des by the nearest motion that keeps the TCP on the table."""
    model, q = _panda_touching()
    form = formulations.make("lcp_noslip", model)
    form.solve(q, np.zeros(model.nv), np.zeros(model.nv), model.contact_frames)
    J = form.contacts.basis[0] @ form.contacts.J[0]
    qdd_des = -5.0 * J[2] / np.linalg.norm(J[2]) + 0.5  # into the surface, and sliding
    result = form.solve(q, np.zeros(model.nv), qdd_des, model.contact_frames)
    assert result.status == "solved" and form.adjusted
    a_contact = J @ result.qdd
    np.testing.assert_allclose(a_contact[:2], 0.0, atol=1e-6)
    assert a_contact[2] >= -1e-6
    assert form.dynamics_residual(result) <= RESIDUAL_TOL


def test_contact_scaling_reports_json_rows():
    names = ["lcp_noslip", "lcp_coulomb", "no_such_formulation"]
    rows = contact_scaling(names, counts=(4, 8), ticks=3, warmup=1)
    json.dumps(rows)
    timed = [r for r in rows if "skipped" not in r]
    assert {(r["formulation"], r["contacts"]) for r in timed} == {
        (n, c) for n in LCP_FORMULATIONS for c in (4, 8)}
    assert [r["formulation"] for r in rows if "skipped" in r] == ["no_such_formulation"]
    for r in timed:
        assert r["status"] == {"solved": 3}
        assert r["max_dynamics_residual"] <= RESIDUAL_TOL
        assert 0.0 < r["p50_us"] <= r["p99_us"] <= r["max_us"]


# ============================================================================ closed-loop physics
def _splaying_state(robot, model, rng):
    """Standing, feet slipping apart at 1 mm/s and q̈_des from an acceleration-level
    foot damping (−k_d·v_foot, k_d = 60 /s), as the controller's kinematic layer asks:
    inconsistent with J v⁺ = 0 by (1/Δt − k_d)·v_foot ≈ 1 m/s² per foot."""
    q, v, _ = standing_state(robot, model)
    form = formulations.make("lcp_noslip", model)
    form.prepare(q, v, model.contact_frames)
    J = form.contacts.J[form.contacts.order].reshape(-1, model.nv)
    p = form.contacts.position[form.contacts.order]
    outward = p - p.mean(axis=0)
    outward[:, 2] = 0.0
    outward /= np.linalg.norm(outward, axis=1)[:, None]
    v = np.linalg.lstsq(J, 1e-3 * outward.reshape(-1), rcond=None)[0]
    a = np.linalg.lstsq(J, -60.0 * (J @ v), rcond=None)[0] + rng.normal(0.0, 0.05, model.nv)
    return q, v, a


@pytest.mark.parametrize("robot", ["quadruped", "solo12"])
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_inconsistent_stance_accelerations_are_made_consistent_in_closed_form(load_robot, rng, robot, name):
    """Seed 000 §4.5: legs splaying while the feet must stick (``contact_target="rest"``,
    the paper's J v⁺ = 0). The formulation replaces q̈_j by the nearest joint accelerations
    for which every stance foot sticks (J v⁺ tangential = 0, v⁺ = v + Δt q̈), solves, and
    the dynamics hold — no failure, no QP. Already-consistent q̈_des is left untouched."""
    model = _load(load_robot, robot)
    form = formulations.make(name, model, contact_target="rest", friction_cone="pyramid") \
        if name == "lcp_coulomb" else formulations.make(name, model, contact_target="rest")
    q, v, a = _splaying_state(robot, model, rng)
    result = form.solve(q, v, a, model.contact_frames)
    assert result.status == "solved" and form.adjusted and not form._after_qp
    basis = form.contacts.basis[form.contacts.order]
    J = form.contacts.J[form.contacts.order]
    v_plus = np.einsum("nij,njk,k->ni", basis, J, v + form.dt * result.qdd)
    assert np.abs(v_plus[:, :2]).max() <= 1e-4 * 1e-3   # < 0.01 % of the 1 mm/s slip
    assert v_plus[:, 2].min() >= -1e-9
    assert form.dynamics_residual(result) <= RESIDUAL_TOL
    # the consistent q̈ is a fixed point
    again = form.solve(q, v, result.qdd, model.contact_frames)
    assert again.ok and not form.adjusted
    np.testing.assert_allclose(again.qdd[model.n_base:], result.qdd[model.n_base:], atol=1e-9)


@pytest.mark.parametrize("robot", ["quadruped", "solo12"])
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_indeterminate_stance_loads_every_foot_with_least_norm_forces(load_robot, robot, name):
    """Seed 000 §2.3.3/§4.6: on four feet the normal forces are indeterminate (M = HHᵀ has
    rank 3). The returned ones are the least-norm ones with the same net wrench: every
    foot carries load (a force-thresholded contact estimate keeps seeing it), and
    encoder noise moves them a little, not from one diagonal to the other."""
    model = _load(load_robot, robot)
    q0, v, a = standing_state(robot, model)
    weight = 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias)
    form = formulations.make(name, model)
    rng = np.random.default_rng(3)
    forces = []
    for _ in range(20):
        q = q0.copy()
        q[model.joint_q_index] += rng.normal(0.0, 1e-3, model.na)
        result = form.solve(q, v, a, model.contact_frames)
        assert result.ok
        f_n = _normal_forces(form, result)
        assert f_n.min() > 0.1 * weight
        np.testing.assert_allclose(f_n.sum(), weight, rtol=1e-6)
        # least norm: no other z ≥ 0 with the same Σf and moments about the vertical axes
        p = form.contacts.position[form.contacts.order]
        G = np.vstack((np.ones(4), p[:, 0], p[:, 1]))
        z_mn = np.linalg.lstsq(G, G @ f_n, rcond=None)[0]
        if z_mn.min() >= 0.0:
            np.testing.assert_allclose(f_n, z_mn, rtol=1e-6, atol=1e-9 * weight)
        forces.append(f_n)
    assert np.abs(np.diff(forces, axis=0)).max() < 0.1 * weight


@pytest.mark.parametrize("robot", ["quadruped", "solo12"])
@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_closed_loop_prediction_matches_mujoco_while_standing(robot, name):
    """Lock-step with MuJoCo, rigid ground, μ = ∞, standing 1 s with the default
    controller (weighted, so slightly inconsistent q̈_des): no tick falls back, the
    robot stays up, and the predicted normal forces reproduce the simulator's — the
    sum within 2 % on average (seed 000 Table 5: 1.2–1.9 %)."""
    import math

    from idyn_control.sim.lockstep import Scenario, run_scenario

    run = run_scenario(Scenario(robot=robot, formulation=name, friction=math.inf, compliant=False,
                                duration=1.0, trot_start=1.0))
    tr, m = run.trace, run.metrics
    assert not m["fell"] and tr.t.size == 1000
    assert int(tr.fallback.sum()) == 0
    settled = tr.t >= 0.05
    pred = tr.f_pred[settled, :, 2].sum(axis=1)
    meas = tr.f_meas[settled, :, 2].sum(axis=1)
    assert np.abs(pred - meas).mean() <= 0.02 * meas.mean()
    assert np.abs(tr.f_pred[settled, :, :2]).max() <= meas.mean()  # transients, not kN


@pytest.mark.parametrize("name", LCP_FORMULATIONS)
def test_friction_spread_changes_torques_not_motion(load_robot, name):
    """Two diagonal feet, the base asked to accelerate forward and sideways: along the line
    between the feet the tangential force is internal (seed 000 App. E), so Find-Indices'
    own answer (``spread_friction=False``: the kept rows carry it all), the load-
    proportional split and the minimum-torque one give the same q̈ and base wrench; the
    minimum-torque one has the smallest torques, and both spreads load both feet."""
    model = _load(load_robot, "quadruped")
    q, v, a = standing_state("quadruped", model)
    a[0], a[1] = 1.0, 0.5  # base: forward and sideways [m/s²]
    frames = (model.contact_frames[0], model.contact_frames[3])  # LF, RH
    out = {}
    for spread in (False, "load", "torque"):
        form = formulations.make(name, model, spread_friction=spread)
        result = form.solve(q, v, a, frames)
        assert result.ok and form.dynamics_residual(result) <= RESIDUAL_TOL
        out[spread] = result, form.stacked_jacobian()[:, :model.n_base].T @ result.forces.reshape(-1)
    ref, wrench = out[False]
    for spread in ("load", "torque"):
        result, w = out[spread]
        np.testing.assert_allclose(result.qdd, ref.qdd, atol=1e-6 * max(1.0, np.abs(ref.qdd).max()))
        np.testing.assert_allclose(w, wrench, atol=1e-6 * max(1.0, np.abs(wrench).max()))
        assert np.all(np.linalg.norm(result.forces[:, :2], axis=1) > 1e-3)
    tau = {k: np.linalg.norm(r.tau) for k, (r, _) in out.items()}
    assert tau["torque"] <= min(tau[False], tau["load"]) + 1e-9
    assert tau["torque"] < tau[False] - 1e-3  # the internal force was worth something


@functools.lru_cache(maxsize=None)
def _lcp_coulomb_trot(friction: float):
    from idyn_control.sim.lockstep import Scenario, run_scenario

    return run_scenario(Scenario(robot="quadruped", formulation="lcp_coulomb", friction=friction,
                                 compliant=False, duration=3.0, trot_start=0.5, task="trot"))


@pytest.mark.parametrize("friction", [math.inf, 0.1])
def test_lcp_coulomb_trots_on_rigid_ground(friction):
    """Lock-step with MuJoCo, the project quadruped trotting at 0.2 m/s for 3 s (from
    0.5 s) on rigid ground, μ ∞ and 0.1: no fall, no fallback tick, speed within 30 % of
    the command, every predicted force in its friction cone — no foot pulls sideways
    without normal force (μ = 1e3 for ∞) — and the summed normal force predicted within
    2.5 % (measured 2.3 % / 2.2 %; seed 000 Table 5: LCP,μ 1.2–1.9 %) and, on μ ∞, within
    2 % on the ticks whose contact set the estimate knew (1.2 %: half of the error is the
    impacts of feet the estimate has not seen land). With the quadruped's former 8 mm
    swings its feet landed harder and μ ∞ was 3.4 %."""
    run = _lcp_coulomb_trot(friction)
    tr, m = run.trace, run.metrics
    assert not m["fell"] and tr.t.size == 3000
    assert int(tr.fallback.sum()) == 0
    assert abs(m["speed_along_command_m_s"] - 0.2) <= 0.3 * 0.2
    assert m["force_error_sum_rel"] <= 0.025
    if friction == math.inf:  # the rest is at unseen touchdowns (on μ 0.1: slip, 2.0 % known)
        assert m["force_error_sum_known_rel"] <= 0.02
    mu = 1e3 if friction == math.inf else friction
    f_t = np.abs(tr.f_pred[:, :, :2]).sum(axis=2)  # ground normal +z: inscribed cone |fx| + |fy| ≤ μ fz
    assert np.all(f_t <= mu * tr.f_pred[:, :, 2] + 1e-6 * (1.0 + np.abs(tr.f_pred).max()))


def test_lcp_coulomb_trots_when_told_the_simulators_touching_feet():
    """Scenario contact_estimate="touching": the controller and the gait are told the feet
    MuJoCo's collision detection finds touching, the contacts the coming step pushes on
    (seed 000's simulator handed its controllers its contact points). No touchdown is then
    unseen, and the quadruped still trots (rigid μ∞, 3 s). The landing impacts stay
    unpredicted: the error moves from unseen to seen ticks (2.1 % against 2.3 %; README,
    seed 000)."""
    from idyn_control.sim.lockstep import Scenario, run_scenario

    run = run_scenario(Scenario(robot="quadruped", formulation="lcp_coulomb", friction=math.inf, compliant=False,
                                duration=3.0, trot_start=0.5, task="trot", contact_estimate="touching"))
    m = run.metrics
    assert not m["fell"] and int(run.trace.fallback.sum()) == 0
    assert abs(m["speed_along_command_m_s"] - 0.2) <= 0.3 * 0.2
    assert m["touchdown_unseen_ticks"] == 0
    assert m["force_error_sum_rel"] == m["force_error_sum_known_rel"]
    with pytest.raises(ConfigError, match="contact_estimate"):
        Scenario(contact_estimate="sensor").validate()
