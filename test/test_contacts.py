"""Contact kinematics against finite differences, and the robot model's maps."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import RobotModel, robots
from idyn_control.contacts import MU_MAX, ContactSet, pyramid_rows, tangent_basis
from idyn_control.dynamics import DynamicsTerms

from conftest import ALL_ROBOTS, FLOATING, random_state


def contact_positions(model, q):
    terms = DynamicsTerms(model)
    terms.update(q, np.zeros(model.nv))
    cs = ContactSet(model)
    cs.update(terms)
    return cs.position.copy()


@pytest.mark.parametrize("robot", FLOATING)
def test_jacobian_and_drift_match_finite_differences(robot, load_robot, rng):
    model = load_robot(robot)
    pm = model.pin_model
    q, v, _ = random_state(model, rng)
    terms = DynamicsTerms(model)
    terms.update(q, v)
    cs = ContactSet(model)
    cs.update(terms)
    eps = 1e-6
    # Jacobian: ṗ = J v
    p_plus = contact_positions(model, pin.integrate(pm, q, eps * v))
    p_minus = contact_positions(model, pin.integrate(pm, q, -eps * v))
    velocity_fd = (p_plus - p_minus) / (2 * eps)
    np.testing.assert_allclose(np.einsum("kij,j->ki", cs.J, v), velocity_fd, rtol=1e-5, atol=1e-6)
    # drift: p̈ at q̈ = 0 is d/dt (J v) along the motion with constant v
    def jv(qq):
        t = DynamicsTerms(model)
        t.update(qq, v)
        c = ContactSet(model)
        c.update(t)
        return np.einsum("kij,j->ki", c.J, v)
    drift_fd = (jv(pin.integrate(pm, q, eps * v)) - jv(pin.integrate(pm, q, -eps * v))) / (2 * eps)
    np.testing.assert_allclose(cs.drift, drift_fd, rtol=1e-4, atol=1e-5)


def test_mass_matrix_and_bias_match_pinocchio(load_robot, rng):
    model = load_robot("solo12")
    q, v, a = random_state(model, rng)
    terms = DynamicsTerms(model)
    terms.update(q, v)
    data = model.pin_model.createData()
    np.testing.assert_allclose(terms.M @ a + terms.h, pin.rnea(model.pin_model, data, q, v, a), atol=1e-10)
    np.testing.assert_allclose(terms.M, terms.M.T)


def test_friction_pyramid_rows():
    basis = tangent_basis(np.array([0.0, 0.0, 1.0]))
    np.testing.assert_allclose(basis @ basis.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(np.cross(basis[0], basis[1]), basis[2], atol=1e-12)
    rows = pyramid_rows(basis, 0.5)
    assert (rows @ np.array([0.2, -0.2, 1.0]) <= 0).all()           # inside
    assert (rows @ np.array([0.6, 0.0, 1.0]) > 0).any()             # slides
    assert (rows @ np.array([0.0, 0.0, -1.0]) > 0).any()            # pulls


def test_a_friction_above_mu_max_is_clamped_and_set_again_rebuilds_nothing(load_robot):
    """μ 1000 (a node's contacts.friction or ~/contact_ground may say so; the lock-step loop
    tells a μ = ∞ ground so) becomes MU_MAX: the pyramid still bounds the tangential force."""
    cs = ContactSet(load_robot("solo12"))
    up = np.array([0.0, 0.0, 1.0])
    cs.set_friction(0, 1000.0)
    assert cs.mu[0] == MU_MAX and 2.0 <= MU_MAX <= 100.0
    assert (cs.friction_rows[0] @ np.array([0.9 * MU_MAX, 0.0, 1.0]) <= 0).all()
    assert (cs.friction_rows[0] @ np.array([1.1 * MU_MAX, 0.0, 1.0]) > 0).any()
    assert cs.set_surface(1, up, 1000.0) and not cs.set_surface(1, up, 1000.0)  # no rebuild every tick
    assert cs.mu[1] == MU_MAX
    cs.set_friction(2, 0.7)
    assert cs.mu[2] == 0.7


@pytest.mark.parametrize("robot", ALL_ROBOTS)
def test_model_maps_and_limits(robot, load_robot):
    model = load_robot(robot)
    assert len(model.joint_names) == model.na == model.nv - model.n_base
    for i, name in enumerate(model.joint_names):
        assert model.joint_index(name) == i
    order = model.joint_order(list(reversed(model.joint_names)))
    assert list(order) == list(reversed(range(model.na)))
    assert (model.tau_max > 0).all() and np.isfinite(model.tau_max).all()
    assert model.floating_base == (robot in FLOATING)


def test_model_from_xml_string_and_package_uris(tmp_path):
    spec = robots.spec("solo12")
    xml = spec.urdf_path().read_text()
    model = RobotModel.from_urdf(xml, contact_frames=spec.contact_frames, package_dirs=spec.search_dirs())
    assert model.floating_base and model.nv == 18
    assert "package://" not in model.urdf_xml  # meshes resolved to absolute paths
    fixed = RobotModel.from_urdf(xml, floating_base=False)
    assert not fixed.floating_base and fixed.nv == 12
