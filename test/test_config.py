"""The node's parameter table, the robot YAMLs and ``idyn-control check-config`` (no ROS)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from idyn_control import cli, config, formulations, robots
from idyn_control.controller import Controller

ROOT = Path(__file__).resolve().parents[1]
NODE_YAMLS = sorted(p for p in (ROOT / "config").glob("*.yaml")
                    if config.NODE_NAME in (yaml.safe_load(p.read_text()) or {}))
ROBOT_YAMLS = ("quadruped", "solo12", "panda", "anymal_c", "go2", "ur5", "panda_grasp", "g1")
#: robot files the node refuses (a hand holding a free box: lock-step experiments only)
EXPERIMENT_ONLY = ("panda_grasp",)


def _declared(params) -> set[str]:
    names = set(config.SPEC) | {s.name for s in config.option_specs(params.get("formulation", "qp_coulomb"))}
    for key in params:
        if key.startswith(config.FORMULATION_DEFAULTS):
            formulation = key[len(config.FORMULATION_DEFAULTS):].split(".")[0]
            names |= {s.name for s in config.default_specs(formulation)}
    return names


def _readme_parameters() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Parameters")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_every_robot_is_a_yaml_for_the_node():
    assert {p.stem for p in NODE_YAMLS} >= set(ROBOT_YAMLS)
    assert set(robots.names()) == set(ROBOT_YAMLS)


@pytest.mark.parametrize("path", NODE_YAMLS, ids=lambda p: p.stem)
def test_robot_yaml_is_valid_and_every_key_is_a_declared_parameter(path):
    params = config.load_params_file(path)
    assert set(params) <= _declared(params), set(params) - _declared(params)
    if path.stem in EXPERIMENT_ONLY:
        assert config.validate(params, check_model=False) == []
        [problem] = config.validate(params)
        assert problem.startswith("hand.urdf") and "lock-step experiments only" in problem
        assert cli.main(["check-config", str(path)]) == 1
        return
    assert config.validate(params) == []
    assert cli.main(["check-config", str(path)]) == 0


@pytest.mark.parametrize("path", [p for p in NODE_YAMLS if p.stem not in EXPERIMENT_ONLY], ids=lambda p: p.stem)
def test_robot_yaml_builds_a_controller_whose_command_joints_are_model_joints(path):
    settings = config.resolve(config.load_params_file(path))
    model = config.build_model(settings)
    joints, command = config.joint_orders(settings, model)
    ctrl = Controller(model, config.controller_config(settings, model))
    assert ctrl.config.dt == pytest.approx(1.0 / settings["update_rate"])
    assert set(command) <= set(model.joint_names) and sorted(joints) == sorted(model.joint_names)
    if model.floating_base:  # legged: four feet, or two soles of four corners; all joints commanded
        assert len(model.contacts) in (4, 8) and sorted(command) == sorted(model.joint_names)


def test_quadruped_yaml_matches_the_ros2_control_effort_controller():
    controllers = yaml.safe_load((ROOT / "config" / "ros2_controllers.yaml").read_text())
    assert controllers["controller_manager"]["ros__parameters"]["update_rate"] == 1000
    cm = controllers["controller_manager"]["ros__parameters"]
    assert cm["effort_controller"]["type"] == "effort_controllers/JointGroupEffortController"
    assert cm["joint_state_broadcaster"]["type"] == "joint_state_broadcaster/JointStateBroadcaster"
    joints = controllers["effort_controller"]["ros__parameters"]["joints"]
    node = config.load_params_file(ROOT / "config" / "quadruped.yaml")
    assert node["command_joints"] == joints
    assert sorted(joints) == sorted(robots.load("quadruped").joint_names)


def test_every_declared_parameter_is_documented_in_the_readme():
    section = _readme_parameters()
    documented = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.M))
    declared = {p.name for p in config.PARAMETERS}
    assert declared <= documented, declared - documented
    assert documented - declared == {"formulation_options.<key>", "formulation_defaults.<formulation>.<key>"}


def test_readme_table_is_the_generated_one():
    assert config.markdown_table() in _readme_parameters()


def test_parameter_table_is_consistent():
    for p in config.PARAMETERS:
        assert config.check_value(p, p.default) is None, p.name
        assert p.description and p.type in (config.BOOL, config.INT, config.DOUBLE, config.STRING,
                                             config.DOUBLE_ARRAY, config.STRING_ARRAY, config.INT_ARRAY)
    # structural parameters are read-only, gains are not
    for name in ("robot", "urdf_path", "robot_description", "formulation", "joints", "contacts.frames",
                 "command_joints", "update_rate", "loop_mode"):
        assert config.SPEC[name].read_only, name
    for name, field_name in config.CONTROLLER_FIELDS.items():
        assert not config.SPEC[name].read_only and hasattr(Controller(robots.load("panda")).config, field_name)


@pytest.mark.parametrize("name", [n for n in formulations.names() if n != "sensed"])
def test_formulation_options_are_typed_from_their_defaults(name):
    try:
        specs = config.option_specs(name)
    except config.ConfigError:
        pytest.skip(f"{name} not importable yet")
    for spec in specs:
        assert spec.name.startswith(config.FORMULATION_OPTIONS)
        assert config.check_value(spec, spec.default) is None


def _write(tmp_path, params: dict, node=config.NODE_NAME) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({node: {"ros__parameters": params}}))
    return path


def _problems(tmp_path, params):
    return config.validate(config.load_params_file(_write(tmp_path, params)))


@pytest.mark.parametrize("params, expected", [
    ({"robot": "solo12", "controler": {"joint_kp": [1.0]}}, "controler.joint_kp: unknown parameter"),
    ({"robot": "solo12", "update_rate": 1000}, "update_rate: expected double, got integer"),
    ({"robot": "solo12", "controller": {"joint_kd": [40, 40]}}, "expected double_array, got integer_array"),
    ({"robot": "solo12", "controller": {"effort_limit_scale": 1.5}}, "outside [0.001, 1]"),
    ({"robot": "solo12", "controller": {"safe_output": "explode"}}, "not one of zero, damping"),
    ({"robot": "solo12", "formulation": "magic"}, "unknown formulation 'magic'"),
    ({"robot": "solo12", "formulation_options": {"nope": 1.0}}, "not an option of 'qp_coulomb'"),
    ({"robot": "robot_x"}, "'robot_x': is not a shipped robot"),
    ({"urdf_path": "/does/not/exist.urdf"}, "file not found"),
    ({}, "set one of robot, urdf_path or robot_description"),
    ({"robot": "solo12", "contacts": {"frames": ["FL_FOOT", "NOSE"]}}, "unknown contact frame 'NOSE'"),
    ({"robot": "solo12", "joints": ["FL_HAA", "NOPE"]}, "NOPE"),
    ({"robot": "solo12", "command_joints": ["FL_HAA", "ELBOW"]}, "ELBOW"),
    ({"robot": "solo12", "controller": {"joint_kp": [1.0, 2.0]}}, "needs 1 or 12 values"),
])
def test_check_config_reports_each_problem(tmp_path, params, expected, capsys):
    problems = _problems(tmp_path, params)
    assert any(expected in p for p in problems), problems
    assert cli.main(["check-config", str(_write(tmp_path, params))]) == 1
    assert expected in capsys.readouterr().err


def test_params_file_layouts(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("/**:\n  ros__parameters:\n    robot: panda\n    formulation: rnea\n"
                    "    formulation_options: {}\n    controller:\n      damping: 1e-6\n")
    params = config.load_params_file(path)
    assert params["controller.damping"] == 1e-6  # rcl reads 1e-6 as a double
    assert config.validate(params) == []
    path.write_text("other_node:\n  ros__parameters:\n    robot: panda\n")
    with pytest.raises(config.ConfigError, match="no section for node 'idyn_controller'"):
        config.load_params_file(path)


def test_urdf_path_and_robot_description_build_the_same_model(tmp_path):
    urdf = robots.spec("quadruped").urdf_path()
    frames = list(robots.spec("quadruped").contact_frames)
    by_path = config.build_model(config.resolve({"urdf_path": str(urdf), "contacts.frames": frames}))
    by_text = config.build_model(config.resolve({"robot_description": urdf.read_text(), "contacts.frames": frames}))
    assert by_path.floating_base and by_text.floating_base
    assert by_path.joint_names == by_text.joint_names and by_path.contact_frames == tuple(frames)
    np.testing.assert_allclose(by_path.tau_max, by_text.tau_max)


def test_per_joint_gains_follow_the_joints_parameter_order():
    model = robots.load("solo12")
    joints = list(reversed(model.joint_names))
    kp = config.per_joint([float(i) for i in range(12)], joints, model, "controller.joint_kp")
    for i, name in enumerate(joints):
        assert kp[model.joint_index(name)] == float(i)
    assert (config.per_joint([5.0], joints, model, "x") == 5.0).all()


def test_every_formulation_option_is_declared_with_a_type_and_a_range_or_choices():
    """Issue 14: an invalid run-time value of any option is refused by its declaration
    (numbers: a range; strings: their choices) or, for the frame lists, by the formulation
    that the node builds before accepting it; sensed's sensor layout is a string array of
    "<frame>: <components>" entries."""
    from idyn_control import formulations, robots

    model = robots.load("solo12")
    for name in formulations.names():
        for key in formulations.get(name).defaults:
            spec = config.option_spec(name, key)
            assert config.check_value(spec, spec.default) is None, (name, key)
            if spec.type in (config.DOUBLE, config.INT, config.DOUBLE_ARRAY, config.INT_ARRAY):
                assert spec.range is not None, (name, key)
            elif spec.type == config.STRING:
                assert spec.choices and config.check_value(spec, "not_a_choice"), (name, key)
            elif spec.type == config.STRING_ARRAY:
                with pytest.raises(config.IdynError):
                    formulations.make(name, model, **{key: config.option_value(
                        formulations.get(name).defaults[key], ["NOT_A_FRAME: n"])})
    layout = config.option_spec("sensed", "measured_components")
    assert layout.type == config.STRING_ARRAY and config.check_value(layout, [1.0])
    f = formulations.make("sensed", model, slippery_ground=True, measured_components=config.option_value(
        None, [f"{frame}: n" for frame in model.contact_frames]))
    assert f.measured[:, 2].all() and not f.measured[:, :2].any()
    assert formulations.make("sensed", model, measured_components=config.option_value(None, [])).full_sensing
