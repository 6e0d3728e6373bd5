"""The ROS demo beyond the project's quadruped: a robot from a YAML file only, and the humanoid.

``idyn-control demo --config a1.yaml``: Unitree A1, Go1, B1 (50 kg) and IIT's HyQ (87 kg), which
the package does not ship, each from the file ``conftest.write_robot_file`` writes (no code), trot through the
bridge and the gait node.

The humanoid: Unitree G1 stands, shifts its weight and squats through DDS.

``idyn-control demo --robot g1`` over real rclpy and DDS on a random ROS_DOMAIN_ID: the
MuJoCo bridge in lock-step and the gait node with ``gait.task`` balance (the lock-step
loop's BalanceTask, timed from activation), both formulations that predict forces. Scored
from the recorded topics: no fall, every corner of both soles loaded on every tick (each
sole's centre of pressure inside it), the predicted forces the simulator's, the base over
each foot in turn and down by the squat.
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("rclpy")

import yaml  # noqa: E402

from conftest import NEW_ROBOTS, write_robot_file  # noqa: E402
from idyn_control import config, robots  # noqa: E402
from idyn_control.demo import DemoOptions, controller_params  # noqa: E402

#: a short balance (4 s): stand 0.5 s, one weight shift of 2 s (0.15 of the half stance width: the
#: gait moves a standing base at 5 cm/s at most), one squat of 1.5 s; then it stands 0.2 s
SHORT = {"stand_s": 0.5, "shift_period_s": 2.0, "shift_fraction": 0.15, "squat_period_s": 1.5}


def test_controller_params_describe_the_soles_and_the_balance_task():
    spec = robots.spec("g1")
    opts = DemoOptions(robot="g1", formulation="qp_coulomb", balance=SHORT).resolved()
    assert opts.task == "balance" and opts.speed == 0.0 and opts.total == pytest.approx(4.0 + opts.stop_time)
    assert opts.crouch == 0.0  # it starts standing
    p = controller_params(opts)["idyn_controller"]["ros__parameters"]
    assert "frames" not in p["contacts"]  # G1 has soles only; an empty list has no ROS type
    assert p["contacts"]["surfaces"]["links"] == [s.link for s in spec.surfaces]
    assert np.reshape(p["contacts"]["surfaces"]["corners"], (-1, 3)).tolist() == [list(c) for c in
                                                                                spec.surfaces[0].corners]
    assert p["gait"]["task"] == "balance" and p["gait"]["balance"]["shift_period_s"] == 2.0
    assert isinstance(p["gait"]["balance"]["stand_s"], float)  # a ROS double, even when given as 1
    assert p["formulation_defaults"] == {"qp_coulomb": {"cop_margin": 0.2}}  # g1.yaml's
    quad = DemoOptions(robot="solo12").resolved()
    assert quad.task == "trot" and "task" not in controller_params(quad)["idyn_controller"]["ros__parameters"]["gait"]


@pytest.mark.parametrize("name", ["quadruped", "solo12", "anymal_c"])
def test_the_demos_gait_node_trots_the_robot_files_gait(name):
    """The node gets the robot file's gait.* (as the lock-step runner and the launch file
    do): without them the demo's quadruped trotted with the default vertical swing ends and
    2 mm touchdown depth where its file then said 0 and 8 mm, and fell after a 200 ms input gap."""
    spec = robots.spec(name)
    gait = controller_params(DemoOptions(robot=name).resolved())["idyn_controller"]["ros__parameters"]["gait"]
    assert spec.gait and {k: gait[k] for k in spec.gait} == spec.gait
    # ROS types: doubles as doubles (a YAML 0 would be an integer), booleans as booleans
    # (the quadruped's velocity_product: false, which the node refused as 0.0)
    for k in spec.gait:
        assert type(gait[k]) is (bool if config.SPEC[f"gait.{k}"].type == config.BOOL else float), (k, gait[k])


@pytest.mark.parametrize("name", sorted(NEW_ROBOTS))
def test_a_robot_from_a_yaml_file_only_trots_through_ros(tmp_path, name):
    """A1, Go1 (13 kg), B1 (50 kg) (their URDFs by a package:// URI) and HyQ (87 kg, by a path
    relative to the file) trot 3 s through the bridge and the gait node at the demo's 0.2 m/s."""
    pytest.importorskip("mcap")
    path = write_robot_file(tmp_path, name)
    out = tmp_path / "demo"
    proc = _cli_demo(out, "--config", str(path), "--duration", "3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    m = report["metrics"]
    assert report["options"]["robot"] == str(path) and report["options"]["task"] == "trot"
    assert not m["fell"] and "failure" not in m and m["fallback_ticks"] == 0
    assert m["speed_along_command_m_s"] > 0.1
    params = yaml.safe_load((out / "controller_params.yaml").read_text())["idyn_controller"]["ros__parameters"]
    assert params["robot"] == name and params["contacts"]["frames"] == NEW_ROBOTS[name]["frames"]
    assert m["compiled_tick_fraction"] >= 0.99, m["compiled_tick_fraction"]


def _demo_env() -> dict:
    """The environment of a demo child process: a ROS domain of its own."""
    domain = random.Random(os.getpid() ^ time.time_ns()).randint(1, 200)
    return dict(os.environ, IDYN_DEMO_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")


def _cli_demo(out, *args: str) -> subprocess.CompletedProcess:
    """``idyn-control demo ARGS --out OUT`` in a child process."""
    return subprocess.run([sys.executable, "-m", "idyn_control.cli", "demo", *args, "--out", str(out)],
                          env=_demo_env(), capture_output=True, text=True, timeout=600)


def _run_demo(out, **options) -> subprocess.CompletedProcess:
    env = _demo_env()
    script = textwrap.dedent(f"""
        from idyn_control import demo
        report = demo.run(demo.DemoOptions(robot="g1", out={str(out)!r}, **{options!r}))
        raise SystemExit(1 if report["metrics"]["fell"] or "failure" in report["metrics"] else 0)
    """)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)


def test_g1_ignores_cmd_vel_and_stands_on_its_soles(tmp_path):
    """Asked to trot (the demo publishes /cmd_vel 0.2 m/s for 1 s), the gait node keeps a
    robot on flat feet standing: the trot would lift single corners of a sole."""
    out = tmp_path / "demo"
    proc = _run_demo(out, formulation="wbc_qp", task="trot", duration=1.0, stand_time=0.5, stop_time=0.2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "/cmd_vel is ignored" in (out / "controller.log").read_text()
    m = json.loads((out / "report.json").read_text())["metrics"]
    assert not m["fell"] and m["sole_cop_inside_all"], m.get("sole_cop_inside_fraction")
    assert abs(m["speed_along_command_m_s"]) < 0.01


@pytest.mark.parametrize("formulation", ["wbc_qp", "qp_coulomb"])
def test_g1_balances_through_ros(tmp_path, formulation):
    pytest.importorskip("mcap")
    out = tmp_path / "demo"
    proc = _run_demo(out, formulation=formulation, balance=SHORT, stop_time=0.2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "CoP inside left_ankle_roll_link" in proc.stdout
    m = json.loads((out / "report.json").read_text())["metrics"]
    assert not m["fell"] and "failure" not in m
    # the bridge stepped all 4.2 s; the recorder (a fourth, niced Python process taking 22
    # messages a tick: 16 of them the soles' wrenches) loses some states on a loaded machine:
    # the soles are scored on the ticks it has every measured wrench of
    assert m["duration_s"] > 4.1  # the recorded states span the run
    assert m["ticks"] > 2500 and m["sole_ticks"] > 2000
    assert m["fallback_ticks"] == 0
    # both soles flat on the ground all along: every corner pushes, so each centre of
    # pressure is inside its sole, and neither sole ever carries the whole robot
    assert m["sole_cop_inside_all"], m["sole_cop_inside_fraction"]
    assert min(m["sole_min_corner_share"].values()) > 0.01, m["sole_min_corner_share"]
    assert min(m["sole_load_share_min"].values()) > 0.1, m["sole_load_share_min"]
    assert m["force_error_sum_rel"] < 0.02
    # the body went over each foot and squatted (from the recorded odometry)
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(out / "demo.mcap", "rb") as f:
        odom = [(msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec, msg.pose.pose.position)
                for _, _, _, msg in make_reader(f, decoder_factories=[DecoderFactory()])
                .iter_decoded_messages(topics=["/odom"])]
    t = np.array([s for s, _ in odom])
    y, z = np.array([p.y for _, p in odom]), np.array([p.z for _, p in odom])
    stand = (t > 0.3) & (t < 0.5)
    y0, z0 = y[stand].mean(), z[stand].mean()
    assert y.max() - y0 > 0.012 and y0 - y.min() > 0.012  # the shift: 1.8 cm each way
    assert z0 - z.min() > 0.04  # the squat: 6 cm down
    # the routine ticks ran in the compiled loop (qp_coulomb's cop_margin included), the task's offsets too
    assert m["compiled_tick_fraction"] >= 0.99, m["compiled_tick_fraction"]


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
def test_the_demo_trots_over_the_height_map_through_ros(tmp_path, formulation):
    """``idyn-control demo --terrain heightmap``: the bridge builds seed 000's height map
    (bumps up to 3 cm, per-patch μ 0.1–1.5) and tells the controller the normal and μ under
    each foot on ~/contact_ground, as a terrain map would; the controller trots the
    quadruped over it through DDS. (Blind, on its one μ 0.7, the trot fell on 3 of 40 start
    phases of this map in lock-step, on the μ 0.23 patch at x ≈ 0.3 m: README.)"""
    pytest.importorskip("mcap")
    out = tmp_path / "demo"
    proc = _cli_demo(out, "--formulation", formulation, "--terrain", "heightmap", "--terrain-seed", "2",
                     "--duration", "4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "height map (seed 2)" in (out / "bridge.log").read_text()
    m = json.loads((out / "report.json").read_text())["metrics"]
    assert not m["fell"] and "failure" not in m and m["fallback_ticks"] == 0
    assert m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.15)
    # the ground changed under the feet about a hundred times, each change one Python tick
    # (1–2.5 % of the ticks in 10 loaded runs)
    assert m["bridge_ground_messages"] > 20 and m["controller_ground_updates"] > 20, m
    assert m["compiled_tick_fraction"] >= 0.95, m["compiled_tick_fraction"]


def test_the_demo_walks_solo12_up_and_down_the_ramp_through_ros(tmp_path):
    """``idyn-control demo --robot solo12 --terrain ramp``: 10° up, a flat top, 10° down,
    through the bridge and the gait node (compiled gait, ``gait.follow_ground``), the
    ramp's normals on ~/contact_ground. No fall, the speed, up by most of the ramp's rise."""
    pytest.importorskip("mcap")
    from idyn_control.sim.terrain import make_terrain

    spec = robots.spec("solo12")
    ramp = make_terrain("ramp", 0, robots.standing_footprint(robots.load(spec), spec))
    trot = (ramp.start_m + 2.0 * ramp.climb_m + ramp.top_m + 0.2) / 0.2  # over the far foot of it
    _assert_the_demo_climbs(tmp_path / "demo", "solo12", "ramp", "ramp", ramp.rise_m, trot)


def _assert_the_demo_climbs(out, robot: str, terrain: str, label: str, rise_m: float, trot_s: float) -> None:
    """``idyn-control demo --robot ROBOT --terrain TERRAIN`` through ROS: the bridge built the
    terrain (``label`` in its log), no fall nor fallback, the commanded 0.2 m/s, the base up
    by most of ``rise_m``, the ticks compiled."""
    proc = _cli_demo(out, "--robot", robot, "--terrain", terrain, "--duration", f"{trot_s:.1f}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"lock-step, {label};" in (out / "bridge.log").read_text()
    m = json.loads((out / "report.json").read_text())["metrics"]
    assert not m["fell"] and "failure" not in m and m["fallback_ticks"] == 0
    assert m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.15)
    spec = robots.spec(robot)
    standing = robots.standing_configuration(robots.load(spec), spec)[2]
    assert m["base_height_max_m"] > standing + 0.7 * rise_m, (m["base_height_max_m"], standing, rise_m)
    assert m["compiled_tick_fraction"] >= 0.95, m["compiled_tick_fraction"]


def test_the_demo_walks_go2_blind_onto_a_block_and_off_it_through_ros(tmp_path):
    """``idyn-control demo --robot go2 --terrain block``: a block of 15 % of its standing
    height (4.5 cm) through the bridge and the gait node, which is told no heights: the
    swing feet strike its face and the compiled gait swings them again over it (the trip
    reflex). No fall, the speed, the base up by most of the block's height."""
    pytest.importorskip("mcap")
    from idyn_control.sim.terrain import block_height, make_terrain

    spec = robots.spec("go2")
    model = robots.load(spec)
    footprint = robots.standing_footprint(model, spec)
    block = make_terrain("block", 0, footprint, rise_m=block_height(model, spec))
    trot = (block.start_m + block.top_m + 2.0 * footprint + 0.2) / 0.2  # off its far face
    _assert_the_demo_climbs(tmp_path / "demo", "go2", "block", "block (4.5 cm)", block.rise_m, trot)


def test_the_demo_walks_go2_blind_up_stairs_and_down_them_through_ros(tmp_path):
    """``idyn-control demo --robot go2 --terrain stairs``: three steps of 10 % of its standing
    height (3.0 cm) up, a landing and three down, the gait node told no heights: it trips
    up each step and finds each step down. No fall, the speed, the base up by most of the
    flight's height."""
    pytest.importorskip("mcap")
    from idyn_control.sim.terrain import block_height, make_terrain

    spec = robots.spec("go2")
    model = robots.load(spec)
    footprint = robots.standing_footprint(model, spec)
    stairs = make_terrain("stairs", 0, footprint, rise_m=block_height(model, spec, terrain="stairs"))
    trot = (stairs.faces_m[-1] + 2.0 * footprint + 0.2) / 0.2  # off the last step down
    _assert_the_demo_climbs(tmp_path / "demo", "go2", "stairs", "stairs (3 × 3.0 cm)",
                            stairs.steps * stairs.rise_m, trot)


def test_demo_terrain_options_are_checked():
    from idyn_control.errors import ConfigError

    with pytest.raises(ConfigError, match="terrain"):
        DemoOptions(terrain="mars").resolved()
    with pytest.raises(ConfigError, match="rigid"):
        DemoOptions(terrain="heightmap", compliant=True).resolved()
    assert DemoOptions(terrain="heightmap", terrain_seed=3).resolved().terrain_seed == 3
    with pytest.raises(ConfigError, match="follow_ground"):  # the quadruped's file: seed 000's pipeline
        DemoOptions(terrain="ramp").resolved()
    with pytest.raises(ConfigError, match="rigid"):
        DemoOptions(robot="solo12", terrain="ramp", compliant=True).resolved()
    for slope in (0.5, 31.0, math.nan):  # the bridge's range: [1, 30]°
        with pytest.raises(ConfigError, match="ramp_slope"):
            DemoOptions(robot="solo12", terrain="ramp", ramp_slope=slope).resolved()
    assert DemoOptions(robot="solo12", terrain="ramp", ramp_slope=15.0).resolved().ramp_slope == 15.0
    for terrain in ("block", "stairs"):
        with pytest.raises(ConfigError, match="follow_ground"):
            DemoOptions(terrain=terrain).resolved()
    for height in (0.0, -0.01, 1.5, math.nan):  # the bridge's range: (0, 1] m
        with pytest.raises(ConfigError, match="block_height"):
            DemoOptions(robot="go2", terrain="block", block_height=height).resolved()
    assert DemoOptions(robot="go2", terrain="block", block_height=0.03).resolved().block_height == 0.03
