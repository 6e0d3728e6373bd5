"""The compiled gait and the compiled controller tick agree with their Python references.

gait.py and Controller.update are the reference. Both are fed the same measured trot of a
lock-step MuJoCo run (contact switches, a turn, a stop) tick by tick, open loop: the
compiled gait must give the same references and state to round-off, and the compiled
tick (gait, contacts held with make/break ramps, kinematic layer, formulation, clamps)
the same torques, accelerations and forces as the Python tick on the same formulation.
CI sets IDYN_REQUIRE_NATIVE=1, so a missing build fails there instead of skipping.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from idyn_control.controller import Controller, ControllerConfig
from idyn_control.gait import Gait
from idyn_control.sim.lockstep import LockstepRunner, Scenario

from conftest import native_or_skip

native_or_skip()
from idyn_control.native.gait import STATE, CompiledGait  # noqa: E402
from idyn_control.native.tick import Tick  # noqa: E402

LEGGED = ("quadruped", "solo12", "go2")  # go2: the vertical swing ends (its gait.vertical_fraction 0.125)
TROT = dict(duration=2.4, velocity=(0.2, 0.05, 0.3), trot_start=0.3, trot_stop=1.5)
REF_ARRAYS = ("q_ref", "v_ref", "a_ref", "base_position_ref", "base_rotation_ref", "base_velocity_ref",
              "base_angular_ref", "foot_position_ref", "foot_velocity_ref", "foot_acceleration_ref", "swing")


@lru_cache(maxsize=None)
def recorded_trot(robot: str):
    """A lock-step trot (Python gait, qp_coulomb): its runner and the measured ticks."""
    runner = LockstepRunner(Scenario(robot=robot, formulation="qp_coulomb", **TROT))
    run = runner.run()
    assert not run.metrics["fell"]
    return runner, run.trace


def twin_gaits(runner, trace):
    """A Python and a compiled gait of ``runner``'s robot and gait configuration, each on a
    controller of its own, reset at the start of ``trace``: (ctrl_py, ctrl_c, g_py, g_c)."""
    ctrl_py, ctrl_c = controller(runner), controller(runner)
    g_py = Gait(ctrl_py, runner.q_standing, runner.gait.config)
    g_c = CompiledGait(Gait(ctrl_c, runner.q_standing, runner.gait.config))
    for g in (g_py, g_c):
        g.reset(0.0, trace.q[0], trace.v[0])
    return ctrl_py, ctrl_c, g_py, g_c


def references_difference(ctrl_c, ctrl_py) -> float:
    """The largest relative difference of the reference arrays the two gaits wrote."""
    return max(relative(getattr(ctrl_c, name), getattr(ctrl_py, name)) for name in REF_ARRAYS)


def state_difference(g_c, g_py, n: int) -> float:
    """The largest relative difference of the two gaits' state (every :data:`STATE` slot);
    a mode or an unset time must be equal, and so must where the obstacle apex is NaN."""
    worst = 0.0
    for name, _ in STATE:
        a, b = getattr(g_c, name), getattr(g_py, name)
        if isinstance(b, str) or b is None:
            assert a == b, (n, name, a, b)
        else:
            assert np.array_equal(np.isnan(a), np.isnan(b)), (n, name, a, b)
            worst = max(worst, relative(np.nan_to_num(a), np.nan_to_num(b)))
    return worst


def drive_gait(gait, scenario, t):
    """The lock-step runner's start/stop schedule."""
    if t == pytest.approx(scenario.trot_start):
        gait.start(t)
        gait.set_velocity(*scenario.velocity)
    if t == pytest.approx(scenario.trot_stop):
        gait.stop()


def controller(runner, formulation="qp_coulomb", **config):
    c = runner.controller.config
    return Controller(runner.controller.model, ControllerConfig(**{**c.__dict__, "formulation": formulation,
                                                                   "formulation_options": {}, **config}))


def relative(a, b) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.abs(a - b).max()) / max(1.0, float(np.abs(b).max())) if b.size else 0.0


@pytest.mark.parametrize("robot", LEGGED)
def test_compiled_gait_reproduces_the_python_gait_along_a_trot(robot):
    """Same references (every array the gait writes) and same state, every tick, through
    lift-offs, touchdowns, a turn, the stop and a mid-stride reset on three feet."""
    runner, trace = recorded_trot(robot)
    s = runner.scenario
    ctrl_py, ctrl_c, g_py, g_c = twin_gaits(runner, trace)
    for g in (g_py, g_c):
        g.set_velocity(*s.velocity)
    reset_at = int(0.9 * trace.n)
    switches, worst_ref, worst_state = 0, 0.0, 0.0
    for n in range(trace.n):
        t, q, v, mask = trace.t[n], trace.q[n], trace.v[n], trace.contact[n]
        if n == reset_at:  # an input gap's recovery: stand where the robot is, one foot up
            partial = mask.copy()
            partial[0] = False
            for g in (g_py, g_c):
                g.reset(t, q, v, partial)
        for g in (g_py, g_c):
            drive_gait(g, s, t)
        g_py.update(t, q, v, mask)
        g_c.update(t, q, v, mask)
        worst_ref = max(worst_ref, references_difference(ctrl_c, ctrl_py))
        worst_state = max(worst_state, state_difference(g_c, g_py, n))
        switches += n > 0 and bool((trace.contact[n] != trace.contact[n - 1]).any())
    assert worst_ref <= 1e-9 and worst_state <= 1e-9, (worst_ref, worst_state)
    assert switches >= 10  # the trot made and broke contacts
    assert g_c.mode == "stand" and not g_c.swinging.any()  # the stop finished


def test_compiled_gait_learns_a_ramp_as_the_python_gait_does():
    """Solo12 trots blind onto the 10° ramp (gait.follow_ground): both gaits fit the same
    plane through the footholds, raise the base with it, pitch it with it (gait.ground_tilt)
    and aim the swings at it."""
    scenario = Scenario(robot="solo12", formulation="qp_coulomb", terrain="ramp", terrain_known=False,
                        duration=3.5, velocity=(0.3, 0.0, 0.0), trot_start=0.3)
    runner = LockstepRunner(scenario)
    trace = runner.run().trace
    assert runner.gait.config.follow_ground and trace.n == 3500  # no fall
    ctrl_py, ctrl_c, g_py, g_c = twin_gaits(runner, trace)
    worst, steepest, nose_up = 0.0, 0.0, 0.0
    for n in range(trace.n):
        t, q, v, mask = trace.t[n], trace.q[n], trace.v[n], trace.contact[n]
        for g in (g_py, g_c):
            drive_gait(g, scenario, t)
            g.update(t, q, v, mask)
        worst = max(worst, references_difference(ctrl_c, ctrl_py))
        for name in ("ground_plane", "ground_offset", "base_tilt", "_stance_position"):
            worst = max(worst, relative(getattr(g_c, name), getattr(g_py, name)))
        steepest = max(steepest, float(g_py.ground_plane[1]))
        nose_up = max(nose_up, -float(g_py.base_tilt[0]))
        worst = max(worst, relative(g_c.base_rotation(), g_py.base_rotation()))
    assert worst <= 1e-9, worst
    grade = np.tan(np.radians(runner.terrain.slope_deg))
    assert 0.85 * grade <= steepest <= 1.15 * grade, (steepest, grade)  # it learned the slope
    assert g_py.ground_offset > 0.5 * runner.terrain.rise_m  # and the base went up with it
    assert 0.85 * np.arctan(grade) <= nose_up <= 1.15 * np.arctan(grade), (nose_up, grade)  # and pitched


def test_compiled_gait_trips_over_a_block_as_the_python_gait_does():
    """Go2 trots blind onto a block of 15 % of its standing height: its swing feet strike the
    face, and both gaits swing them again over it (the trip reflex, ``gait.TRIP_*``) with the
    same obstacle profile, plant them on the block and learn its height in the plane."""
    scenario = Scenario(robot="go2", formulation="qp_coulomb", terrain="block", terrain_known=False,
                        duration=4.0, velocity=(0.2, 0.0, 0.0), trot_start=0.5)
    runner = LockstepRunner(scenario)
    run = runner.run()
    trace = run.trace
    assert not run.metrics["fell"] and run.metrics["trips"] >= 2, run.metrics
    ctrl_py, ctrl_c, g_py, g_c = twin_gaits(runner, trace)
    worst, planted = 0.0, -np.inf
    for n in range(trace.n):
        t, q, v, mask = trace.t[n], trace.q[n], trace.v[n], trace.contact[n]
        for g in (g_py, g_c):
            drive_gait(g, scenario, t)
            g.update(t, q, v, mask)
        worst = max(worst, references_difference(ctrl_c, ctrl_py), state_difference(g_c, g_py, n))
        planted = max(planted, float(g_py._stance_position[:, 2].max()))
    assert worst <= 1e-9, worst
    assert g_py.trips == g_c.trips >= 2
    assert planted > runner.gait.ground_height + 0.8 * runner.terrain.rise_m  # a foot stood on the block


@pytest.mark.parametrize("robot", LEGGED)
@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
@pytest.mark.parametrize("ramp", [0.0, 0.01])
def test_compiled_tick_matches_the_python_tick_along_a_trot(robot, formulation, ramp):
    """Controller.update after Gait.update vs one compiled tick (gait included), on the same
    compiled formulation: same held contacts every tick and the same τ, q̈ and forces,
    contact switches (ramped or not) included; the Python tick may take over at any tick
    (a hand-over every 97 ticks)."""
    runner, trace = recorded_trot(robot)
    s = runner.scenario
    ctrl_py, ctrl_c = controller(runner, formulation, contact_ramp_time=ramp), \
        controller(runner, formulation, contact_ramp_time=ramp)
    g_py = Gait(ctrl_py, runner.q_standing, runner.gait.config)
    g_c = CompiledGait(Gait(ctrl_c, runner.q_standing, runner.gait.config))
    tick = Tick(ctrl_c, g_c)
    tau = np.zeros(ctrl_c.model.na)
    for ctrl, g in ((ctrl_py, g_py), (ctrl_c, g_c)):
        ctrl.reset(trace.q[0], trace.v[0])
        g.reset(0.0, trace.q[0], trace.v[0])
    errors, tau_errors, compiled_ticks, switches = [], [], 0, 0
    active_prev = None
    for n in range(trace.n):
        t, q, v, mask = trace.t[n], trace.q[n], trace.v[n], trace.contact[n]
        for g in (g_py, g_c):
            drive_gait(g, s, t)
        g_py.update(t, q, v, mask)
        cmd = ctrl_py.update(q, v, mask)
        if n % 97 == 0:  # a Python tick of the compiled side (the node's hand-over)
            tick.hand_over()
            g_c.update(t, q, v, mask)
            tau[:] = ctrl_c.update(q, v, mask).tau
            tick.plan()
        else:
            assert tick.run(t, q, v, mask, 0.0, tau) == 0, n
            compiled_ticks += 1
        f_py, f_c = ctrl_py.formulation, ctrl_c.formulation
        np.testing.assert_array_equal(f_c.contacts.active, f_py.contacts.active)
        np.testing.assert_array_equal(f_c.contacts.released, f_py.contacts.released)
        switches += active_prev is not None and bool((f_py.contacts.active != active_prev).any())
        active_prev = f_py.contacts.active.copy()
        tau_errors.append(relative(tau, cmd.tau))
        errors.append(max(tau_errors[-1], relative(f_c.qdd, f_py.qdd), relative(f_c.forces, f_py.forces)))
    errors, tau_errors = np.asarray(errors), np.asarray(tau_errors)
    assert compiled_ticks > 0.95 * trace.n and switches >= 10
    # the same QP data up to round-off (the gait's, and ProxQP's summation order, which
    # follows the heap layout): on rare ticks round-off flips a decision of the formulation
    # (fast path or two stages, with or without torque limits, where ProxQP stops on
    # wbc_qp's flat force optimum) and the two ticks part; never for long, and the contact
    # logic (held and released contacts, every tick above) is exact
    assert np.mean(errors <= 1e-6) >= 0.95, np.mean(errors <= 1e-6)
    # standing again: the same torques; q̈ and forces within ProxQP's stopping tolerance (on
    # one standing tick of Solo12's trot the two solves stopped 4e-5 apart in q̈, 9e-7 in τ)
    assert tau_errors[-100:].max() <= 1e-6, tau_errors[-100:].max()
    assert errors[-100:].max() <= 1e-4, errors[-100:].max()


def test_compiled_tick_hands_a_failed_solve_back_unchanged(load_robot):
    """A tick whose solve fails returns non-zero and leaves the gait and contact state as
    they were, so the Python tick that runs it again starts from the same state."""
    runner, trace = recorded_trot("solo12")
    ctrl = controller(runner, "qp_coulomb", contact_ramp_time=0.01)
    g = CompiledGait(Gait(ctrl, runner.q_standing, runner.gait.config))
    tick = Tick(ctrl, g)
    ctrl.reset(trace.q[0], trace.v[0])
    g.reset(0.0, trace.q[0], trace.v[0])
    g.start(0.0)
    g.set_velocity(0.2, 0.0, 0.0)
    tau = np.zeros(ctrl.model.na)
    n = 500
    for i in range(n):
        assert tick.run(trace.t[i], trace.q[i], trace.v[i], trace.contact[i], 0.0, tau) == 0
    state = g.state.copy()
    held = ctrl.transitions.held.copy(), ctrl.transitions.bound.copy(), ctrl.formulation.contacts.active.copy()
    version = int(tick.version[0])
    bad_v = trace.v[n].copy()
    bad_v[0] = np.nan  # the solve cannot be finite
    assert tick.run(trace.t[n], trace.q[n], bad_v, ~trace.contact[n], 0.0, tau) != 0
    np.testing.assert_array_equal(g.state, state)
    for now, before in zip((ctrl.transitions.held, ctrl.transitions.bound, ctrl.formulation.contacts.active), held):
        np.testing.assert_array_equal(now, before)
    assert int(tick.version[0]) == version


@pytest.mark.parametrize("velocities", [True, False], ids=["cubic", "linear"])
def test_compiled_tick_samples_a_joint_trajectory_as_the_node_does(velocities):
    """A running ~/joint_reference trajectory is sampled by the compiled tick into the
    node's full references and the controller's, exactly as the node's Python tick does
    (JointTrajectoryReference.sample and set_joint_reference): the same bits at every
    time, before, inside and after its points; at its end the tick hands over (status 3,
    nothing written) so the Python tick ends it. A trajectory moves the torques as the
    Python controller does on the same references."""
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from idyn_control import robots
    from idyn_control.ros.conversions import JointTrajectoryReference

    model = robots.load("solo12")
    q0 = robots.standing_configuration(model, "solo12")
    ctrl = Controller(model, ControllerConfig(formulation="wbc_qp"))
    ctrl.reset(q0, np.zeros(model.nv))
    full = [ctrl.q_ref.copy(), np.zeros(model.na), np.zeros(model.na)]  # the node's _q_ref_full, ...
    msg = JointTrajectory(joint_names=["FL_KFE", "HR_HFE", "FR_HAA"])
    rng = np.random.default_rng(3)
    for i, t in enumerate((0.1, 0.35, 0.6, 1.0)):
        point = JointTrajectoryPoint(positions=list(full[0][[2, 10, 3]] + rng.normal(0.0, 0.2, 3)),
                                     time_from_start=Duration(nanosec=int(t * 1e9)))
        if velocities:
            point.velocities = list(rng.normal(0.0, 1.0, 3))
        msg.points.append(point)
    start = 1_700_000_000_123_456_789  # a system-clock time [ns]
    traj, reason = JointTrajectoryReference.from_msg(msg, model, start, full[0])
    assert reason is None
    python = JointTrajectoryReference.from_msg(msg, model, start, full[0])[0]
    tick = Tick(ctrl, None)
    tick.set_trajectory(traj, *full)
    tick.plan()
    tau = np.zeros(model.na)
    for dt_ns in (*range(-5_000_000, 1_000_000_000, 7_777_777), 999_999_999):
        now = start + dt_ns
        assert tick.sample_trajectory(now)
        assert python.sample(now)
        want = [r.copy() for r in full]
        for r, part in zip(want, (python.q, python.v, python.a)):
            r[python.index] = part
        for got, expected, ctrl_ref in zip(full, want, (ctrl.q_ref, ctrl.v_ref, ctrl.a_ref)):
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(ctrl_ref, expected)
    assert not tick.sample_trajectory(start + 1_000_000_000)  # over: the Python tick ends it
    # in compiled ticks (on the system clock) along a measured trot's sequence (contact
    # switches), a trajectory that starts now: the torques, accelerations and forces of the
    # Python controller on the references the tick sampled, and not the standing torques
    import time

    runner, trace = recorded_trot("solo12")
    # started 50 ms ago: the 200 ticks below take only ~25 ms of wall time on an idle
    # machine, too little for a trajectory that starts now to move measurably (a CI run
    # saw 0.049 rad); its end, 1 s after the start, leaves them ample time
    traj_now, _ = JointTrajectoryReference.from_msg(msg, model, time.time_ns() - 50_000_000, full[0])
    tick.set_trajectory(traj_now, *full)
    tick.plan()
    reference = Controller(model, ControllerConfig(formulation="wbc_qp"))
    reference.reset(trace.q[0], trace.v[0])
    ctrl.reset(trace.q[0], trace.v[0])
    moved, errors = 0.0, []
    for n in range(0, 600, 3):
        q, v, mask = trace.q[n], trace.v[n], trace.contact[n]
        status = tick.run(trace.t[n], q, v, mask, 0.0, tau)
        if status == 3:  # over (a slow machine): the Python tick would end it
            break
        assert status == 0, n
        reference.set_joint_reference(ctrl.q_ref, ctrl.v_ref, ctrl.a_ref)  # what the tick sampled
        cmd = reference.update(q, v, mask)
        errors.append(max(relative(tau, cmd.tau), relative(ctrl.formulation.qdd, reference.formulation.qdd),
                          relative(ctrl.formulation.forces, reference.formulation.forces)))
        moved = max(moved, float(np.abs(traj_now.q - traj_now.pos[0]).max()))  # from where it started
    assert len(errors) >= 50 and np.mean(np.asarray(errors) <= 1e-6) >= 0.95, errors
    assert moved > 0.05  # the trajectory ran through its points
    traj_over, _ = JointTrajectoryReference.from_msg(msg, model, time.time_ns() - 2 * 10**9, full[0])
    tick.set_trajectory(traj_over, *full)
    tick.plan()
    assert tick.run(0.0, q0, np.zeros(model.nv), mask, 0.0, tau) == 3


@pytest.mark.parametrize("reach, lands_at", [(0.25, 0.875), (10.0, 0.55)])
@pytest.mark.parametrize("compiled", [False, True], ids=["python", "compiled"])
def test_a_foot_that_trips_mid_swing_swings_on_to_its_foothold(reach, lands_at, compiled):
    """A swinging foot that reads contact far from its foothold mid-swing (here: still at its
    lift-off point, 0.4 m/s) tripped: with ``touchdown_reach`` 0.25 it swings on, and the
    contact lands it only in the final descent (the last ``vertical_fraction``); with 10
    (the quadruped's file) the first contact after ``early_touchdown`` lands it. Python and
    compiled gaits alike."""
    runner = LockstepRunner(Scenario(robot="go2", formulation="qp_coulomb", duration=0.01,
                                     gait_config={"touchdown_reach": reach}))
    config = runner.gait.config
    assert config.early_touchdown == 0.5 and 1.0 - config.vertical_fraction == 0.875
    gait = Gait(controller(runner), runner.q_standing, config)
    if compiled:
        gait = CompiledGait(gait)
    q, v = runner.q_standing, np.zeros(runner.robot.nv)
    gait.reset(0.0, q, v)
    gait.start(0.0)
    gait.set_velocity(0.4, 0.0, 0.0)
    landed: dict[int, float] = {}
    mask = np.ones(gait.n_feet, dtype=bool)
    for n in range(1200):
        t = n * 1e-3
        s = np.where(gait.swinging, (t - gait._swing_start) / gait.swing_duration, -1.0)
        # planted feet read contact; a swinging one from 55 % of its swing on (a trip, then the
        # descent), once the velocity has ramped up (0.4 s at 1 m/s²)
        mask[:] = ~gait.swinging | ((s >= 0.55) & (gait._swing_start >= 0.5))
        was = gait.swinging.copy()
        gait.update(t, q, v, mask)
        for i in np.flatnonzero(was & ~gait.swinging & (gait._swing_start >= 0.5)):
            landed.setdefault(i, s[i])
    assert len(landed) == gait.n_feet
    np.testing.assert_allclose(list(landed.values()), lands_at, atol=0.02)
