"""ament_python package that also installs with plain pip (how it runs without ROS).

The compiled tick is part of this build: ``pip install .``, ``pip install -e .`` and
``colcon build`` (which runs this file) compile the optional extension modules described
in ``idyn_control/native/build.py``. When they cannot be built the install still succeeds
and the package runs its Python formulations (``idyn_control.native.status()`` says why).
"""

import importlib.util
import os
import sys
from glob import glob
from pathlib import Path

from setuptools import find_packages, setup

PACKAGE = "idyn_control"
ROOT = Path(__file__).resolve().parent


def _native_build():
    """idyn_control/native/build.py, loaded by path: the package's dependencies (numpy...)
    are not importable in pip's isolated build environment."""
    spec = importlib.util.spec_from_file_location("_idyn_native_build", ROOT / PACKAGE / "native" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


_build = _native_build()
os.chdir(ROOT)  # setuptools wants extension sources relative to the project
_ext_modules, _skipped = _build.extensions(ROOT)
_BuildExt = _build.build_ext_class()
_BuildExt.skipped = _skipped
try:  # compile the sources of one module in parallel (two of them take minutes each)
    from pybind11.setup_helpers import ParallelCompile

    ParallelCompile("IDYN_BUILD_JOBS").install()
except ImportError:
    pass

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    # the compiled tick's sources ship too: `idyn-control build-native` rebuilds in place
    package_data={f"{PACKAGE}.native": ["*.cpp", "*.hpp", "*.h"]},
    ext_modules=_ext_modules,
    cmdclass={"build_ext": _BuildExt},
    distclass=_build.distribution_class(),
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
