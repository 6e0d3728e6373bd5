"""The compiled tick (idyn_control.native) agrees with the Python reference, robot by robot.

The Python formulations are the reference: the C++ port must give the same rigid-body
terms (to round-off) and, on the same tick sequence, the same torques, accelerations and
forces (to the QP tolerance). CI sets IDYN_REQUIRE_NATIVE=1, so a missing build fails
there instead of skipping.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import formulations, native, robots
from idyn_control.contacts import ContactSet
from idyn_control.dynamics import DynamicsTerms
from idyn_control.errors import ConfigError

from conftest import ALL_ROBOTS, native_or_skip, random_state, switching_sequence

native_or_skip()

NATIVE_NAMES = ("wbc_qp", "qp_coulomb", "qp_noslip")


def relative_error(a, b) -> float:
    if np.size(b) == 0:
        return 0.0
    return float(np.abs(np.asarray(a) - np.asarray(b)).max()) / max(1.0, float(np.abs(b).max()))


@pytest.mark.parametrize("robot", ALL_ROBOTS)
def test_engine_matches_pinocchio(robot, load_robot, rng):
    """M, h, contact Jacobians, drift, positions and orientations equal Python Pinocchio's."""
    model = load_robot(robot)
    terms, contacts = DynamicsTerms(model), ContactSet(model)
    engine = native.Engine(model, terms, contacts)
    ref_terms, ref_contacts = DynamicsTerms(model), ContactSet(model)
    for _ in range(5):
        q, v, _ = random_state(model, rng, scale_v=3.0)
        ref_terms.update(q, v)
        ref_contacts.update(ref_terms)
        terms.q[:], terms.v[:] = q, v
        engine.update()
        for got, ref in ((terms.M, ref_terms.M), (terms.h, ref_terms.h), (contacts.J, ref_contacts.J),
                         (contacts.drift, ref_contacts.drift), (contacts.position, ref_contacts.position),
                         (contacts.rotation, ref_contacts.rotation)):
            assert relative_error(got, ref) <= 1e-12


@pytest.mark.parametrize("robot", ALL_ROBOTS)
@pytest.mark.parametrize("name", NATIVE_NAMES)
def test_formulation_matches_python(name, robot, load_robot):
    """Same ticks through both backends: same status, torques, accelerations and forces."""
    model = load_robot(robot)
    fast = formulations.make(name, model, backend="native")
    ref = formulations.make(name, model, backend="python")
    assert (fast.backend, ref.backend) == ("native", "python")
    if name == "wbc_qp":
        for f in (fast, ref):
            f.add_com_task(1.0)
            if model.contact_frames:
                f.add_frame_task(model.contact_frames[0], 0.5, name="foot")
    rng = np.random.default_rng(5)
    errors = []
    for q, v, a, active in switching_sequence(model, robot, rng, 12):
        if name == "wbc_qp":
            for f in (fast, ref):
                f.set_task_reference("com", q[:3] if model.floating_base else np.zeros(3), kp=50.0, kd=10.0)
        r_fast = fast.solve(q, v, a, active)
        r_ref = ref.solve(q, v, a, active)
        assert r_fast.contact_frames == r_ref.contact_frames
        if not r_ref.ok:
            # unconverged or infeasible: both stop short of an optimum, and round-off (the
            # two ProxQP builds sum in different orders) decides which status they report
            continue
        assert r_fast.status == r_ref.status
        error = max(relative_error(got, want) for got, want in
                    ((r_fast.tau, r_ref.tau), (r_fast.qdd, r_ref.qdd), (r_fast.forces, r_ref.forces)))
        # a nearly flat optimum (wbc_qp's forces are regularized by 1e-5/m² only) ends where
        # round-off steers ProxQP: ≤ 1e-3 on every tick, and most ticks agree to 1e-6
        assert error <= 1e-3, (r_fast, r_ref)
        errors.append(error)
        assert fast.dynamics_residual(r_fast) <= 1e-6
    assert np.mean(np.asarray(errors) <= 1e-6) >= 0.8, errors
    if name == "wbc_qp":
        np.testing.assert_allclose(fast.tasks["com"].position, ref.tasks["com"].position, atol=1e-12)
        np.testing.assert_allclose(fast.tasks["com"].velocity, ref.tasks["com"].velocity, atol=1e-12)
    else:
        assert fast.fast_path_ticks == ref.fast_path_ticks
        assert fast.stage2_failures == ref.stage2_failures


def test_native_backend_refuses_what_it_cannot_run(load_robot):
    model = load_robot("solo12")
    with pytest.raises(ConfigError, match="osqp"):
        formulations.make("qp_coulomb", model, backend="native", solver="osqp")
    auto = formulations.make("qp_coulomb", model, solver="osqp")
    assert auto.backend == "python" and "osqp" in auto.native_unavailable
    with pytest.raises(ConfigError, match="backend"):
        formulations.make("wbc_qp", model, backend="fast")
    f = formulations.make("wbc_qp", model)
    with pytest.raises(ConfigError, match="fixed when the formulation is made"):
        f.set_option("backend", "python")


@pytest.mark.parametrize("robot", ["panda", "ur5"])
def test_rnea_on_a_fixed_base_matches_pinocchio(robot, load_robot, rng):
    """rnea runs on the compiled engine for a fixed base: τ = M q̈ + h == pinocchio.rnea."""
    import pinocchio as pin

    model = load_robot(robot)
    fast = formulations.make("rnea", model)
    ref = formulations.make("rnea", model, backend="python")
    assert fast.backend == "native" and ref.backend == "python"
    data = model.pin_model.createData()
    for _ in range(20):
        q = model.random_configuration(rng)
        v, a = rng.standard_normal(model.nv), rng.standard_normal(model.nv)
        expected = pin.rnea(model.pin_model, data, q, v, a)
        r_fast, r_ref = fast.solve(q, v, a), ref.solve(q, v, a)
        assert r_fast.ok and r_ref.ok
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(r_fast.tau, expected, atol=1e-10 * scale)
        np.testing.assert_allclose(r_ref.tau, expected, atol=1e-10 * scale)


def test_rnea_with_a_floating_base_stays_in_python(load_robot):
    model = load_robot("solo12")
    auto = formulations.make("rnea", model)
    assert auto.backend == "python" and "fixed base" in auto.native_unavailable
    with pytest.raises(ConfigError, match="fixed base"):
        formulations.make("rnea", model, backend="native")


def test_lemke_stage1_falls_back_to_python_at_run_time(load_robot):
    """stage1_solver is read every tick: switching to Lemke runs the Python path, correctly."""
    model = load_robot("solo12")
    f = formulations.make("qp_coulomb", model)
    assert f.backend == "native"
    q = robots.standing_configuration(model, "solo12")
    zero = np.zeros(model.nv)
    first = f.solve(q, zero, zero, model.contact_frames)
    f.set_option("stage1_solver", "lemke")
    second = f.solve(q, zero, zero, model.contact_frames)
    assert first.ok and second.ok
    assert f.dynamics_residual(second) <= 1e-6
    np.testing.assert_allclose(second.forces.sum(axis=0), first.forces.sum(axis=0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("robot", ALL_ROBOTS)
def test_kinematic_layer_matches_python(robot, load_robot):
    """Controller.desired_acceleration compiled == Python, with swing and stance feet."""
    from idyn_control.controller import Controller, ControllerConfig

    model = load_robot(robot)
    fast = Controller(model, ControllerConfig(formulation="qp_coulomb"))
    ref = Controller(model, ControllerConfig(formulation="qp_coulomb", formulation_options={"backend": "python"}))
    assert fast._native_layer is not None and ref._native_layer is None
    rng = np.random.default_rng(11)
    k = len(model.contacts)
    for _ in range(10):
        q, v, _ = random_state(model, rng)
        mask = rng.random(k) < 0.7
        refs = dict(q_ref=rng.normal(size=model.na), v_ref=rng.normal(size=model.na),
                    a_ref=rng.normal(size=model.na), base_position_ref=rng.normal(size=3),
                    foot_position_ref=rng.normal(size=(k, 3)), foot_velocity_ref=rng.normal(size=(k, 3)),
                    foot_acceleration_ref=rng.normal(size=(k, 3)))
        swing = rng.random(k) < 0.3
        results = []
        for c in (fast, ref):
            for name, value in refs.items():
                getattr(c, name)[:] = value
            c.base_rotation_ref[:] = pin.rpy.rpyToMatrix(0.1, -0.2, 0.3)
            c.swing[:] = swing
            c.set_gains(base_kp=300.0, foot_kp=500.0, posture_weight=2.0)
            f = c.formulation
            f.prepare(q, v, ())
            results.append(c.desired_acceleration(f.terms.q, f.terms.v, mask).copy())
        assert relative_error(results[0], results[1]) <= 1e-9


def test_kinematic_layer_follows_a_swapped_formulation(load_robot):
    """The node rebuilds the formulation on option changes (ctrl.formulation = new): the
    compiled kinematic layer must read the new one's state, not the old engine's."""
    from idyn_control.controller import Controller, ControllerConfig

    model = load_robot("solo12")
    ctrl = Controller(model, ControllerConfig(formulation="qp_coulomb"))
    ref = Controller(model, ControllerConfig(formulation="qp_coulomb", formulation_options={"backend": "python"}))
    old_engine = ctrl.formulation._engine
    ctrl.formulation = formulations.make("qp_coulomb", model, eps_abs=1e-7)
    assert ctrl._native_layer is not None and ctrl._native_layer.engine is ctrl.formulation._engine
    assert ctrl._native_layer.engine is not old_engine
    rng = np.random.default_rng(2)
    mask = np.ones(len(model.contacts), dtype=bool)
    for _ in range(3):
        q, v, _ = random_state(model, rng)
        out = []
        for c in (ctrl, ref):
            c.q_ref[:] = 0.1
            c.formulation.prepare(q, v, model.contact_frames)
            out.append(c.desired_acceleration(c.formulation.terms.q, c.formulation.terms.v, mask).copy())
        assert relative_error(out[0], out[1]) <= 1e-9


@pytest.mark.parametrize("name", NATIVE_NAMES)
def test_fixed_base_with_contacts_matches_python(name):
    """A manipulator touching the world with its fingers (fixed base, k > 0): the Stage II
    only / fixed-base branches of the compiled tick agree with Python."""
    from idyn_control import RobotModel

    spec = robots.spec("panda")
    model = RobotModel.from_urdf(spec.urdf_path(), package_dirs=spec.search_dirs(),
                                 contact_frames=["panda_leftfinger", "panda_rightfinger"], friction=0.5,
                                 floating_base=False)
    fast = formulations.make(name, model, backend="native")
    ref = formulations.make(name, model, backend="python")
    rng = np.random.default_rng(4)
    for i in range(8):
        q, v, a = random_state(model, rng, scale_v=0.5, scale_a=1.0)
        active = model.contact_frames if i % 3 else model.contact_frames[:1]
        r_fast, r_ref = fast.solve(q, v, a, active), ref.solve(q, v, a, active)
        if r_ref.ok:
            assert r_fast.ok
            for got, want in ((r_fast.tau, r_ref.tau), (r_fast.qdd, r_ref.qdd), (r_fast.forces, r_ref.forces)):
                assert relative_error(got, want) <= 1e-5
        assert fast.dynamics_residual(r_fast) <= 1e-6
