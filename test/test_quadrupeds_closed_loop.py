"""Issue 13's acceptance for legged robots with default options, lock-step in MuJoCo.

Every shipped quadruped and four the package does not ship, each from its YAML file only
(Unitree A1, 14 kg; Go1, 13 kg; B1, 50 kg; HyQ, 87 kg: ``conftest.NEW_ROBOTS``), stands 5 s and then trots 5 s
at 0.2 m/s with ``wbc_qp`` and with ``qp_coulomb``, every option at its default: it does
not fall, the QP falls back on at most 0.1 % of the ticks, the pelvis holds its height
while standing, the trot reaches the commanded speed and the predicted contact forces are
the simulator's. Each tick runs compiled, as the node's loop does.
"""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from conftest import MORE_ROBOTS, NEW_ROBOTS, write_robot_file
from idyn_control import robots
from idyn_control.sim.faults import Faults
from idyn_control.sim.lockstep import LockstepRunner, Scenario, run_scenario
from idyn_control.sim.terrain import make_terrain

#: the shipped robots with point feet, then those described only by a file written here
QUADRUPEDS = tuple(n for n in robots.names() if robots.spec(n).contact_frames and robots.spec(n).hand is None) \
    + tuple(sorted(NEW_ROBOTS))
STAND_S, TROT_S, SPEED_M_S = 5.0, 5.0, 0.2


def test_the_set_covers_the_shipped_quadrupeds_and_a_heavy_unshipped_one(tmp_path):
    assert {"quadruped", "solo12", "go2", "anymal_c"} <= set(QUADRUPEDS)
    masses = {n: pin.computeTotalMass(robots.load(write_robot_file(tmp_path, n)).pin_model) for n in NEW_ROBOTS}
    assert len(masses) >= 2 and max(masses.values()) > 30.0, masses


@pytest.mark.parametrize("formulation", ["wbc_qp", "qp_coulomb"])
@pytest.mark.parametrize("robot", QUADRUPEDS)
def test_each_quadruped_stands_5_s_and_trots_5_s_with_default_options(robot, formulation, tmp_path):
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    run = run_scenario(Scenario(robot=source, formulation=formulation, duration=STAND_S + TROT_S,
                                trot_start=STAND_S, velocity=(SPEED_M_S, 0.0, 0.0), compiled=True))
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["ticks"] == int(round((STAND_S + TROT_S) / 1e-3))
    assert m["fallback_ticks"] <= 1e-3 * m["ticks"], m["fallback_ticks"]
    standing = (tr.t >= 1.0) & (tr.t < STAND_S)  # risen from the crouch
    assert np.ptp(tr.q[standing, 2]) < 0.01
    assert np.abs(tr.q[standing, 0] - tr.q[standing, 0].mean()).max() < 0.01  # stands still
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["force_error_sum_rel"] < 0.05, m


#: (robot, formulation, terrain) cells that fail today, with how (strict xfails). None since the
#: swing leaves and meets the ground vertically (``GaitConfig.vertical_fraction``) and ANYmal C
#: trots with a 0.5 s cycle (its file): before, ``qp_coulomb`` with μ = ∞ on compliant ground
#: fell in the trot on ANYmal C, Go2 and Go1 (a swing foot still travelling when it touched the
#: sticky ground was stopped dead) and predicted HyQ's summed normal force 62 % off (now 1.5 %).
#: Issue 10.
FAILS_TODAY: dict[tuple[str, str, str], str] = {}
TERRAINS = {"rigid_mu0.3": (0.3, False), "compliant_inf": (math.inf, True), "compliant_mu0.3": (0.3, True)}


def _cells() -> list:
    return [pytest.param(robot, formulation, terrain, id=f"{robot}-{formulation}-{terrain}",
                         marks=[pytest.mark.xfail(strict=True, reason=FAILS_TODAY[robot, formulation, terrain])]
                         if (robot, formulation, terrain) in FAILS_TODAY else [])
            for robot in QUADRUPEDS for formulation in ("wbc_qp", "qp_coulomb") for terrain in TERRAINS]


@pytest.mark.parametrize("robot, formulation, terrain", _cells())
def test_each_quadruped_trots_on_low_friction_and_compliant_ground(robot, formulation, terrain, tmp_path):
    """Beyond the default ground: μ = 0.3 on rigid and compliant ground (1 mm at rest) and
    μ = ∞ on compliant ground, stand 3 s then trot 5 s with default options: no fall, the
    commanded speed, the QP answering on ≥ 99.7 % of the ticks, the predicted summed
    normal force within 10 % of the simulator's."""
    friction, compliant = TERRAINS[terrain]
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    m = run_scenario(Scenario(robot=source, formulation=formulation, duration=8.0, trot_start=3.0,
                              friction=friction, compliant=compliant, compiled=True)).metrics
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["fallback_ticks"] <= 3e-3 * m["ticks"], m["fallback_ticks"]
    assert m["force_error_sum_rel"] < 0.1, m


#: the shipped quadrupeds: each file tunes the pid baseline's torque gain
SHIPPED = tuple(n for n in QUADRUPEDS if n not in NEW_ROBOTS)
PID_GROUNDS = {"rigid_mu0.3": dict(friction=0.3), "compliant_inf": dict(friction=math.inf, compliant=True),
               "heightmap": dict(terrain="heightmap", terrain_seed=2)}


@pytest.mark.parametrize("ground", sorted(PID_GROUNDS))
@pytest.mark.parametrize("robot", SHIPPED)
def test_the_pid_baseline_stands_and_trots_each_shipped_quadruped(robot, ground):
    """`pid` with the robot file's defaults: stand 1 s, trot 5 s at 0.2 m/s without a fall,
    tracking the joints to a few hundredths of a radian, within the torque limits."""
    run = run_scenario(Scenario(robot=robot, formulation="pid", duration=6.0, trot_start=1.0,
                                **PID_GROUNDS[ground]))
    m = run.metrics
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["joint_position_error_rad"] < 0.06, m
    assert np.all(np.abs(run.trace.tau) <= robots.load(robot).tau_max + 1e-9)


@pytest.mark.parametrize("ground", sorted(PID_GROUNDS))
@pytest.mark.parametrize("robot", sorted(NEW_ROBOTS) + sorted(MORE_ROBOTS))
def test_the_pid_baseline_walks_a_robot_whose_file_does_not_tune_it(robot, ground, tmp_path):
    """`pid` with its own defaults (a shared torque gain from the joints' inertia, ``ki``
    10/s) on seven quadrupeds whose files say nothing of it: stand 1 s, trot 5 s at 0.2 m/s
    without a fall, tracking the joints to a few hundredths of a radian, within the torque
    limits. With the former defaults (diag(M) at the neutral pose, no integral) every cell
    failed: 20 fell, 19 of them within 0.33 s."""
    source = write_robot_file(tmp_path, robot)
    assert "formulation_defaults" not in source.read_text()
    run = run_scenario(Scenario(robot=str(source), formulation="pid", duration=6.0, trot_start=1.0,
                                **PID_GROUNDS[ground]))
    m = run.metrics
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["joint_position_error_rad"] < 0.06, m
    assert np.all(np.abs(run.trace.tau) <= robots.load(str(source)).tau_max + 1e-9)


@pytest.mark.parametrize("robot", ["anymal_c", "b1", "hyq"])
def test_a_large_quadruped_starts_on_the_flat_and_trots_over_the_heightmaps_bumps(robot, tmp_path):
    """The height map's flat start is as wide as the robot's feet: before, it was the project
    quadruped's (0.22 m) and HyQ's feet stood up to 29 mm inside a bump of seed 0's map,
    MuJoCo pushed them out sideways and HyQ fell at 2.6 s. Stand 1 s, trot 4 s at 0.2 m/s
    over seed 0's bumps with ``qp_coulomb``: no fall, the speed, the predicted summed normal
    force within 5 %, and the feet stood on bumps (≥ 5 mm high)."""
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    runner = LockstepRunner(Scenario(robot=source, formulation="qp_coulomb", duration=5.0, trot_start=1.0,
                                     terrain="heightmap", terrain_seed=0, velocity=(SPEED_M_S, 0.0, 0.0)))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["force_error_sum_rel"] < 0.05, m
    model = runner.robot
    data = model.pin_model.createData()
    stood = 0.0
    for i in range(0, tr.n, 10):
        pin.framesForwardKinematics(model.pin_model, data, tr.q[i])
        for k, f in enumerate(model.contact_frame_ids):
            if tr.contact[i, k]:
                stood = max(stood, runner.terrain.height(*data.oMf[f].translation[:2]))
    assert stood > 0.005, stood


@pytest.mark.parametrize("formulation, velocity", [("qp_coulomb", (0.4, 0.0, 0.0)), ("qp_coulomb", (0.1, 0.0, 0.5)),
                                                   ("wbc_qp", (0.1, 0.0, 0.5)), ("wbc_qp", (0.0, 0.0, 0.8))])
def test_anymal_c_trots_faster_and_turns_without_tripping_over_its_hind_feet(formulation, velocity):
    """ANYmal C at 0.4 m/s (its file's ``qp_coulomb``) and turning at 0.5 rad/s: its hind
    feet touch the ground mid-swing, and planted there they landed ever shorter of their
    footholds (9, 19, 56 … 316 mm) until it fell at 4.1 s at 0.4 m/s (``wbc_qp`` turning fell
    at 2.6 s). With ``gait.touchdown_reach`` they swing on. Turning in place, ``wbc_qp`` fell
    at 2.5 s after one tick in which both stance feet left the rigid ground: its file ramps a
    broken contact's force bound down over 5 ms (``controller.contact_ramp_time``). No fall,
    the commanded velocity, the predicted summed normal force within 10 %."""
    run = run_scenario(Scenario(robot="anymal_c", formulation=formulation, duration=6.0, trot_start=1.0,
                                velocity=velocity, compiled=True))
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["compiled_tick_fraction"] > 0.999
    late = tr.t[:tr.n] >= 2.0
    q = tr.q[:tr.n][late]
    span = tr.t[:tr.n][late][-1] - tr.t[:tr.n][late][0]
    yaw = np.unwrap(2.0 * np.arctan2(q[:, 5], q[:, 6]))
    assert (yaw[-1] - yaw[0]) / span == pytest.approx(velocity[2], abs=0.05)
    if velocity[2] == 0.0:
        assert (q[-1, 0] - q[0, 0]) / span == pytest.approx(velocity[0], rel=0.1)
    assert m["force_error_sum_rel"] < 0.1, m


#: robots that do not turn in place at TURN_RATE on rigid μ 0.1 today, with how (strict xfails).
#: ANYmal C, measured 2026-11-29: its swing feet accelerate so hard that the two stance feet
#: cannot hold the yaw; the body's yaw rate drops in each stance and overshoots after, the
#: torques saturate at 80 N·m. `wbc_qp` falls at 4.6 s; `qp_coulomb` turns but predicts the
#: summed normal force 36 % off. (Rigid μ 0.7: 12 % off, 3.5 % with duty factor 0.65; README,
#: "Other robots on the same pipeline".) Issue 10.
TURN_FAILS_TODAY = {("anymal_c", "wbc_qp"): "falls at 4.6 s", ("anymal_c", "qp_coulomb"): "36 % force error"}
TURN_RATE = 1.0  # [rad/s] seed 000's waypoint task turns in place at up to 1 rad/s


def _turn_cells() -> list:
    return [pytest.param(robot, formulation, id=f"{robot}-{formulation}",
                         marks=[pytest.mark.xfail(strict=True, reason=TURN_FAILS_TODAY[robot, formulation])]
                         if (robot, formulation) in TURN_FAILS_TODAY else [])
            for robot in QUADRUPEDS for formulation in ("wbc_qp", "qp_coulomb")]


@pytest.mark.parametrize("robot, formulation", _turn_cells())
def test_each_quadruped_turns_in_place_on_low_friction_ground(robot, formulation, tmp_path):
    """Stand 1 s, then turn in place at 1 rad/s for 7 s on rigid μ 0.1 (seed 000's waypoint
    task turns so at each waypoint), default options, compiled ticks: no fall, the
    commanded yaw rate, the base within 8 cm of where it stood, the predicted summed normal
    force within 5 % of the simulator's."""
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    run = run_scenario(Scenario(robot=source, formulation=formulation, friction=0.1, duration=8.0, trot_start=1.0,
                                velocity=(0.0, 0.0, TURN_RATE), compiled=True))
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    late = tr.t >= 3.0
    yaw = np.unwrap(2.0 * np.arctan2(tr.q[late, 5], tr.q[late, 6]))
    assert (yaw[-1] - yaw[0]) / (tr.t[late][-1] - tr.t[late][0]) == pytest.approx(TURN_RATE, abs=0.05)
    assert np.hypot(*(tr.q[-1, :2] - tr.q[0, :2])) < 0.08
    assert m["force_error_sum_rel"] < 0.05, m


@pytest.mark.parametrize("robot", ["go1", "hyq"])
def test_qp_coulomb_on_sticky_compliant_ground_predicts_forces_the_ground_gives_from_any_trot_start(robot, tmp_path):
    """Compliant μ∞ ground (the controller told μ 1000, clamped to ``contacts.MU_MAX``),
    trot starts 1.0–2.5 s: no fall, the summed normal force within 5 %, and no predicted
    force above the robot's weight. With μ 1000 Stage I met its base wrench with equal
    and opposite forces of 10³–10⁶ N along the line between two stance feet: Go1 fell from
    6 of 8 trot starts (0.5–4 s) and HyQ predicted its forces up to 400 % off."""
    path = str(write_robot_file(tmp_path, robot))
    weight = 9.81 * pin.computeTotalMass(robots.load(path).pin_model)
    for start in (1.0, 1.5, 2.0, 2.5):
        run = run_scenario(Scenario(robot=path, formulation="qp_coulomb", duration=start + 4.0, trot_start=start,
                                    friction=math.inf, compliant=True, compiled=True))
        m, tr = run.metrics, run.trace
        assert not m["fell"], (start, m)
        assert m["force_error_sum_rel"] < 0.05, (start, m["force_error_sum_rel"])
        assert np.abs(tr.f_pred[:tr.n]).max() < weight, (start, np.abs(tr.f_pred[:tr.n]).max(), weight)


def _ramp_run(source: str, formulation: str, slope_deg: float, known: bool, **gait):
    """Stand 1 s, trot at 0.2 m/s across the whole ramp of ``slope_deg``: (runner, run)."""
    ramp = make_terrain("ramp", 0, robots.standing_footprint(robots.load(source), source), slope_deg)
    duration = 1.0 + (ramp.start_m + 2.0 * ramp.climb_m + ramp.top_m + 0.3) / SPEED_M_S
    runner = LockstepRunner(Scenario(robot=source, formulation=formulation, duration=duration, trot_start=1.0,
                                     terrain="ramp", ramp_slope_deg=slope_deg, terrain_known=known,
                                     velocity=(SPEED_M_S, 0.0, 0.0), compiled=not known, gait_config=gait))
    return runner, runner.run()


@pytest.mark.parametrize("robot, formulation, known", [
    ("solo12", "qp_coulomb", False), ("solo12", "wbc_qp", True), ("go2", "qp_coulomb", False), ("go2", "wbc_qp", True),
    ("anymal_c", "qp_coulomb", True), ("anymal_c", "wbc_qp", False), ("a1", "wbc_qp", True), ("hyq", "qp_coulomb", False)])
def test_each_quadruped_walks_up_and_down_a_10_degree_ramp(robot, formulation, known, tmp_path):
    """Terrain "ramp": 10° up, a flat top, 10° down. Told the ramp (``known``: footholds on it,
    its normals to the controller) or blind (told nothing, compiled ticks), the gait fits a
    plane through the footholds (``gait.follow_ground``) and the base keeps its standing
    height above it. Without that it kept its start height and fell (the next test). Stand
    1 s, trot at 0.2 m/s across the whole ramp: no fall, the speed, the base's height above
    the ground within 20 % of the standing one, the summed normal force within 10 %."""
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    runner, run = _ramp_run(source, formulation, 10.0, known)
    ramp = runner.terrain
    far_end = ramp.start_m + 2.0 * ramp.climb_m + ramp.top_m
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["fallback_ticks"] <= 1e-3 * m["ticks"], m["fallback_ticks"]
    if not known:
        assert m["compiled_tick_fraction"] > 0.999
    assert tr.q[tr.n - 1, 0] > far_end + 0.2
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    standing = runner.q_standing[2] - runner.gait.ground_height
    above = np.array([tr.q[i, 2] - ramp.height(tr.q[i, 0], tr.q[i, 1]) for i in range(1000, tr.n, 10)])
    assert np.all(np.abs(above - standing) < 0.2 * standing), (above.min(), above.max(), standing)
    assert tr.q[:tr.n, 2].max() > runner.q_standing[2] + 0.5 * ramp.rise_m  # it went up (a long robot spans the top)
    assert m["force_error_sum_rel"] < 0.1, m


def test_without_following_the_ground_solo12_keeps_its_start_height_and_crouches_on_the_ramp():
    """The same ramp with ``gait.follow_ground`` false (the ground stays at the level the
    robot stood up on): the base keeps its start height, so on the top it stands lower
    above the ground by the ramp's rise (a 1 m climb at 10°, 18 cm, made Solo12 fall)."""
    runner = LockstepRunner(Scenario(robot="solo12", formulation="qp_coulomb", duration=8.0, trot_start=1.0,
                                     terrain="ramp", velocity=(SPEED_M_S, 0.0, 0.0),
                                     gait_config={"follow_ground": False}))
    tr = runner.run().trace
    ramp = runner.terrain
    standing = runner.q_standing[2] - runner.gait.ground_height
    above = min(tr.q[i, 2] - ramp.height(tr.q[i, 0], tr.q[i, 1]) for i in range(1000, tr.n, 10))
    assert above < standing - 0.8 * ramp.rise_m, (above, standing)


def _pitch(q: np.ndarray) -> float:
    """The base's pitch [rad] (nose up < 0, a rotation about y), of a configuration."""
    R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
    return -math.asin(max(-1.0, min(1.0, R[2, 0])))


@pytest.mark.parametrize("robot, formulation, known", [
    ("anymal_c", "qp_coulomb", True), ("anymal_c", "qp_coulomb", False), ("solo12", "wbc_qp", True),
    ("go2", "wbc_qp", False), ("hyq", "wbc_qp", True), ("b1", "qp_coulomb", False)])
def test_each_quadruped_walks_a_15_degree_ramp_with_its_body_parallel_to_it(robot, formulation, known, tmp_path):
    """A 15° ramp (0.27 of the climb's length up): the base pitches with the footholds' plane
    (``gait.ground_tilt`` 1), nose up on the climb and down on the descent. No fall, the
    speed, and the base's pitch on the middle of the climb within 5° of the slope's (next
    test: with the body level ANYmal C falls)."""
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    runner, run = _ramp_run(source, formulation, 15.0, known)
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    ramp = runner.terrain
    assert tr.q[tr.n - 1, 0] > ramp.start_m + 2.0 * ramp.climb_m + ramp.top_m + 0.2
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    x = tr.q[:tr.n, 0]
    climb = np.flatnonzero(np.abs(x - (ramp.start_m + 0.5 * ramp.climb_m)) < 0.05)
    descent = np.flatnonzero(np.abs(x - (ramp.start_m + 1.5 * ramp.climb_m + ramp.top_m)) < 0.05)
    slope = math.radians(15.0)
    assert abs(np.mean([_pitch(tr.q[i]) for i in climb]) + slope) < math.radians(5.0)
    assert abs(np.mean([_pitch(tr.q[i]) for i in descent]) - slope) < math.radians(5.0)
    assert m["force_error_sum_rel"] < 0.12, m


def test_with_its_body_level_anymal_c_falls_on_the_15_degree_ramp():
    """The same ramp, told the terrain, with ``gait.ground_tilt`` 0 (the base level whatever
    the ground): ANYmal C's hind legs stretch and its front legs fold on the climb; it falls."""
    _, run = _ramp_run("anymal_c", "qp_coulomb", 15.0, True, ground_tilt=0.0)
    assert run.metrics["fell"], run.metrics


@pytest.mark.parametrize("robot", ["solo12", "go1", "hyq"])
def test_blind_wbc_qp_walks_a_20_degree_ramp_its_late_feet_going_on_down(robot, tmp_path):
    """Blind (told nothing, compiled ticks) on a 20° ramp a swing often ends above the
    ground: the plane through the last footholds misses it. A foot that has not landed then
    goes on down at ``gait.late_descent_speed`` (0.3 m/s) for up to 0.1 s before it is
    planted: no fall, the speed. At 0.1 m/s (next test) it was planted in the air."""
    source = str(write_robot_file(tmp_path, robot)) if robot in NEW_ROBOTS else robot
    runner, run = _ramp_run(source, "wbc_qp", 20.0, False)
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    ramp = runner.terrain
    assert tr.q[tr.n - 1, 0] > ramp.start_m + 2.0 * ramp.climb_m + ramp.top_m + 0.2
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m


def test_blind_with_a_slow_late_descent_solo12_falls_on_the_20_degree_ramp():
    _, run = _ramp_run("solo12", "wbc_qp", 20.0, False, late_descent_speed=0.1)
    assert run.metrics["fell"], run.metrics


def test_the_gait_knows_which_robots_cannot_step_sideways(tmp_path):
    """Every quadruped of the other tests moves its feet sideways; Solo 8's legs (hip and
    knee pitch only) cannot, so its gait realizes forward speed alone."""
    from idyn_control.controller import Controller
    from idyn_control.gait import Gait

    for robot in QUADRUPEDS + tuple(sorted(MORE_ROBOTS)):
        source = robot if robot in robots.names() else str(write_robot_file(tmp_path, robot))
        model = robots.load(source)
        gait = Gait(Controller(model), robots.standing_configuration(model, source))
        expected = [1.0, 0.0, 0.0] if robot == "solo8" else [1.0, 1.0, 1.0]
        assert gait.velocity_axes.tolist() == expected, robot
        gait.set_velocity(0.2, 0.1, 0.5)
        assert gait.velocity_command.tolist() == pytest.approx([0.2, 0.1 * expected[1], 0.5 * expected[2]]), robot


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("friction", [0.7, 0.1])
def test_solo8_told_to_turn_and_step_sideways_trots_straight_on(friction, compiled, tmp_path):
    """Solo 8 commanded (0.2 m/s, 0.1 m/s, 0.5 rad/s): its gait holds the lateral speed and the
    yaw rate at 0 (a stance phase's two diagonal feet, held by the ground, lock the body's yaw)
    and it trots straight ahead at 0.2 m/s: no fall, heading within 0.1 rad, no sideways
    drift, the QP's predicted forces within 5 %. Commanded the turn (0.3 rad/s, rigid μ∞) it
    fell within 3 s. (On MuJoCo's μ∞ ground its four sagittal legs clamp the ground sideways
    with hundreds of newtons that cancel out, which no joint feels; the joints then track
    ten times worse, so that ground is not tried here.)"""
    source = str(write_robot_file(tmp_path, "solo8"))
    run = run_scenario(Scenario(robot=source, formulation="qp_coulomb", duration=6.0, trot_start=1.0,
                                velocity=(SPEED_M_S, 0.1, 0.5), friction=friction, compiled=compiled))
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    q = tr.q
    yaw = np.arctan2(2 * (q[:, 6] * q[:, 5] + q[:, 3] * q[:, 4]), 1 - 2 * (q[:, 4] ** 2 + q[:, 5] ** 2))
    assert np.abs(yaw).max() < 0.1, np.abs(yaw).max()
    later = tr.t >= 2.0
    forward = (q[later, 0][-1] - q[later, 0][0]) / (tr.t[later][-1] - tr.t[later][0])
    assert forward == pytest.approx(SPEED_M_S, rel=0.15)
    assert abs(q[-1, 1] - q[0, 1]) < 0.05
    assert m["force_error_sum_rel"] < 0.05, m


@pytest.mark.parametrize("compiled, friction", [(True, 0.5), (True, 0.3), (True, 0.2), (False, 0.5)])
def test_solo8_without_effort_limits_trots_with_wbc_qp_on_torques_its_motors_have(compiled, friction, tmp_path):
    """A Solo 8 file that does not set ``effort_limit`` (its URDF says 1000 N·m: nothing
    bounds the QP's torques) trots 5 s at 0.2 m/s with ``wbc_qp``: no fall, the commanded
    speed, forces predicted within 5 %, and every torque below the 2.7 N·m its motors give.
    Its legs cannot move a foot sideways, so with three feet down the feet's sideways rows
    are nearly dependent (wbc_qp.CONTACT_RANK_TOLERANCE): held exactly, a landing's QP asked
    for 120 rad/s² of roll and 230 N at one foot, and the robot fell 0.3 s into the trot."""
    source = str(write_robot_file(tmp_path, "solo8"))
    run = run_scenario(Scenario(robot=source, formulation="wbc_qp", duration=6.0, trot_start=1.0,
                                velocity=(SPEED_M_S, 0.0, 0.0), friction=friction, compiled=compiled))
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    q, later = tr.q, tr.t >= 2.0
    forward = (q[later, 0][-1] - q[later, 0][0]) / (tr.t[later][-1] - tr.t[later][0])
    assert forward == pytest.approx(SPEED_M_S, rel=0.15)
    assert m["force_error_sum_rel"] < 0.05, m
    assert np.abs(tr.tau).max() < 2.7


#: the waypoint task on rigid μ 0.1: cells that fall today (strict xfails)
WAYPOINT_FAILS = {
    ("quadruped", "wbc_qp"): "marginal: falls at 5.6 s here; with the trot from 1 s it walked 20 s compiled and fell "
                             "at 17.1 s in Python",
    ("anymal_c", "wbc_qp"): "falls at 5.0 s in the first turn in place (see the turning test above)",
    ("anymal_c", "qp_coulomb"): "falls at 6.6 s in the first turn in place (see the turning test above)",
}


def _waypoint_cells() -> list:
    return [pytest.param(robot, formulation, id=f"{robot}-{formulation}",
                         marks=[pytest.mark.xfail(strict=True, reason=WAYPOINT_FAILS[robot, formulation])]
                         if (robot, formulation) in WAYPOINT_FAILS else [])
            for robot in QUADRUPEDS + tuple(sorted(set(MORE_ROBOTS) - {"solo8"}))
            for formulation in ("wbc_qp", "qp_coulomb")]


@pytest.mark.parametrize("robot, formulation", _waypoint_cells())
def test_each_quadruped_walks_the_waypoint_task_on_low_friction_ground(robot, formulation, tmp_path):
    """Seed 000's waypoint task (accelerate from rest, turn in place, turn while moving) for
    20 s on rigid μ 0.1, compiled ticks: no fall, two waypoints reached, the predicted summed
    normal force within 5 %. The turns push the feet sideways along the friction pyramid's
    diagonals; while ``wbc_qp`` planned in the square pyramid (up to √2 μ there), the
    project quadruped, ANYmal C, B1, HyQ, Laikago and ANYmal B fell (Python ticks, trot from
    1 s)."""
    source = robot if robot in robots.names() else str(write_robot_file(tmp_path, robot))
    run = run_scenario(Scenario(robot=source, formulation=formulation, duration=20.0, task="waypoints",
                                friction=0.1, compiled=True))
    m = run.metrics
    assert not m["fell"], m
    assert m["waypoints_reached"] >= 2, m
    assert m["force_error_sum_rel"] < 0.05, m


#: (vx, vy) [m/s], μ, compliant ground: backwards on soft ground, sideways on μ 0.5
STEPS = {"backwards": ((-0.2, 0.0), 0.8, True), "sideways": ((0.0, 0.15), 0.5, False)}


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("robot", QUADRUPEDS + tuple(sorted(set(MORE_ROBOTS) - {"solo8"})))
def test_each_quadruped_trots_backwards_or_sideways_then_stops_and_stands(robot, step, tmp_path):
    """Stand 1 s, trot backwards (compliant ground, μ 0.8) or sideways (rigid μ 0.5) for 4 s,
    then the stop: the gait ramps the command down, lands its feet and stands. Compiled
    ticks, every option at its default. No fall, the commanded speed (±15 %) along the
    command and not across it, standing still at the end (the base moves < 5 mm in the
    last 0.5 s, all feet planned down) and the predicted summed normal force within 5 %."""
    (vx, vy), mu, compliant = STEPS[step]
    source = robot if robot in robots.names() else str(write_robot_file(tmp_path, robot))
    runner = LockstepRunner(Scenario(robot=source, formulation="qp_coulomb", duration=8.0, trot_start=1.0,
                                     trot_stop=5.0, velocity=(vx, vy, 0.0), friction=mu, compliant=compliant,
                                     compiled=True))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    speed = math.hypot(vx, vy)
    assert m["speed_along_command_m_s"] == pytest.approx(speed, rel=0.15), m
    walk = (tr.t >= 2.0) & (tr.t <= 5.0)
    i0, i1 = np.flatnonzero(walk)[[0, -1]]
    across = np.array([-vy, vx]) / speed
    assert abs(across @ (tr.q[i1, :2] - tr.q[i0, :2])) < 0.15 * speed * (tr.t[i1] - tr.t[i0])  # no drift across
    end = tr.t >= tr.t[-1] - 0.5
    assert np.hypot(*np.ptp(tr.q[end, :2], axis=0)) < 0.005
    assert tr.planned_stance[end].all() and runner.gait.mode == "stand"
    assert m["force_error_sum_rel"] < 0.05, m


@pytest.mark.parametrize("mass_error", [0.15, -0.15])
@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
@pytest.mark.parametrize("robot", QUADRUPEDS + tuple(sorted(MORE_ROBOTS)))
def test_each_quadruped_trots_with_a_model_15_percent_too_heavy_or_too_light(robot, formulation, mass_error,
                                                                           tmp_path):
    """Every link of the controller's model 15 % heavier or lighter than the simulated robot
    (``Faults.mass_error``: a payload, a battery, a wrong URDF), compiled ticks, rigid μ 0.6:
    stand 1 s, trot 5 s at 0.2 m/s. No fall, the commanded speed, and the summed normal force
    predicted within 6 % (the joint feedback makes up most of the model's 15 %: 0.6–4.6 % on
    these robots, measured 2026-11-30)."""
    source = robot if robot in robots.names() else str(write_robot_file(tmp_path, robot))
    run = run_scenario(Scenario(robot=source, formulation=formulation, duration=6.0, trot_start=1.0,
                                velocity=(SPEED_M_S, 0.0, 0.0), friction=0.6, compiled=True,
                                faults=Faults(mass_error=mass_error)))
    m = run.metrics
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["force_error_sum_rel"] < 0.06, m
