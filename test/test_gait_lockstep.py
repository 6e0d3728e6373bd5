"""Gait generator and the lock-step closed loop, with real MuJoCo physics (no ROS).

The gait is checked on its own (schedule, swing shape, base references, stop) and in
closed loop: the project's quadruped and Solo12 trot at the seed 000 §7.6 speed, Panda
follows the seed's sinusoidal joint motion with rnea + PD, qp_coulomb predicts the
contact forces MuJoCo applies, and ``idyn-control demo --no-ros`` writes its files.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import robots
from idyn_control.controller import Controller, ControllerConfig
from idyn_control.errors import ConfigError, ShapeError
from idyn_control.gait import Gait, GaitConfig, min_jerk, swing_bump, touchdown_ramp
from idyn_control.sim.lockstep import LockstepRunner, Scenario, run_scenario

TROT_SPEED = 0.2  # [m/s] seed 000 §7.6
DT = 1e-3


def _gait(name="quadruped", formulation="rnea", **config):
    model = robots.load(name)
    q = robots.standing_configuration(model, name, foot_height=0.01)
    ctrl = Controller(model, ControllerConfig(formulation=formulation))
    gait = Gait(ctrl, q, GaitConfig(**config))
    gait.reset(0.0, q, np.zeros(model.nv))
    return model, q, ctrl, gait


def _drive(gait, q, seconds, *, t0=0.0, mask=None):
    """Run the gait open loop at the standing state; return per-tick schedules and refs."""
    k = gait.n_feet
    mask = np.ones(k, dtype=bool) if mask is None else mask
    v = np.zeros(gait.model.nv)
    stance, swinging, feet, base = [], [], [], []
    for n in range(int(round(seconds / DT))):
        gait.update(t0 + n * DT, q, v, mask)
        stance.append(gait.planned_stance.copy())
        swinging.append(gait.swinging.copy())
        feet.append(gait.foot_position_ref.copy())
        base.append(gait.base_position_ref.copy())
    return np.array(stance), np.array(swinging), np.array(feet), np.array(base)


# ====================================================================== gait alone
def test_swing_profiles_are_smooth_at_lift_off_and_touchdown():
    for s in (0.0, 1.0):
        assert min_jerk(s)[1:] == (0.0, 0.0)
        assert swing_bump(s) == (0.0, 0.0, 0.0)
    assert swing_bump(0.5)[0] == pytest.approx(1.0) and swing_bump(0.5)[1] == pytest.approx(0.0)
    # the touchdown ramp starts like the others and ends going down at unit slope
    assert touchdown_ramp(0.0) == (0.0, 0.0, 0.0) and touchdown_ramp(1.0) == (0.0, 1.0, 0.0)
    assert max(touchdown_ramp(s)[0] for s in np.linspace(0.0, 1.0, 101)) <= 0.0
    # derivatives match finite differences
    for f in (min_jerk, swing_bump, touchdown_ramp):
        for s in np.linspace(0.05, 0.95, 7):
            h = 1e-6
            assert f(s)[1] == pytest.approx((f(s + h)[0] - f(s - h)[0]) / (2 * h), rel=1e-5, abs=1e-7)
            assert f(s)[2] == pytest.approx((f(s + h)[1] - f(s - h)[1]) / (2 * h), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("name", ["quadruped", "solo12"])
def test_trot_schedule_duty_factor_and_diagonal_pairs(name):
    """Seed 000 §7.6: period 0.3 s, duty factor 0.75, LF+RH and RF+LH swing together."""
    model, q, ctrl, gait = _gait(name)
    gait.set_velocity(TROT_SPEED)
    gait.start(0.0)
    stance, _, _, _ = _drive(gait, q, 3.0)
    steady = stance[300:]  # whole cycles after the first
    np.testing.assert_allclose(steady.mean(axis=0), 0.75, atol=0.01)
    # diagonal pairs: front-left with hind-right, front-right with hind-left
    front_left = [i for i, o in enumerate(gait.foot_offsets) if o[0] > 0 and o[1] > 0][0]
    hind_right = [i for i, o in enumerate(gait.foot_offsets) if o[0] < 0 and o[1] < 0][0]
    front_right = [i for i, o in enumerate(gait.foot_offsets) if o[0] > 0 and o[1] < 0][0]
    np.testing.assert_array_equal(steady[:, front_left], steady[:, hind_right])
    assert not np.any(~steady[:, front_left] & ~steady[:, front_right])  # pairs alternate
    # never fewer than two feet planned on the ground
    assert steady.sum(axis=1).min() == 2


def test_swing_reaches_step_height_and_lands_on_the_ground():
    model, q, ctrl, gait = _gait("quadruped")
    gait.set_velocity(TROT_SPEED)
    gait.start(0.0)
    # no contact sensed during the swings: they run their full length
    mask = np.ones(4, dtype=bool)
    v = np.zeros(model.nv)
    apex = np.zeros(4)
    for n in range(300):
        mask[:] = ~gait.swinging if n else True
        gait.update(n * DT, q, v, mask)
        apex = np.maximum(apex, gait.foot_position_ref[:, 2] - gait.ground_height)
        # swing feet are handed to the controller as swinging, stance feet as planted
        np.testing.assert_array_equal(ctrl.swing, gait.swinging)
    # step height 1.5 cm above the line from lift-off (on the ground) to the touchdown
    # target (touchdown_depth below it): at mid-swing, where the bump peaks
    c = gait.config
    assert c.step_height == 0.015
    np.testing.assert_allclose(apex, c.step_height - 0.5 * c.touchdown_depth, atol=5e-4)


@pytest.mark.parametrize("name, fraction", [("quadruped", 0.0), ("solo12", 0.0), ("go2", 0.125)])
@pytest.mark.parametrize("speed, late", [(0.1, 0.1), (0.3, 0.1)])
def test_the_swing_ends_going_down_at_the_touchdown_speed(name, fraction, speed, late):
    """``touchdown_speed`` v: a swing's reference reaches its touchdown point at its end
    (touchdown_depth below the ground) going down at v, having stayed above the ground until
    then; a foot that has not landed then goes on down at ``late_descent_speed``."""
    depth = 0.002
    model, q, ctrl, gait = _gait(name, touchdown_speed=speed, late_descent_speed=late, touchdown_depth=depth,
                                 vertical_fraction=fraction)
    gait.set_velocity(TROT_SPEED)
    gait.start(0.0)
    k = gait.n_feet
    mask = np.ones(k, dtype=bool)
    v = np.zeros(model.nv)
    ends = 0
    prev_s = np.full(k, np.nan)
    prev_z = np.zeros(k)
    for n in range(1200):
        mask[:] = ~gait.swinging if n else True  # no contact sensed while swinging
        t = n * DT
        gait.update(t, q, v, mask)
        s = np.where(gait.swinging, (t - gait._swing_start) / gait._swing_time, np.nan)
        z, vz = gait.foot_position_ref[:, 2] - gait.ground_height, gait.foot_velocity_ref[:, 2]
        for i in range(k):
            if 0.25 < s[i] < 1.0 - 1e-9:  # descending half: above the touchdown point
                assert z[i] > -depth
            if prev_s[i] < 1.0 <= s[i]:  # the first tick past the swing's end: the late descent
                end = gait._touchdown[i, 2] - gait.ground_height
                assert end == pytest.approx(-depth, abs=1e-12)
                assert vz[i] == pytest.approx(-late)
                # the swing's last tick was within one tick's travel of the end, going down at v
                assert prev_z[i] - end == pytest.approx(speed * (1.0 - prev_s[i]) * gait._swing_time, abs=2e-5)
                ends += 1
        prev_s, prev_z = s, z.copy()
    assert ends >= 2 * k
    # the swing's end velocity: v at s → 1 (the profile evaluated just before the end)
    Ts = gait.swing_duration
    r, dr, _ = touchdown_ramp(1.0 - 1e-9)
    assert -speed * dr + gait.config.step_height * swing_bump(1.0 - 1e-9)[1] / Ts == pytest.approx(-speed, rel=1e-6)


@pytest.mark.parametrize("fraction", [0.0, 0.125, 0.3])
@pytest.mark.parametrize("name", ["go2", "anymal_c"])
def test_the_swing_leaves_and_meets_the_ground_vertically(name, fraction):
    """``vertical_fraction`` f: over the first and the last f of a swing the foot's reference
    moves only up and down, at its lift-off point, then at its touchdown point (re-targeting
    has stopped); it travels in between. With f = 0 it travels the whole swing."""
    model, q, ctrl, gait = _gait(name, vertical_fraction=fraction)
    gait.set_velocity(TROT_SPEED)
    gait.start(0.0)
    k = gait.n_feet
    mask = np.ones(k, dtype=bool)
    v = np.zeros(model.nv)
    pos, vel, phase = [], [], []
    for n in range(1500):
        mask[:] = ~gait.swinging if n else True  # no contact sensed while swinging
        gait.update(n * DT, q, v, mask)
        pos.append(gait.foot_position_ref.copy())
        vel.append(gait.foot_velocity_ref.copy())
        # the swing's phase s in [0, 1) (NaN in stance or past the swing's end)
        s = (n * DT - gait._swing_start) / gait._swing_time
        phase.append(np.where(gait.swinging & (s < 1.0), s, np.nan))
    pos, vel, phase = np.array(pos), np.array(vel), np.array(phase)
    checked = 0
    for i in range(k):
        s = phase[:, i]
        starts = np.flatnonzero(np.isnan(s[:-1]) & ~np.isnan(s[1:])) + 1
        for a in starts:
            b = a + np.argmax(np.isnan(s[a:]))  # the swing's ticks [a, b)
            if b == a or b - a < 50:
                continue  # runs past the end of the record
            sw = s[a:b]
            rising, landing = sw < fraction - 0.01, sw > 1.0 - fraction + 0.01
            middle = np.abs(sw - 0.5) < 0.1
            for part in (rising, landing):
                np.testing.assert_array_equal(vel[a:b][part, i, :2], 0.0)
                assert np.all(np.abs(vel[a:b][part & (sw > 0.01) & (sw < 0.99), i, 2]) > 0.0)  # up or down
                if part.any():  # at the lift-off point, then at the touchdown point
                    assert np.ptp(pos[a:b][part, i, :2], axis=0).max() < 1e-12
            assert rising.any() == (fraction > 0.0) == landing.any()
            assert np.linalg.norm(vel[a:b][middle, i, :2], axis=1).min() > 0.01  # travelling
            checked += 1
    assert checked >= 2 * k


def test_base_reference_integrates_the_commanded_velocity():
    model, q, ctrl, gait = _gait("quadruped", max_position_error=10.0)
    gait.set_velocity(TROT_SPEED, 0.0, 0.0)
    gait.start(0.0)
    _, _, _, base = _drive(gait, q, 2.0)
    # rate-limited to 1 m/s²: 0.2 s ramp, then 0.2 m/s
    expected = TROT_SPEED * (2.0 - 0.1)
    assert base[-1, 0] - base[0, 0] == pytest.approx(expected, abs=0.005)
    assert np.allclose(base[:, 2], gait.standing_height, atol=1e-9)
    np.testing.assert_allclose(ctrl.base_velocity_ref, (TROT_SPEED, 0.0, 0.0), atol=1e-9)


def test_yaw_rate_command_turns_the_heading():
    model, q, ctrl, gait = _gait("quadruped")
    gait.set_velocity(0.0, 0.0, 0.5)
    gait.start(0.0)
    _drive(gait, q, 1.0)
    yaw = math.atan2(ctrl.base_rotation_ref[1, 0], ctrl.base_rotation_ref[0, 0])
    assert yaw == pytest.approx(0.5 * (1.0 - 0.125), abs=0.01)  # 2 rad/s² ramp to 0.5 rad/s


def test_stop_finishes_the_swings_and_stands():
    model, q, ctrl, gait = _gait("quadruped")
    gait.set_velocity(TROT_SPEED)
    gait.start(0.0)
    _drive(gait, q, 1.0)
    gait.stop()
    stance, swinging, _, _ = _drive(gait, q, 1.5, t0=1.0)
    assert gait.mode == "stand"
    assert stance[-1].all() and not swinging[-1].any()
    assert not ctrl.swing.any()
    np.testing.assert_allclose(gait.velocity_filtered, 0.0)


def test_stand_up_rises_to_the_standing_height():
    model, q, ctrl, gait = _gait("solo12", stand_up_time=1.0)
    low = q.copy()
    low[2] -= 0.03
    gait.reset(0.0, low, np.zeros(model.nv))
    _, _, _, base = _drive(gait, low, 1.2)
    assert base[0, 2] == pytest.approx(low[2], abs=1e-6)
    assert base[-1, 2] == pytest.approx(gait.standing_height, abs=1e-9)
    assert np.all(np.diff(base[:, 2]) >= -1e-12)  # monotonic rise


def test_gait_rejects_bad_configuration_and_inputs():
    model = robots.load("quadruped")
    q = robots.standing_configuration(model, "quadruped")
    ctrl = Controller(model, ControllerConfig(formulation="rnea"))
    with pytest.raises(ConfigError):
        Gait(ctrl, q, GaitConfig(duty_factor=1.0))
    with pytest.raises(ShapeError):
        Gait(ctrl, q, GaitConfig(touchdown_phases=(0.25, 0.75)))
    with pytest.raises(ConfigError, match="velocity_product"):
        Gait(ctrl, q, GaitConfig(velocity_product="no"))  # a YAML string is not false
    with pytest.raises(ConfigError):
        Gait(Controller(robots.load("panda"), ControllerConfig(formulation="rnea")), np.zeros(9))
    gait = Gait(ctrl, q)
    with pytest.raises(ConfigError):
        gait.set_velocity(math.nan)
    with pytest.raises(ShapeError):
        gait.update(0.0, q, np.zeros(model.nv), [True, True])


# ====================================================================== closed loop
@pytest.mark.parametrize("name", ["quadruped", "solo12"])
def test_trot_at_the_commanded_speed_without_falling(name):
    """Seed 000 §7.6 trot, 5 s at 0.2 m/s on rigid μ = 0.7 ground, wbc_qp."""
    run = run_scenario(Scenario(robot=name, formulation="wbc_qp", duration=5.0, velocity=(TROT_SPEED, 0.0, 0.0),
                                friction=0.7, compliant=False))
    m = run.metrics
    assert not m["fell"], m
    assert abs(m["speed_along_command_m_s"] - TROT_SPEED) <= 0.3 * TROT_SPEED, m
    # it trotted: every foot was planned in swing a quarter of the time
    t = run.trace.t
    steady = run.trace.planned_stance[t > 1.5]
    np.testing.assert_allclose(steady.mean(axis=0), 0.75, atol=0.02)
    # straight: lateral drift small compared with the distance walked
    drift = abs(run.trace.q[-1, 1] - run.trace.q[0, 1])
    assert drift < 0.2 * (run.trace.q[-1, 0] - run.trace.q[0, 0])


def _swing_end_gaps(name: str, formulation: str, gait_config: dict) -> np.ndarray:
    """Height of each swing foot above where the joint references put it on the measured
    base, on the swing's last tick [m] (2 s trot, rigid μ 0.7, past the first steps)."""
    runner = LockstepRunner(Scenario(robot=name, formulation=formulation, duration=2.0, friction=0.7,
                                     gait_config=gait_config))
    run = runner.run()
    assert not run.metrics["fell"]
    tr, robot = run.trace, runner.robot
    data = robot.pin_model.createData()
    gaps = []
    for n in np.flatnonzero((tr.planned_stance[1:tr.n] & ~tr.planned_stance[:tr.n - 1]).any(axis=1)) + 1:
        if tr.t[n] < 0.7:  # the first steps, from rest
            continue
        q = tr.q[n - 1].copy()  # the swing's last tick
        pin.framesForwardKinematics(robot.pin_model, data, q)
        measured = np.array([data.oMf[f].translation[2] for f in robot.contact_frame_ids])
        q[7:] = tr.q_ref[n - 1]
        pin.framesForwardKinematics(robot.pin_model, data, q)
        referenced = np.array([data.oMf[f].translation[2] for f in robot.contact_frame_ids])
        landing = tr.planned_stance[n] & ~tr.planned_stance[n - 1]
        gaps += list((measured - referenced)[landing])
    assert len(gaps) >= 12
    return np.asarray(gaps)


#: the quadruped's swing ends as they would be with J̇v (its file follows seed 000's pipeline)
QUADRUPED_EXACT = {"velocity_product": True, "touchdown_depth": 0.0, "touchdown_speed": 0.1,
                   "late_descent_speed": 0.1}


@pytest.mark.parametrize("name, formulation", [("quadruped", "qp_coulomb"), ("quadruped", "wbc_qp"),
                                               ("quadruped", "lcp_coulomb"), ("solo12", "qp_coulomb"),
                                               ("solo12", "wbc_qp"), ("go2", "qp_coulomb"), ("go2", "wbc_qp")])
def test_swing_feet_end_their_swings_where_their_joint_references_put_them(name, formulation):
    """The gait's joint accelerations carry the swing's feed-forward exactly (J_j a_j =
    a_foot − J̇v, ``velocity_product``, the default): at the end of each swing the foot is
    within 1.5 mm (median) and 4 mm (worst) of where the joint references put it on the
    measured base (measured ≤ 0.7 mm and 2.8 mm). Without J̇v the feet ended 3.7–9.4 mm
    (median) above it, 5.6–13.9 mm at worst, and landed late."""
    gaps = _swing_end_gaps(name, formulation, QUADRUPED_EXACT if name == "quadruped" else {})
    worst = np.abs(gaps).max()
    assert abs(np.median(gaps)) <= 1.5e-3 and worst <= 4e-3, (np.median(gaps), worst)


@pytest.mark.parametrize("name", ["quadruped", "solo12"])
def test_without_the_velocity_product_the_swing_feet_lag_their_references(name):
    """``velocity_product: false`` (seed 000's pipeline, the quadruped's file): J_j a_j =
    a_foot alone, as Pacer's inverse kinematics computes the joint accelerations; the swing
    feet end several mm above their joint references (the lag the quadruped's deeper swing
    end makes up for)."""
    extra = {} if name == "quadruped" else {"velocity_product": False}
    assert robots.spec("quadruped").gait["velocity_product"] is False
    gaps = _swing_end_gaps(name, "qp_coulomb", extra)
    assert np.median(gaps) >= 3e-3, np.median(gaps)


def test_panda_tracks_the_sinusoidal_joint_trajectory_with_rnea_and_pd():
    """Seed 000 §7.2.2: joints oscillate about three times per second."""
    run = run_scenario(Scenario(robot="panda", formulation="rnea", duration=2.0, gait=False))
    m = run.metrics
    assert m["joint_position_error_rad"] <= 0.01, m
    assert np.ptp(run.trace.q_ref[:, 0]) > 0.15  # it really moved (±0.1 rad)
    assert m["fallback_ticks"] == 0


@pytest.mark.parametrize("name", ["quadruped", "solo12"])
def test_qp_coulomb_predicts_the_standing_contact_forces_of_mujoco(name):
    """Seed 000 Table 5 quantity (summed normal forces), standing still: ≤ 5 %."""
    run = run_scenario(Scenario(robot=name, formulation="qp_coulomb", duration=1.5, gait=False))
    m = run.metrics
    assert not m["fell"]
    assert m["force_error_sum_rel"] <= 0.05, m
    weight = 9.81 * __import__("pinocchio").computeTotalMass(robots.load(name).pin_model)
    assert m["measured_normal_sum_N"] == pytest.approx(weight, rel=0.05)


def test_lockstep_is_deterministic():
    """Same scenario, same run — up to floating-point summation order (threaded BLAS)."""
    a = run_scenario(Scenario(robot="solo12", formulation="wbc_qp", duration=0.8, trot_start=0.3))
    b = run_scenario(Scenario(robot="solo12", formulation="wbc_qp", duration=0.8, trot_start=0.3))
    np.testing.assert_allclose(a.trace.q, b.trace.q, rtol=0, atol=1e-9)
    np.testing.assert_allclose(a.trace.tau, b.trace.tau, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(a.trace.contact, b.trace.contact)


def test_demo_without_ros_writes_report_mcap_and_png(tmp_path):
    pytest.importorskip("mcap")
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "idyn_control.cli", "demo", "--no-ros", "--duration", "2",
                           "--robot", "solo12", "--out", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo report" in proc.stdout and "force prediction" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert not report["metrics"]["fell"]
    assert (out / "demo.png").stat().st_size > 10_000
    from mcap.reader import make_reader

    with open(out / "demo.mcap", "rb") as f:
        summary = make_reader(f).get_summary()
    topics = {c.topic for c in summary.channels.values()}
    schemas = {s.name for s in summary.schemas.values()}
    assert {"/joint_states", "/odom", "/effort_controller/commands", "/idyn_sim/contact_wrench/FL_FOOT",
            "/idyn_controller/contact_wrench/FL_FOOT"} <= topics
    assert {"sensor_msgs/msg/JointState", "nav_msgs/msg/Odometry", "geometry_msgs/msg/WrenchStamped"} <= schemas
    _assert_wall_clock_and_qos(summary)


def _assert_wall_clock_and_qos(summary):
    """Log times in wall-clock (not 1970) and rosbag2's offered QoS on every channel."""
    import yaml

    year_2020_ns = 1_577_836_800 * 10**9
    assert summary.statistics.message_start_time > year_2020_ns
    assert summary.statistics.message_start_time <= time.time_ns()
    for channel in summary.channels.values():
        profiles = yaml.safe_load(channel.metadata["offered_qos_profiles"])
        assert profiles and profiles[0]["reliability"] in ("reliable", "best_effort"), channel.topic
        assert profiles[0]["durability"] in ("volatile", "transient_local")
