"""A robot is one YAML file: the shipped ones, robots the package does not ship, and every
tool that takes a robot (lock-step loop, CLI, node parameters) reading it (issue 13)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
import yaml

from idyn_control import cli, config, robots
from idyn_control.errors import ConfigError, UnknownNameError
from idyn_control.sim.lockstep import run_scenario
from conftest import NEW_ROBOTS, write_robot_file as _write  # noqa: E402


@pytest.mark.parametrize("name", robots.names())
def test_shipped_robot_file_gives_a_model_and_a_pose_inside_its_limits(name):
    spec = robots.spec(name)
    assert spec.origin == robots.config_dir() / f"{name}.yaml" and spec.name == name
    model = robots.load(name)
    q = robots.standing_configuration(model, name, foot_height=0.01)
    assert set(spec.standing_joints) <= set(model.joint_names)
    lo, hi = model.pin_model.lowerPositionLimit, model.pin_model.upperPositionLimit
    joints = model.joint_q_index
    assert np.all(q[joints] >= lo[joints] - 1e-9) and np.all(q[joints] <= hi[joints] + 1e-9)
    if (spec.contact_frames or spec.surfaces) and spec.hand is None:  # legged: every foot on the ground, base above
        data = model.pin_model.createData()
        pin.framesForwardKinematics(model.pin_model, data, q)
        feet = np.array([data.oMf[i].translation[2] for i in model.contact_frame_ids])
        assert feet.min() == pytest.approx(0.01) and np.ptp(feet) < 0.02
        assert q[2] > feet.max() + 0.1


def test_unknown_robot_names_list_the_shipped_ones(tmp_path):
    with pytest.raises(UnknownNameError, match="solo12"):
        robots.spec("solo21")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({config.NODE_NAME: {"ros__parameters": {"robot": "nameless"}}}))
    with pytest.raises(ConfigError, match="urdf_path"):
        robots.spec(bad)


@pytest.mark.parametrize("name", sorted(NEW_ROBOTS))
def test_a_robot_the_package_does_not_ship_is_one_yaml_file(tmp_path, name):
    path = _write(tmp_path, name)
    assert config.validate(config.load_params_file(path)) == []
    assert cli.main(["check-config", str(path)]) == 0
    spec = robots.spec(path)
    assert spec.name == name and Path(spec.urdf_path()).is_file()
    model = robots.load(path)
    assert model.contact_frames == tuple(NEW_ROBOTS[name]["frames"]) and model.na == 12
    # the node builds the same model from the same file
    node_model = config.build_model(config.resolve(config.load_params_file(path)))
    assert node_model.joint_names == model.joint_names
    assert pin.computeTotalMass(node_model.pin_model) == pytest.approx(pin.computeTotalMass(model.pin_model))


@pytest.mark.parametrize("name", sorted(NEW_ROBOTS))
def test_a_new_robot_stands_and_trots_in_lockstep_from_its_file(tmp_path, name):
    """A1 (14 kg) and HyQ (87 kg): stand 1 s, trot 0.2 m/s for 2 s with wbc_qp."""
    path = _write(tmp_path, name)
    run = run_scenario(robot=str(path), formulation="wbc_qp", duration=3.0, trot_start=1.0)
    m = run.metrics
    assert not m["fell"], m
    assert m["speed_along_command_m_s"] > 0.1, m
    standing_height = robots.standing_configuration(robots.load(path), path)[2]
    assert run.trace.q[: run.trace.n, 2].min() > 0.7 * standing_height


@pytest.mark.parametrize("params, problem", [
    ({"gait": {"step_heigth": 0.02}}, "gait.step_heigth: unknown parameter"),
    ({"controller": {"joint_kpp": [1.0]}}, "controller.joint_kpp: unknown parameter"),
    ({"controller": {"base_kp": -1.0}}, "controller.base_kp"),
    ({"gait": {"period": "fast"}}, "gait.period"),
])
def test_a_robot_file_with_a_wrong_key_or_value_is_refused_not_run_on_defaults(tmp_path, params, problem):
    """A misspelt gait or controller key used to be dropped silently (the robot then ran on
    the default); the loader now refuses the file with what check-config reports."""
    path = tmp_path / "my_solo.yaml"
    path.write_text(yaml.safe_dump({config.NODE_NAME: {"ros__parameters": {"robot": "solo12", **params}}}))
    with pytest.raises(ConfigError, match=re.escape(problem)):
        robots.spec(path)


def test_a_file_naming_a_shipped_robot_inherits_what_it_leaves_unset(tmp_path):
    path = tmp_path / "my_solo.yaml"
    params = {"robot": "solo12", "controller": {"base_kp": 300.0},
              "formulation_defaults": {"pid": {"ki": 3.0}}, "gait": {"period": 0.4}}
    path.write_text(yaml.safe_dump({config.NODE_NAME: {"ros__parameters": params}}))
    mine, shipped = robots.spec(path), robots.spec("solo12")
    assert mine.urdf_path() == shipped.urdf_path() and mine.contact_frames == shipped.contact_frames
    assert mine.standing_joints == shipped.standing_joints and mine.effort_limit == 2.7
    assert mine.controller["controller.base_kp"] == 300.0
    assert mine.controller["controller.base_kd"] == shipped.controller["controller.base_kd"]
    assert mine.formulation_options("pid") == {**shipped.formulation_options("pid"), "ki": 3.0}
    assert mine.gait["period"] == 0.4 and mine.gait["duty_factor"] == shipped.gait["duty_factor"]


def test_formulation_defaults_apply_to_the_running_formulation_and_options_win():
    params = {"robot": "quadruped", "formulation": "pid", "formulation_defaults.pid.ki": 2.0,
              "formulation_defaults.pid.gain": [0.005], "formulation_defaults.qp_coulomb.eps_abs": 1e-6}
    assert config.validate(params) == []
    options = config.resolve(params).formulation_options
    assert options["ki"] == 2.0 and options["gain"] == [0.005]
    options = config.resolve({**params, "formulation_options.ki": 5.0}).formulation_options
    assert options["ki"] == 5.0
    problems = config.validate({**params, "formulation_defaults.pid.nope": 1.0,
                                "formulation_defaults.no_such.ki": 1.0}, check_model=False)
    assert len(problems) == 2 and "nope" in problems[0] + problems[1]


def test_the_lockstep_loop_uses_the_files_gains_and_formulation_defaults():
    from idyn_control.sim.lockstep import LockstepRunner, Scenario

    runner = LockstepRunner(Scenario(robot="quadruped", formulation="pid", duration=0.01))
    assert runner.controller.config.base_kp == 200.0 and runner.controller.config.safe_output == "hold"
    f = runner.controller.formulation
    assert f.options["ki"] == 2.0 and np.allclose(f.gain, 0.005)
    assert runner.gait.config.period == robots.spec("quadruped").gait["period"]


def test_command_line_tools_take_a_robot_file(tmp_path, capsys):
    path = _write(tmp_path, "a1")
    assert cli.main(["solve", "--config", str(path), "--formulation", "qp_coulomb"]) == 0
    assert "a1" in capsys.readouterr().out
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "--config", str(path), "--formulations", "wbc_qp:python", "--ticks", "50",
                     "--scenarios", "standing", "--peer", "off", "--json", str(out)]) == 0
    assert out.is_file()


def test_robot_files_resolve_relative_paths_against_the_file(tmp_path):
    path = _write(tmp_path, "hyq")
    params = config.load_params_file(path)
    assert Path(params["urdf_path"]).is_absolute() and Path(params["urdf_path"]).is_file()
    cwd = os.getcwd()
    os.chdir("/")
    try:
        assert robots.load(path).na == 12
    finally:
        os.chdir(cwd)
    assert math.isfinite(robots.standing_configuration(robots.load(path), path)[2])


def test_placeholder_effort_limits_are_flagged_and_real_ones_are_not(tmp_path, capsys):
    """Solo 8's URDF gives each joint 1000 N·m (its motors give 2.7): check-config and the
    node warn of each such joint (they still load: the file may mean it), and say nothing of
    the shipped robots, of the other robot files' URDFs, nor of Solo 8 given its limit."""
    from conftest import MORE_ROBOTS

    for name in robots.names():
        assert robots.load(name).effort_limit_warnings() == [], name
    for name in [*NEW_ROBOTS, *MORE_ROBOTS]:
        path = _write(tmp_path, name)
        model = config.build_model(config.resolve(config.load_params_file(path)))
        assert (model.effort_limit_warnings() != []) == (name == "solo8"), name
    solo8 = _write(tmp_path, "solo8")
    assert cli.main(["check-config", str(solo8)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 8 and all("1000 N·m" in line and "placeholder" in line for line in warnings), warnings
    assert cli.main(["check-config", str(_write(tmp_path, "solo8", effort_limit=2.7))]) == 0
    assert "warning" not in capsys.readouterr().err
