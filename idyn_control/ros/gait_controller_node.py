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
  ``gait.cmd_vel_timeout`` [s], stops it (the swings finish, then the robot stands). A
  NaN/inf command, or one beyond 10 m/s or 20 rad/s, is dropped and counted
  (``dropped.cmd_vel.nonfinite`` / ``implausible`` in /diagnostics).
- Gait time is the ``/joint_states`` stamp (simulated time under ``use_sim_time``).
- The gait runs compiled (:class:`~idyn_control.native.gait.CompiledGait`, the same gait in
  C++) when the formulation does: with ``loop_mode native`` every routine tick of a trotting
  robot, contact switches included, then runs without Python, and /cmd_vel is a data write
  into the compiled gait. Otherwise the Python gait runs in the node's Python tick.
- /diagnostics adds ``gait.trips``: swings the gait began again over something a swing foot
  struck in the first half of its swing (``Gait.trips``, the trip reflex: README, "Blocks").
- ``~/reference`` sensor_msgs/JointState: the joint references (position, velocity; model
  joint order), published with ``~/state`` (``monitor_rate_hz``) and stamped like it.
- ``gait.task`` balance: no /cmd_vel; the robot stands, shifts its weight from foot to foot
  and squats on the schedule of ``gait.balance.*``, timed from the first tick after
  activation: :class:`~idyn_control.sim.tasks.BalanceTask`, the lock-step loop's task,
  sets the gait's body offset (``Gait.set_body_offset``). A Python tick drives it with the
  tick's stamp; while the compiled loop runs the ticks, a timer of the executor does every
  ``BALANCE_PERIOD_S`` (wall) with the node's clock (simulated time under
  ``use_sim_time``): a data write into the compiled gait, so the ticks stay compiled.
- Flat feet (``contacts.surfaces``) never trot: the trot moves point feet, so the node
  ignores /cmd_vel (it warns once) and the robot stands.

Parameters (read-only, in the node's table, config.PARAMETERS): ``gait.enabled``,
``gait.period`` [s], ``gait.duty_factor``, ``gait.step_height`` [m], ``gait.touchdown_depth`` [m],
``gait.touchdown_speed`` [m/s], ``gait.velocity_product``, ``gait.touchdown_reach``, ``gait.follow_ground``,
``gait.ground_tilt``, ``gait.late_descent_speed`` [m/s], ``gait.vertical_fraction``,
``gait.cmd_vel_timeout`` [s], ``gait.task``, ``gait.balance.*``; the standing pose is
``standing_pose.joints/positions``.

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
from ..config import GAIT_FIELDS, balance_config
from ..gait import Gait, GaitConfig
from ..sim.tasks import BalanceTask
from .controller_node import MONITOR_QOS, REFERENCE_QOS, ControllerNode, run
from .conversions import cdr_template

#: how often the executor re-evaluates the balance task while the compiled loop ticks [s, wall]
BALANCE_PERIOD_S = 0.005
#: a /cmd_vel beyond these is implausible: linear [m/s], yaw rate [rad/s] (finite but no legged
#: robot's; the gait would ramp its references toward it)
CMD_VEL_LINEAR_MAX, CMD_VEL_YAW_MAX = 10.0, 20.0

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
        self.balance: BalanceTask | None = None
        self._stand_only = False  # flat feet: the trot moves point feet only, /cmd_vel is ignored
        self._balance_t0: float | None = None  # the task's time zero [s]: the first tick's stamp
        self._balance_timer = None

    def _configure(self) -> None:
        super()._configure()
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        m = self.model
        self.gait = None
        self.balance, self._balance_t0 = None, None
        if not (get("gait.enabled") and m.floating_base and m.contacts):
            return
        self._stand_only = bool(self.settings["contacts.surfaces.links"])
        if self._stand_only and get("gait.task") == "cmd_vel":
            self.get_logger().warning("flat feet (contacts.surfaces): the gait trots point feet only, so /cmd_vel "
                                      "is ignored and the robot stands (gait.task balance shifts and squats)")
        if get("gait.task") == "balance":
            self.balance = BalanceTask(balance_config(self.settings))
            if self._balance_timer is None:  # wall-clock period: it keeps firing when the clock is simulated
                from rclpy.clock import Clock, ClockType

                self._balance_timer = self.create_timer(BALANCE_PERIOD_S, self._drive_balance,
                                                        clock=Clock(clock_type=ClockType.STEADY_TIME))
        q_stand = self._standing_configuration()
        config = GaitConfig(**{name[len("gait."):]: get(name) for name in GAIT_FIELDS})
        self._cmd_vel_timeout = float(get("gait.cmd_vel_timeout"))
        self.gait = Gait(self.ctrl, q_stand, config)
        try:  # the same gait in C++: the compiled loop evaluates it (routine ticks stay compiled)
            from ..native import NativeUnavailable
            from ..native.gait import CompiledGait

            self.gait = CompiledGait(self.gait, cmd_vel_timeout=self._cmd_vel_timeout)
        except (ImportError, NativeUnavailable) as exc:
            self.get_logger().info(f"gait in Python ({exc})")
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
        if self.balance is not None or self._stand_only or self.ctrl is None:  # the balance task commands
            return                                                           # the gait, or none (yet)
        cmd = np.array([msg.linear.x, msg.linear.y, msg.angular.z])
        if not np.isfinite(cmd).all():
            self._drop("cmd_vel", "nonfinite", lambda: "NaN/inf velocity")
            return
        if max(abs(cmd[0]), abs(cmd[1])) > CMD_VEL_LINEAR_MAX or abs(cmd[2]) > CMD_VEL_YAW_MAX:
            self._drop("cmd_vel", "implausible", lambda: (
                f"({cmd[0]:g}, {cmd[1]:g}) m/s, {cmd[2]:g} rad/s beyond {CMD_VEL_LINEAR_MAX:g} m/s, "
                f"{CMD_VEL_YAW_MAX:g} rad/s"))
            return
        gait = self.gait.reference if self._gait_compiled() else self.gait
        if gait is not None and np.any(cmd * (1.0 - gait.velocity_axes)):  # the gait holds these at 0
            self._log_throttled("cmd_vel.axes", f"this robot's feet cannot move sideways: /cmd_vel's "
                                f"linear.y ({cmd[1]:g} m/s) and angular.z ({cmd[2]:g} rad/s) are held at 0")
        self._cmd_vel[:] = cmd
        self._cmd_vel_time = time.monotonic()
        if self._gait_compiled():
            self.gait.command(cmd[0], cmd[1], cmd[2], self._cmd_vel_time)  # a data write: no Python tick

    def _gait_compiled(self) -> bool:
        return self.gait is not None and not isinstance(self.gait, Gait)

    def _compiled_references(self):
        # the compiled tick runs the compiled gait (or no gait: the base node's references)
        if self.gait is None:
            return True, None
        return (True, self.gait) if self._gait_compiled() else (False, None)

    def _apply_references(self) -> None:
        super()._apply_references()
        gait = self.gait
        if gait is None:
            return
        # the input's stamp; in an input gap, advanced by the prediction's age
        t = self._stamp_in["joint_states"] * 1e-9 + self._prediction_age_s
        if self._gait_reset:
            gait.reset(t, self._q, self._v)
            self._gait_reset = False
        if self.balance is not None:
            if self._balance_t0 is None:
                self._balance_t0 = t
            self.balance.drive(t - self._balance_t0, self._q, gait)
        if self._gait_compiled():  # the /cmd_vel logic below, in C++ (as the compiled tick runs it)
            gait.drive(t, self._q, self._v, self._mask, time.monotonic())
        else:
            fresh = time.monotonic() - self._cmd_vel_time <= self._cmd_vel_timeout
            if fresh and np.any(self._cmd_vel != 0.0):
                gait.set_velocity(*self._cmd_vel)
                gait.start(t)
            elif gait.mode == "trot":
                gait.stop()
            gait.update(t, self._q, self._v, self._mask)

    def diagnostics_values(self, now: float | None = None) -> dict:
        """The controller's /diagnostics, and the gait's ``gait.trips``: swings begun again
        over something a foot struck (``Gait.trips``; a block blind, a kerb)."""
        values = super().diagnostics_values(now)
        if self.gait is not None:
            values["gait.trips"] = int(self.gait.trips)
        return values

    def _predicted_contacts(self) -> np.ndarray:
        """In an input gap the feet are where the gait's schedule puts them."""
        if self.gait is None:
            return super()._predicted_contacts()
        return self.gait.planned_stance

    def _drive_balance(self) -> None:
        """The balance task between Python ticks (the compiled loop runs the others)."""
        gait, t0 = self.gait, self._balance_t0
        if self.balance is None or gait is None or t0 is None or not self._gait_compiled():
            return
        self.balance.drive(self.get_clock().now().nanoseconds * 1e-9 - t0, self._q, gait)

    def _publish_state(self) -> None:
        super()._publish_state()
        if self._ref_msg is None:
            return
        # the references of the tick (model joint order), stamped like ~/state: for tracking
        # metrics (seed 000 Table 3) and plots
        msg = self._ref_msg
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(self._stamp_in["joint_states"], 1_000_000_000)
        self._ref_views[0][:] = self.ctrl.q_ref
        self._ref_views[1][:] = self.ctrl.v_ref
        self._ref_pub.publish(msg)

    def _rt_monitor_messages(self) -> list:
        messages = super()._rt_monitor_messages()
        if self._ref_msg is None:
            return messages
        na = self.model.na
        msg = JointState()
        msg.name = list(self.model.joint_names)
        msg.position, msg.velocity, msg.effort = [0.0] * na, [0.0] * na, [0.0] * na
        buf, stamp_at, at = cdr_template(msg, [f"{f}[{j}]" for f in ("position", "velocity") for j in range(na)])
        q_ref, v_ref = self.ctrl.q_ref.ctypes.data, self.ctrl.v_ref.ctypes.data
        fields = [(at[f"position[{j}]"], q_ref + 8 * j) for j in range(na)]
        fields += [(at[f"velocity[{j}]"], v_ref + 8 * j) for j in range(na)]
        return messages + [(self._ref_pub.handle.pointer, buf, stamp_at, fields)]


def main(args=None) -> None:
    """Entry point of ``ros2 run idyn_control idyn_gait_controller``."""
    run(GaitControllerNode, args)


if __name__ == "__main__":
    main()
