"""Flat feet: contact surfaces (sole polygons as corner points) and a humanoid standing.

Unitree G1 from example-robot-data (config/g1.yaml): each sole touches the ground at the
four corners of its polygon, the URDF's collision spheres. The model's corner frames must
sit where the simulator's spheres are; in closed loop (lock-step MuJoCo) the robot stands
on both soles with every corner loaded, the predicted forces match the measured ones and
satisfy the dynamics, and it shifts its weight and squats without falling.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from conftest import native_or_skip, write_params_file
from idyn_control import formulations, robots
from idyn_control.errors import ConfigError, UnknownNameError
from idyn_control.model import ContactSurface
from idyn_control.sim.lockstep import LockstepRunner, Scenario, run_scenario
from idyn_control.sim.mujoco_model import build_mujoco

#: the corners of G1's sole in the ankle-roll link frame (its URDF collision spheres) [m]
G1_CORNERS = ((-0.05, 0.025, -0.03), (-0.05, -0.025, -0.03), (0.12, 0.03, -0.03), (0.12, -0.03, -0.03))


def assert_shifts_and_squats(tr) -> None:
    """The balance task's motion: the base over each foot in turn (≥ 3 cm either side of
    where it stood at 0.9 s) and down by the squat (≥ 5 cm)."""
    y0, z0 = tr.q[int(0.9 / 1e-3), 1], tr.q[int(0.9 / 1e-3), 2]
    assert tr.q[:, 1].max() - y0 > 0.03 and y0 - tr.q[:, 1].min() > 0.03
    assert z0 - tr.q[:, 2].min() > 0.05


def relative_error(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max()) / max(1.0, float(np.abs(b).max()))


@pytest.fixture(scope="module")
def g1():
    return robots.load("g1")


def test_surface_corners_are_frames_on_the_link_where_the_simulator_puts_its_spheres(g1):
    assert len(g1.contacts) == 8 and g1.floating_base
    pm = g1.pin_model
    q = robots.standing_configuration(g1, "g1", foot_height=0.005)
    data = pm.createData()
    pin.framesForwardKinematics(pm, data, q)
    for side in ("left", "right"):
        link = data.oMf[pm.getFrameId(f"{side}_ankle_roll_link")]
        for i, corner in enumerate(G1_CORNERS):
            frame = data.oMf[pm.getFrameId(f"{side}_ankle_roll_link_corner_{i}")]
            np.testing.assert_allclose(frame.translation, link.act(np.array(corner)), atol=1e-12)
    sim = build_mujoco(g1, friction=0.8)
    assert [c.radius for c in sim.contacts] == [0.005] * 8  # the URDF's spheres at those corners
    sim.set_state(q, np.zeros(g1.nv))
    sites = np.array([sim.data.site_xpos[c.site_id] for c in sim.contacts])
    np.testing.assert_allclose(sites, [data.oMf[f].translation for f in g1.contact_frame_ids], atol=1e-9)
    np.testing.assert_allclose(sites[:, 2], 0.005, atol=1e-9)  # standing: every sphere touches


def test_surface_configuration_errors_name_the_value():
    with pytest.raises(ConfigError, match="3 numbers"):
        ContactSurface.from_flat(["left_ankle_roll_link"], [0.1, 0.2])
    with pytest.raises(UnknownNameError, match="no_such_link"):
        ContactSurface("no_such_link", G1_CORNERS).add_frames(pin.Model())


@pytest.mark.parametrize("name", ["qp_coulomb", "lcp_coulomb", "contact_lstsq"])
def test_standing_sole_forces_satisfy_the_dynamics_inside_the_pyramids(g1, name):
    q = robots.standing_configuration(g1, "g1")
    f = formulations.make(name, g1, dt=1e-3)
    r = f.solve(q, np.zeros(g1.nv), np.zeros(g1.nv), g1.contact_frames)
    assert r.ok
    weight = 9.81 * pin.computeTotalMass(g1.pin_model)
    assert r.forces[:, 2].sum() == pytest.approx(weight, rel=1e-6)
    data = g1.pin_model.createData()
    M = pin.crba(g1.pin_model, data, q)
    h = pin.rnea(g1.pin_model, data, q, np.zeros(g1.nv), np.zeros(g1.nv))
    pin.computeJointJacobians(g1.pin_model, data, q)
    pin.updateFramePlacements(g1.pin_model, data)
    Jt_f = sum(pin.getFrameJacobian(g1.pin_model, data, fid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)[:3].T @ fr
               for fid, fr in zip(g1.contact_frame_ids, r.forces))
    rhs = np.concatenate((np.zeros(6), r.tau)) + Jt_f
    assert np.linalg.norm(M @ r.qdd + h - rhs) <= 1e-6 * np.linalg.norm(h)
    if f.respects_friction:
        assert np.all(r.forces[:, 2] >= -1e-9)
        assert np.all(np.abs(r.forces[:, :2]).sum(axis=1) <= 0.8 * r.forces[:, 2] + 1e-6)


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
def test_g1_stands_5_s_on_both_soles_with_every_corner_loaded(formulation):
    run = run_scenario(Scenario(robot="g1", formulation=formulation, gait=False, duration=5.0, friction=0.8))
    m, tr = run.metrics, run.trace
    assert not m["fell"] and tr.fallback.sum() == 0
    settled = tr.t >= 0.1
    fz = tr.f_meas[settled, :, 2]
    for sole in (fz[:, :4], fz[:, 4:]):  # each corner carries ≥ 10 % of its sole's load: the CoP is inside
        assert np.all(sole.min(axis=1) >= 0.1 * sole.mean(axis=1))
    assert m["force_error_sum_rel"] < 0.01
    assert np.ptp(tr.q[settled, 2]) < 0.005  # the pelvis holds its height


def test_g1_shifts_its_weight_and_squats_without_falling():
    runner = LockstepRunner(Scenario(robot="g1", formulation="qp_coulomb", gait=False, duration=8.0,
                                     friction=0.8, task="balance"))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"] and tr.fallback.sum() == 0
    assert m["balance_phase_s"]["shift"] == pytest.approx(4.0, abs=0.01)
    assert_shifts_and_squats(tr)
    fz = tr.f_meas[tr.t >= 0.1, :, 2]
    for sole in (fz[:, :4], fz[:, 4:]):  # both soles keep weight, every corner down: CoP inside
        assert sole.sum(axis=1).min() > 0.1 * fz.sum(axis=1).mean()
        assert np.all(sole.min(axis=1) >= 0.01 * sole.sum(axis=1))
    assert m["force_error_sum_rel"] < 0.02
    assert runner.controller.formulation.options["cop_margin"] == 0.2  # g1.yaml's default


@pytest.mark.parametrize("backend", ["native", "python"])
def test_g1_wbc_qp_holds_each_sole_as_one_rigid_body(backend):
    """wbc_qp with a sole's four corners held: one rigid-body constraint per sole (its first
    corner's three rows and the sole's angular acceleration, ContactSet.held_rows), not
    twelve point rows that no q̈ meets once the foot turns a little. The robot shifts its
    weight and squats with consistent rows (never elastic), every corner loaded, and the
    predicted forces are the simulator's."""
    if backend == "native":
        native_or_skip()
    runner = LockstepRunner(Scenario(robot="g1", formulation="wbc_qp", formulation_options={"backend": backend},
                                     gait=False, duration=6.0, friction=0.8, task="balance"))
    run = runner.run()
    m, tr, f = run.metrics, run.trace, runner.controller.formulation
    assert f.backend == backend
    assert not m["fell"] and tr.fallback.sum() == 0
    assert f.relaxations() == {"torque_limits_dropped": 0}  # no elastic contact rows
    assert [n for _, _, n, _ in f.contacts.held_rows(np.ones(8, bool))] == [3, 3]  # both soles, planar corners
    fz = tr.f_meas[tr.t >= 0.1, :, 2]
    for sole in (fz[:, :4], fz[:, 4:]):
        assert np.all(sole.min(axis=1) >= 0.05 * sole.sum(axis=1))
    assert m["force_error_sum_rel"] < 0.005


def _shifted_standing_state(g1):
    """G1 standing with its pelvis 4 cm toward the left foot, the soles where they were
    (both down; joints from the gait's inverse kinematics)."""
    from idyn_control.gait import moved_base_configuration

    return moved_base_configuration(g1, robots.standing_configuration(g1, "g1"), (0.0, 0.04, 0.0), ik_iterations=20)


@pytest.mark.parametrize("backend", ["native", "python"])
@pytest.mark.parametrize("margin", [0.0, 0.2, 0.5])
def test_cop_margin_keeps_every_corner_of_a_sole_loaded(g1, margin, backend):
    if backend == "native":
        native_or_skip()
    q = _shifted_standing_state(g1)
    f = formulations.make("qp_coulomb", g1, dt=1e-3, cop_margin=margin, backend=backend)
    assert f.backend == backend
    r = f.solve(q, np.zeros(g1.nv), np.zeros(g1.nv), g1.contact_frames)
    assert r.ok and f.stage2_failures == 0
    weight = 9.81 * pin.computeTotalMass(g1.pin_model)
    assert r.forces[:, 2].sum() == pytest.approx(weight, rel=1e-6)  # the margin changes no base wrench
    for sole in (r.forces[:4, 2], r.forces[4:, 2]):
        if margin:
            assert sole.min() >= margin * sole.mean() - 1e-6 * weight
    if not margin:  # minimum torques alone leave corners unloaded here
        assert r.forces[:, 2].min() < 0.01 * weight


def _sole_wrenches(g1, q, forces):
    """Each sole's wrench about its link's origin [N, N·m] (world frame): what the corner
    forces do to the robot; their split among the corners is the internal force."""
    data = g1.pin_model.createData()
    pin.framesForwardKinematics(g1.pin_model, data, q)
    out = []
    for corners in (range(4), range(4, 8)):
        origin = data.oMi[g1.pin_model.frames[g1.contact_frame_ids[corners[0]]].parentJoint].translation
        w = np.zeros(6)
        for i in corners:
            w[:3] += forces[i]
            w[3:] += np.cross(data.oMf[g1.contact_frame_ids[i]].translation - origin, forces[i])
        out.append(w)
    return np.concatenate(out)


def test_cop_margin_compiled_matches_python(g1):
    """Stage II's centre-of-pressure rows compiled (solvers.cpp Qpc::fill_cop_rows) and in
    Python, on the same ticks: G1 shifted over its left foot and moving, a sole's corner
    lifted and put down again (contact switches rebuild the rows). Same status, fast-path
    and Stage II failure counts; the same torques, accelerations and sole wrenches (≤ 1e-3
    on every tick, ≤ 1e-6 on most: where Stage II fails both answer with Stage I's forces,
    whose optimum is flat); every tick whose Stage II solved keeps each held corner at ≥ the
    margin of its sole's mean load, on both sides. How a sole's wrench splits among its
    corners is only regularized (neither torques nor base see a foot's internal forces), so
    the corner forces are not compared."""
    native_or_skip()
    margin = 0.2
    fast = formulations.make("qp_coulomb", g1, dt=1e-3, cop_margin=margin, backend="native")
    ref = formulations.make("qp_coulomb", g1, dt=1e-3, cop_margin=margin, backend="python")
    assert (fast.backend, ref.backend) == ("native", "python")
    rng = np.random.default_rng(3)
    q0 = _shifted_standing_state(g1)
    frames = g1.contact_frames
    weight = 9.81 * pin.computeTotalMass(g1.pin_model)
    errors, switches, prev, margin_checked = [], 0, None, 0
    for i in range(60):
        q, v = q0.copy(), np.zeros(g1.nv)
        phase = 2 * np.pi * i * 1e-2 + np.arange(g1.na)
        q[g1.joint_q_index] += 0.01 * np.sin(phase)
        v[g1.n_base:] = 0.05 * np.cos(phase)
        a = rng.normal(0.0, 0.5, g1.nv)
        active = frames if i < 20 or i >= 40 else frames[:3] + frames[4:]  # the left sole's last corner lifted
        switches += prev is not None and active != prev
        prev = active
        failures = fast.stage2_failures
        r_fast, r_ref = fast.solve(q, v, a, active), ref.solve(q, v, a, active)
        assert r_fast.status == r_ref.status == "solved", (i, r_fast.status, r_ref.status)
        assert r_fast.contact_frames == r_ref.contact_frames
        assert (fast.fast_path_ticks, fast.stage2_failures) == (ref.fast_path_ticks, ref.stage2_failures), i
        corner_forces = []
        for r in (r_fast, r_ref):
            f_all = np.zeros((8, 3))
            f_all[[frames.index(c) for c in r.contact_frames]] = r.forces
            corner_forces.append(f_all)
            if fast.stage2_failures > failures:  # Stage I's forces: no margin asked of them
                continue
            margin_checked += 1
            for sole in (range(4), range(4, 8)):
                fz = f_all[[j for j in sole if frames[j] in active], 2]
                assert fz.min() >= margin * fz.mean() - 1e-6 * weight, (i, fz)
        errors.append(max(relative_error(r_fast.tau, r_ref.tau), relative_error(r_fast.qdd, r_ref.qdd),
                          relative_error(*(_sole_wrenches(g1, q, f) for f in corner_forces))))
        assert fast.dynamics_residual(r_fast) <= 1e-6
    assert switches == 2 and margin_checked >= 100
    errors = np.asarray(errors)
    assert errors.max() <= 1e-3 and np.mean(errors <= 1e-6) >= 0.9, errors


def test_cop_margin_must_be_below_one(g1):
    with pytest.raises(ConfigError, match="cop_margin"):
        formulations.make("qp_coulomb", g1, dt=1e-3, cop_margin=1.0)


def test_g1_qp_coulomb_balances_compiled_with_every_corner_loaded(g1):
    """G1's default qp_coulomb (cop_margin 0.2 from g1.yaml) in the compiled tick, as the
    node's compiled loop and ``demo --no-ros`` run it: the weight shift and the squat with
    every tick compiled, and on every tick every corner of both soles predicted at ≥ the
    margin of its sole's mean load and measured pushing (each sole's centre of pressure
    inside it)."""
    native_or_skip()
    runner = LockstepRunner(Scenario(robot="g1", formulation="qp_coulomb", gait=False, duration=8.0,
                                     friction=0.8, task="balance", compiled=True))
    run = runner.run()
    m, tr, f = run.metrics, run.trace, runner.controller.formulation
    assert f.backend == "native" and f.options["cop_margin"] == 0.2
    assert not m["fell"] and tr.fallback.sum() == 0
    assert m["compiled_tick_fraction"] >= 0.999, m["compiled_tick_fraction"]  # all but the first
    assert f.stage2_failures == 0
    weight = 9.81 * pin.computeTotalMass(g1.pin_model)
    pred, meas = tr.f_pred[1:, :, 2], tr.f_meas[tr.t >= 0.1, :, 2]
    for sole in (slice(0, 4), slice(4, 8)):
        assert np.all(pred[:, sole].min(axis=1) >= 0.2 * pred[:, sole].mean(axis=1) - 1e-6 * weight)
        assert np.all(meas[:, sole].min(axis=1) >= 0.01 * meas[:, sole].sum(axis=1))
    assert m["balance_phase_s"]["shift"] == pytest.approx(4.0, abs=0.01)
    assert_shifts_and_squats(tr)
    assert m["force_error_sum_rel"] < 0.02


def test_lift_swings_a_crept_foot_from_where_it_is_back_onto_its_foothold(g1):
    """Gait.lift: a planted foot creeps (G1's soles, 10 s of qp_coulomb standing: 2-4.7 mm
    inward), so the swing starts where the foot is, not at its foothold, and lands on the
    foothold. Started at the foothold, the foot's PD asked the swing leg for a sideways
    kick at lift-off (4.7 mm: ~4 m/s²) and G1 rolled over its stance sole."""
    from idyn_control.controller import Controller, ControllerConfig
    from idyn_control.gait import Gait

    q0 = robots.standing_configuration(g1, "g1", foot_height=0.005)
    gait = Gait(Controller(g1, ControllerConfig(formulation="rnea")), q0)
    v, down = np.zeros(g1.nv), np.ones(8, bool)
    gait.reset(0.0, q0, v)
    footholds = gait.foot_position_ref.copy()
    crept = q0.copy()
    crept[1] -= 0.004  # the whole robot 4 mm to the right: its feet off their footholds
    gait.update(1e-3, crept, v, down)
    pm, data = g1.pin_model, g1.pin_model.createData()
    pin.framesForwardKinematics(pm, data, crept)
    where = np.array([data.oMf[f].translation for f in g1.contact_frame_ids])
    right = np.arange(4, 8)
    gait.lift(right, 2e-3, 0.6, 0.03)
    gait.update(2e-3, crept, v, down)
    np.testing.assert_allclose(gait.foot_position_ref[right], where[right], atol=1e-12)  # s = 0: where it is
    np.testing.assert_allclose(gait.foot_velocity_ref[right], 0.0, atol=1e-12)
    gait.update(2e-3 + 0.6 * 0.9999, crept, v, ~np.isin(np.arange(8), right))  # the swing's end, in the air
    np.testing.assert_allclose(gait.foot_position_ref[right, :2], footholds[right, :2], atol=1e-6)


@pytest.mark.parametrize("formulation", ["wbc_qp", "qp_coulomb"])
def test_g1_steps_in_place(g1, formulation):
    """Stepping in place on two soles (sim.tasks.StepTask, Gait.lift), quasi-static: the
    centre of mass goes over the left sole, the right sole lifts 3 cm and lands where it
    was, then the same on the other side, and the robot stands between its feet again.
    wbc_qp holds the soles as rigid bodies, never elastic; qp_coulomb (g1.yaml's cop_margin)
    never drops non-penetration. With both: the lifted sole carries nothing and clears the
    ground, the stance sole carries the robot with every corner pushing (its centre of
    pressure inside it), the predicted forces are the simulator's."""
    from idyn_control.sim.tasks import StepConfig

    duration = StepConfig().duration_s + 0.5
    runner = LockstepRunner(Scenario(robot="g1", formulation=formulation, gait=False, task="steps", friction=0.8,
                                     duration=duration, gait_config={"stand_shift_speed": 0.1}))
    run = runner.run()
    m, tr, f = run.metrics, run.trace, runner.controller.formulation
    assert not m["fell"] and tr.fallback.sum() == 0
    relaxed = {"wbc_qp": "torque_limits_dropped", "qp_coulomb": "non_penetration_dropped"}[formulation]
    assert f.relaxations() == {relaxed: 0}  # no elastic contact rows; non-penetration always held
    assert m["steps_lifted"] == 2 and m["force_error_sum_rel"] < 0.01
    lifts = runner.task.lifts
    assert [sorted(feet) for _, feet in lifts] == [[4, 5, 6, 7], [0, 1, 2, 3]]  # right sole first, then left
    pm, data = g1.pin_model, g1.pin_model.createData()

    def corners_z(n):
        pin.framesForwardKinematics(pm, data, tr.q[n])
        return np.array([data.oMf[fid].translation for fid in g1.contact_frame_ids])

    ground = corners_z(0)
    weight = 9.81 * pin.computeTotalMass(pm)
    fz = tr.f_meas[:, :, 2]
    swing_s = runner.task.config.swing_s
    for t_lift, feet in lifts:
        stance = np.setdiff1d(np.arange(8), feet)
        mid = (tr.t >= t_lift + 0.3 * swing_s) & (tr.t <= t_lift + 0.7 * swing_s)
        assert fz[mid][:, feet].sum(axis=1).max() == 0.0  # the lifted sole carries nothing
        apex = max(corners_z(n)[feet, 2].min() - ground[feet, 2].min() for n in np.flatnonzero(mid))
        assert apex > 0.02  # every corner of it clears the ground by 2 cm
        sole = fz[mid][:, stance]  # single support
        assert sole.sum(axis=1).min() > 0.9 * weight  # the stance sole carries the robot
        assert np.all(sole.min(axis=1) >= 0.01 * sole.sum(axis=1))  # every corner pushing: CoP inside
        landed = int(np.searchsorted(tr.t, t_lift + swing_s + 0.3))
        np.testing.assert_allclose(corners_z(landed)[feet], ground[feet], atol=0.01)  # in place, on the ground
    end = fz[-200:]
    for sole in (end[:, :4], end[:, 4:]):  # back between the feet: both soles loaded
        assert sole.sum(axis=1).min() > 0.2 * weight


#: PAL's Talos (90 kg, 32 joints), which the package does not ship, as a user describes it:
#: its soles as 20 × 13 cm rectangles under the ankle links, the half-sitting pose of its SRDF
TALOS = {
    "robot": "talos",
    "urdf_path": "package://example-robot-data/robots/talos_data/robots/talos_reduced.urdf",
    "contacts": {"friction": 0.8, "surfaces": {
        "links": ["leg_left_6_link", "leg_right_6_link"],
        "corners": [-0.1, 0.065, -0.107, -0.1, -0.065, -0.107, 0.1, 0.065, -0.107, 0.1, -0.065, -0.107]}},
    "standing_pose": {
        "joints": [f"leg_{side}_{j}_joint" for side in ("left", "right") for j in (3, 4, 5)]
        + ["arm_left_2_joint", "arm_right_2_joint", "arm_left_4_joint", "arm_right_4_joint"],
        "positions": [-0.411354, 0.859395, -0.448041] * 2 + [0.1, -0.1, -0.5, -0.5]},
    "controller": {"joint_kp": [400.0], "joint_kd": [40.0], "base_kp": 100.0, "base_kd": 20.0, "safe_output": "hold"},
    "formulation_defaults": {"qp_coulomb": {"cop_margin": 0.2}},
}


@pytest.mark.parametrize("formulation", ["wbc_qp", "qp_coulomb"])
def test_a_humanoid_from_a_users_file_stands_shifts_and_squats(formulation, tmp_path):
    """A second humanoid, twice G1's size, from a file written here (no code): Talos stands,
    shifts its weight from foot to foot and squats in the compiled lock-step loop, every
    corner of both soles measured pushing on every tick (each centre of pressure inside its
    sole), the predicted forces the simulator's."""
    path = write_params_file(tmp_path, "talos", TALOS)
    run = run_scenario(Scenario(robot=str(path), formulation=formulation, gait=False, duration=8.0,
                                friction=0.8, task="balance", compiled=True))
    m, tr = run.metrics, run.trace
    assert not m["fell"] and tr.fallback.sum() == 0 and m["compiled_tick_fraction"] >= 0.999
    meas = tr.f_meas[tr.t >= 0.1, :, 2]
    for sole in (slice(0, 4), slice(4, 8)):
        assert np.all(meas[:, sole].min(axis=1) >= 0.03 * meas[:, sole].sum(axis=1))
    assert_shifts_and_squats(tr)
    assert m["force_error_sum_rel"] < 0.01
