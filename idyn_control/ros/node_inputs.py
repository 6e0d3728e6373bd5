"""The controller node's input callbacks: every message checked, the bad ones dropped and
counted (``dropped.<input>.<reason>`` in /diagnostics), the good ones copied for the tick.
"""

from __future__ import annotations

import inspect
import math
import time
from typing import Any, Callable

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from .conversions import (BASE_ANGULAR_MAX, BASE_LINEAR_MAX, JointTrajectoryReference, as_array,
                          quaternion_to_matrix, stamp_ns)
from .node_monitoring import LOG_THROTTLE_S

CLOCK_RESET_NS = 1_000_000_000  # a stamp jump back larger than this is a clock reset

#: a base pose reference farther than this from the measured base is implausible [m]
#: (beyond any leg's reach: the base PD would saturate every joint trying)
BASE_REFERENCE_REACH = 1.0
#: a contact force (measured or desired) above this is implausible [N]: finite but beyond any
#: load cell or robot (the upper end of contacts.max_desired_force's range)
CONTACT_FORCE_MAX = 1e6
#: the μ a ~/contact_ground row may carry: contacts.friction's lower bound, and the value the
#: project takes for "infinite" friction (no slip)
GROUND_MU_MIN, GROUND_MU_MAX = 1e-3, 1e3


class InputsMixin:
    """ControllerNode's subscriptions' callbacks."""

    def _drop(self, inp: str, reason: str, detail: Callable[[], str]) -> None:
        self._drops[(inp, reason)] += 1
        key = f"{inp}.{reason}"
        now = time.monotonic()
        if now - self._log_times.get(key, 0.0) >= LOG_THROTTLE_S:
            self._log_times[key] = now
            self.get_logger().warning(f"dropped {inp} message ({reason}): {detail()} "
                                      f"[{self._drops[(inp, reason)]} so far]")

    def _out_of_order(self, inp: str, stamp: int) -> bool:
        """Drop a message older than the previous one; a jump back > 1 s is a clock reset
        (e.g. a restarted simulator) and is accepted, with a warning."""
        last = self._stamp_in[inp]
        if stamp == 0 or stamp >= last:
            return False
        if last - stamp > CLOCK_RESET_NS:
            self._log_throttled(f"{inp}.clock", f"{inp} stamps jumped back {(last - stamp) * 1e-9:.1f} s: "
                                "clock reset, accepted")
            return False
        self._drop(inp, "out_of_order", lambda: "stamp older than the previous message")
        return True

    def _on_joint_states(self, data: bytes | JointState, msg_info: dict | None = None,
                         callback_ns: int = 0) -> None:
        """/joint_states, subscribed raw (CDR bytes, see JointStateReader.read_serialized) with
        the rmw message info: its receive time starts the input → command latency."""
        callback_ns = callback_ns or time.time_ns()
        received_ns = msg_info["received_timestamp"] if msg_info else callback_ns
        reader = self._js
        reason = reader.read_serialized(data) if isinstance(data, bytes) else reader.read(data)
        if reason is not None:
            self._drop("joint_states", reason, lambda: (
                f"missing {list(reader.missing)}" if reason == "missing_joint" else
                "{} names, {} positions, {} velocities".format(*reader.sizes) if reason == "wrong_size" else
                "not a sensor_msgs/JointState" if reason == "malformed" else
                "position or velocity far outside the joint's limits" if reason == "implausible" else
                "NaN/inf in position or velocity"))
            return
        if reader.unknown:  # entries the model lacks are ignored, and counted
            self._drop("joint_states", "unknown_joint", lambda: f"ignored joints {list(reader.unknown)}")
        stamp = reader.stamp_ns
        if self._out_of_order("joint_states", stamp):
            return
        now = time.monotonic()
        with self._lock:
            self._in_jq[:] = reader.q
            self._in_jv[:] = reader.v
            self._t_in["joint_states"] = now
            self._stamp_in["joint_states"] = stamp
            if self._in_rx_ns:
                self._stats.overwritten_inputs += 1
            self._in_rx_ns, self._in_cb_ns = received_ns, callback_ns
        if self._loop_running:
            self._last_scheduled = now
            self._tick(now)
            self._maybe_collect(now + self.period_s)

    def _on_odom(self, msg: Odometry) -> None:
        reason = self._odom.read(msg)
        if reason is not None:
            self._drop("odom", reason, lambda: {"nonfinite": "NaN/inf pose or twist",
                                                "implausible": "position or twist beyond any plausible value"}.get(
                reason, "quaternion norm far from 1"))
            return
        stamp = stamp_ns(msg.header.stamp)
        if self._out_of_order("odom", stamp):
            return
        with self._lock:
            self._in_base_q[:] = self._odom.q
            self._in_base_v[:] = self._odom.v
            self._t_in["odom"] = time.monotonic()
            self._stamp_in["odom"] = stamp
        if self._rt is not None:
            self._rt.set_base(self._in_base_q, self._in_base_v)

    def _on_contacts(self, msg: Float64MultiArray) -> None:
        data = msg.data
        k = self._in_contacts.size
        if len(data) != k:
            self._drop("contact_states", "wrong_size",
                       lambda: f"{len(data)} values for {k} contacts {list(self.model.contact_frames)}")
            return
        values = as_array(data)
        if not np.isfinite(values).all():
            self._drop("contact_states", "nonfinite", lambda: "NaN/inf estimate")
            return
        with self._lock:
            self._in_contacts[:] = values
            self._t_in["contact_states"] = time.monotonic()
        if self._rt is not None:
            self._rt.set_contacts(self._in_contacts)

    def _on_joint_reference(self, msg: JointTrajectory) -> None:
        if self.ctrl is None:
            return
        traj, reason = JointTrajectoryReference.from_msg(
            msg, self.model, self.get_clock().now().nanoseconds, self._q_ref_full)
        if reason is not None:
            self._drop("joint_reference", reason, lambda: f"joints {list(msg.joint_names)}")
            return
        self._trajectory = traj
        self._t_in["joint_reference"] = time.monotonic()
        self._rt_interrupt()

    def _on_base_reference(self, msg: PoseStamped) -> None:
        p, o = msg.pose.position, msg.pose.orientation
        quat = np.array([o.x, o.y, o.z, o.w])
        position = np.array([p.x, p.y, p.z])
        if not (np.isfinite(quat).all() and np.isfinite(position).all()):
            self._drop("base_reference", "nonfinite", lambda: "NaN/inf pose")
            return
        norm = float(np.linalg.norm(quat))
        if abs(norm - 1.0) > 0.1:
            self._drop("base_reference", "bad_quaternion", lambda: f"quaternion norm {norm:.3f}")
            return
        with self._lock:
            base = self._in_base_q[:3].copy() if self._t_in["odom"] > 0.0 else None
        if base is not None and np.abs(position - base).max() > BASE_REFERENCE_REACH:
            self._drop("base_reference", "implausible", lambda: (
                f"{np.abs(position - base).max():.3g} m from the measured base (> {BASE_REFERENCE_REACH} m)"))
            return
        R = quaternion_to_matrix(quat / norm, np.zeros((3, 3)))
        self._base_pose_ref = (position, R)
        self._base_ref = (position, R, np.zeros(3), np.zeros(3))
        self._t_in["base_reference"] = time.monotonic()
        self._rt_interrupt()

    def _on_base_twist_reference(self, msg: TwistStamped) -> None:
        lin, ang = msg.twist.linear, msg.twist.angular
        velocity, angular = np.array([lin.x, lin.y, lin.z]), np.array([ang.x, ang.y, ang.z])
        if not (np.isfinite(velocity).all() and np.isfinite(angular).all()):
            self._drop("base_reference", "nonfinite", lambda: "NaN/inf twist")
            return
        if np.abs(velocity).max() > BASE_LINEAR_MAX or np.abs(angular).max() > BASE_ANGULAR_MAX:
            self._drop("base_reference", "implausible", lambda: "twist beyond any plausible value")
            return
        ctrl = self.ctrl
        position, R = ((ctrl.base_position_ref.copy(), ctrl.base_rotation_ref.copy())
                       if ctrl is not None else self._base_pose_ref)
        self._base_ref = (position, R, velocity, angular)
        self._rt_interrupt()

    def _wrench_frame_ok(self, kind: str, frame_id: str, frame: str, world_frame: str) -> bool:
        """A contact wrench is given in its contact frame or the world's; else it is
        dropped (counted under ``dropped.<kind>.wrong_frame``)."""
        if frame_id == frame or frame_id == world_frame:
            return True
        self._drop(kind, "wrong_frame", lambda: (
            f"frame_id {frame_id!r} on {frame}'s topic: expected {frame!r} or {world_frame!r}"))
        return False

    def _desired_wrench_callback(self, index: int, frame: str, world_frame: str):
        """Desired force of force contact ``index`` [N]: finite, in its own frame or the
        world's, no torque, within ``contacts.max_desired_force``; else dropped (the previous
        reference is kept). No loop interrupt: the Python tick reads the latest value, and the
        compiled loop (loop_mode native, a compiled formulation) gets it too and writes it into
        the compiled solver's buffer at its next tick, which stays compiled."""
        def callback(msg: WrenchStamped) -> None:
            f, m = msg.wrench.force, msg.wrench.torque
            x, y, z = f.x, f.y, f.z
            if not all(math.isfinite(c) for c in (x, y, z, m.x, m.y, m.z)):
                self._drop("desired_wrench", "nonfinite", lambda: f"NaN/inf wrench for {frame}")
                return
            frame_id = msg.header.frame_id
            if not self._wrench_frame_ok("desired_wrench", frame_id, frame, world_frame):
                return
            if m.x != 0.0 or m.y != 0.0 or m.z != 0.0:
                self._drop("desired_wrench", "torque", lambda: (
                    f"torque ({m.x:g}, {m.y:g}, {m.z:g}) N·m for {frame}: a point contact exerts none"))
                return
            bound = self._node_params["contacts.max_desired_force"]
            norm = math.sqrt(x * x + y * y + z * z)
            if not norm <= CONTACT_FORCE_MAX:  # also an overflow to inf
                self._drop("desired_wrench", "implausible", lambda: f"|f| = {norm:g} N for {frame}")
                return
            if bound > 0.0 and norm > bound:
                self._drop("desired_wrench", "too_large", lambda: (
                    f"|f| = {norm:.1f} N for {frame} > contacts.max_desired_force {bound:g} N"))
                return
            now = time.monotonic()
            with self._lock:
                self._force_ref_in[index] = x, y, z
                self._force_ref_local[index] = frame_id == frame
                self._force_ref_t[index] = now
                self._t_in["desired_wrench"] = now
                rt_loop = self._rt
                if rt_loop is not None:
                    rt_loop.set_desired_force(index, self._force_ref_in[index], frame_id == frame, now)
        return callback

    def _on_contact_ground(self, msg: Float64MultiArray) -> None:
        """The ground under each contact: rows (nx, ny, nz, μ); rows that differ from the ones
        in use are applied by the next tick (:meth:`_apply_pending`)."""
        k = self._ground_in.shape[0]
        data = as_array(msg.data)
        if data.size != 4 * k:
            self._drop("contact_ground", "wrong_size", lambda: f"{data.size} values, expected 4 × {k} contacts")
            return
        rows = data.reshape(k, 4)
        if not np.isfinite(rows).all():
            self._drop("contact_ground", "nonfinite", lambda: "NaN/inf normal or μ")
            return
        norms = np.sqrt(np.einsum("ij,ij->i", rows[:, :3], rows[:, :3]))
        mu = rows[:, 3]
        if not ((norms > 1e-6).all() and np.isfinite(norms).all() and (mu >= GROUND_MU_MIN).all()
                and (mu <= GROUND_MU_MAX).all()):
            self._drop("contact_ground", "implausible", lambda: (
                f"a zero or overflowing normal, or μ outside [{GROUND_MU_MIN:g}, {GROUND_MU_MAX:g}]"))
            return
        with self._lock:
            self._ground_in[:, :3] = rows[:, :3] / norms[:, None]
            self._ground_in[:, 3] = rows[:, 3]
            changed = bool((self._ground_in != self._ground_now).any())
            self._ground_pending |= changed
            self._t_in["contact_ground"] = time.monotonic()
        if changed:
            self._rt_interrupt()

    def _measured_wrench_callback(self, index: int, frame: str, world_frame: str):
        """Measured force of contact ``index`` [N]: finite, in its own frame or the world's."""
        def callback(msg: WrenchStamped) -> None:
            f = msg.wrench.force
            x, y, z = f.x, f.y, f.z
            if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
                self._drop("measured_wrench", "nonfinite", lambda: f"NaN/inf force for {frame}")
                return
            if not max(abs(x), abs(y), abs(z)) <= CONTACT_FORCE_MAX:
                self._drop("measured_wrench", "implausible", lambda: f"force ({x:g}, {y:g}, {z:g}) N for {frame}")
                return
            frame_id = msg.header.frame_id
            if not self._wrench_frame_ok("measured_wrench", frame_id, frame, world_frame):
                return
            now = time.monotonic()
            with self._lock:
                self._meas_in[index] = x, y, z
                self._meas_local[index] = frame_id == frame
                self._meas_t[index] = now
                self._measured_any = True
                self._t_in["measured_wrench"] = now
        return callback


_MSG_INFO_SIGNATURE = inspect.Signature([inspect.Parameter("msg", inspect.Parameter.POSITIONAL_ONLY),
                                         inspect.Parameter("msg_info", inspect.Parameter.POSITIONAL_ONLY)])


def with_message_info(callback: Callable[[Any, dict], None]) -> Callable[..., None]:
    """``callback(msg, msg_info)`` as a subscription callback that rclpy calls with the rmw
    message info (``received_timestamp``, ``source_timestamp`` [ns, system clock]).

    rclpy picks "with message info" from the callback's signature (two positional
    parameters). The SingleThreadedExecutor then calls ``cb(msg, info)``; the EventsExecutor
    of this rclpy (Kilted) calls ``cb((msg, info))`` with the tuple as one argument (calling
    a two-parameter function that way fails inside its C++), hence ``*args`` with a declared
    two-parameter ``__signature__``: both calling conventions work.
    """
    def subscription_callback(*args) -> None:
        msg, info = args if len(args) == 2 else args[0]
        callback(msg, info)

    subscription_callback.__signature__ = _MSG_INFO_SIGNATURE
    return subscription_callback

