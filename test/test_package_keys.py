"""package.xml on a ROS machine (issue 14 item 5): every dependency key resolves with rosdep.

``rosdep install --from-paths src --ignore-src`` stops at the first key it cannot resolve,
so one wrong key (``rclpy_lifecycle``, ``example-robot-data``) makes the README's install
step fail. The keys rosdep resolves for Jazzy and Kilted are the released packages of
the distribution (``<distro>/distribution.yaml``) and the system keys of
``rosdep/base.yaml`` and ``rosdep/python.yaml`` of the rosdistro repository; the table
below records, for each key this package uses, where it was found (rosdistro as of
2026-08-22). Set ``IDYN_ROSDISTRO`` to a rosdistro checkout to check the table itself.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DISTROS = ("jazzy", "kilted")
#: key → where rosdep finds it: "distribution" (a released ROS package of both distros) or
#: the rosdep file of a system key
ROSDEP_KEYS = {
    **{k: "distribution" for k in (
        "rclpy", "std_msgs", "sensor_msgs", "geometry_msgs", "nav_msgs", "trajectory_msgs", "diagnostic_msgs",
        "visualization_msgs", "lifecycle_msgs", "rcl_interfaces", "rosgraph_msgs", "pinocchio", "proxsuite",
        "pybind11_vendor", "rcl", "rmw", "rcutils", "ament_index_python", "launch", "launch_ros",
        "robot_state_publisher", "controller_manager", "effort_controllers", "joint_state_broadcaster",
        "ros_gz_sim", "ros_gz_bridge", "gz_ros2_control", "ament_copyright", "ament_flake8")},
    "eigen": "rosdep/base.yaml",
    **{k: "rosdep/python.yaml" for k in (
        "python3-dev", "python3-numpy", "python3-scipy", "python3-yaml", "python3-matplotlib", "python3-pytest")},
}
DEPEND_TAGS = ("depend", "build_depend", "build_export_depend", "buildtool_depend", "exec_depend",
               "test_depend", "doc_depend")


def package_keys() -> list[str]:
    root = ET.parse(ROOT / "package.xml").getroot()
    return [e.text.strip() for tag in DEPEND_TAGS for e in root.findall(tag)]


def test_every_package_xml_key_resolves_with_rosdep():
    keys = package_keys()
    assert "rclpy" in keys and "pinocchio" in keys  # the parse found the dependencies
    unknown = sorted(set(keys) - set(ROSDEP_KEYS))
    assert not unknown, f"keys rosdep cannot resolve on {DISTROS}: {unknown}"


@pytest.mark.skipif(not os.environ.get("IDYN_ROSDISTRO"), reason="set IDYN_ROSDISTRO to a rosdistro checkout")
def test_the_recorded_keys_are_rosdistros():
    root = Path(os.environ["IDYN_ROSDISTRO"])
    for distro in DISTROS:
        released = set()
        for name, repo in yaml.safe_load((root / distro / "distribution.yaml").read_text())["repositories"].items():
            if "release" in repo:
                released.update(repo["release"].get("packages", [name]))
        for key, where in ROSDEP_KEYS.items():
            if where == "distribution":
                assert key in released, (distro, key)
            else:
                rules = yaml.safe_load((root / where).read_text())
                assert key in rules and {"debian", "ubuntu"} <= set(rules[key]), (key, where)

