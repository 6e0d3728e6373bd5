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

The loop (``loop_mode``: ``native`` compiled, ``triggered`` its Python twin), its real-time
set-up and the input → command latency it measures: :mod:`.node_loop`.

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
  /diagnostics. No profile-as-trajectory message: a profile is streamed. In ``loop_mode
  native`` with the formulation compiled (``backend`` auto/native) a new reference is a
  routine compiled tick: the subscription hands it to the compiled loop, which writes it
  (turned into the world frame with the last tick's kinematics) into the compiled solver's
  buffer before its next tick; a stale reference (timeout) goes to the Python tick, which
  zeroes, warns and counts. With the Python backend every tick is the Python tick
  (``bench/force_reference.py`` measures both). No other formulation subscribes to desired
  wrenches.
- ``contacts.measured_wrench_topic`` (default ``~/measured_wrench/<frame>``)
  geometry_msgs/WrenchStamped, one per contact frame: the measured force of the last
  control period (formulations with ``set_measured_forces``: ``sensed``, ID(t_{i−1}) /
  ID(t_{i−2}) of seed 000 §7.3), forwarded through ``Controller.set_measured_forces`` every
  tick. ``header.frame_id`` is the contact frame (rotated to the world with the last
  tick's kinematics) or ``contacts.world_frame``; any other frame or a NaN/inf force is
  dropped and counted. Once one has arrived, every contact's must stay fresher than
  ``watchdog_timeout`` (a stale measurement trips the watchdog like a stale state).

- ``contacts.ground_topic`` (default ``~/contact_ground``) std_msgs/Float64MultiArray: the
  ground under each contact, one row (nx, ny, nz, μ) per contact in the order of
  ``~/contact_states`` (world-frame normal, normalized here; Coulomb μ in [0.001, 1000]), from
  a terrain map or perception (seed 000 §7.4–7.5: the controller knows the normal and μ at
  each point of contact). A row that differs from the one in use rebuilds that contact's
  friction pyramid (``Controller.set_contact_surface``) at the next tick, which runs in
  Python in ``loop_mode native`` (the compiled ticks resume after it); it holds until the next
  message. A wrong size, a NaN/inf, a zero normal or another μ is dropped and counted
  (``dropped.contact_ground.*``); ``ground_updates`` in /diagnostics counts the rows applied.
  Before any message every contact has ``contacts.normal`` and ``contacts.friction``.

Outputs: ``command_topic`` std_msgs/Float64MultiArray (reliable, ``command_joints``
order), ``~/state`` sensor_msgs/JointState (measured position/velocity, commanded
effort, ``joints`` order, stamped with the input's stamp), ``~/contact_wrench/<frame>``
geometry_msgs/WrenchStamped (predicted force in the contact frame, so RViz draws it at the
foot), ``/diagnostics``.
"""

from __future__ import annotations

import array
import gc
import threading
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, KeyValue
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
from ..prediction import StatePredictor
from . import parameters, signals
from .conversions import JointStateReader, JointTrajectoryReference, OdometryReader
from .loop_stats import LoopStats
from .node_inputs import InputsMixin, with_message_info
from .node_loop import OFF, SAFE, WAITING, LoopMixin, set_timer_slack
from .node_monitoring import MonitoringMixin
from .node_native import NativeLoopMixin

STATE_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                       durability=DurabilityPolicy.VOLATILE)
REFERENCE_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
MONITOR_QOS = QoSProfile(depth=5, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)

INPUTS = ("joint_states", "odom", "contact_states", "joint_reference", "base_reference", "desired_wrench",
          "measured_wrench", "contact_ground")
DROP_REASONS = {
    "joint_states": ("missing_joint", "unknown_joint", "wrong_size", "nonfinite", "implausible", "out_of_order",
                     "malformed"),
    "odom": ("nonfinite", "implausible", "bad_quaternion", "out_of_order"),
    "contact_states": ("wrong_size", "nonfinite"),
    "joint_reference": ("empty", "unknown_joint", "wrong_size", "nonfinite", "time_not_increasing"),
    "base_reference": ("nonfinite", "implausible", "bad_quaternion"),
    "desired_wrench": ("nonfinite", "implausible", "wrong_frame", "torque", "too_large"),
    "measured_wrench": ("nonfinite", "implausible", "wrong_frame"),
    "contact_ground": ("wrong_size", "nonfinite", "implausible"),
    "cmd_vel": ("nonfinite", "implausible"),  # idyn_gait_controller
}
STATUSES = ("solved", "max_iter", "infeasible", "failed", "exception")


class ControllerNode(InputsMixin, MonitoringMixin, NativeLoopMixin, LoopMixin, LifecycleNode):
    """The lifecycle node around :class:`Controller` (see the module docstring).

    This file holds its lifecycle, configuration and parameters; the other concerns are
    mixins over the same state, one file each: the input callbacks (:mod:`.node_inputs`),
    the loop, its real-time set-up and the Python tick (:mod:`.node_loop`), the compiled
    loop's side (:mod:`.node_native`) and monitoring (:mod:`.node_monitoring`).
    """

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
            for n in ("watchdog_timeout", "prediction_horizon", "monitor_rate_hz", "diagnostics_rate_hz",
                      "contacts.threshold",
                      "contacts.desired_wrench_timeout", "contacts.max_desired_force")}
        self.ctrl: Controller | None = None
        self._mode = OFF
        self._loop_running = False
        self._watchdog_timer = None
        self._predict_timer = None
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
        for line in model.effort_limit_warnings():
            self.get_logger().warning(line)

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
        # the ground under each contact (nx, ny, nz, μ): received and not yet applied, in use
        self._ground_in = np.zeros((k, 4))
        self._ground_pending = False
        self._ground_now = np.zeros((k, 4))
        self._ground_updates = 0
        self._pending_fields: dict[str, Any] = {}
        self._pending_formulation = None
        self._retired_formulation = None  # replaced by the tick, released by the executor (node_loop)
        self._stats = LoopStats(self.period_s)
        self._drops = {(i, r): 0 for i, rs in DROP_REASONS.items() for r in rs}
        self._status_counts = {s: 0 for s in STATUSES}
        self._source_counts: dict[str, int] = {"formulation": 0, "zero": 0, "damping": 0, "gravity": 0, "hold": 0}
        self._saturated_joints = 0
        self._watchdog_trips = 0
        self._watchdog_tripped = False
        # input gaps bridged on the predicted state (prediction_horizon): the predictor, its
        # ticks, the gaps begun, those that outlasted the horizon (then the watchdog's safe
        # output), and the current prediction's age [s] (0: none; the gait's clock runs on it);
        # ticks at the gap's end with the joint states back before the other state inputs
        self._predictor = StatePredictor(model, self._node_params["prediction_horizon"])
        self._predicted_ticks = self._input_gaps = self._prediction_expired = self._resumed_ticks = 0
        self._prediction_age_s = 0.0
        self._prediction_from = 0.0  # receive time [s, monotonic] of the input the prediction started from
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
        if k and settings["contacts.ground_topic"]:  # empty: none
            self._add(self.create_subscription(Float64MultiArray, settings["contacts.ground_topic"],
                                               self._on_contact_ground, REFERENCE_QOS))
        if hasattr(ctrl.formulation, "set_measured_forces"):
            pattern, world = settings["contacts.measured_wrench_topic"], settings["contacts.world_frame"]
            for i, frame in enumerate(model.contact_frames):
                self._add(self.create_subscription(
                    WrenchStamped, pattern.format(frame=frame),
                    self._measured_wrench_callback(i, frame, world), STATE_QOS))

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
                if p.name == "use_sim_time":  # the node's clock: a joint trajectory's time base
                    self._rt_interrupt()
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
        if "prediction_horizon" in node_values and self.ctrl is not None:
            self._predictor.set_horizon(node_values["prediction_horizon"])
        if node_values and self._rt is not None:
            self._rt.set_params(self._node_params["watchdog_timeout"], self._node_params["contacts.threshold"])
        if "contacts.desired_wrench_timeout" in node_values:
            self._rt_interrupt()  # the Python tick hands the compiled loop the new timeout
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
