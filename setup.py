"""ament_python package that also installs with plain pip (how it runs without ROS)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "idyn_control"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    # sources of the native tick, compiled on the target by `idyn-control build-native`
    package_data={f"{PACKAGE}.native": ["*.cpp", "*.hpp"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/urdf", glob("urdf/*")),
    ],
    python_requires=">=3.10",
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",
        "pin>=3.0",
        "proxsuite>=0.6",
        "PyYAML>=6.0",
    ],
    extras_require={
        # on a ROS machine these come from the distro (rosdep); here from PyPI wheels
        "ros": [
            "ros-rclpy", "ros-std-msgs", "ros-sensor-msgs", "ros-geometry-msgs", "ros-nav-msgs",
            "ros-trajectory-msgs", "ros-diagnostic-msgs", "ros-visualization-msgs",
            "ros-rmw-fastrtps-cpp",
        ],
        "sim": ["mujoco>=3.0", "matplotlib>=3.7", "mcap>=1.1", "mcap-ros2-support>=0.5"],
        "test": ["pytest>=7", "example-robot-data>=4.0", "qpsolvers>=4.0"],
        # the other QP backends (`solver:` option); ProxQP needs none of them
        "qpsolvers": ["qpsolvers>=4.0"],
    },
    zip_safe=False,
    maintainer="idyn_control maintainers",
    maintainer_email="idyn-control@example.org",
    description="Whole-body inverse dynamics with contact at 1 kHz for ROS 2",
    license="BSD-3-Clause",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "idyn-control = idyn_control.cli:main",
            "idyn_controller = idyn_control.ros.controller_node:main",
            "idyn_sim = idyn_control.ros.sim_bridge_node:main",
            "idyn_gait_controller = idyn_control.ros.gait_controller_node:main",
        ],
    },
)
