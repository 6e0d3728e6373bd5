"""Physics invariants of every formulation on real robots (DESIGN.md §2)."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import formulations, native, robots
from idyn_control.errors import ConfigError, NonFiniteError, ShapeError, UnknownNameError

from conftest import ALL_ROBOTS, FLOATING, FIXED, random_state

# formulations whose inputs are not just (q, v, q̈_des) are covered in their own files
SPECIAL = {"sensed", "pidc_qp", "pidc_qp_howsm", "pidcwcu"}
# formulations with a compiled tick also run their Python reference ("name:python")
NATIVE = ("wbc_qp", "qp_coulomb", "qp_noslip")
NAMES = tuple(n for n in formulations.names() if n not in SPECIAL) + tuple(f"{n}:python" for n in NATIVE)
RESIDUAL_TOL = 1e-6


def make(name, model, **options):
    """formulations.make for ``name`` or ``name:backend``."""
    base, _, backend = name.partition(":")
    if backend:
        options["backend"] = backend
    return formulations.make(base, model, **options)


def get(name):
    return formulations.get(name.partition(":")[0])


def check_friction(f, result, tol=1e-6):
    for frame, force in zip(result.contact_frames, result.forces):
        rows = f.contacts.friction_rows[f.model.contact_index(frame)]
        scale = max(1.0, float(np.linalg.norm(force)))
        assert (rows @ force).max() <= tol * scale, (frame, force)


@pytest.mark.parametrize("robot", ALL_ROBOTS)
@pytest.mark.parametrize("name", NAMES)
def test_dynamics_residual_random_states(name, robot, load_robot, rng):
    model = load_robot(robot)
    f = make(name, model)
    for _ in range(3):
        q, v, a = random_state(model, rng)
        result = f.solve(q, v, a, model.contact_frames)
        assert np.isfinite(result.tau).all() and np.isfinite(result.forces).all()
        assert f.dynamics_residual(result) <= RESIDUAL_TOL
        assert result.qdd.shape == (model.nv,) and result.tau.shape == (model.na,)
        assert result.forces.shape == (len(model.contact_frames), 3)
        assert result.contact_frames == model.contact_frames


@pytest.mark.parametrize("robot", FLOATING)
@pytest.mark.parametrize("name", NAMES)
def test_standing_balances_weight(name, robot, load_robot):
    """Standing still on four feet: forces carry the weight, the base does not move."""
    model = load_robot(robot)
    f = make(name, model)
    q = robots.standing_configuration(model, robot)
    zero = np.zeros(model.nv)
    result = f.solve(q, zero, zero, model.contact_frames)
    assert result.ok
    assert f.dynamics_residual(result) <= RESIDUAL_TOL
    if f.predicts_forces:
        weight = pin.computeTotalMass(model.pin_model) * 9.81
        assert result.forces[:, 2].sum() == pytest.approx(weight, rel=1e-3)
        assert np.abs(result.qdd[:6]).max() <= 1e-3


@pytest.mark.parametrize("robot", FLOATING)
@pytest.mark.parametrize("name", [n for n in NAMES if get(n).respects_friction])
def test_friction_pyramid_and_unilateral(name, robot, load_robot, rng):
    model = load_robot(robot)
    f = make(name, model)
    states = [(robots.standing_configuration(model, robot), np.zeros(model.nv), np.zeros(model.nv))]
    states += [random_state(model, rng) for _ in range(3)]
    for q, v, a in states:
        result = f.solve(q, v, a, model.contact_frames)
        check_friction(f, result)
        normals = np.einsum("ij,ij->i", result.forces, f.contacts.basis[:, 2])
        assert (normals >= -1e-6 * max(1.0, np.abs(normals).max())).all()


@pytest.mark.parametrize("name", [n for n in NAMES if get(n).respects_friction])
def test_a_friction_change_takes_effect_on_the_next_solve(name, load_robot):
    """Solo12 standing, pushed sideways (3 m/s² base acceleration): after
    ``contacts.set_friction`` to μ = 0.1 the next solve's forces are inside the new pyramid
    (the friction blocks were built once for μ = 0.7 and kept while the active set stayed
    the same: wbc_qp and qp_coulomb returned forces with |f_t| ≈ 0.3 f_n), and a
    ``set_surface`` back to the first μ takes effect too."""
    model = load_robot("solo12")
    f = make(name, model)
    q = robots.standing_configuration(model, "solo12")
    zero, push = np.zeros(model.nv), np.zeros(model.nv)
    push[0] = 3.0
    ratio = []  # largest |f_t| / f_n per phase
    for setter, mu in (("set_friction", 0.7), ("set_friction", 0.1), ("set_surface", 0.7)):
        for i, contact in enumerate(model.contacts):
            if setter == "set_surface":
                assert f.contacts.set_surface(i, contact.normal_world, mu)
            else:
                f.contacts.set_friction(i, mu)
        result = f.solve(q, zero, push, model.contact_frames)
        assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
        check_friction(f, result)
        assert np.allclose(f.contacts.mu, mu)
        loaded = result.forces[:, 2] > 0.01 * result.forces[:, 2].sum()
        ratio.append((np.linalg.norm(result.forces[loaded, :2], axis=1) / result.forces[loaded, 2]).max())
    assert ratio[1] <= 0.1 * np.sqrt(2) + 1e-6 < min(ratio[0], ratio[2])


@pytest.mark.parametrize("robot", ALL_ROBOTS)
@pytest.mark.parametrize("name", [n for n in NAMES if get(n).respects_torque_limits])
def test_torque_limits(name, robot, load_robot, rng):
    model = load_robot(robot)
    f = make(name, model)
    for _ in range(3):
        q, v, a = random_state(model, rng, scale_a=20.0)  # demands beyond the limits
        result = f.solve(q, v, a, model.contact_frames)
        if result.ok:
            assert (np.abs(result.tau) <= model.tau_max * (1 + 1e-6) + 1e-6).all()


@pytest.mark.parametrize("robot", FIXED)
def test_rnea_matches_pinocchio(robot, load_robot, rng):
    model = load_robot(robot)
    f = formulations.make("rnea", model)
    data = model.pin_model.createData()
    for _ in range(5):
        q, v, a = random_state(model, rng)
        result = f.solve(q, v, a)
        np.testing.assert_allclose(result.tau, pin.rnea(model.pin_model, data, q, v, a), rtol=1e-12, atol=1e-10)
        np.testing.assert_array_equal(result.qdd, a)


@pytest.mark.parametrize("robot", FIXED)
@pytest.mark.parametrize("name", NAMES)
def test_fixed_base_without_contact_is_rnea(name, robot, load_robot, rng):
    """With nothing touching, every model-based formulation reduces to RNEA."""
    if name == "pid":
        pytest.skip("pid is model-free")
    model = load_robot(robot)
    f = make(name, model)
    data = model.pin_model.createData()
    q, v, a = random_state(model, rng, scale_a=0.5)
    result = f.solve(q, v, a)
    expected = pin.rnea(model.pin_model, data, q, v, a)
    if get(name).respects_torque_limits and (np.abs(expected) > model.tau_max).any():
        pytest.skip("demand beyond limits")
    np.testing.assert_allclose(result.tau, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["qp_coulomb", "wbc_qp"])
def test_warm_start_needs_fewer_iterations(name, load_robot):
    """A slowly varying stance: warm-started ProxQP iterates less than cold starts."""
    model = load_robot("solo12")
    q0 = robots.standing_configuration(model, "solo12")
    totals = {}
    for warm in (True, False):
        f = make(name, model, warm_start=warm)
        total = 0
        for i in range(200):
            t = i * 1e-3
            q, v = q0.copy(), np.zeros(model.nv)
            phase = 2 * np.pi * t + np.arange(model.na)
            q[model.joint_q_index] += 0.01 * np.sin(phase)
            v[6:] = 0.02 * np.pi * np.cos(phase)
            result = f.solve(q, v, np.zeros(model.nv), model.contact_frames)
            assert result.ok
            total += result.iterations
        totals[warm] = total
    assert totals[True] < totals[False], totals


def test_unknown_formulation_lists_valid_names(load_robot):
    with pytest.raises(UnknownNameError) as err:
        formulations.make("qp_magic", load_robot("panda"))
    assert "qp_magic" in str(err.value) and "qp_coulomb" in str(err.value)


def test_unknown_option_is_rejected(load_robot):
    with pytest.raises(ConfigError, match="stage3"):
        formulations.make("qp_coulomb", load_robot("solo12"), stage3=True)


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_raise_clear_errors(name, load_robot):
    model = load_robot("solo12")
    f = make(name, model)
    q, v, a = model.neutral(), np.zeros(model.nv), np.zeros(model.nv)
    with pytest.raises(ShapeError, match=r"q has shape \(18,\)"):
        f.solve(q[:-1], v, a)
    with pytest.raises(ShapeError, match="qdd_des"):
        f.solve(q, v, a[:3])
    bad = v.copy()
    bad[4] = np.nan
    with pytest.raises(NonFiniteError, match=r"v has non-finite entries at indices \[4\]"):
        f.solve(q, bad, a)
    with pytest.raises(UnknownNameError, match="LEFT_HAND"):
        f.solve(q, v, a, ["FL_FOOT", "LEFT_HAND"])
    # the formulation still works after rejected inputs
    assert f.solve(q, v, a, model.contact_frames).ok


def test_bad_robot_inputs():
    from idyn_control import RobotModel
    from idyn_control.errors import ModelError

    with pytest.raises(ModelError, match="not found"):
        RobotModel.from_urdf("/nonexistent/robot.urdf")
    with pytest.raises(ModelError, match="cannot build"):
        RobotModel.from_urdf("<robot name='x'><link name='a'/><joint name='j' type='revolute'></joint></robot>")
    with pytest.raises(UnknownNameError, match="NOSE"):
        robots.load("solo12", contact_frames=("FL_FOOT", "NOSE"))
    with pytest.raises(ConfigError, match="friction"):
        robots.load("solo12", friction=-1.0)


@pytest.mark.parametrize("robot", ["go2", "solo12", "anymal_c", "quadruped"])
def test_stage2_empty_set_check_agrees_with_proxqp(robot, load_robot):
    """qp_coulomb decides without ProxQP that Stage II's set is empty when one or two feet
    are down (Stage I's optimal set is then a point or a line): a trot's diagonal pair
    pushed sideways and forward harder and harder (0-8 m/s²), from rest and moving. Same
    answers (torques, forces) and Stage II failures as ProxQP deciding every tick, in Python
    and compiled; the check fires where the forces must cross the friction margin."""
    model = load_robot(robot)
    checked = make("qp_coulomb", model, backend="python")
    by_proxqp = make("qp_coulomb", model, backend="python")
    by_proxqp._stage2_set_empty = lambda: False
    formulations_ = [checked, by_proxqp]
    if native.available():
        formulations_.append(make("qp_coulomb", model, backend="native"))
    fired = []
    decide = checked._stage2_set_empty
    checked._stage2_set_empty = lambda: fired.append(decide()) or fired[-1]
    frames = model.contact_frames
    q0 = robots.standing_configuration(model, robot)
    rng = np.random.default_rng(1)
    for pair in ((frames[0], frames[3]), (frames[1], frames[2]), (frames[0],)):
        for push in np.linspace(0.0, 8.0, 17):
            q, v, a = q0.copy(), 0.05 * rng.normal(size=model.nv), np.zeros(model.nv)
            a[:3] = push * np.array([0.8, 0.6, 0.0]) + rng.normal(0.0, 0.3, 3)
            results = [f.solve(q, v, a, pair) for f in formulations_]
            reference = results[1]
            scale = max(1.0, float(np.abs(reference.tau).max()))
            for f, r in zip(formulations_, results):
                assert r.ok and f.stage2_failures == by_proxqp.stage2_failures, (push, pair)
                np.testing.assert_allclose(r.tau, reference.tau, rtol=0, atol=1e-6 * scale)
                np.testing.assert_allclose(r.forces, reference.forces, rtol=0, atol=1e-6 * max(1.0, np.abs(
                    reference.forces).max()))
    assert sum(fired) >= 5 and by_proxqp.stage2_failures >= sum(fired), (sum(fired), by_proxqp.stage2_failures)


@pytest.mark.parametrize("robot", FLOATING)
def test_projected_min_force_is_the_least_norm_force_distribution(robot, load_robot):
    """``projected``'s constraint-space step (internal_forces "min_force", Righetti et al.
    2013): standing on four feet, its forces are the least-norm ones that carry the base
    (contact_lstsq's), with less tangential force than the minimum-norm torque's."""
    model = load_robot(robot)
    q = robots.standing_configuration(model, robot)
    zero = np.zeros(model.nv)
    frames = model.contact_frames
    least = formulations.make("contact_lstsq", model).solve(q, zero, zero, frames)
    by_force = formulations.make("projected", model).solve(q, zero, zero, frames)
    by_torque = formulations.make("projected", model, internal_forces="min_torque").solve(q, zero, zero, frames)
    weight = pin.computeTotalMass(model.pin_model) * 9.81
    np.testing.assert_allclose(by_force.forces, least.forces, rtol=0, atol=1e-6 * weight)
    assert np.abs(by_torque.tau).sum() <= np.abs(by_force.tau).sum() * (1 + 1e-9)
    tangential = [np.linalg.norm(r.forces[:, :2], axis=1).max() for r in (by_force, by_torque)]
    assert tangential[0] <= tangential[1] + 1e-9 * weight


@pytest.mark.parametrize("robot", FLOATING)
@pytest.mark.parametrize("feet", [1, 2])
def test_projected_underactuated_is_nearest_in_kinetic_energy(robot, feet, load_robot, rng):
    """On one foot, or a trot's diagonal pair, no torque gives the projected q̈: ``projected``
    returns the τ whose constrained motion is nearest it in the metric M (Gauss's
    principle); no other τ comes nearer."""
    model = load_robot(robot)
    f = formulations.make("projected", model)
    frames = model.contact_frames[:1] if feet == 1 else (model.contact_frames[0], model.contact_frames[3])
    q, v = robots.standing_configuration(model, robot), 0.1 * rng.normal(size=model.nv)
    qdd_des = rng.normal(0.0, 2.0, model.nv)
    result = f.solve(q, v, qdd_des, frames)
    assert f.dynamics_residual(result) <= RESIDUAL_TOL
    J = f.stacked_jacobian()
    P = np.eye(model.nv) - np.linalg.pinv(J) @ J
    target = P @ qdd_des - np.linalg.pinv(J) @ f.stacked_drift()
    M = f.terms.M

    def distance(tau):
        f.constrained_forward_dynamics(tau)
        e = f.qdd - target
        return float(e @ M @ e)

    best = distance(result.tau)
    scale = max(1.0, float(np.abs(result.tau).max()))
    for _ in range(20):
        assert distance(result.tau + 0.05 * scale * rng.normal(size=model.na)) >= best * (1 - 1e-9)
