"""Simulation back-ends that stand in for Gazebo + ros2_control here (DESIGN.md §5).

Only MuJoCo for now: :func:`build_mujoco` turns a :class:`~idyn_control.model.RobotModel`
(its URDF) into a :class:`MujocoSim` whose state and torques use Pinocchio's conventions.
Its names load ``mujoco`` (the ``sim`` extra) when first used, so the ROS-free reference
generators of :mod:`idyn_control.sim.tasks` import without it (the gait node runs them).
"""

__all__ = ["INFINITE_FRICTION", "ContactGeom", "MujocoSim", "build_mujoco"]

#: how the lock-step loop estimates which feet are in contact (``Scenario.contact_estimate``):
#: force = a foot the ground pushed over the last period (as the bridge node publishes),
#: touching = the feet MuJoCo's collision detection finds touching at the current state
CONTACT_ESTIMATES = ("force", "touching")


def __getattr__(name: str):
    if name in __all__:
        from . import mujoco_model

        return getattr(mujoco_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
