"""``idyn_gait_controller``: the controller node with the built-in gait generator and /cmd_vel.

    ros2 run idyn_control idyn_gait_controller --ros-args --params-file config/solo12.yaml

:class:`~idyn_control.ros.controller_node.ControllerNode` plus
:class:`~idyn_control.gait.Gait` (DESIGN.md §4: "/cmd_vel when the built-in gait
generator is on"): every tick, before ``Controller.update``, the gait writes the base,
feet and joint references from the measured state, the contact estimates and the
commanded velocity. The controller itself, its parameters, topics and diagnostics are
the base node's, unchanged.

- ``/cmd_vel`` geometry_msgs/Twist (base frame): linear.x, linear.y [m/s], angular.z
  [rad/s]. A non-zero command starts the trot; zero, or no message for
  ``gait.cmd_vel_timeout`` [s], stops it (the swings finish, then the robot stands).
- Gait time is the ``/joint_states`` stamp (simulated time under ``use_sim_time``).
- ``~/reference`` sensor_msgs/JointState: the joint references of every tick (position,
  velocity; model joint order), stamped like ``~/state``.

Parameters (read-only, in the node's table, config.PARAMETERS): ``gait.enabled``,
``gait.period`` [s], ``gait.duty_factor``, ``gait.step_height`` [m],
``gait.cmd_vel_timeout`` [s]; the standing pose is ``standing_pose.joints/positions``.

This subclass exists because the base node has no gait yet; it only uses the base
node's configure step and its reference hook (``_apply_references``).
"""

from __future__ import annotations

import array
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import Twist
from sensor_msgs.msg import JointState

from .. import robots
from ..gait import Gait, GaitConfig
from .controller_node import MONITOR_QOS, REFERENCE_QOS, ControllerNode, run

class GaitControllerNode(ControllerNode):
    """The controller node with :class:`Gait` and a /cmd_vel input."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)  # declares gait.* with the other parameters (config.PARAMETERS)
        self.gait: Gait | None = None
        self._cmd_vel = np.zeros(3)
        self._cmd_vel_time = 0.0
        self._gait_reset = True
        self.create_subscription(Twist, "/cmd_vel", self._on_cmd_vel, REFERENCE_QOS)
        self._ref_pub = self.create_publisher(JointState, "~/reference", MONITOR_QOS)
        self._ref_msg: JointState | None = None

    def _configure(self) -> None:
        super()._configure()
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        m = self.model
        self.gait = None
        if not (get("gait.enabled") and m.floating_base and m.contacts):
            return
        q_stand = self._standing_configuration()
        config = GaitConfig(period=get("gait.period"), duty_factor=get("gait.duty_factor"),
                            step_height=get("gait.step_height"), touchdown_depth=get("gait.touchdown_depth"))
        self.gait = Gait(self.ctrl, q_stand, config)
        self._cmd_vel_timeout = float(get("gait.cmd_vel_timeout"))
        reset = self.ctrl.reset

        def reset_with_gait(q, v):  # the base node resets the controller on activate / after a trip
            reset(q, v)
            self._gait_reset = True

        self.ctrl.reset = reset_with_gait
        msg = JointState()
        msg.name = list(m.joint_names)
        for field in ("position", "velocity", "effort"):
            setattr(msg, field, array.array("d", bytes(8 * m.na)))
        self._ref_views = [np.frombuffer(getattr(msg, f), dtype=float) for f in ("position", "velocity")]
        self._ref_msg = msg

    def _standing_configuration(self) -> np.ndarray:
        """The standing pose: ``standing_pose.*``, else the shipped robot's, else neutral."""
        m, s = self.model, self.settings
        joints, positions = s["standing_pose.joints"], s["standing_pose.positions"]
        if joints:
            spec = robots.RobotSpec(s["robot"], "", contact_frames=m.contact_frames,
                                    standing_joints=dict(zip(joints, positions)))
            return robots.standing_configuration(m, spec)
        if s["robot"] in robots.names():
            return robots.standing_configuration(m, s["robot"])
        self.get_logger().warning("no standing_pose.joints/positions: the gait stands the robot in the "
                                  "URDF's neutral pose")
        return m.neutral()

    def _on_cmd_vel(self, msg: Twist) -> None:
        cmd = np.array([msg.linear.x, msg.linear.y, msg.angular.z])
        if not np.isfinite(cmd).all():
            self._log_throttled("cmd_vel", "ignored /cmd_vel with NaN/inf")
            return
        self._cmd_vel[:] = cmd
        self._cmd_vel_time = time.monotonic()

    def _apply_references(self) -> None:
        super()._apply_references()
        gait = self.gait
        if gait is None:
            return
        t = self._stamp_in["joint_states"] * 1e-9
        if self._gait_reset:
            gait.reset(t, self._q, self._v)
            self._gait_reset = False
        fresh = time.monotonic() - self._cmd_vel_time <= self._cmd_vel_timeout
        if fresh and np.any(self._cmd_vel != 0.0):
            gait.set_velocity(*self._cmd_vel)
            gait.start(t)
        elif gait.mode == "trot":
            gait.stop()
        gait.update(t, self._q, self._v, self._mask)
        # the references of this tick (model joint order), stamped like ~/state: for
        # tracking metrics (seed 000 Table 3) and plots
        msg = self._ref_msg
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(self._stamp_in["joint_states"], 1_000_000_000)
        self._ref_views[0][:] = self.ctrl.q_ref
        self._ref_views[1][:] = self.ctrl.v_ref
        self._ref_pub.publish(msg)


def main(args=None) -> None:
    """Entry point of ``ros2 run idyn_control idyn_gait_controller``."""
    run(GaitControllerNode, args)


if __name__ == "__main__":
    main()
