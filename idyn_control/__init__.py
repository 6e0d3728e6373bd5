"""idyn_control: whole-body inverse dynamics with contact, for ROS 2 robot controllers.

The core (model, contacts, formulations, solvers, controller) imports no ROS; the ROS
adapters live in :mod:`idyn_control.ros`.
"""

from . import formulations, robots
from .errors import ConfigError, IdynError, ModelError, NonFiniteError, ShapeError, UnknownNameError
from .model import RobotModel

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "IdynError", "ModelError", "NonFiniteError", "RobotModel", "ShapeError",
    "UnknownNameError", "formulations", "robots",
]
