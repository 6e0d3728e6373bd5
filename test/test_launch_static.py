"""Launch files, checked statically (launch/launch_ros are not installable here) and run for
real when launch_ros is importable.

Checks: each file parses and defines generate_launch_description(); every executable of
this package it starts is a console entry point of setup.py; every share file it names
(config/..., urdf/...) exists in the share layout setup.py installs; every parameter it
sets on idyn_controller is declared by the node; the Gazebo launch turns the URDF's
placeholder into the installed ros2_controllers.yaml path.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest

from idyn_control import config

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.py"))
PACKAGE = "idyn_control"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _setup_call() -> ast.Call:
    tree = _tree(ROOT / "setup.py")
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")


def _console_scripts() -> dict[str, str]:
    call = _setup_call()
    entry = next(k.value for k in call.keywords if k.arg == "entry_points")
    scripts = ast.literal_eval(entry)["console_scripts"]
    return dict(tuple(s.strip() for s in line.split("=", 1)) for line in scripts)


def _share_files() -> set[str]:
    """Paths relative to share/idyn_control that setup.py's data_files install."""
    call = _setup_call()
    expr = next(k.value for k in call.keywords if k.arg == "data_files")
    # setup.py is this repository's own file: evaluate its data_files expression
    data_files = eval(compile(ast.Expression(expr), "setup.py", "eval"),  # noqa: S307
                      {"PACKAGE": PACKAGE, "glob": lambda pattern: glob.glob(str(ROOT / pattern))})
    installed = set()
    prefix = f"share/{PACKAGE}"
    for dest, files in data_files:
        if dest.startswith(prefix):
            sub = dest[len(prefix):].strip("/")
            installed |= {f"{sub}/{Path(f).name}".strip("/") for f in files}
    return installed


def _string_constants(tree) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _module_constants(tree) -> dict[str, object]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _node_calls(tree):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Node"]


def _kw(call: ast.Call, name: str, constants: dict):
    for k in call.keywords:
        if k.arg == name:
            if isinstance(k.value, ast.Name):
                return constants.get(k.value.id)
            try:
                return ast.literal_eval(k.value)
            except ValueError:
                return None
    return None


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_launch_file_parses_and_defines_generate_launch_description(path):
    tree = _tree(path)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    assert {"idyn_control.launch.py", "gazebo.launch.py"} <= {p.name for p in LAUNCH_FILES}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_executables_of_this_package_are_console_entry_points(path):
    tree = _tree(path)
    constants = _module_constants(tree)
    scripts = _console_scripts()
    ours = [c for c in _node_calls(tree) if _kw(c, "package", constants) == PACKAGE]
    if path.name in ("idyn_control.launch.py", "gazebo.launch.py"):
        assert ours, "the launch file starts the controller node"
    for call in ours:
        executable = _kw(call, "executable", constants)
        assert executable in scripts, (executable, scripts)
        module, func = scripts[executable].split(":")
        assert hasattr(importlib.import_module(module), func)


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_share_files_named_by_the_launch_file_are_installed(path):
    tree = _tree(path)
    installed = _share_files()
    constants = _module_constants(tree)
    named = [s for s in _string_constants(tree) if re.fullmatch(r"(config|urdf|launch)/[\w./{}-]+", s)]
    for rel in named:
        if "{robot}" in rel:
            for robot in constants["ROBOTS"]:
                assert rel.format(robot=robot) in installed, rel.format(robot=robot)
        else:
            assert rel in installed, (rel, sorted(installed))


def _controller_parameter_names(tree) -> set[str]:
    """Parameter names a launch file sets on idyn_controller: the keys of the dicts built by
    its controller_parameters() or, without one, of dict literals in ``parameters=``."""
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "controller_parameters"), None)
    constants = _module_constants(tree)
    scopes = [func] if func is not None else [
        k.value for c in _node_calls(tree) if _kw(c, "package", constants) == PACKAGE
        for k in c.keywords if k.arg == "parameters"]
    names = set()
    for node in (n for scope in scopes for n in ast.walk(scope)):
        if isinstance(node, ast.Dict):
            names |= {ast.literal_eval(k) for k in node.keys if k is not None}
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            names.add(ast.literal_eval(node.slice))
    return names


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_every_parameter_set_on_the_node_is_declared(path):
    tree = _tree(path)
    names = _controller_parameter_names(tree)
    if path.name in ("idyn_control.launch.py", "gazebo.launch.py"):
        assert "use_sim_time" in names
    declared = set(config.SPEC) | {"use_sim_time"}  # rclpy declares use_sim_time itself
    assert names <= declared, names - declared
    # the YAML handed to the node is a node parameter file whose keys are declared
    constants = _module_constants(tree)
    if "ROBOT_CONFIG" not in constants:
        return
    robot_yamls = ([constants["ROBOT_CONFIG"].format(robot=r) for r in constants["ROBOTS"]]
                   if "ROBOTS" in constants else [constants["ROBOT_CONFIG"]])
    for rel in robot_yamls:
        assert config.validate(config.load_params_file(ROOT / rel)) == []


def _load_gazebo_module(monkeypatch):
    """Import launch/gazebo.launch.py with stand-ins for launch/launch_ros (not installed here)."""
    for name in ("launch", "launch.actions", "launch.event_handlers", "launch.launch_description_sources",
                 "launch.substitutions", "launch_ros", "launch_ros.actions"):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__getattr__ = lambda attr: type(attr, (), {"__init__": lambda self, *a, **k: None})
            monkeypatch.setitem(sys.modules, name, stub)
    spec = importlib.util.spec_from_file_location("gazebo_launch", ROOT / "launch" / "gazebo.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gazebo_launch_resolves_the_controllers_file_and_adds_odometry(monkeypatch):
    module = _load_gazebo_module(monkeypatch)
    xml = module.robot_description(str(ROOT))
    assert "package://idyn_control/" not in xml
    parameters = re.search(r"<parameters>(.*?)</parameters>", xml).group(1)
    assert parameters == f"{ROOT}/config/ros2_controllers.yaml" and Path(parameters).is_file()
    assert "gz-sim-odometry-publisher-system" in xml and xml.rstrip().endswith("</robot>")
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    ros2_control = root.find("ros2_control")
    joints = [j.get("name") for j in ros2_control.findall("joint")]
    assert all(j.find("command_interface").get("name") == "effort" for j in ros2_control.findall("joint"))
    assert sorted(joints) == sorted(config.load_params_file(ROOT / "config" / "quadruped.yaml")["command_joints"])
    odom_base = root.find(".//robot_base_frame").text
    assert root.find(f"link[@name='{odom_base}']") is not None


def test_launch_files_run_for_real_when_launch_ros_is_available():
    pytest.importorskip("launch_ros")
    import launch
    from launch.launch_description_sources import PythonLaunchDescriptionSource

    source = PythonLaunchDescriptionSource(str(ROOT / "launch" / "idyn_control.launch.py"))
    service = launch.LaunchService()
    service.include_launch_description(
        launch.actions.IncludeLaunchDescription(source, launch_arguments={"robot": "panda"}.items()))
    loop = service.run_async()
    import asyncio

    async def run_briefly():
        task = asyncio.ensure_future(loop)
        await asyncio.sleep(8.0)
        service.shutdown()
        return await task

    assert asyncio.run(run_briefly()) == 0
