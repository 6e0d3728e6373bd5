"""pidc_qp with its baselines (seed 004 §III–IV) and sensed (seed 000 §7.3, seed 002 §VI).

Physics on real robots: the dynamics residual, friction pyramids and torque limits, the
ANYmal C force-tracking experiment of seed 004 §IV, torques reproduced from exact sensed
forces, and well-posedness of force-sensor layouts including Nori's humanoid example.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import RobotModel, formulations, robots
from idyn_control.errors import ConfigError, NonFiniteError, ShapeError, UnknownNameError
from idyn_control.formulations.sensed import IllPosedLayoutError
from idyn_control.model import ContactConfig

from conftest import ALL_ROBOTS, FIXED, FLOATING, random_state

PIDC = ("pidc_qp", "pidc_qp_howsm", "pidcwcu")
NAMES = PIDC + ("sensed",)
RESIDUAL_TOL = 1e-6
EXACT_TOL = 1e-6  # relative force error of pidc_qp when no inequality is active


def weight(model):
    return pin.computeTotalMass(model.pin_model) * 9.81


def make_with_inputs(name, model):
    """The formulation, plus a function (q, v, a, active) that sets its extra input.

    pidc family: the first foot is force-controlled, pressing with a fifth of the weight.
    sensed: the forces measured are those ``contact_lstsq`` predicts at the same state.
    """
    if name == "sensed":
        f = formulations.make(name, model)
        reference = formulations.make("contact_lstsq", model)

        def feed(q, v, a, active):
            r = reference.solve(q, v, a, active)
            f.set_measured_forces({frame: force for frame, force in zip(r.contact_frames, r.forces)})
        return f, feed
    force_contacts = model.contact_frames[:1]
    f = formulations.make(name, model, force_contacts=force_contacts)
    if force_contacts:
        f.set_desired_forces({force_contacts[0]: [3.0, -2.0, 0.2 * weight(model)]})
    return f, lambda *state: None


def check_friction(f, result, tol=1e-6):
    for frame, force in zip(result.contact_frames, result.forces):
        rows = f.contacts.friction_rows[f.model.contact_index(frame)]
        scale = max(1.0, float(np.linalg.norm(force)))
        assert (rows @ force).max() <= tol * scale, (frame, force)


# ---------------------------------------------------------------------------- registry
def test_registered_with_their_flags():
    for name in NAMES:
        assert name in formulations.names()
        assert formulations.get(name).name == name
    assert formulations.get("pidc_qp").respects_friction
    assert formulations.get("pidc_qp").respects_torque_limits
    assert not formulations.get("pidcwcu").respects_torque_limits


# ---------------------------------------------------------------------------- invariants
@pytest.mark.parametrize("robot", ALL_ROBOTS)
@pytest.mark.parametrize("name", NAMES)
def test_dynamics_residual(name, robot, load_robot, rng):
    """M q̈ + h = Sᵀτ + Σ Jᵀf at standing and random states, all and random contact subsets."""
    model = load_robot(robot)
    f, feed = make_with_inputs(name, model)
    states = [random_state(model, rng) for _ in range(4)]
    if model.floating_base:
        states.insert(0, (robots.standing_configuration(model, robot), np.zeros(model.nv), np.zeros(model.nv)))
    for n, (q, v, a) in enumerate(states):
        frames = model.contact_frames
        active = frames if n % 2 == 0 else tuple(c for c in frames if rng.random() < 0.6)
        feed(q, v, a, active)
        result = f.solve(q, v, a, active)
        assert np.isfinite(result.tau).all() and np.isfinite(result.forces).all()
        assert result.tau.shape == (model.na,) and result.qdd.shape == (model.nv,)
        assert result.forces.shape == (len(active), 3) and result.contact_frames == active
        assert f.dynamics_residual(result) <= RESIDUAL_TOL, (n, active)


@pytest.mark.parametrize("robot", FIXED)
@pytest.mark.parametrize("name", NAMES)
def test_fixed_base_without_contact_is_rnea(name, robot, load_robot, rng):
    model = load_robot(robot)
    f, _ = make_with_inputs(name, model)
    data = model.pin_model.createData()
    for _ in range(3):
        q, v, a = random_state(model, rng, scale_a=0.5)
        expected = pin.rnea(model.pin_model, data, q, v, a)
        result = f.solve(q, v, a)
        np.testing.assert_allclose(result.tau, expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(result.qdd, a, atol=1e-9)


@pytest.mark.parametrize("robot", FLOATING)
def test_pidc_qp_friction_unilateral_and_limits(robot, load_robot, rng):
    model = load_robot(robot)
    f, _ = make_with_inputs("pidc_qp", model)
    states = [(robots.standing_configuration(model, robot), np.zeros(model.nv), np.zeros(model.nv))]
    states += [random_state(model, rng, scale_v=0.2, scale_a=0.5) for _ in range(3)]
    checked = 0
    for q, v, a in states:
        result = f.solve(q, v, a, model.contact_frames)
        if not result.ok:  # a random pose may admit no force inside the pyramids
            continue
        checked += 1
        check_friction(f, result)
        normals = np.einsum("ij,ij->i", result.forces, f.contacts.basis[:, 2])
        assert (normals >= -1e-6 * max(1.0, np.abs(normals).max())).all()
        assert (np.abs(result.tau) <= model.tau_max * (1 + 1e-6) + 1e-6).all()
        assert f.dynamics_residual(result) <= RESIDUAL_TOL
    assert checked >= 1  # at least the standing pose


@pytest.mark.parametrize("limit", [40.0, 35.0, 25.0])
def test_pidc_qp_binding_torque_limits_trade_off_the_force(limit):
    """Eq. 24: with effort limits below the demand |τ| ≤ τ_max and the force gives way."""
    model = robots.load("anymal_c")
    model.set_effort_limits(limit)
    f = formulations.make("pidc_qp", model, force_contacts=("LF_FOOT",))
    desired = np.array([0.0, 0.0, 160.0])
    f.set_desired_forces({"LF_FOOT": desired})
    result = f.solve(robots.standing_configuration(model, "anymal_c"), np.zeros(model.nv), np.zeros(model.nv),
                     model.contact_frames)
    assert result.ok and f.n_active_inequalities > 0
    assert np.abs(result.tau).max() == pytest.approx(limit, rel=1e-6)
    assert (np.abs(result.tau) <= limit * (1 + 1e-6)).all()
    check_friction(f, result)
    assert f.dynamics_residual(result) <= RESIDUAL_TOL
    assert np.linalg.norm(result.forces[0] - desired) > 1.0  # traded off, as §IV says


# ---------------------------------------------------------------------------- seed 004 §IV
def sine_profile(n=30):
    """F = (30 sin 0.2t, 20 sin t, 140 − 50 sin 2t) [N] for t over [0, 2π] [s]."""
    t = np.linspace(0.0, 2 * np.pi, n)
    return np.stack([30 * np.sin(0.2 * t), 20 * np.sin(t), 140 - 50 * np.sin(2 * t)], axis=1)


def step_profile(ticks_per_level=4):
    """F_z: 100 → 130 → 160 → 130 → 100 N, tangential zero."""
    fz = np.repeat([100.0, 130.0, 160.0, 130.0, 100.0], ticks_per_level)
    return np.stack([np.zeros_like(fz), np.zeros_like(fz), fz], axis=1)


@lru_cache(maxsize=None)
def anymal_force_tracking(name, profile, **options):
    """Relative LF_FOOT force errors, binding-inequality counts and results per tick."""
    model = robots.load("anymal_c")
    q = robots.standing_configuration(model, "anymal_c")
    zero = np.zeros(model.nv)
    f = formulations.make(name, model, force_contacts=("LF_FOOT",), **options)
    errors, active, results = [], [], []
    for desired in (sine_profile() if profile == "sine" else step_profile()):
        f.set_desired_forces({"LF_FOOT": desired})
        r = f.solve(q, zero, zero, model.contact_frames)
        assert r.ok and f.dynamics_residual(r) <= RESIDUAL_TOL
        assert r.contact_frames[0] == "LF_FOOT"
        if f.respects_friction:
            check_friction(f, r)
        errors.append(np.linalg.norm(r.forces[0] - desired) / np.linalg.norm(desired))
        active.append(getattr(f, "n_active_inequalities", 0))
        results.append(r)
    return np.array(errors), np.array(active), results


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("profile", ["sine", "step"])
def test_pidc_qp_tracks_the_interaction_force_exactly(profile, fast_path):
    """ANYmal C on three feet, LF_FOOT pressing with the paper's profiles (seed 004 §IV)."""
    errors, active, results = anymal_force_tracking("pidc_qp", profile, fast_path=fast_path)
    free = active == 0
    assert free.sum() >= len(errors) // 4
    assert errors[free].max() <= EXACT_TOL
    # a friction facet of a support foot may bind: the internal forces of the support
    # legs absorb it, the pressing force stays on target within the QP accuracy
    assert errors.max() <= 10 * EXACT_TOL
    # the base does not move: q̈_des = 0 is met exactly in the motion space
    assert max(np.abs(r.qdd[:6]).max() for r in results) <= 1e-6


@pytest.mark.parametrize("profile", ["sine", "step"])
@pytest.mark.parametrize("name", ["pidc_qp_howsm", "pidcwcu"])
def test_baselines_deviate_from_the_desired_force(name, profile):
    """Without the B_m/B_f split the pressing force is a compromise (seed 004 §IV)."""
    errors, _, results = anymal_force_tracking(name, profile)
    exact, _, _ = anymal_force_tracking("pidc_qp", profile)
    assert errors.max() >= 0.1 and np.median(errors) >= 0.05
    assert errors.mean() >= 1e4 * exact.mean()
    assert max(np.abs(r.qdd[:6]).max() for r in results) <= 1e-6  # motion is kept


def test_howsm_reduces_to_eq14_when_no_inequality_is_active():
    """Both pick the realizable constraint torque nearest to τ_c,d (least squares)."""
    _, active, howsm = anymal_force_tracking("pidc_qp_howsm", "step")
    _, _, wcu = anymal_force_tracking("pidcwcu", "step")
    for a, r1, r2 in zip(active, howsm, wcu):
        if a == 0:
            np.testing.assert_allclose(r1.forces, r2.forces, rtol=0, atol=1e-6 * np.abs(r2.forces).max())


def test_pidc_qp_warm_start_needs_fewer_iterations():
    """Slowly varying stance and force: warm-started ProxQP iterates less than cold starts."""
    model = robots.load("anymal_c")
    q0, zero = robots.standing_configuration(model, "anymal_c"), np.zeros(model.nv)
    totals = {}
    for warm in (True, False):
        f = formulations.make("pidc_qp", model, force_contacts=("LF_FOOT",), fast_path=False,
                              warm_start=warm)
        total = 0
        for i in range(100):
            q, v = q0.copy(), np.zeros(model.nv)
            phase = 2 * np.pi * i * 1e-3 + np.arange(model.na)
            q[model.joint_q_index] += 0.01 * np.sin(phase)
            v[6:] = 0.02 * np.pi * np.cos(phase)
            f.set_desired_forces({"LF_FOOT": [0.0, 20.0 * np.sin(0.05 * i), 140.0 - 50.0 * np.sin(0.1 * i)]})
            result = f.solve(q, v, zero, model.contact_frames)
            assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
            total += result.iterations
        totals[warm] = total
    assert totals[True] < totals[False], totals


def test_pidc_qp_keeps_its_warm_start_across_contact_switches():
    model = robots.load("anymal_c")
    f = formulations.make("pidc_qp", model, force_contacts=("LF_FOOT",))
    f.set_desired_forces({"LF_FOOT": [0.0, 0.0, 120.0]})
    q, zero = robots.standing_configuration(model, "anymal_c"), np.zeros(model.nv)
    sizes = (f.qp_motion.n, f.qp_force.n, f.qp_force.n_in)
    for active in (model.contact_frames, model.contact_frames[1:], model.contact_frames):
        r = f.solve(q, zero, zero, active)
        assert f.dynamics_residual(r) <= RESIDUAL_TOL
    assert (f.qp_motion.n, f.qp_force.n, f.qp_force.n_in) == sizes
    assert np.linalg.norm(r.forces[0] - [0.0, 0.0, 120.0]) <= 1e-6 * 120.0


# ---------------------------------------------------------------------------- sensed
LAYOUTS = {
    "full": None,
    "RH normal only": {"LF_FOOT": "all", "RF_FOOT": "all", "LH_FOOT": "all", "RH_FOOT": "n"},
    "RH unmeasured": {"LF_FOOT": "t1 t2 n", "RF_FOOT": ("t1", "t2", "n"), "LH_FOOT": "all"},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("delay", [1, 2])
@pytest.mark.parametrize("reference", ["contact_lstsq", "projected"])
def test_sensed_reproduces_torques_from_exact_forces(reference, delay, layout, rng):
    """Forces of a known solution in, the same τ (and the missing components) out."""
    model = robots.load("anymal_c")
    ref = formulations.make(reference, model)
    states = [(robots.standing_configuration(model, "anymal_c"), np.zeros(model.nv), np.zeros(model.nv))]
    states += [random_state(model, rng) for _ in range(2)]
    for q, v, a in states:
        f = formulations.make("sensed", model, delay_ticks=delay, measured_components=LAYOUTS[layout])
        known = ref.solve(q, v, a, model.contact_frames)
        for _ in range(3):  # the same forces every tick: any delay sees them
            f.set_measured_forces(known.forces)
            result = f.solve(q, v, known.qdd, model.contact_frames)
            assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
            scale = max(1.0, np.abs(known.tau).max())
            np.testing.assert_allclose(result.tau, known.tau, atol=1e-8 * scale)
            np.testing.assert_allclose(result.qdd, known.qdd, atol=1e-8 * max(1.0, np.abs(known.qdd).max()))
            np.testing.assert_allclose(result.forces, known.forces,
                                       atol=1e-8 * max(1.0, np.abs(known.forces).max()))
        assert f.refactorizations == 0  # the offline permutations served every tick


@pytest.mark.parametrize("delay", [1, 2])
def test_sensed_uses_forces_delay_ticks_old(delay, load_robot):
    model = load_robot("solo12")
    f = formulations.make("sensed", model, delay_ticks=delay)
    q, zero = robots.standing_configuration(model, "solo12"), np.zeros(model.nv)
    result = f.solve(q, zero, zero, model.contact_frames)
    assert result.status == "failed"  # nothing measured yet
    used = []
    for tick in range(1, 5):
        f.set_measured_forces(np.full((4, 3), float(tick)))
        result = f.solve(q, zero, zero, model.contact_frames)
        assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
        used.append(result.forces[0, 0])
    assert used == ([1.0, 2.0, 3.0, 4.0] if delay == 1 else [1.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("delay", [1, 2])
def test_sensed_older_measurement_keeps_the_force_of_a_foot_dropped_since(delay, load_robot, rng):
    """A foot measured carrying load, then no longer passed as active (lifted, or swung by
    the gait): ID(t_{i−2}) still applies the force its two-tick-old measurement has there
    (the measurement's forces balanced the robot together) and lists that contact; ID(t_{i−1})
    uses the caller's set, its measurement being of the caller's own period."""
    model = load_robot("solo12")
    f = formulations.make("sensed", model, delay_ticks=delay)
    q, zero = robots.standing_configuration(model, "solo12"), np.zeros(model.nv)
    frames = model.contact_frames
    loaded = np.zeros((4, 3))
    loaded[:, 2] = weight(model) / 4.0
    loaded[:, :2] = rng.uniform(-0.5, 0.5, (4, 2))
    lifted = loaded.copy()
    lifted[0] = 0.0  # the next measurement: the first foot has left the ground
    f.set_measured_forces(loaded)
    f.solve(q, zero, zero, frames)
    f.set_measured_forces(lifted)
    result = f.solve(q, zero, zero, frames[1:])  # the caller drops the first foot
    assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
    if delay == 1:
        assert result.contact_frames == frames[1:]
        np.testing.assert_array_equal(result.forces, lifted[1:])
    else:
        assert set(result.contact_frames) == set(frames)
        got = dict(zip(result.contact_frames, result.forces))
        np.testing.assert_array_equal(got[frames[0]], loaded[0])
        # the same τ as a solve told that all four feet touch
        full = formulations.make("sensed", model, delay_ticks=1)
        full.set_measured_forces(loaded)
        np.testing.assert_allclose(result.tau, full.solve(q, zero, zero, frames).tau, atol=1e-10)
    # the next solve starts again from the caller's set
    f.set_measured_forces(lifted)
    result = f.solve(q, zero, zero, frames[1:])
    assert result.contact_frames == frames[1:] and f.dynamics_residual(result) <= RESIDUAL_TOL


def test_sensed_rejects_tangential_forces_of_two_feet_on_flat_ground():
    """Seed 002 Property 3 on a quadruped: internal tangential force between two feet."""
    model = robots.load("anymal_c")
    layout = {"LF_FOOT": "n", "RF_FOOT": "n", "LH_FOOT": "all", "RH_FOOT": "all"}
    with pytest.raises(IllPosedLayoutError) as err:
        formulations.make("sensed", model, measured_components=layout)
    message = str(err.value)
    assert "LF_FOOT: n measured, t1 t2 unknown" in message and "RH_FOOT: t1 t2 n measured" in message
    assert "only 3 of the 4 unknown" in message
    # assuming slippery ground removes the unknowns
    f = formulations.make("sensed", model, measured_components=layout, slippery_ground=True)
    assert "t1 t2 assumed zero" in f.describe_layout()


def test_sensed_partial_layouts_keep_the_dynamics_with_any_data(rng):
    """Measurements inconsistent with q̈_des: the base acceleration gives way (0 < n_u < 6)."""
    model = robots.load("anymal_c")
    for layout in ("RH normal only", "RH unmeasured"):
        f = formulations.make("sensed", model, measured_components=LAYOUTS[layout])
        for _ in range(3):
            q, v, a = random_state(model, rng)
            f.set_measured_forces(rng.normal(0.0, 50.0, (4, 3)))
            result = f.solve(q, v, a, model.contact_frames)
            assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL
            np.testing.assert_array_equal(result.qdd[6:], a[6:])  # joints as commanded
        assert f.refactorizations == 0


def test_sensed_reports_a_pose_where_the_layout_is_singular():
    """Unknown t2 (world x) at LF and RF: fine upright, singular with the base yawed 90°."""
    model = robots.load("anymal_c")
    layout = {"LF_FOOT": "t1 n", "RF_FOOT": "t1 n", "LH_FOOT": "all", "RH_FOOT": "all"}
    f = formulations.make("sensed", model, measured_components=layout)
    reference = formulations.make("contact_lstsq", model)
    upright, zero = robots.standing_configuration(model, "anymal_c"), np.zeros(model.nv)
    yawed = upright.copy()
    yawed[3:7] = pin.Quaternion(pin.rpy.rpyToMatrix(0.0, 0.0, np.pi / 2)).coeffs()
    for q, determined in ((upright, True), (yawed, False)):
        known = reference.solve(q, zero, zero, model.contact_frames)
        f.set_measured_forces(known.forces)
        result = f.solve(q, zero, known.qdd, model.contact_frames)
        assert f.dynamics_residual(result) <= RESIDUAL_TOL  # even the fallback keeps them
        assert result.ok == determined
        if determined:
            np.testing.assert_allclose(result.tau, known.tau, atol=1e-8 * np.abs(known.tau).max())


def talos_with_load_cells():
    """Talos with a 3-D point contact at each corner of both soles (four load cells a foot)."""
    path = robots.example_robot_data_dir() / "robots/talos_data/robots/talos_reduced.urdf"
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    corners = []
    for side in ("left", "right"):
        sole = pm.frames[pm.getFrameId(f"{side}_sole_link")]
        for label, dx, dy in (("fl", 0.1, 0.065), ("fr", 0.1, -0.065),
                              ("hl", -0.1, 0.065), ("hr", -0.1, -0.065)):
            offset = pin.SE3(np.eye(3), np.array([dx, dy, 0.0]))
            pm.addFrame(pin.Frame(f"{side}_sole_{label}", sole.parentJoint, sole.placement * offset,
                                  pin.FrameType.OP_FRAME))
            corners.append(f"{side}_sole_{label}")
    return RobotModel(pm, contacts=[ContactConfig(c) for c in corners]), tuple(corners)


def test_humanoid_with_four_load_cells_per_foot_is_ill_posed_unless_slippery():
    """Seed 002 §VI, Remark 5: ill-posed; with zero tangential forces it becomes solvable."""
    model, corners = talos_with_load_cells()
    load_cells = {c: "n" for c in corners}
    with pytest.raises(IllPosedLayoutError) as err:
        formulations.make("sensed", model, measured_components=load_cells)
    message = str(err.value)
    assert err.value.layout in message and "left_sole_fl: n measured, t1 t2 unknown" in message
    assert "16 force components" in message
    # the unknowns act on the robot through 6 dimensions, the base rows see 3 of them
    assert "span 6 dimensions, the base rows see 3" in message and "torques are not determined" in message

    slippery = formulations.make("sensed", model, measured_components=load_cells, slippery_ground=True)
    full = formulations.make("sensed", model)
    q, zero = model.neutral(), np.zeros(model.nv)
    rng = np.random.default_rng(7)
    forces = np.zeros((len(corners), 3))
    forces[:, 2] = weight(model) / len(corners) * rng.uniform(0.5, 1.5, len(corners))
    noise = forces + np.c_[rng.normal(0, 5, (len(corners), 2)), np.zeros(len(corners))]
    truth = (full.set_measured_forces(forces), full.solve(q, zero, zero, corners))[1]
    slippery.set_measured_forces(noise)  # tangential readings are ignored: only normals measured
    result = slippery.solve(q, zero, zero, corners)
    assert result.ok and slippery.dynamics_residual(result) <= RESIDUAL_TOL
    np.testing.assert_allclose(result.tau, truth.tau, atol=1e-9 * np.abs(truth.tau).max())
    np.testing.assert_allclose(result.qdd, truth.qdd, atol=1e-9)
    np.testing.assert_allclose(result.forces, forces, atol=1e-9)
    # a new set of touching contacts is a new layout: checked and ordered once, then solved
    left = corners[:4]
    result = slippery.solve(q, zero, zero, left)
    assert result.ok and slippery.dynamics_residual(result) <= RESIDUAL_TOL
    assert slippery.refactorizations == 0


# ---------------------------------------------------------------------------- bad input
def test_sensed_bad_inputs_name_the_value(load_robot):
    model = load_robot("solo12")
    f = formulations.make("sensed", model)
    with pytest.raises(ShapeError, match=r"measured forces has shape \(3,\)"):
        f.set_measured_forces(np.zeros(3))
    with pytest.raises(UnknownNameError, match="NOSE"):
        f.set_measured_forces({"NOSE": [0.0, 0.0, 1.0]})
    with pytest.raises(ShapeError, match="measured force of 'FL_FOOT'"):
        f.set_measured_forces({"FL_FOOT": [0.0, 1.0]})
    with pytest.raises(NonFiniteError, match="indices \\[5\\]"):
        f.set_measured_forces(np.r_[np.zeros(5), np.nan, np.zeros(6)])
    with pytest.raises(ConfigError, match="delay_ticks=3"):
        formulations.make("sensed", model, delay_ticks=3)
    with pytest.raises(ConfigError, match="'t3'"):
        formulations.make("sensed", model, measured_components={"FL_FOOT": "t3"})
    with pytest.raises(UnknownNameError, match="HAND"):
        formulations.make("sensed", model, measured_components={"HAND": "n"})
    # an ill-posed layout set at run time is refused and the previous one kept
    with pytest.raises(IllPosedLayoutError):
        f.set_option("measured_components", {c: "n" for c in model.contact_frames})
    assert f.options["measured_components"] is None
    f.set_measured_forces(np.zeros((4, 3)))
    q, zero = robots.standing_configuration(model, "solo12"), np.zeros(model.nv)
    assert f.solve(q, zero, zero, model.contact_frames).ok


@pytest.mark.parametrize("name", PIDC)
def test_pidc_bad_inputs_name_the_value(name, load_robot):
    model = load_robot("solo12")
    with pytest.raises(UnknownNameError, match="LEFT_HAND"):
        formulations.make(name, model, force_contacts=("LEFT_HAND",))
    f = formulations.make(name, model, force_contacts=("FL_FOOT",))
    with pytest.raises(UnknownNameError, match="force contact 'HR_FOOT'; valid: FL_FOOT"):
        f.set_desired_forces({"HR_FOOT": [0.0, 0.0, 1.0]})
    with pytest.raises(ShapeError, match=r"desired force of 'FL_FOOT' has shape \(2,\)"):
        f.set_desired_forces({"FL_FOOT": [0.0, 1.0]})
    with pytest.raises(NonFiniteError, match="desired force of 'FL_FOOT'"):
        f.set_desired_forces({"FL_FOOT": [0.0, np.inf, 1.0]})
    q, zero = robots.standing_configuration(model, "solo12"), np.zeros(model.nv)
    with pytest.raises(ShapeError, match="qdd_des"):
        f.solve(q, zero, zero[:3], model.contact_frames)
    result = f.solve(q, zero, zero, model.contact_frames)  # still works afterwards
    assert result.ok and f.dynamics_residual(result) <= RESIDUAL_TOL


@pytest.mark.parametrize("name", PIDC)
def test_pidc_desired_forces_as_an_array_set_the_force_contacts_rows_only(name, load_robot):
    """(k, 3) in configured-contact order (what the node hands over every tick, through
    Controller.set_desired_forces): the force contacts' rows are taken, the others not read;
    a wrong shape or NaN is refused and the previous value kept."""
    from idyn_control.controller import Controller, ControllerConfig

    model = load_robot("solo12")
    ctrl = Controller(model, ControllerConfig(formulation=name, formulation_options={"force_contacts": ("FL_FOOT",)}))
    f = ctrl.formulation
    forces = np.arange(12.0).reshape(4, 3)
    assert ctrl.set_desired_forces(forces)
    expected = np.zeros((4, 3))
    expected[model.contact_index("FL_FOOT")] = forces[model.contact_index("FL_FOOT")]
    np.testing.assert_array_equal(f.lambda_des, expected)
    with pytest.raises(ShapeError, match=r"desired forces has shape \(3, 3\)"):
        ctrl.set_desired_forces(np.zeros((3, 3)))
    bad = np.zeros((4, 3))
    bad[model.contact_index("FL_FOOT"), 1] = np.nan
    with pytest.raises(NonFiniteError):
        ctrl.set_desired_forces(bad)
    np.testing.assert_array_equal(f.lambda_des, expected)
    assert not Controller(model, ControllerConfig(formulation="wbc_qp")).set_desired_forces(forces)
