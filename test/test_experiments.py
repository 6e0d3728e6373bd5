"""Seed 000 §7.5–7.6 scenarios and the ``experiments seed000`` runner (real MuJoCo, no mocks)."""

from __future__ import annotations

import json
import math

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import cli, robots
from idyn_control.controller import Controller, ControllerConfig
from idyn_control.experiments import CONTROLLERS, GROUNDS, PAPER, cells
from idyn_control.sim import build_mujoco
from idyn_control.sim.lockstep import LockstepRunner, Scenario
from idyn_control.sim.tasks import MOVE, TURN, WaypointConfig, WaypointPolicy, base_yaw
from idyn_control.sim.terrain import HeightMap

#: wbc_qp: the formulation that trots reliably in closed loop today (the task is under test)
TROT_FORMULATION = "wbc_qp"


# ---------------------------------------------------------------------------- waypoint task
def test_waypoint_policy_turns_in_place_then_walks():
    """From (0.25, 0) facing +x, the next waypoint (0, 0.25) is 135° away: the robot stops
    and turns in place first, then walks toward it at the commanded speed (seed 000 §7.6)."""
    cfg = WaypointConfig()
    policy = WaypointPolicy(cfg)
    policy.target = 2
    q = np.zeros(19)
    q[6] = 1.0
    q[0] = 0.25
    vx, vy, wz = policy.command(0.0, q)
    assert policy.mode == TURN and vx == 0.0 and vy == 0.0 and wz == pytest.approx(cfg.max_yaw_rate_rad_s)
    q[3:7] = (0.0, 0.0, math.sin(0.5 * 3 * math.pi / 4), math.cos(0.5 * 3 * math.pi / 4))  # facing it
    vx, _, wz = policy.command(0.1, q)
    assert policy.mode == MOVE and vx == pytest.approx(cfg.speed_m_s) and abs(wz) < 1e-9


def test_waypoint_task_closed_loop_reaches_turns_and_walks():
    """Closed loop: the first waypoint is reached walking, then the robot turns in place
    (heading changes, position does not) toward the second, and walks at ≈ 0.2 m/s."""
    runner = LockstepRunner(Scenario(formulation=TROT_FORMULATION, duration=4.0, task="waypoints"))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"]
    assert m["waypoints_reached"] >= 1
    t_reach = m["waypoint_times_s"][0]
    i = int(np.searchsorted(tr.t, t_reach))
    assert np.hypot(*(tr.q[i, :2] - (0.25, 0.0))) < 0.05
    j = int(np.searchsorted(tr.t, t_reach + 1.5))
    yaw_i, yaw_j = base_yaw(tr.q[i]), base_yaw(tr.q[j])
    assert yaw_j - yaw_i > 0.5                                 # turned left, toward (0, 0.25)
    assert np.hypot(*(tr.q[j, :2] - tr.q[i, :2])) < 0.04       # ... in place
    assert 0.15 < m["speed_moving_m_s"] < 0.25                 # walking speed vs the 0.2 m/s command
    assert m["turning_fraction"] > 0.1


# ---------------------------------------------------------------------------- height map
def test_heightmap_bumps_friction_normals():
    hm = HeightMap(seed=3)
    assert hm.heights.min() >= 0.0 and hm.heights.max() == pytest.approx(0.03)   # bumps ≤ 3 cm
    assert np.all((hm.mu >= 0.1) & (hm.mu <= 1.5)) and hm.mu.std() > 0.2
    nz = hm.cell_normals[..., 2]
    assert nz.min() < math.cos(math.radians(5.0))              # non-vertical normals exist
    assert hm.height(0.0, 0.0) == 0.0 and hm.normal(0.05, -0.05)[2] == 1.0  # flat start
    assert np.array_equal(HeightMap(seed=3).heights, hm.heights) and not np.array_equal(HeightMap(seed=4).mu, hm.mu)
    # MuJoCo's ground is the same surface: a ray down hits it at HeightMap.height
    import mujoco

    sim = build_mujoco(robots.load("quadruped"), terrain=hm)
    mujoco.mj_forward(sim.model, sim.data)
    rng = np.random.default_rng(0)
    geom = np.zeros(1, np.int32)
    for x, y in rng.uniform(-0.9, 0.9, size=(20, 2)):
        dist = mujoco.mj_ray(sim.model, sim.data, np.array([x, y, 1.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
        assert 1.0 - dist == pytest.approx(hm.height(x, y), abs=2e-4)
        row, col = hm.patch(x, y)
        assert sim.model.geom_friction[geom[0], 0] == pytest.approx(hm.mu[row, col])


def test_heightmap_is_surrounded_by_flat_ground():
    """Off the map the ground is flat at z = 0 with μ = outside_mu, in the controller's
    view and in MuJoCo's; the bumps fade out before the edge, and the fade leaves the
    map's inside as it was."""
    import mujoco
    from idyn_control.sim.terrain import HeightMapConfig

    hm = HeightMap(seed=1)
    half = 0.5 * hm.config.size_m
    assert hm.heights[0].max() == hm.heights[-1].max() == hm.heights[:, 0].max() == hm.heights[:, -1].max() == 0.0
    for x, y in ((half + 0.3, 0.1), (-half - 2.0, half + 1.0), (0.2, -half - 0.01)):
        assert hm.height(x, y) == 0.0 and hm.friction(x, y) == hm.config.outside_mu
        assert np.array_equal(hm.normal(x, y), [0.0, 0.0, 1.0])
    narrow = HeightMap(HeightMapConfig(border_m=0.01), seed=1)
    inside = np.abs(np.linspace(-half, half, hm.n_samples)) <= half - hm.config.border_m
    assert np.array_equal(narrow.heights[np.ix_(inside, inside)], hm.heights[np.ix_(inside, inside)])
    sim = build_mujoco(robots.load("quadruped"), terrain=hm)
    mujoco.mj_forward(sim.model, sim.data)
    geom = np.zeros(1, np.int32)
    for x, y in ((half + 0.05, 0.0), (0.0, -half - 3.0), (-half - 10.0, half + 10.0), (half - 0.005, 0.33)):
        dist = mujoco.mj_ray(sim.model, sim.data, np.array([x, y, 1.0]), np.array([0.0, 0.0, -1.0]), None, 1, -1, geom)
        assert 1.0 - dist == pytest.approx(hm.height(x, y), abs=2e-4)
        assert sim.model.geom_friction[geom[0], 0] == pytest.approx(hm.friction(x, y))


@pytest.mark.parametrize("robot", ["quadruped", "solo12", "anymal_c", "hyq"])
def test_the_heightmaps_flat_start_holds_the_robots_feet(robot, tmp_path):
    """Every foot of the standing robot is on the flat start with START_CLEARANCE_M to spare
    (HyQ's stood up to 29 mm inside a bump of seed 0's map), the map grows by as much, so
    the bumpy ring is as wide as seed 000's, and the project quadruped's maps are seed 000's."""
    from conftest import NEW_ROBOTS, write_robot_file
    from idyn_control.sim.terrain import START_CLEARANCE_M, HeightMapConfig, heightmap_config, make_terrain

    source = write_robot_file(tmp_path, robot) if robot in NEW_ROBOTS else robot
    model = robots.load(source)
    q = robots.standing_configuration(model, source)
    footprint = robots.footprint_radius(model, q)
    default = HeightMapConfig()
    config = heightmap_config(footprint)
    assert config.flat_radius_m >= footprint + START_CLEARANCE_M - 1e-12
    assert config.size_m / 2 - config.flat_radius_m >= default.size_m / 2 - default.flat_radius_m - 1e-12
    if robot == "quadruped":
        assert config == default
        assert np.array_equal(make_terrain("heightmap", 0, footprint).heights, HeightMap(seed=0).heights)
    data = model.pin_model.createData()
    pin.framesForwardKinematics(model.pin_model, data, q)
    for seed in range(3):
        terrain = make_terrain("heightmap", seed, footprint)
        for f in model.contact_frame_ids:
            x, y = data.oMf[f].translation[:2]
            for dx, dy in ((0.0, 0.0), (0.05, 0.0), (-0.05, 0.0), (0.0, 0.05), (0.0, -0.05)):
                assert terrain.height(x + dx, y + dy) == 0.0
        assert 0.5 * default.bump_height_m < terrain.heights.max() <= default.bump_height_m + 1e-12  # bumps


def test_heightmap_config_refuses_a_negative_footprint():
    from idyn_control.errors import ConfigError
    from idyn_control.sim.terrain import heightmap_config

    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ConfigError, match="footprint_m"):
            heightmap_config(bad)


@pytest.mark.parametrize("robot", ["quadruped", "go2"])
def test_a_straight_trot_walks_off_the_heightmap(robot):
    """Trotting straight at 0.2 m/s, the robot crosses the map's edge (1 m from the
    origin) at ≈ 5 s and trots on over the flat ground around it; without that ground it
    fell off the world's edge there. The controller is told the ground's μ out there."""
    runner = LockstepRunner(Scenario(robot=robot, formulation="qp_coulomb", duration=8.0, trot_start=1.0,
                                     terrain="heightmap", terrain_seed=1, velocity=(0.2, 0.0, 0.0)))
    run = runner.run()
    m = run.metrics
    assert not m["fell"] and m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.1)
    assert run.trace.q[-1, 0] > 0.5 * runner.terrain.config.size_m + 0.25
    cs = runner.controller.formulation.contacts
    touching = np.flatnonzero(run.trace.contact[-1])
    assert touching.size >= 2 and np.all(cs.mu[touching] == runner.terrain.config.outside_mu)


def test_controller_gets_the_local_surface_under_a_foot():
    """Each foot in contact gets the terrain's μ and normal; rows rebuilt only on change."""
    ctrl = Controller(robots.load("quadruped"), ControllerConfig(formulation="qp_coulomb"))
    cs = ctrl.formulation.contacts
    n = np.array([0.2, -0.1, 1.0])
    v0 = cs.version
    assert ctrl.set_contact_surface(2, n, 0.37)
    assert not ctrl.set_contact_surface(2, n, 0.37)
    assert cs.version == v0 + 1
    assert cs.mu[2] == 0.37 and np.allclose(cs.basis[2, 2], n / np.linalg.norm(n))
    assert np.allclose(cs.basis[2] @ cs.basis[2].T, np.eye(3))
    f_edge = 0.37 * cs.basis[2, 0] + cs.basis[2, 2]               # on the pyramid's facet
    assert cs.friction_rows[2, 0] @ f_edge == pytest.approx(0.0, abs=1e-12)

    runner = LockstepRunner(Scenario(formulation=TROT_FORMULATION, duration=2.0, terrain="heightmap",
                                     terrain_seed=1, velocity=(0.2, 0.0, 0.0)))
    run = runner.run()
    assert not run.metrics["fell"] and run.metrics["surface_updates"] > 4
    cs, sim, hm = runner.controller.formulation.contacts, runner.sim, runner.terrain
    checked = 0
    for i, c in enumerate(sim.contacts):  # the feet in contact at the last tick (1 ms ago: same patch)
        if run.trace.contact[-1, i]:
            normal, mu = hm.surface_at(*sim.data.site_xpos[c.site_id, :2])
            assert cs.mu[i] == mu and cs.basis[i, 2] @ normal > math.cos(math.radians(2.0))
            checked += 1
    assert checked >= 2


def test_a_blind_controller_is_told_nothing_of_the_height_map():
    """``terrain_known=False`` (what the ROS demo's ``--blind`` runs): no surface reaches the
    controller, which keeps its one μ and vertical normals, the gait plans on flat ground,
    the tick runs compiled; the fall is still judged on the true ground."""
    runner = LockstepRunner(Scenario(formulation=TROT_FORMULATION, duration=2.0, terrain="heightmap",
                                     terrain_seed=1, friction=0.4, terrain_known=False, compiled=True))
    run = runner.run()
    m = run.metrics
    assert m["surface_updates"] == 0 and m["compiled_tick_fraction"] > 0.99
    cs = runner.controller.formulation.contacts
    assert np.all(cs.mu == 0.4) and np.all(cs.basis[:, 2] == [0.0, 0.0, 1.0])
    assert runner.gait.terrain_height is None
    assert not m["fell"] and run.trace.q[-1, 0] > 0.15  # walked onto the bumps (they start at 0.22 m)


# ---------------------------------------------------------------------------- runner
def test_cells_and_paper_tables_cover_the_grid():
    full = cells()
    assert len([c for c in full if c.group == "planar"]) == len(CONTROLLERS) * len(GROUNDS) == 28
    assert {c.ground for c in full if c.group == "heightmap"} == {"seed0", "seed1", "seed2"}
    assert all(c.duration_s == 30.0 and c.task == "waypoints" for c in full if c.group != "manipulator")
    grasp = [c for c in full if c.group == "manipulator"]
    assert {(c.ground, c.controller) for c in grasp} == {(g, k) for g in ("mu_inf", "mu1.0")
                                                          for k in ("qp_coulomb", "sensed_1", "pid")}
    assert all(c.duration_s == 3.0 for c in grasp)
    assert set(PAPER["manipulator"]["mu1.0"]) == {"qp_coulomb", "sensed_1", "pid"}
    for g in GROUNDS:
        assert set(PAPER["table3"][g]) == set(CONTROLLERS)
    assert PAPER["table3"]["rigid_mu0.1"]["lcp_noslip"] is None
    assert PAPER["table5"]["rigid_inf"]["lcp_noslip"] == (0.3572, 0.0116)


def test_experiments_quick_writes_report(tmp_path, capsys):
    rc = cli.main(["experiments", "seed000", "--quick", "--workers", "1", "--out", str(tmp_path),
                   "--only", "planar/rigid_inf/pid,heightmap/seed0/pid"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "[2/2]" in out
    report = json.loads((tmp_path / "seed000.json").read_text())
    assert {c["id"] for c in report["cells"]} == {"planar/rigid_inf/pid", "heightmap/seed0/pid"}
    assert set(report["paper"]) >= {"table3", "table4", "table5"}
    for c in report["cells"]:
        assert {"joint_position_error_rad", "joint_velocity_error_rad_s", "torque_rate_mean_Nm_s",
                "torque_mean_Nm"} <= set(c["metrics"])
        assert c["fell"] in (True, False) and c["simulated_s"] > 0
    md = (tmp_path / "seed000.md").read_text()
    for heading in ("## Table 3", "## Table 4", "## Table 5", "## Walks / falls", "## Height map", "## Manipulator"):
        assert heading in md
    assert "(0.0916)" in md                                      # the paper's PID value beside ours
    series = json.loads((tmp_path / "series.json").read_text())
    assert len(series["heightmap/seed0/pid"]["joint_error_rad"]) > 100
    for png in ("fig16_heightmap_tracking.png", "fig17_com_paths.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_seed000_runs_a_robot_described_only_by_its_file(tmp_path, capsys, monkeypatch):
    """``experiments seed000 --robot <file>``: A1 (a file written here, not shipped) trots
    the quick cells with its own gains and gait; the report names it, its force prediction
    is the simulator's within 5 %, and the default output is beside the quadruped's."""
    from conftest import write_robot_file

    from idyn_control import experiments

    path = write_robot_file(tmp_path, "a1")
    monkeypatch.chdir(tmp_path)  # the default output directory is relative
    rc = cli.main(["experiments", "seed000", "--quick", "--workers", "1", "--robot", str(path),
                   "--only", "planar/rigid_mu0.1/qp_coulomb,planar/rigid_inf/lcp_coulomb"])
    assert rc == 0, capsys.readouterr().err
    out = tmp_path / experiments.default_out(str(path))
    assert out.name == f"seed000_{robots.spec(path).name}"
    report = json.loads((out / "seed000.json").read_text())
    assert report["meta"]["robot"] == str(path.resolve())
    for c in report["cells"]:
        assert c["cell"]["robot"] == str(path.resolve())
        assert not c["fell"], c["id"]
        assert c["metrics"]["force_error_sum_rel"] < 0.05, (c["id"], c["metrics"]["force_error_sum_rel"])
        # A1's weight, not the quadruped's 28 N
        assert c["metrics"]["measured_normal_sum_N"] > 100.0
    assert f"Robot {path.resolve()}" in (out / "seed000.md").read_text()


@pytest.mark.parametrize("robot", ["g1", "panda", "ur5"])
def test_seed000_refuses_a_robot_the_gait_cannot_trot(robot, capsys):
    from idyn_control.errors import ConfigError
    from idyn_control.experiments import check_robot

    with pytest.raises(ConfigError, match="point feet"):
        check_robot(robot)
    assert cli.main(["experiments", "seed000", "--robot", robot]) == 2
    assert "point feet" in capsys.readouterr().err
    assert cli.main(["experiments", "faults", "--robot", "go2"]) == 2


def test_seed000_refuses_a_robot_that_cannot_turn(tmp_path, capsys):
    """Solo 8's legs have no abduction: its gait holds any yaw rate at 0, and the waypoint
    task's turns would never come."""
    from conftest import write_robot_file

    source = str(write_robot_file(tmp_path, "solo8"))
    assert cli.main(["experiments", "seed000", "--robot", source, "--quick"]) == 2
    assert "cannot move sideways" in capsys.readouterr().err


def test_table5s_per_tick_relative_error_is_the_mean_of_each_ticks_ratio():
    """The per-tick relative force error is the mean over the loaded ticks of |Σ predicted −
    Σ measured| / Σ measured (normal forces); the relative error is the ratio of the means."""
    from idyn_control.sim.lockstep import LockstepRunner, Scenario
    from idyn_control.sim.metrics import MIN_LOAD_FRACTION

    runner = LockstepRunner(Scenario(robot="quadruped", formulation="qp_coulomb", duration=2.0, trot_start=0.5))
    run = runner.run()
    tr, m = run.trace, run.metrics
    pred, meas = tr.f_pred[:, :, 2].sum(axis=1), tr.f_meas[:, :, 2].sum(axis=1)
    loaded = meas > MIN_LOAD_FRACTION * runner.weight
    assert not tr.fallback[loaded].any()
    ratios = np.abs(pred - meas)[loaded] / meas[loaded]
    assert m["force_error_sum_rel_per_tick"] == pytest.approx(ratios.mean(), rel=1e-12)
    assert m["force_error_sum_rel"] == pytest.approx(np.abs(pred - meas)[loaded].mean() / meas[loaded].mean(), rel=1e-12)
    assert 0.0 < m["force_error_sum_rel_per_tick"] < 0.1
