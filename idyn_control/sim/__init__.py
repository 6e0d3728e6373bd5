"""Simulation back-ends that stand in for Gazebo + ros2_control here (DESIGN.md §5).

Only MuJoCo for now: :func:`build_mujoco` turns a :class:`~idyn_control.model.RobotModel`
(its URDF) into a :class:`MujocoSim` whose state and torques use Pinocchio's conventions.
Importing this package needs ``mujoco`` (the ``sim`` extra); the core does not.
"""

from .mujoco_model import INFINITE_FRICTION, ContactGeom, MujocoSim, build_mujoco

__all__ = ["INFINITE_FRICTION", "ContactGeom", "MujocoSim", "build_mujoco"]
