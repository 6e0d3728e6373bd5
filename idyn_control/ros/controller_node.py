"""``idyn_controller``: the whole-body inverse-dynamics controller as a ROS 2 lifecycle node.

    ros2 run idyn_control idyn_controller --ros-args --params-file config/solo12.yaml

It drives :class:`idyn_control.controller.Controller` (the same code path as the
lock-step simulator) at ``update_rate`` and publishes joint efforts for a ros2_control
``effort_controllers/JointGroupEffortController``. Lifecycle (ros2_controllers style):

- configure: read parameters, build the model, contacts and formulation, size every
  buffer and message, create publishers/subscriptions; any problem → FAILURE with one
  clear log line.
- activate: take the measured state as the reference (``Controller.reset``) — at the
  first complete state if none has arrived yet — and command.
- deactivate: command the configured safe output (zero/damping/gravity/hold) at the loop
  rate: the effort controller holds the last command it received, so going silent would
  leave the last active torque on the motors.
- cleanup/shutdown: one last safe command at zero velocity, then everything is released.

``autostart`` (default true) configures and activates at start-up.

Loop designs (``loop_mode``; measured by ``bench/ros_loop.py``):

- ``native`` (default): ``triggered`` (below) with the routine tick compiled. A C++ thread
  of its own (:mod:`idyn_control.native.rt`, SCHED_FIFO ``loop_priority``) is woken by the
  middleware for each /joint_states sample on a subscription the executor does not serve,
  and runs the tick without Python or the GIL: CDR bytes → the compiled controller tick
  (:mod:`idyn_control.native.tick`: the gait node's compiled gait, the contacts held — switches,
  make/break ramps included —, Pinocchio, kinematic layer, compiled formulation (wbc_qp,
  qp_coulomb, qp_noslip; rnea on a fixed base), clamps) → command published through rcl,
  then the monitoring topics (~/state, predicted contact wrenches, the gait's ~/reference)
  at ``monitor_rate_hz``, published from the same thread. Whatever is not routine is handed
  to the Python tick on that thread with the same bytes (the first tick after activation, a
  new reference, gain or option, a running joint trajectory, stale inputs, a joint-name
  layout not seen before, a stamp out of order, a failed or non-finite solve, a formulation
  that only runs in Python), and after each Python tick the node tells the loop whether the
  next ticks are routine again. A bookkeeping thread reads the compiled ticks' records
  (statistics, counters) and publishes /diagnostics, so the loop never waits for Python in a
  routine tick. Odometry, contact estimates and /cmd_vel still arrive through the executor
  and are copied to the loop (data writes, no Python tick). Without the
  compiled loop (not built, no ROS 2 headers) the node runs ``triggered`` with a warning.
- ``triggered``: the Python twin of ``native``, and its fallback: one tick per
  /joint_states message, run in its executor callback as soon as it arrives (the hardware
  or simulator clock drives the loop, like ros2_control's read → update → write; the state
  publisher must run at ``update_rate``); a timer covers a silent input (watchdog). A miss
  is a tick whose command left more than one period after its input's callback started.

Designs that tick on the node's own clock (a deadline loop between executor callbacks, a
loop thread, rclpy timers on either executor) were measured beside these two by
``bench/ros_loop.py`` and lost on every measure (an input waits up to a period for its tick;
Solo12 standing, 20 s each, loaded 2-core VM: node misses 10-80 % against triggered's 1.9 %
and native's 0.6 %, input → command p50 0.55-2.1 ms against 0.54 and 0.21 ms); they were
removed.

The path /joint_states → command is kept short: /joint_states is subscribed raw and read
from its CDR bytes (:meth:`.JointStateReader.read_serialized`: no Python message object),
the command is kept serialized and published as bytes, and everything that is not needed
for the command (counters, statistics, monitoring) runs after it is published. Per tick
the node allocates nothing but the bytes handed to the middleware (messages and buffers are
preallocated and written through numpy views); the garbage collector is frozen after
configure, disabled while the loop runs and collected (young generations) only when a tick
left slack. Monitoring (~/state, contact wrenches, /diagnostics) is decimated and
published in the slack before the next deadline.

Input → command latency ("joint state in → command out") is measured in the node from the
rmw ``received_timestamp`` of each /joint_states sample to the command's publish, on the
system clock the rmw stamps use (:mod:`.loop_stats`), and reported in /diagnostics
(``input_to_command_*``, with its dispatch/wait split and a whole-run histogram).

Inputs (state topics are subscribed best-effort, depth 1: they match best-effort and
reliable publishers; references reliable, depth 1):

- ``/joint_states`` sensor_msgs/JointState, matched by name to the model joints.
- ``/odom`` nav_msgs/Odometry (floating base only), see :mod:`.conversions`.
- ``~/contact_states`` std_msgs/Float64MultiArray: one estimate per ``contacts.frames``
  entry, in that order; contact when ≥ ``contacts.threshold`` (so 0/1 flags and contact
  probabilities both work). Until the first message every contact is taken as closed.
- ``~/joint_reference`` trajectory_msgs/JointTrajectory (by joint name, interpolated).
- ``~/base_reference`` geometry_msgs/PoseStamped, ``~/base_twist_reference``
  geometry_msgs/TwistStamped (world frame).
- ``contacts.desired_wrench_topic`` (default ``~/desired_wrench/<frame>``)
  geometry_msgs/WrenchStamped, one per force contact (``formulation_options.force_contacts``
  of a formulation with ``set_desired_forces``: ``pidc_qp`` and its baselines, seed 004): the
  desired force of the ground on that foot [N], streamed at up to the control rate or sent
  once. ``header.frame_id`` is ``contacts.world_frame`` or the contact frame (rotated to the
  world with the last tick's kinematics, at every tick); the torque must be zero (a point
  contact exerts none). A NaN/inf entry, another frame, a torque, or a force above
  ``contacts.max_desired_force`` (when > 0) is dropped and counted, and the previous
  reference kept. Every tick hands the latest accepted references to the formulation
  (``Controller.set_desired_forces``): a reference is held until the next one, or, when
  ``contacts.desired_wrench_timeout`` > 0, goes back to zero (the value before any reference
  arrived) once older than that, with one warning and ``stale_ticks.desired_wrench`` in
  /diagnostics. No profile-as-trajectory message: a profile is streamed. The formulations
  that take desired forces run in Python (no compiled solver), so with them every tick of
  ``loop_mode native`` is handed to the Python tick on the compiled loop's thread (same
  trigger, no executor hop, but GIL hand-offs with the executor thread: ``triggered`` is
  faster for them, see ``bench/force_reference.py``); no other formulation subscribes to
  desired wrenches and their compiled ticks are unchanged.
- ``contacts.measured_wrench_topic`` (default ``~/measured_wrench/<frame>``)
  geometry_msgs/WrenchStamped, one per contact frame: the measured force of the last
  control period (formulations with ``set_measured_forces``: ``sensed``, ID(t_{i−1}) /
  ID(t_{i−2}) of seed 000 §7.3), forwarded through ``Controller.set_measured_forces`` every
  tick. ``header.frame_id`` is the contact frame (rotated to the world with the last
  tick's kinematics) or ``contacts.world_frame``; any other frame or a NaN/inf force is
  dropped and counted. Once one has arrived, every contact's must stay fresher than
  ``watchdog_timeout`` (a stale measurement trips the watchdog like a stale state).

Outputs: ``command_topic`` std_msgs/Float64MultiArray (reliable, ``command_joints``
order), ``~/state`` sensor_msgs/JointState (measured position/velocity, commanded
effort, ``joints`` order, stamped with the input's stamp), ``~/contact_wrench/<frame>``
geometry_msgs/WrenchStamped (predicted force in the contact frame, so RViz draws it at the
foot), ``/diagnostics``.
"""

from __future__ import annotations

import array
import ctypes
import gc
import inspect
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped, TwistStamped, WrenchStamped
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import ExternalShutdownException
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import serialize_message
from rclpy.type_support import check_for_type_support
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory

from .. import config, formulations
from ..controller import Controller, ControllerConfig
from ..errors import ConfigError, IdynError
from . import parameters, signals
from .conversions import (BASE_ANGULAR_MAX, BASE_LINEAR_MAX, BASE_POSITION_MAX, JointStateReader, JointTrajectoryReference,
                          OdometryReader, as_array, cdr_template, quaternion_to_matrix, stamp_ns)
from .loop_stats import LoopStats

STATE_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                       durability=DurabilityPolicy.VOLATILE)
REFERENCE_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
MONITOR_QOS = QoSProfile(depth=5, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)

GC_EVERY_TICKS = 1000    # collect young generations this often, when the tick left slack
GC_SLACK_S = 300e-6
LOG_THROTTLE_S = 2.0
WATCHDOG_TIMER_S = 0.005      # triggered mode: how often staleness is checked without input
RT_DRAIN_EVERY = 10           # native mode: bookkeeping of the compiled loop's ticks, in batches of this many
RT_DRAIN_WAIT_S = 0.02        # ... or at least this often
# native mode: a Python tick on the loop's thread gives the GIL up in every compiled call and
# waits for it back; with the interpreter's 5 ms switch interval another thread could keep
# it that long (the activation tick took 4-5 ms in the demo)
RT_GIL_SWITCH_INTERVAL_S = 2e-4
PR_SET_TIMERSLACK = 29
MCL_CURRENT, MCL_FUTURE = 1, 2  # mlockall flags (Linux)
CLOCK_RESET_NS = 1_000_000_000  # a stamp jump back larger than this is a clock reset
STATE_BUDGET_S = 150e-6        # typical cost of ~/state + contact wrenches (measured, loaded VM)
DIAGNOSTICS_BUDGET_S = 400e-6  # typical cost of /diagnostics
MONITOR_MAX_DEFER_S = 0.5      # publish anyway after waiting this long for slack

#: a base pose reference farther than this from the measured base is implausible [m]
#: (beyond any leg's reach: the base PD would saturate every joint trying)
BASE_REFERENCE_REACH = 1.0

INPUTS = ("joint_states", "odom", "contact_states", "joint_reference", "base_reference", "desired_wrench",
          "measured_wrench")
DROP_REASONS = {
    "joint_states": ("missing_joint", "unknown_joint", "wrong_size", "nonfinite", "implausible", "out_of_order",
                     "malformed"),
    "odom": ("nonfinite", "implausible", "bad_quaternion", "out_of_order"),
    "contact_states": ("wrong_size", "nonfinite"),
    "joint_reference": ("empty", "unknown_joint", "wrong_size", "nonfinite", "time_not_increasing"),
    "base_reference": ("nonfinite", "implausible", "bad_quaternion"),
    "desired_wrench": ("nonfinite", "wrong_frame", "torque", "too_large"),
    "measured_wrench": ("nonfinite", "wrong_frame"),
}
STATUSES = ("solved", "max_iter", "infeasible", "failed", "exception")

# modes of the output
OFF, WAITING, ACTIVE, SAFE = "off", "waiting_for_state", "active", "safe"


class ControllerNode(LifecycleNode):
    """The lifecycle node around :class:`Controller` (see the module docstring)."""

    def __init__(self, node_name: str = config.NODE_NAME, **kwargs: Any):
        super().__init__(node_name, **kwargs)
        parameters.declare_all(self)
        self._option_specs: dict[str, config.ParamSpec] = {}
        try:
            formulation = parameters.value(self, config.SPEC["formulation"])
            specs = config.option_specs(formulation)
            # the robot file's defaults of this formulation's options (read-only)
            self._default_specs = config.default_specs(formulation)
        except (IdynError, KeyError) as exc:  # reported again, as the configure failure
            self.get_logger().warning(f"formulation options not declared: {exc}")
            specs, self._default_specs = (), ()
        for spec in self._default_specs:
            parameters.declare(self, spec)
        for spec in specs:
            parameters.declare(self, spec)
            self._option_specs[spec.name] = spec
        self.autostart: bool = parameters.value(self, config.SPEC["autostart"])
        self.loop_mode: str = parameters.value(self, config.SPEC["loop_mode"])
        self._loop_fallback: str | None = None  # why loop_mode native fell back to triggered
        self.loop_priority: int = parameters.value(self, config.SPEC["loop_priority"])
        self.middleware_priority: int = parameters.value(self, config.SPEC["middleware_priority"])
        self.loop_spin_us: float = parameters.value(self, config.SPEC["loop_spin_us"])
        self.lock_memory: bool = parameters.value(self, config.SPEC["lock_memory"])
        self.loop_cpu: int = parameters.value(self, config.SPEC["loop_cpu"])
        self._memory_locked = False
        self.cpu_affinity: list[int] = list(parameters.value(self, config.SPEC["cpu_affinity"]))
        self._lock = threading.Lock()
        self._node_params: dict[str, float] = {
            n: parameters.value(self, config.SPEC[n])
            for n in ("watchdog_timeout", "monitor_rate_hz", "diagnostics_rate_hz", "contacts.threshold",
                      "contacts.desired_wrench_timeout", "contacts.max_desired_force")}
        self.ctrl: Controller | None = None
        self._mode = OFF
        self._loop_running = False
        self._watchdog_timer = None
        self._rt = None        # native.rt.RtLoop while loop_mode native runs
        self._rt_sub = None    # its /joint_states subscription (not the executor's)
        self._rt_odom_sub = self._rt_contacts_sub = None  # and its odometry and contact estimates
        self._rt_input_drops = np.zeros(6)  # the loop's input drop counts, as last booked
        self._rt_interrupts = 0
        self._book_lock = threading.Lock()  # native mode: bookkeeping thread vs Python ticks
        self._book_thread: threading.Thread | None = None
        self._rt_unknown = 0
        self._rt_tick = None  # native.tick.Tick of the compiled loop (rt.plan_for)
        self._rt_monitor_key = None  # (compiled tick, decimation) the compiled loop's monitoring was set for
        self._last_fast = False
        self._entities: list = []  # publishers and subscriptions created at configure
        self._log_times: dict[str, float] = {}
        self.rejected_parameters = 0
        self.callback_exceptions = 0  # callbacks that raised and were survived (_spin_once)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        guard_parameter_services(self)

    # ================================================================== lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self._configure()
        except Exception as exc:  # noqa: BLE001 - any problem: FAILURE with one clear line
            kind = "" if isinstance(exc, IdynError) else f"{type(exc).__name__}: "
            self.get_logger().error(f"configure failed: {kind}{exc}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        m = self.model
        self.get_logger().info(
            f"configured: {m!r}, formulation {self.ctrl.config.formulation}, {self.rate_hz:g} Hz "
            f"({self.loop_mode} loop), commands on {self._cmd_pub.topic_name} for {len(self.command_joints)} joints")
        self.get_logger().info(f"loop: {self.loop_report()}")
        gc.collect()
        gc.freeze()  # everything built so far never needs scanning again
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._need_reset = True
            self._trajectory = None
        self._mode = WAITING
        self._start_loop()
        have_state = self._t_in["joint_states"] > 0.0
        self.get_logger().info("activated: " + ("holding the measured posture" if have_state
                                                else "will hold the posture of the first complete state"))
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self._lock:
            self._mode = SAFE
        self._rt_interrupt()
        self.get_logger().info(f"deactivated: commanding the safe output ({self.ctrl.config.safe_output})")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_and_release()
        self.get_logger().info("cleaned up")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_and_release()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_and_release()
        return TransitionCallbackReturn.SUCCESS

    def destroy_node(self) -> None:
        """Stop the loop and release everything (also without a shutdown transition)."""
        if getattr(self, "ctrl", None) is not None or getattr(self, "_loop_running", False):
            self._stop_and_release()  # (a constructor that failed half-way has neither)
        super().destroy_node()

    def _stop_and_release(self) -> None:
        self._stop_loop()
        if self.ctrl is not None and self._mode != OFF:
            self._publish_final()
        self._mode = OFF
        self._release()

    # ================================================================== configure
    def _configure(self) -> None:
        # options: formulation_options.<key> where it differs from the formulation's default,
        # else the robot's formulation_defaults.<formulation>.<key>, else the default
        params = parameters.read_all(self, config.PARAMETERS)
        for spec in self._default_specs + tuple(self._option_specs.values()):
            value = parameters.value(self, spec)
            if value != spec.default:
                params[spec.name] = value
        problems = config.validate(params, check_model=False)
        if problems:
            raise ConfigError("parameters", len(problems), "; ".join(problems))
        settings = config.resolve(params)
        model = config.build_model(settings)
        if model.nq - (7 if model.floating_base else 0) != model.na:
            raise ConfigError("robot", model.pin_model.name, "continuous (unbounded) joints are not supported")
        joints, command_joints = config.joint_orders(settings, model)
        ctrl = Controller(model, config.controller_config(settings, model))
        self.model, self.ctrl, self.settings = model, ctrl, settings
        self.joints, self.command_joints = joints, command_joints
        self.rate_hz = float(settings["update_rate"])
        self.period_s = 1.0 / self.rate_hz
        nv, na, k = model.nv, model.na, len(model.contacts)
        missing = [j for j in model.joint_names if j not in command_joints]
        if missing:
            self.get_logger().warning(f"joints not in command_joints get no command: {missing}")

        # ---------------------------------------------------------- buffers
        self._js = JointStateReader(model)
        self._odom = OdometryReader(settings["odom_twist_frame"] == "parent")
        self._in_jq, self._in_jv = np.zeros(na), np.zeros(na)          # latest accepted inputs
        self._in_base_q, self._in_base_v = np.array([0, 0, 0, 0, 0, 0, 1.0]), np.zeros(6)
        self._in_contacts = np.ones(k)
        self._t_in = {name: 0.0 for name in INPUTS}                       # monotonic receive time
        # the latest /joint_states not yet used by a tick: middleware receive and callback start
        # [ns, system clock, as the rmw stamps], 0 = none new; and those of the tick's input
        self._in_rx_ns = self._in_cb_ns = 0
        self._used_rx_ns = self._used_cb_ns = 0
        self._published_ns = 0                                           # this tick's command [ns]
        self._stamp_in = {"joint_states": 0, "odom": 0}                  # header stamps [ns]
        self._q, self._v = model.neutral(), np.zeros(nv)                 # tick state
        self._mask = np.ones(k, dtype=bool)
        self._zero_v = np.zeros(nv)
        self._tau = np.zeros(na)
        self._cmd_index = model.joint_order(command_joints)
        self._joints_index = model.joint_order(joints)
        self._forces_world = np.zeros((k, 3))
        self._need_reset = True
        self._trajectory: JointTrajectoryReference | None = None
        self._q_ref_full, self._v_ref_full, self._a_ref_full = ctrl.q_ref.copy(), np.zeros(na), np.zeros(na)
        self._base_ref: tuple | None = None
        self._base_pose_ref = (np.zeros(3), np.eye(3))
        # desired forces of the force contacts as received (contact or world frame), whether
        # given in the contact frame, receive times [s, monotonic; 0 = none yet], in the world
        # frame for the formulation; contacts whose reference went stale (timeout)
        self._force_ref_in = np.zeros((k, 3))
        self._force_ref_local = np.zeros(k, dtype=bool)
        self._force_ref_t = np.zeros(k)
        self._force_ref_world = np.zeros((k, 3))
        self._force_ref_stale = np.zeros(k, dtype=bool)
        self._force_ref_stale_ticks = 0
        self._is_force_contact = np.zeros(k, dtype=bool)
        self._force_indices: tuple[int, ...] = ()
        # measured contact forces as received (contact or world frame), receive times
        # [s, monotonic], and in the world frame for the formulation
        self._meas_in = np.zeros((k, 3))
        self._meas_local = np.zeros(k, dtype=bool)
        self._meas_t = np.zeros(k)
        self._meas_world = np.zeros((k, 3))
        self._measured_any = False
        self._meas_stale_ticks = 0
        self._pending_fields: dict[str, Any] = {}
        self._pending_formulation = None
        self._stats = LoopStats(self.period_s)
        self._drops = {(i, r): 0 for i, rs in DROP_REASONS.items() for r in rs}
        self._status_counts = {s: 0 for s in STATUSES}
        self._source_counts: dict[str, int] = {"formulation": 0, "zero": 0, "damping": 0, "gravity": 0, "hold": 0}
        self._saturated_joints = 0
        self._watchdog_trips = 0
        self._watchdog_tripped = False
        self._last_source = "none"
        self._ticks_since_gc = 0
        self._monitor_countdown = 0
        self._diag_countdown = 0
        self._last_result = None
        self._last_scheduled = 0.0
        self._diag_msg: DiagnosticArray | None = None
        self._diag_values: list[KeyValue] = []

        # ---------------------------------------------------------- warm-up (no lazy set-up in the tick)
        q0 = model.neutral()
        mask0 = np.ones(k, dtype=bool)
        safe = ctrl.config.safe_output
        ctrl.set_gains(safe_output="gravity")
        ctrl.safe_torque(q0, self._zero_v, mask0)  # builds the gravity fallback now
        ctrl.set_gains(safe_output=safe)
        ctrl.reset(q0, self._zero_v)
        try:
            ctrl.update(q0, self._zero_v, mask0)      # first solve: QP set-up, caches
        except Exception:  # noqa: BLE001 - warm-up only; real failures surface in the loop
            pass
        ctrl.reset(q0, self._zero_v)

        # ---------------------------------------------------------- messages
        # numpy views onto the messages' own buffers: the tick writes in place, no copies
        # (read back after assignment: the field setter may copy the array)
        # the command is kept serialized (CDR bytes, as the middleware sends it) and published
        # as bytes: half the cost of publishing the message object; the tick writes the
        # efforts into the data sequence at the end of the buffer
        cmd_msg = Float64MultiArray()
        cmd_msg.layout.dim = [MultiArrayDimension(label="joints", size=len(command_joints),
                                                  stride=len(command_joints))]
        cmd_msg.data = array.array("d", bytes(8 * len(command_joints)))
        self._cmd_cdr = bytearray(serialize_message(cmd_msg))
        self._cmd_view = np.frombuffer(self._cmd_cdr, dtype="<f8", count=len(command_joints),
                                       offset=len(self._cmd_cdr) - 8 * len(command_joints))
        self._state_msg = JointState()
        self._state_msg.name = list(joints)
        for field in ("position", "velocity", "effort"):
            setattr(self._state_msg, field, array.array("d", bytes(8 * na)))
        self._state_views = tuple(np.frombuffer(getattr(self._state_msg, f), dtype=float)
                                  for f in ("position", "velocity", "effort"))
        self._wrench_msgs = []
        for frame in model.contact_frames:
            msg = WrenchStamped()
            msg.header.frame_id = frame
            self._wrench_msgs.append(msg)

        # ---------------------------------------------------------- publishers, subscriptions
        self._cmd_pub = self._add(self.create_publisher(Float64MultiArray, settings["command_topic"], COMMAND_QOS))
        self._state_pub = self._add(self.create_publisher(JointState, "~/state", MONITOR_QOS))
        self._wrench_pubs = [self._add(self.create_publisher(WrenchStamped, f"~/contact_wrench/{f}", MONITOR_QOS))
                             for f in model.contact_frames]
        self._diag_pub = self._add(self.create_publisher(DiagnosticArray, "/diagnostics", MONITOR_QOS))
        if self.loop_mode == "native" and not self._native_loop_available():
            self.loop_mode = "triggered"
        if self.loop_mode == "native":  # served by the compiled loop's thread, not the executor
            qos = STATE_QOS.get_c_qos_profile()
            for msg_type in (JointState, Odometry, Float64MultiArray):
                check_for_type_support(msg_type)  # what create_subscription does first
            with self.handle:
                self._rt_sub = _rclpy.Subscription(self.handle, JointState, "/joint_states", qos, None)
                # the state around each joint state too: through the executor a tick could use
                # odometry and contacts ticks older than its joint states while the robot moves
                if model.floating_base:
                    self._rt_odom_sub = _rclpy.Subscription(self.handle, Odometry, "/odom", qos, None)
                if k:
                    self._rt_contacts_sub = _rclpy.Subscription(self.handle, Float64MultiArray, "~/contact_states",
                                                                qos, None)
        else:
            self._add(self.create_subscription(JointState, "/joint_states", with_message_info(self._on_joint_states),
                                               STATE_QOS, raw=True))  # CDR bytes: see JointStateReader
            if model.floating_base:
                self._add(self.create_subscription(Odometry, "/odom", self._on_odom, STATE_QOS))
            if k:
                self._add(self.create_subscription(Float64MultiArray, "~/contact_states", self._on_contacts,
                                                   STATE_QOS))
        self._add(self.create_subscription(JointTrajectory, "~/joint_reference", self._on_joint_reference,
                                           REFERENCE_QOS))
        if model.floating_base:
            self._add(self.create_subscription(PoseStamped, "~/base_reference", self._on_base_reference,
                                               REFERENCE_QOS))
            self._add(self.create_subscription(TwistStamped, "~/base_twist_reference",
                                               self._on_base_twist_reference, REFERENCE_QOS))
        # desired forces: a subscription per force contact (none for other formulations); the
        # force contacts are structural (read-only options), so a rebuilt formulation keeps them
        self._takes_force_refs = hasattr(ctrl.formulation, "set_desired_forces")
        if self._takes_force_refs:
            pattern, world = settings["contacts.desired_wrench_topic"], settings["contacts.world_frame"]
            for frame in ctrl.formulation.options.get("force_contacts", ()) or ():
                i = model.contact_index(frame)
                self._is_force_contact[i] = True
                self._force_indices += (i,)
                self._add(self.create_subscription(
                    WrenchStamped, pattern.format(frame=frame),
                    self._desired_wrench_callback(i, frame, world), REFERENCE_QOS))
        if hasattr(ctrl.formulation, "set_measured_forces"):
            pattern, world = settings["contacts.measured_wrench_topic"], settings["contacts.world_frame"]
            for i, frame in enumerate(model.contact_frames):
                self._add(self.create_subscription(
                    WrenchStamped, pattern.format(frame=frame),
                    self._measured_wrench_callback(i, frame, world), STATE_QOS))

    def _native_loop_available(self) -> bool:
        """loop_mode native needs the compiled loop (rt.cpp) built for this ROS 2; else triggered."""
        try:
            from ..native import rt

            rt.load_rt()
        except Exception as exc:  # noqa: BLE001 - any reason: say it, run the Python loop
            self._loop_fallback = str(exc)
            self.get_logger().warning(f"loop_mode native unavailable ({exc}); running loop_mode triggered")
            return False
        self._loop_fallback = None
        return True

    def loop_report(self) -> str:
        """Which loop runs the ticks and what computes them, with the reason when it is not the
        compiled one (logged at configure, ``loop`` in /diagnostics)."""
        from .. import native

        f = self.ctrl.formulation
        if f.backend == "native":
            tick = f"compiled tick ({self.ctrl.config.formulation}, {native.status()[1]})"
        else:
            why = f.native_unavailable
            if why is None:
                why = ("backend python" if f.options.get("backend") == "python"
                       else f"{self.ctrl.config.formulation} runs in Python only")
            tick = f"Python tick ({why})"
        if self.loop_mode == "native":
            return f"native loop: {tick}"
        chosen = (f"compiled loop unavailable: {self._loop_fallback}" if self._loop_fallback
                  else f"loop_mode {self.loop_mode}")
        return f"python {self.loop_mode} loop ({chosen}): {tick}"

    def _subscription_callback_for(self, topic: str):
        """The callback subscribed to ``topic`` (tests and introspection)."""
        return next(s.callback for s in self.subscriptions if s.topic_name == topic)

    def _add(self, entity):
        self._entities.append(entity)
        return entity

    def _release(self) -> None:
        for name in ("_rt_sub", "_rt_odom_sub", "_rt_contacts_sub"):
            sub = getattr(self, name)
            if sub is not None:
                sub.destroy_when_not_in_use()
                setattr(self, name, None)
        for entity in self._entities:
            if hasattr(entity, "topic_name") and hasattr(entity, "publish"):
                self.destroy_publisher(entity)
            else:
                self.destroy_subscription(entity)
        self._entities = []
        self.ctrl = None
        gc.unfreeze()

    # ================================================================== loop designs
    def make_executor(self):
        """The executor the node runs on: the EventsExecutor (the lowest dispatch cost of
        rclpy's executors, measured by bench/ros_loop.py)."""
        from rclpy.experimental import EventsExecutor

        return EventsExecutor()

    def _start_loop(self) -> None:
        if self._loop_running:
            return
        self._loop_running = True
        self._last_scheduled = time.monotonic()
        gc.disable()  # collected by the loop when a tick leaves slack
        self._pin_cpus()
        loop_cpu = self._native_loop_cpu()
        self._prioritize_middleware(loop_cpu)
        self._lock_memory()
        if self.loop_mode == "native":  # the compiled loop's own thread ticks; the executor serves the rest
            self._start_native_loop(loop_cpu)
        else:
            self._set_priority()  # triggered: the executor thread runs the tick
        # ticks come from /joint_states; a timer covers a silent input
        self._watchdog_timer = self.create_timer(WATCHDOG_TIMER_S, self._on_watchdog_timer)

    def _native_loop_cpu(self) -> int | None:
        """native mode: the CPU of the loop thread and the middleware's threads (``loop_cpu``), or None."""
        if self.loop_mode != "native" or self.loop_cpu == -2:
            return None
        allowed = sorted(os.sched_getaffinity(0))  # after cpu_affinity
        if self.loop_cpu == -1:
            return allowed[-1]
        if self.loop_cpu not in allowed:
            self.get_logger().warning(f"loop_cpu {self.loop_cpu} not available (have {allowed}); not pinned")
            return None
        return self.loop_cpu

    def _start_native_loop(self, cpu: int | None) -> None:
        from ..native import rt

        m = self.model
        self._rt = rt.RtLoop(self._rt_sub.pointer, self._cmd_pub.handle.pointer, self._cmd_cdr, self._rt_slow,
                             priority=self.loop_priority, cpus=[cpu] if cpu is not None else self.cpu_affinity,
                             drain_every=RT_DRAIN_EVERY, k=len(m.contacts), na=m.na, nv=m.nv)
        self._rt.set_params(self._node_params["watchdog_timeout"], self._node_params["contacts.threshold"])
        self._rt.inputs(self._rt_odom_sub.pointer if self._rt_odom_sub is not None else 0,
                        self._rt_contacts_sub.pointer if self._rt_contacts_sub is not None else 0,
                        self._odom.twist_in_parent, np.array([BASE_POSITION_MAX, BASE_LINEAR_MAX, BASE_ANGULAR_MAX]),
                        self._in_base_q, self._in_base_v, self._in_contacts)
        self._rt_input_drops[:] = 0.0
        # built now, not on the loop's thread after its first tick (the input that follows
        # would wait for them): the monitoring templates and the compiled tick
        self._rt_monitor_key = None
        self._rt_wrench_local = np.zeros((len(m.contacts), 3))
        self._rt_monitor_templates = self._rt_monitor_messages()
        compiled, gait = self._compiled_references()
        if compiled:
            rt.prepare(self, gait)
        with self._lock:
            if self._t_in["odom"] > 0.0:
                self._rt.set_base(self._in_base_q, self._in_base_v)
            if self._t_in["contact_states"] > 0.0:
                self._rt.set_contacts(self._in_contacts)
        self._rt.set_spin(self.loop_spin_us * 1e-6, self.period_s)
        sys.setswitchinterval(RT_GIL_SWITCH_INTERVAL_S)
        self._rt.start()
        self._book_thread = threading.Thread(target=self._run_bookkeeping, args=(self._rt,),
                                             name="idyn_bookkeeping", daemon=True)
        self._book_thread.start()

    def _stop_loop(self) -> None:
        self._loop_running = False
        if self._rt is not None:
            rt_loop = self._rt
            rt_loop.stop()  # waits for its tick
            self._book_thread.join(timeout=2.0)
            with self._book_lock:
                self._rt_drain(rt_loop)
            self._rt = None
            rt_loop.close()
        if self._watchdog_timer is not None:
            self.destroy_timer(self._watchdog_timer)
            self._watchdog_timer = None
        gc.enable()

    def _pin_cpus(self) -> None:
        """Restrict every thread of the process to ``cpu_affinity`` (threads made later inherit it)."""
        if not self.cpu_affinity:
            return
        cpus = set(self.cpu_affinity)
        try:
            available = os.sched_getaffinity(0)
            if not cpus <= available:
                raise OSError(f"CPUs {sorted(cpus - available)} not available (have {sorted(available)})")
            for tid in os.listdir("/proc/self/task"):  # sched_setaffinity acts on one thread
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except ProcessLookupError:  # the thread ended meanwhile
                    pass
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"cpu_affinity {sorted(cpus)} not applied ({exc}); running on any CPU")

    def _lock_memory(self) -> None:
        """``lock_memory``: mlockall, as ros2_control's controller_manager does, so the tick never
        waits for a page fault. Future allocations are locked too only when that cannot fail
        them (no memlock limit, or root); otherwise what is mapped now is locked."""
        if not self.lock_memory or self._memory_locked:
            return
        import resource

        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        flags = MCL_CURRENT | (MCL_FUTURE if limit == resource.RLIM_INFINITY or os.geteuid() == 0 else 0)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(flags) != 0:
            err = ctypes.get_errno()
            self.get_logger().warning(f"lock_memory: mlockall refused ({os.strerror(err)}); pages may fault in "
                                      "the tick (raise the memlock limit or grant CAP_IPC_LOCK)")
            return
        self._memory_locked = True

    def _prioritize_middleware(self, cpu: int | None = None) -> None:
        """SCHED_FIFO ``middleware_priority`` for the middleware's threads: those it named
        (Fast DDS: dds.*; Cyclone: recv*, tev, ...), made when the context was created, and
        pinned to ``cpu`` when given (the loop's: the thread that receives an input wakes the
        loop on its own CPU, a preemption instead of an inter-processor interrupt). Threads
        still named after the process (Python's, BLAS workers, which may spin) keep their
        scheduling; the loop threads started after this set their own priority."""
        if self.middleware_priority <= 0 and cpu is None:
            return
        param = os.sched_param(self.middleware_priority)
        try:
            process = Path("/proc/self/comm").read_text().strip()
            for tid in os.listdir("/proc/self/task"):
                try:
                    if Path(f"/proc/self/task/{tid}/comm").read_text().strip() == process:
                        continue
                    if self.middleware_priority > 0:
                        os.sched_setscheduler(int(tid), os.SCHED_FIFO, param)
                    if cpu is not None:
                        os.sched_setaffinity(int(tid), {cpu})
                except (ProcessLookupError, FileNotFoundError):  # the thread ended meanwhile
                    pass
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"middleware_priority {self.middleware_priority}: SCHED_FIFO refused "
                                      f"({exc}); middleware threads keep normal scheduling")

    def _set_priority(self) -> None:
        """Timer slack 1 ns, and SCHED_FIFO when ``loop_priority`` > 0, for the calling thread."""
        set_timer_slack()
        if self.loop_priority <= 0:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.loop_priority))
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"loop_priority {self.loop_priority}: SCHED_FIFO refused ({exc}); "
                                      "running with normal scheduling")

    def _spin_once(self, executor, timeout: float) -> None:
        """One executor step; an exception a callback raises is logged, counted in
        /diagnostics (``callback_exceptions``) and survived: a malformed request (e.g. a
        SetParameters whose value type does not exist, which rclpy's parameter service
        raises on) must not take the controller down. Shutdown still ends the loop."""
        try:
            executor.spin_once(timeout_sec=timeout)
        except (ExternalShutdownException, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - survive any callback's failure, report it
            self.callback_exceptions += 1
            self._log_throttled("callback_exception", f"a callback raised and was skipped: "
                                f"{type(exc).__name__}: {exc}")

    def spin(self, executor) -> None:
        """Run the executor until shutdown, surviving any callback's failure (_spin_once)."""
        while rclpy.ok(context=self.context):
            self._spin_once(executor, 0.1)

    def _on_watchdog_timer(self) -> None:
        now = time.monotonic()
        last = self._last_scheduled if self._rt is None else max(self._last_scheduled, self._rt.last_tick())
        if now - last > self._node_params["watchdog_timeout"]:
            rt_loop = self._rt
            if rt_loop is None:
                self._last_scheduled = now
                self._tick(now)
                self._maybe_collect(now + self.period_s)
                return
            from ..native import rt

            rt_loop.lock()  # the compiled loop's thread ticks too: one tick at a time
            try:
                with self._book_lock:
                    self._rt_drain(rt_loop)
                    if time.monotonic() - self._last_scheduled > self._node_params["watchdog_timeout"]:
                        self._last_scheduled = now
                        self._rt_book_inputs(rt_loop)
                        rt.hand_over(self)
                        self._tick(now)
                        self._rt_after_python_tick()
            finally:
                rt_loop.unlock()

    # ================================================================== loop_mode native
    def _rt_slow(self, data: bytes, received_ns: int, wake_ns: int) -> None:
        """The compiled loop handed this input to Python: the node's own tick, then tell the
        loop whether the next ticks are routine (runs on the loop's thread)."""
        from ..native import rt

        try:
            with self._book_lock:
                if self._rt is not None:
                    self._rt_drain(self._rt)  # the fast ticks before this one first
                    self._rt_book_inputs(self._rt)  # the odometry and contacts the loop took
                    rt.hand_over(self)  # the contact set as they left it
                self._on_joint_states(data, {"received_timestamp": received_ns}, wake_ns)
                self._rt_after_python_tick()
        except Exception as exc:  # noqa: BLE001 - never into C++ (garbage is collected by the bookkeeping thread)
            self._log_throttled("native", f"native loop: Python tick failed: {type(exc).__name__}: {exc}")

    def _rt_after_python_tick(self) -> None:
        rt_loop = self._rt
        if rt_loop is None:
            return
        interrupts = self._rt_interrupts
        compiled, gait = self._compiled_references()
        fast = (compiled and self._mode == ACTIVE and not self._watchdog_tripped and not self._need_reset
                and self._trajectory is None and self._base_ref is None and not self._takes_force_refs
                and not self._measured_any and not self._pending_fields and self._pending_formulation is None
                and self._last_source == "formulation")
        if fast:
            from ..native import rt

            plan = rt.plan_for(self, gait)
            if plan is None:
                fast = False
            else:
                rt_loop.plan(*plan)
                self._rt_plan_monitoring(rt_loop)
        rt_loop.sync(fast, self._stamp_in["joint_states"])
        if self._rt_interrupts != interrupts:  # a callback changed something meanwhile
            rt_loop.set_fast(False)

    def _rt_plan_monitoring(self, rt_loop) -> None:
        """The compiled loop publishes the monitoring of its ticks (at monitor_rate_hz)."""
        rate = self._node_params["monitor_rate_hz"]
        every = max(1, int(round(self.rate_hz / rate))) if rate > 0.0 else 0
        key = (self._rt_tick, every)
        if key == self._rt_monitor_key:
            return
        f = self.ctrl.formulation
        rt_loop.monitor(every, self._rt_monitor_templates, f.contacts.rotation, f.forces, self._rt_wrench_local)
        self._rt_monitor_key = key

    def _rt_monitor_messages(self) -> list:
        """What the compiled loop publishes as monitoring (see RtLoop.monitor): ~/state and the
        predicted contact wrenches, as :meth:`_publish_state` does."""
        m, na = self.model, self.model.na
        msg = JointState()
        msg.name = list(self.joints)
        msg.position, msg.velocity, msg.effort = [0.0] * na, [0.0] * na, [0.0] * na
        buf, stamp_at, at = cdr_template(msg, [f"{f}[{j}]" for f in ("position", "velocity", "effort")
                                               for j in range(na)])
        q, v, tau = self._q.ctypes.data, self._v.ctypes.data, self._tau.ctypes.data
        fields = []
        for j, joint in enumerate(self._joints_index):  # ~/state is in `joints` order
            joint = int(joint)
            fields += [(at[f"position[{j}]"], q + 8 * int(m.joint_q_index[joint])),
                       (at[f"velocity[{j}]"], v + 8 * (m.n_base + joint)), (at[f"effort[{j}]"], tau + 8 * joint)]
        messages = [(self._state_pub.handle.pointer, buf, stamp_at, fields)]
        local = self._rt_wrench_local.ctypes.data
        for i, (frame, pub) in enumerate(zip(m.contact_frames, self._wrench_pubs)):
            msg_w = WrenchStamped()
            msg_w.header.frame_id = frame
            axes = [f"wrench.force.{c}" for c in "xyz"]
            buf, stamp_at, at = cdr_template(msg_w, axes)
            messages.append((pub.handle.pointer, buf, stamp_at,
                             [(at[a], local + 8 * (3 * i + c)) for c, a in enumerate(axes)]))
        return messages

    def _compiled_references(self) -> tuple[bool, Any]:
        """Whether the compiled tick evaluates this node's references itself, and the
        compiled gait it runs for them (None: none). A subclass that sets references in
        Python every tick (its own _apply_references) needs the Python tick every time."""
        return type(self)._apply_references is ControllerNode._apply_references, None

    def _rt_interrupt(self) -> None:
        """A reference, gain or mode changed: the next tick runs in Python (it applies it)."""
        self._rt_interrupts += 1
        if self._rt is not None:
            self._rt.set_fast(False)

    def _run_bookkeeping(self, rt_loop) -> None:
        """Native mode: statistics, counters and monitoring of the compiled ticks, in batches."""
        while self._loop_running:
            rt_loop.wait(RT_DRAIN_WAIT_S)
            with self._book_lock:
                self._rt_drain(rt_loop)
                self._rt_book_inputs(rt_loop)
            self._maybe_collect(time.monotonic() + self.period_s)

    def _rt_book_inputs(self, rt_loop) -> None:
        """The odometry and contact estimates the loop took: their receive times and stamp (for
        Python ticks and /diagnostics) and the drops it counted (dropped.odom.*, ...)."""
        from ..native.rt import INPUT_DROPS

        state = rt_loop.input_state()
        with self._lock:
            if state[0] > 0.0:
                self._t_in["odom"] = float(state[0])
                self._stamp_in["odom"] = int(state[2])
            if state[1] > 0.0:
                self._t_in["contact_states"] = float(state[1])
        drops, booked = state[3:], self._rt_input_drops
        for (inp, reason), now, before in zip(INPUT_DROPS, drops, booked):
            if now > before:
                self._drops[(inp, reason)] += int(now - before)
                self._log_throttled(f"{inp}.{reason}", f"dropped {inp} message ({reason}) "
                                    f"[{self._drops[(inp, reason)]} so far]")
        booked[:] = drops

    def _rt_drain(self, rt_loop) -> None:
        """Book the compiled loop's ticks read from its ring (hold ``_book_lock``)."""
        records = rt_loop.take()
        if records is None:
            return
        try:
            stats, counts = self._stats, self._status_counts
            for r in records:
                started, published = r[4], r[5]
                stats.record(started, started, published)
                stats.record_input(int(r[0]), int(r[1]), int(r[2]), int(r[3]))
                stats.overwritten_inputs += int(r[8])
                counts["solved"] += 1
                self._source_counts["formulation"] += 1
                self._saturated_joints += int(r[6])
            last = records[-1]
            if last[4] > self._last_scheduled:  # a Python tick may have run since
                self._last_scheduled = self._t_in["joint_states"] = float(last[4])
                self._stamp_in["joint_states"] = max(self._stamp_in["joint_states"], int(last[7]))
            self._last_source = "formulation"
            self._last_result = None
            self._last_fast = True
            # off the loop's thread: monitoring takes no slack from the loop (the values it
            # publishes are the latest tick's, read while the loop may be writing the next)
            now = time.monotonic()
            self._monitor(now, now + 1.0, ticks=len(records), state=self._rt_monitor_key is None)
            unknown = int(rt_loop.counter("unknown_joint"))
            self._drops[("joint_states", "unknown_joint")] += unknown - self._rt_unknown
            self._rt_unknown = unknown
        except Exception as exc:  # noqa: BLE001 - the bookkeeping thread must survive
            self._log_throttled("native", f"native loop: bookkeeping failed: {type(exc).__name__}: {exc}")

    def _maybe_collect(self, next_deadline: float) -> None:
        self._ticks_since_gc += 1
        if self._ticks_since_gc >= GC_EVERY_TICKS and next_deadline - time.monotonic() > GC_SLACK_S:
            gc.collect(1)
            self._ticks_since_gc = 0

    # ================================================================== the tick
    def _tick(self, scheduled: float) -> None:
        """One control period: inputs → Controller → command; never raises."""
        started = time.monotonic()
        started_ns = time.time_ns()
        self._published_ns = 0
        try:
            self._tick_body(started)
        except Exception as exc:  # noqa: BLE001 - the loop must survive anything
            self._status_counts["exception"] += 1
            self._log_throttled("tick", f"tick failed, commanding zero: {type(exc).__name__}: {exc}")
            self._cmd_view[:] = 0.0
            self._publish_command()
        published = time.monotonic()
        stats = self._stats
        stats.record(scheduled, started, published)
        if self._published_ns:  # joint state in → command out, once per input (loop_stats)
            if self._used_rx_ns:
                stats.record_input(self._used_rx_ns, self._used_cb_ns, started_ns, self._published_ns)
                self._used_rx_ns = 0
            else:
                stats.reused_input_ticks += 1
        self._monitor(published, scheduled + self.period_s)

    def _tick_body(self, now: float) -> None:
        mode = self._mode
        if mode == OFF:
            return
        ctrl, m, t_in = self.ctrl, self.model, self._t_in
        if self._pending_fields or self._pending_formulation is not None:
            self._apply_pending()
        timeout = self._node_params["watchdog_timeout"]
        with self._lock:
            have = t_in["joint_states"] > 0.0 and (not m.floating_base or t_in["odom"] > 0.0)
            fresh = (have and now - t_in["joint_states"] < timeout
                     and (not m.floating_base or now - t_in["odom"] < timeout)
                     and (t_in["contact_states"] == 0.0 or now - t_in["contact_states"] < timeout))
            # measured forces: once one arrived, every contact's (a missing one would read zero)
            stale_forces = self._measured_any and now - self._meas_t.min() >= timeout
            if have and stale_forces:
                fresh = False
                self._meas_stale_ticks += 1
            if have:
                if self._in_rx_ns:  # a joint state no tick has used yet
                    self._used_rx_ns, self._used_cb_ns = self._in_rx_ns, self._in_cb_ns
                    self._in_rx_ns = 0
                self._q[m.joint_q_index] = self._in_jq
                self._v[m.n_base:] = self._in_jv
                if m.floating_base:
                    self._q[:7] = self._in_base_q
                    self._v[:6] = self._in_base_v
                np.greater_equal(self._in_contacts, self._node_params["contacts.threshold"], out=self._mask)
        if not have:
            return  # nothing measured yet: stay silent (the effort controller still holds zero)
        if not fresh:
            if not self._watchdog_tripped:
                self._watchdog_tripped = True
                self._watchdog_trips += 1
                self._log_throttled("watchdog", f"inputs stale (> {timeout * 1e3:g} ms"
                                    f"{', measured wrenches' if stale_forces else ''}): safe output "
                                    f"({ctrl.config.safe_output}) at zero velocity")
            self._need_reset = True
            self._safe_command(self._zero_v)
            return
        if self._watchdog_tripped:
            self._watchdog_tripped = False
            self.get_logger().info("inputs fresh again: holding the measured posture")
        if mode == SAFE:
            self._safe_command(self._v)
            return
        if self._need_reset:
            ctrl.reset(self._q, self._v)
            self._q_ref_full[:] = ctrl.q_ref
            self._need_reset = False
            self._base_ref = None
            with self._lock:  # a deactivate from the executor thread (native mode) wins
                if self._mode == WAITING:
                    self._mode = ACTIVE
        self._apply_references()
        cmd = ctrl.update(self._q, self._v, self._mask)
        np.take(cmd.tau, self._cmd_index, out=self._cmd_view)
        self._publish_command()
        # bookkeeping after the command is out
        result = cmd.result
        self._status_counts[result.status if result is not None else "exception"] += 1
        self._source_counts[cmd.source] = self._source_counts.get(cmd.source, 0) + 1
        self._saturated_joints += cmd.saturated
        self._last_source = cmd.source
        self._last_result = result if cmd.source == "formulation" else None
        self._last_fast = False
        if cmd.source != "formulation":  # a solver failure is never silent (DESIGN.md §7)
            status = result.status if result is not None else "exception"
            self._log_throttled("solve_failed", f"{self.model.pin_model.name}: {ctrl.config.formulation} did not "
                                f"solve (status {status}, {self._status_counts[status]} so far): "
                                f"{cmd.source} output instead")
        self._tau[:] = cmd.tau

    def _safe_command(self, v: np.ndarray) -> None:
        ctrl = self.ctrl
        tau = ctrl.safe_torque(self._q, v, self._mask)
        np.clip(tau, -ctrl.tau_limit, ctrl.tau_limit, out=self._tau)
        self._source_counts[ctrl.config.safe_output] += 1
        self._last_source = ctrl.config.safe_output
        self._last_result = None
        np.take(self._tau, self._cmd_index, out=self._cmd_view)
        self._publish_command()

    def _publish_command(self) -> None:
        if not np.isfinite(self._cmd_view).all():  # last line of defence; Controller already guards
            self._cmd_view[:] = 0.0
            self._status_counts["exception"] += 1
        self._cmd_pub.publish(bytes(self._cmd_cdr))
        self._published_ns = time.time_ns()

    def _publish_final(self) -> None:
        """Cleanup/shutdown: one safe command at zero velocity (the effort controller keeps it)."""
        try:
            if self._t_in["joint_states"] > 0.0:
                self._safe_command(self._zero_v)
            else:
                self._cmd_view[:] = 0.0
                self._publish_command()
        except Exception as exc:  # noqa: BLE001 - shutting down: report, never raise
            self.get_logger().error(f"final safe command failed: {exc}")

    def _apply_references(self) -> None:
        ctrl = self.ctrl
        traj = self._trajectory
        if traj is not None:
            q, v, a = self._q_ref_full, self._v_ref_full, self._a_ref_full
            running = traj.sample(self.get_clock().now().nanoseconds)
            q[traj.index], v[traj.index], a[traj.index] = traj.q, traj.v, traj.a
            if not running:
                v[:] = 0.0
                a[:] = 0.0
                self._trajectory = None
            ctrl.set_joint_reference(q, v, a)
        if self._base_ref is not None:
            position, rotation, velocity, angular = self._base_ref
            ctrl.set_base_reference(position, rotation, velocity, angular)
            self._base_ref = None
        if self._takes_force_refs:
            self._apply_desired_forces()
        if self._measured_any:
            self._apply_measured_forces()

    def _apply_measured_forces(self) -> None:
        """The latest measured forces, in the world frame, to the formulation (in place)."""
        world, rotation = self._meas_world, self.ctrl.formulation.contacts.rotation
        with self._lock:
            world[:] = self._meas_in
            if self._meas_local.any():  # contact frame → world, with the last tick's kinematics
                for i in np.flatnonzero(self._meas_local):
                    world[i] = rotation[i] @ self._meas_in[i]
        self.ctrl.set_measured_forces(world)

    def _apply_desired_forces(self) -> None:
        """The latest desired forces, in the world frame, to the formulation (every tick: a
        reference in the contact frame follows the foot; a stale one goes back to zero).
        Loops over the force contacts (usually one): nothing is allocated."""
        world, rotation = self._force_ref_world, self.ctrl.formulation.contacts.rotation
        timeout = self._node_params["contacts.desired_wrench_timeout"]
        now = time.monotonic()
        went_stale = None
        with self._lock:
            for i in self._force_indices:
                t = self._force_ref_t[i]
                stale = timeout > 0.0 and t > 0.0 and now - t > timeout
                if stale:
                    world[i] = 0.0
                    if not self._force_ref_stale[i]:
                        went_stale = i
                elif self._force_ref_local[i]:  # contact frame → world, last tick's kinematics
                    np.matmul(rotation[i], self._force_ref_in[i], out=world[i])
                else:
                    world[i] = self._force_ref_in[i]
                self._force_ref_stale[i] = stale
                self._force_ref_stale_ticks += stale
        if went_stale is not None:
            self._log_throttled(
                "desired_wrench.stale", f"desired wrench of {self.model.contact_frames[went_stale]} older than "
                f"contacts.desired_wrench_timeout ({timeout:g} s): desired force back to zero until the next one")
        self.ctrl.set_desired_forces(world)

    def _apply_pending(self) -> None:
        with self._lock:
            fields, self._pending_fields = self._pending_fields, {}
            pending, self._pending_formulation = self._pending_formulation, None
        if fields:
            self.ctrl.set_gains(**fields)
        if pending is not None:  # built and validated in the parameter callback
            formulation, options = pending
            self.ctrl.formulation = formulation
            self.ctrl.config.formulation_options = options

    # ================================================================== monitoring
    def _monitor(self, now: float, next_tick: float, ticks: int = 1, state: bool = True) -> None:
        """Decimated ~/state, contact wrenches and /diagnostics, in the slack before the next
        tick: a due message waits (up to MONITOR_MAX_DEFER_S) while less than its budget is
        left, so monitoring does not push the next tick past its deadline. ``state`` False:
        /diagnostics only (the compiled loop publishes its ticks' ~/state itself)."""
        if self._mode == OFF:
            return
        slack = next_tick - now
        rate = self._node_params["monitor_rate_hz"]
        if rate > 0.0 and state:
            self._monitor_countdown -= ticks
            # at the full rate (rate ≥ update_rate) ~/state is part of every tick, never deferred
            if self._monitor_countdown <= 0 and (slack > STATE_BUDGET_S or rate >= self.rate_hz
                                                 or -self._monitor_countdown * self.period_s > MONITOR_MAX_DEFER_S):
                self._monitor_countdown = max(1, int(round(self.rate_hz / rate)))
                self._publish_state()
                now = time.monotonic()
                slack = next_tick - now
        rate = self._node_params["diagnostics_rate_hz"]
        if rate > 0.0:
            self._diag_countdown -= ticks
            if self._diag_countdown <= 0 and (slack > DIAGNOSTICS_BUDGET_S
                                              or -self._diag_countdown * self.period_s > MONITOR_MAX_DEFER_S):
                self._diag_countdown = max(1, int(round(self.rate_hz / rate)))
                self._publish_diagnostics(now)

    def _publish_state(self) -> None:
        m = self.model
        pos, vel, eff = self._state_views
        stamp = self._stamp_in["joint_states"]
        msg = self._state_msg
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        np.take(self._q[m.joint_q_index], self._joints_index, out=pos)
        np.take(self._v[m.n_base:], self._joints_index, out=vel)
        np.take(self._tau, self._joints_index, out=eff)
        self._state_pub.publish(msg)
        result = self._last_result
        forces = self._forces_world
        forces[:] = 0.0
        if self._last_fast and self._last_source == "formulation":  # compiled loop: per configured contact
            forces[:] = self.ctrl.formulation.forces
        elif result is not None:
            for frame, f in zip(result.contact_frames, result.forces):
                forces[m.contact_index(frame)] = f
        rotation = self.ctrl.formulation.contacts.rotation
        for i, (msg_w, pub) in enumerate(zip(self._wrench_msgs, self._wrench_pubs)):
            f_local = rotation[i].T @ forces[i]
            msg_w.header.stamp = msg.header.stamp
            msg_w.wrench.force.x, msg_w.wrench.force.y, msg_w.wrench.force.z = (
                float(f_local[0]), float(f_local[1]), float(f_local[2]))
            pub.publish(msg_w)

    def diagnostics_values(self, now: float | None = None) -> dict[str, Any]:
        """Everything /diagnostics reports, as a dict (also handy in tests)."""
        now = time.monotonic() if now is None else now
        ctrl = self.ctrl
        values: dict[str, Any] = {
            "mode": self._mode,
            "loop_mode": self.loop_mode,
            "loop": self.loop_report(),
            "backend": ctrl.formulation.backend,
            "update_rate_hz": self.rate_hz,
            "formulation": ctrl.config.formulation,
            "last_source": self._last_source,
            "watchdog": "tripped" if self._watchdog_tripped else "ok",
            "watchdog_trips": self._watchdog_trips,
            "saturated_joint_ticks": self._saturated_joints,
            "rejected_parameters": self.rejected_parameters,
            "callback_exceptions": self.callback_exceptions,
        }
        for key, v in self._stats.summary().items():
            values[key] = v
        if self._rt is not None:  # ticks run compiled / handed to Python by the native loop
            for name in ("compiled_ticks", "python_ticks", "dropped_records"):  # dropped: bookkeeping fell behind
                values[f"native_loop.{name}"] = self._rt.counter(name)
        values["input_to_command_hist"] = self._stats.latency_hist.encode()
        for status, n in self._status_counts.items():
            values[f"status.{status}"] = n
        for source, n in self._source_counts.items():
            values[f"source.{source}"] = n
        for name, n in ctrl.formulation.relaxations().items():
            values[f"relaxed.{name}"] = n
        for name in ("joint_states", "odom", "contact_states"):
            t = self._t_in[name]
            values[f"age_ms.{name}"] = (now - t) * 1e3 if t > 0.0 else -1.0
        t = float(self._meas_t.min())  # the oldest contact's measured force (-1: one never came)
        values["age_ms.measured_wrench"] = (now - t) * 1e3 if t > 0.0 else -1.0
        values["stale_ticks.measured_wrench"] = self._meas_stale_ticks
        if self._takes_force_refs:  # the oldest force contact's reference (-1: one never came)
            t = float(self._force_ref_t[self._is_force_contact].min(initial=math.inf))
            values["age_ms.desired_wrench"] = (now - t) * 1e3 if 0.0 < t < math.inf else -1.0
            values["stale_ticks.desired_wrench"] = self._force_ref_stale_ticks
        for (inp, reason), n in self._drops.items():
            values[f"dropped.{inp}.{reason}"] = n
        for key in ("joint_kp", "joint_kd"):
            values[f"gain.{key}_mean"] = float(np.mean(getattr(ctrl, key)))
        values["effort_limit_scale"] = ctrl.config.effort_limit_scale
        return values

    def _publish_diagnostics(self, now: float) -> None:
        values = self.diagnostics_values(now)
        msg = self._diag_msg
        if msg is None or len(self._diag_values) != len(values):  # first time: build the message once
            status = DiagnosticStatus(name=f"{self.get_name()}: controller loop",
                                      hardware_id=self.model.pin_model.name)
            self._diag_values = [KeyValue(key=k) for k in values]
            status.values = self._diag_values
            msg = self._diag_msg = DiagnosticArray(status=[status])
        for kv, v in zip(self._diag_values, values.values()):
            kv.value = f"{v:.6g}" if isinstance(v, float) else str(v)
        status = msg.status[0]
        problems = []
        if self._watchdog_tripped:
            problems.append("watchdog tripped (stale inputs)")
        if self._mode == SAFE:
            problems.append("inactive: safe output")
        if self._last_source not in ("formulation", "none"):
            problems.append(f"fallback output ({self._last_source})")
        status.level = DiagnosticStatus.WARN if problems else DiagnosticStatus.OK
        status.message = "; ".join(problems) if problems else f"{self._mode}, {values['ticks']:.0f} ticks"
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)

    # ================================================================== input callbacks
    def _drop(self, inp: str, reason: str, detail: Callable[[], str]) -> None:
        self._drops[(inp, reason)] += 1
        key = f"{inp}.{reason}"
        now = time.monotonic()
        if now - self._log_times.get(key, 0.0) >= LOG_THROTTLE_S:
            self._log_times[key] = now
            self.get_logger().warning(f"dropped {inp} message ({reason}): {detail()} "
                                      f"[{self._drops[(inp, reason)]} so far]")

    def _log_throttled(self, key: str, text: str) -> None:
        now = time.monotonic()
        if now - self._log_times.get(key, 0.0) >= LOG_THROTTLE_S:
            self._log_times[key] = now
            self.get_logger().warning(text)

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
        reference is kept). No loop interrupt: the formulations that take desired forces run
        the Python tick every tick, which reads the latest value."""
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
        return callback

    def _measured_wrench_callback(self, index: int, frame: str, world_frame: str):
        """Measured force of contact ``index`` [N]: finite, in its own frame or the world's."""
        def callback(msg: WrenchStamped) -> None:
            f = msg.wrench.force
            x, y, z = f.x, f.y, f.z
            if not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
                self._drop("measured_wrench", "nonfinite", lambda: f"NaN/inf force for {frame}")
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

    # ================================================================== parameters
    def _on_set_parameters(self, params) -> SetParametersResult:
        result = self._check_parameters(params)
        if not result.successful:
            self.rejected_parameters += 1
            # throttled: a flood of bad requests must not become a flood of log lines (a
            # blocked stdout stalls the node)
            self._log_throttled("rejected_parameter", f"parameter change rejected: {result.reason}")
        return result

    def _check_parameters(self, params) -> SetParametersResult:
        fields: dict[str, Any] = {}
        options: dict[str, Any] = {}
        node_values: dict[str, float] = {}
        for p in params:
            spec = config.SPEC.get(p.name) or self._option_specs.get(p.name)
            if spec is None:
                continue  # rclpy's own (use_sim_time, qos overrides)
            value = parameters.python_value(p)
            if spec.read_only:
                return SetParametersResult(successful=False, reason=f"{p.name} is read-only (structural)")
            reason = config.check_value(spec, value)
            if reason is not None:
                return SetParametersResult(successful=False, reason=f"{p.name}: {reason}")
            if p.name in config.CONTROLLER_FIELDS:
                fields[p.name] = value
            elif p.name.startswith(config.FORMULATION_OPTIONS):
                options[p.name[len(config.FORMULATION_OPTIONS):]] = value
            else:
                node_values[p.name] = float(value)
        ctrl = self.ctrl
        if ctrl is not None and (fields or options):
            try:
                converted = config.controller_fields(fields, self.model, self.joints)
                with self._lock:
                    merged = {**ctrl.config.__dict__, **self._pending_fields, **converted}
                ControllerConfig(**merged).validate()
                new_formulation = None
                if options:
                    cls = config.formulation_class(ctrl.config.formulation)
                    opts = dict(ctrl.config.formulation_options)
                    opts.update({k: config.option_value(cls.defaults[k], v) for k, v in options.items()})
                    new_formulation = (formulations.make(ctrl.config.formulation, self.model,
                                                         dt=ctrl.config.dt, **opts), opts)
            except (IdynError, ValueError, TypeError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            with self._lock:
                self._pending_fields.update(converted)
                if new_formulation is not None:
                    self._pending_formulation = new_formulation
            self._rt_interrupt()
        self._node_params.update(node_values)
        if node_values and self._rt is not None:
            self._rt.set_params(self._node_params["watchdog_timeout"], self._node_params["contacts.threshold"])
        return SetParametersResult(successful=True)


#: ParameterValue types rclpy can turn into a Parameter (rcl_interfaces/ParameterType)
_PARAMETER_TYPES = frozenset(range(0, 10))


def guard_parameter_services(node) -> None:
    """Answer a SetParameters(Atomically) request carrying a value type that does not
    exist with a refusal, before rclpy's parameter service parses it: rclpy raises on such
    a request inside the executor (ValueError from ``Parameter.Type``), which stopped the
    node's loop. Counted with the other refused changes (``rejected_parameters``)."""
    from rcl_interfaces.msg import SetParametersResult as Result
    from rcl_interfaces.srv import SetParameters, SetParametersAtomically

    for service in node.services:
        atomic = service.srv_type is SetParametersAtomically
        if not (atomic or service.srv_type is SetParameters):
            continue
        parse = service.callback

        def guarded(request, response, parse=parse, atomic=atomic):
            bad = [p.name for p in request.parameters if p.value.type not in _PARAMETER_TYPES]
            if not bad:
                return parse(request, response)
            node.rejected_parameters += 1
            reason = f"no such parameter value type for {bad}"
            node._log_throttled("rejected_parameter", f"parameter change rejected: {reason}")
            if atomic:
                response.result = Result(successful=False, reason=reason)
            else:
                response.results = [Result(successful=False, reason=reason) for _ in request.parameters]
            return response

        service.callback = guarded


def set_timer_slack(ns: int = 1) -> bool:
    """Linux timer slack of the calling thread (threads it creates inherit it).

    The default 50 µs slack delays every timed wait — sleep, executor timeouts — by up to
    that much; at 1 kHz it is a fifth of the slack left after a tick (measured here:
    EventsExecutor.spin_once(0) 117 → 35 µs, sleep overshoot 91 → 38 µs, p50).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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


def main(args=None) -> None:
    """Entry point of ``ros2 run idyn_control idyn_controller``."""
    run(ControllerNode, args)


def run(node_class, args=None) -> None:
    """Create, (auto)start and spin a :class:`ControllerNode` (or subclass) until shutdown.

    Signals are handled here rather than by rclpy so that the node can still publish its
    last safe command on Ctrl-C / SIGTERM before the context shuts down.
    """
    set_timer_slack()  # before rclpy.init: the middleware's threads inherit it
    signals.init(args)
    node = None
    try:
        node = node_class()
        executor = node.make_executor()
        executor.add_node(node)
        if node.autostart:
            if node.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                node.trigger_activate()
        node.spin(executor)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()  # publishes the last safe command first
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
