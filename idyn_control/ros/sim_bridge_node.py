"""``idyn_sim``: MuJoCo behind the topics of ros2_control + a simulator (DESIGN.md §5).

    ros2 run idyn_control idyn_sim --ros-args -p robot:=solo12 -p real_time:=false

It stands in for Gazebo + gz_ros2_control + a JointGroupEffortController: it takes
effort commands, steps the physics at ``rate`` (1 kHz; ``substeps`` physics steps per
period) and publishes what the controller node reads.

- In: ``command_topic`` std_msgs/Float64MultiArray (reliable), one effort per
  ``command_joints`` entry [N·m]. A command of the wrong length or with NaN/inf is
  ignored (counted, logged throttled); the last good one keeps acting until it is older
  than ``command_timeout`` [s, simulated], then the joints get zero torque, as a
  hardware interface whose command stream stopped.
- Out (every period, stamped with the simulated time): ``/clock`` (rosgraph_msgs/Clock);
  ``/odom`` (nav_msgs/Odometry, ground-truth base pose in ``odom_frame``, twist in the
  base frame, REP-105); contact estimates on ``contact_states_topic`` (the controller's
  ``~/contact_states``: :data:`CONTACT_STATES_TYPE`, 1.0 / 0.0 per ``contact_frames``
  entry, 1.0 when MuJoCo's normal force on the foot exceeds ``contact_threshold``, and
  for a foot resting on the flat ground at spawn until the first step);
  ``~/contact_wrench/<frame>`` (geometry_msgs/WrenchStamped, the force the ground
  applied over the period, world frame, ``header.frame_id = odom_frame``: the measured
  forces for the ``sensed`` formulation and for scoring predictions); ``/joint_states``
  last (sensor_msgs/JointState with the applied efforts), so a controller that ticks on
  joint states has the rest of the state already.
- ``terrain`` ``heightmap`` (``terrain_seed``) replaces the plane with seed 000 §7.5's rigid
  height map, ``ramp`` with a ramp up and down ahead (``ramp_slope``, 10° by default),
  ``block`` with a block to step onto and off (``block_height``; by default 15 % of the
  robot's standing base height; :mod:`idyn_control.sim.terrain`), ``stairs`` with three
  steps up, a landing and three down (each ``block_height`` high, by default 10 %). The controller node is
  told no heights: over ROS the gait walks a block blind (README, "Blocks").
  With ``publish_ground`` the bridge tells the controller the ground under its feet, as a
  terrain map would: ``~/contact_ground`` (std_msgs/Float64MultiArray, one row nx, ny, nz,
  μ per contact frame: the map's normal and μ under each foot in contact, a foot in the air
  keeping its last row; reliable, transient local, sent when a row changes and every 0.5 s
  of wall time, so a subscriber that joins late gets it either way), the controller's
  ``contacts.ground_topic``.
  Without it the controller walks blind, on its ``contacts.normal`` and
  ``contacts.friction``.
- ``push`` (start, duration, fraction of the weight) pushes the base sideways once, as
  :class:`~idyn_control.sim.faults.Faults` ``push`` does in the lock-step runner.
- ``~/status`` diagnostic_msgs/DiagnosticArray at 1 Hz, when a push ends and at shutdown:
  steps, real-time factor, command counters (received, rejected, timeouts, lock-step
  waits), push steps.

Timing (``real_time``): true paces the physics to the wall clock, whatever the
controller does (commands that arrive late act late, as on hardware); false runs as fast
as possible and, with ``lockstep`` (default), publishes a state and waits for the
command that answers it (at most ``lockstep_timeout`` wall seconds) before stepping —
deterministic closed loop over real DDS. The controller then runs with
``use_sim_time:=true`` and ticks on ``/joint_states`` (its ``triggered`` loop).
``start_paused`` (default true) holds the physics until the first command arrives;
``paused`` (settable at run time, as a simulator's pause button) holds it while true. The
demo starts the bridge paused and releases it once every node has discovered the others:
DDS discovery can take seconds on a loaded machine, and a /cmd_vel or a recorder that is
not yet matched misses the start of the run.
"""

from __future__ import annotations

import array
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pinocchio as pin
import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray

from .. import robots
from ..errors import IdynError
from ..gait import crouched_configuration
from ..sim.faults import GRAVITY, Faults, push_force
from ..sim.lockstep import CONTACT_THRESHOLD_N
from ..sim.mujoco_model import build_mujoco
from ..sim.terrain import RAMP_SLOPE_DEG, RAMP_SLOPE_RANGE_DEG, block_height, make_terrain
from . import signals
from .conversions import SerializedMessage

NODE_NAME = "idyn_sim"
#: message type of the contact estimates (the controller's ~/contact_states)
CONTACT_STATES_TYPE = Float64MultiArray
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
STATE_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)
GROUND_REPEAT_S = 0.5  # ~/contact_ground again after this long unchanged [s, wall]
GROUND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.TRANSIENT_LOCAL)
CLOCK_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)
LOG_THROTTLE_S = 2.0
PAUSED_PUBLISH_S = 0.01  # paused: re-publish the state this often (wall) until commands come
LOCKSTEP_RESEND_S = 0.02  # lock-step: re-publish an unanswered state after this long (wall)


@dataclass(frozen=True)
class BridgeParam:
    name: str
    default: Any
    description: str
    range: tuple[float, float] | None = None
    read_only: bool = True


PARAMETERS: tuple[BridgeParam, ...] = (
    BridgeParam("robot", "solo12", f"a shipped robot ({', '.join(robots.names())}) or a robot file's path "
                "(the controller's params file: URDF, contacts, standing pose)"),
    BridgeParam("rate", 1000.0, "control period rate: state out, command in [Hz]", (10.0, 10000.0)),
    BridgeParam("substeps", 1, "physics steps per control period", (1, 100)),
    BridgeParam("friction", 0.7, "ground Coulomb friction μ; ≥ 1000 means 'infinite'", (0.01, 1e6)),
    BridgeParam("compliant", False, "soft ground (about 1 mm penetration at rest) instead of rigid"),
    BridgeParam("terrain", "plane", "'plane' (friction, compliant), 'heightmap': seed 000 §7.5's rigid "
                "2 m square of bumps up to 3 cm with per-patch μ ~ U(0.1, 1.5), flat around the origin, "
                "flat ground with μ 0.8 around it, 'ramp': up ahead (+x) at ramp_slope, a flat top, as "
                "steeply down, μ 0.8 (climb and top 0.6 and 0.4 m, or as long as the robot), 'block': a "
                "vertical step up ahead (+x) by block_height, a flat top, a step down, μ 0.8, or 'stairs': "
                "3 steps up ahead (+x) by block_height each, a landing, 3 steps down, μ 0.8 (treads 0.25 m, "
                "or as long as the robot's reach)"),
    BridgeParam("ramp_slope", RAMP_SLOPE_DEG, "terrain 'ramp': its slope [°]", RAMP_SLOPE_RANGE_DEG),
    BridgeParam("block_height", 0.0, "terrain 'block': its height, 'stairs': each step's rise [m]; 0 = 15 % "
                "(stairs: 10 %) of the robot's standing base height", (0.0, 1.0)),
    BridgeParam("terrain_seed", 0, "seed of the height map", (0, 2**31 - 1)),
    BridgeParam("publish_ground", True, "with a height map: publish ~/contact_ground, the normal and μ under "
                "each foot in contact (rows nx, ny, nz, μ; sent when one changes and every 0.5 s)"),
    BridgeParam("real_time", True, "pace the physics to the wall clock; false = as fast as possible"),
    BridgeParam("lockstep", True, "not real time: after each state wait for the command that answers it"),
    BridgeParam("lockstep_timeout", 2.0, "lock-step: longest wait for a command before stepping anyway "
                "[s, wall]; the state is re-published every 20 ms meanwhile", (0.0, 60.0)),
    BridgeParam("start_paused", True, "hold the physics until the first command arrives"),
    BridgeParam("paused", False, "hold the physics while true, the state re-published every 10 ms (wall); "
                "settable at run time (a launcher holds it until its nodes have discovered each other)",
                read_only=False),
    BridgeParam("command_timeout", 0.02, "zero torque when the last good command is older [s, simulated]",
                (0.0, 10.0), read_only=False),
    BridgeParam("command_topic", "/effort_controller/commands", "effort commands (Float64MultiArray)"),
    BridgeParam("command_joints", [""], "joint order of the commands; empty = the model's joint order"),
    BridgeParam("contact_states_topic", "/idyn_controller/contact_states",
                "contact estimates (Float64MultiArray, 1.0/0.0 per contact frame)"),
    BridgeParam("contact_threshold", CONTACT_THRESHOLD_N, "normal force above which a foot is in contact [N]", (0.0, 1e4),
                read_only=False),
    BridgeParam("spawn_crouch", 0.0, "spawn the base this far below its standing height, feet on the "
                "ground [m]", (0.0, 0.2)),
    BridgeParam("odom_frame", "odom", "frame of /odom poses and of the contact wrenches"),
    BridgeParam("base_frame", "", "child_frame_id of /odom; empty = the URDF root link"),
    BridgeParam("publish_wrenches", True, "publish ~/contact_wrench/<frame> every period"),
    BridgeParam("push", [0.0, 0.0, 0.0], "a horizontal push on the base (sim.faults.Faults.push): start [s, "
                "simulated], duration [s], force as a fraction of the robot's weight; duration 0: none"),
    BridgeParam("push_direction", [0.0, 1.0], "world-frame (x, y) direction of the push"),
)


def _descriptor(p: BridgeParam) -> ParameterDescriptor:
    d = ParameterDescriptor(name=p.name, description=p.description, read_only=p.read_only)
    if p.range is not None:
        if isinstance(p.default, bool):
            pass
        elif isinstance(p.default, int):
            d.integer_range = [IntegerRange(from_value=int(p.range[0]), to_value=int(p.range[1]), step=0)]
        else:
            d.floating_point_range = [FloatingPointRange(from_value=float(p.range[0]),
                                                         to_value=float(p.range[1]), step=0.0)]
    return d


class SimBridgeNode(Node):
    """MuJoCo + the ros2_control-like topics (see the module docstring)."""

    def __init__(self, **kwargs: Any):
        super().__init__(NODE_NAME, **kwargs)
        for p in PARAMETERS:
            self.declare_parameter(p.name, p.default, _descriptor(p))
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        self.robot_name: str = get("robot")
        self.rate_hz = float(get("rate"))
        self.period_s = 1.0 / self.rate_hz
        self.substeps = int(get("substeps"))
        self.real_time = bool(get("real_time"))
        self.lockstep = bool(get("lockstep")) and not self.real_time
        self.lockstep_timeout = float(get("lockstep_timeout"))
        self.command_timeout = float(get("command_timeout"))
        self.contact_threshold = float(get("contact_threshold"))
        self.publish_wrenches = bool(get("publish_wrenches"))
        self.publish_ground = bool(get("publish_ground"))
        friction = float(get("friction"))
        friction = math.inf if friction >= 1e3 else friction

        spec = robots.spec(self.robot_name)
        self.robot = robots.load(spec, friction=None if math.isinf(friction) else friction) \
            if spec.contact_frames else robots.load(spec)
        m = self.robot
        terrain = make_terrain(str(get("terrain")), int(get("terrain_seed")), robots.standing_footprint(m, spec),
                               float(get("ramp_slope")), block_height(m, spec, float(get("block_height")) or None,
                                                                    str(get("terrain"))))
        self.sim = build_mujoco(m, friction=friction, compliant=bool(get("compliant")),
                                timestep=self.period_s / self.substeps, terrain=terrain)
        joints = [j for j in get("command_joints") if j]
        self.command_joints = tuple(joints) if joints else m.joint_names
        self._cmd_index = m.joint_order(self.command_joints)  # command entry i → model joint
        self.k = len(m.contacts)

        # spawn
        if m.floating_base:
            radius = self.sim.contacts[0].radius if self.sim.contacts else 0.0
            q0 = robots.standing_configuration(m, spec, foot_height=radius)
            crouch = float(get("spawn_crouch"))
            if crouch > 0.0:
                q0 = crouched_configuration(m, q0, crouch)
        else:  # an arm: its ready pose
            q0 = robots.standing_configuration(m, spec)
        self.sim.set_state(q0, np.zeros(m.nv))

        # command state (written by the subscription callback)
        self._lock = threading.Lock()
        self._tau_cmd = np.zeros(m.na)          # model order
        self._tau_applied = np.zeros(m.na)
        self._cmd_time = -math.inf              # simulated time of the last good command
        self._cmd_seq = 0                       # good commands received
        self._cmd_event = threading.Event()
        self.counters = {"commands": 0, "rejected_length": 0, "rejected_nonfinite": 0,
                         "timeouts": 0, "lockstep_timeouts": 0, "lockstep_resends": 0, "steps": 0,
                         "push_steps": 0}
        self._pushing = self._status_due = False
        self._timed_out = True
        self._log_times: dict[str, float] = {}

        # messages kept serialized, values written in place (numpy views onto their bytes):
        # a step publishes without building or serializing a Python message
        base = (get("base_frame") or _root_link(m)) if m.floating_base else ""
        odom_frame = get("odom_frame")
        js = JointState()
        js.name = list(m.joint_names)
        js.position, js.velocity, js.effort = [0.0] * m.na, [0.0] * m.na, [0.0] * m.na
        self._js = SerializedMessage(js, {f: [f"{f}[{j}]" for j in range(m.na)]
                                          for f in ("position", "velocity", "effort")})
        odom = Odometry()
        odom.header.frame_id = odom_frame
        odom.child_frame_id = base
        self._odom = SerializedMessage(odom, {
            "pose": [f"pose.pose.position.{c}" for c in "xyz"] + [f"pose.pose.orientation.{c}" for c in "xyzw"],
            "twist": [f"twist.twist.linear.{c}" for c in "xyz"] + [f"twist.twist.angular.{c}" for c in "xyz"]})
        contacts = CONTACT_STATES_TYPE()
        contacts.data = [0.0] * self.k
        self._contacts = SerializedMessage(contacts, {"data": [f"data[{i}]" for i in range(self.k)]}) \
            if self.k else None
        self._wrenches = []
        for frame in m.contact_frames:
            w = WrenchStamped()
            w.header.frame_id = odom_frame
            self._wrenches.append(SerializedMessage(w, {"force": [f"wrench.force.{c}" for c in "xyz"]}))
        self._clock_msg = SerializedMessage(Clock(), {}, stamp="clock")  # not _clock: the Node's own clock
        self._time = Time()  # the last published simulated time
        self._forces = np.zeros((self.k, 3))
        self._normal = np.zeros(self.k)  # the period's force along the contact normals [N]
        if self.k:
            self.sim.contact_forces_array(self._forces)  # the spawn state's contacts
            self._normal[:] = self.sim.normal_forces
        self._spawn_contacts = self._resting_feet()
        push = [float(x) for x in get("push")]
        self.push = Faults(push=tuple(push) if len(push) != 3 or push[1] > 0.0 else None,
                           push_direction=tuple(float(x) for x in get("push_direction")))
        self.push.validate()
        self.weight = GRAVITY * pin.computeTotalMass(m.pin_model)  # [N]

        self.pub_js = self.create_publisher(JointState, "/joint_states", STATE_QOS)
        self.pub_odom = self.create_publisher(Odometry, "/odom", STATE_QOS) if m.floating_base else None
        self.pub_contacts = (self.create_publisher(CONTACT_STATES_TYPE, get("contact_states_topic"), STATE_QOS)
                             if self.k else None)
        self.pub_wrench = [self.create_publisher(WrenchStamped, f"~/contact_wrench/{f}", STATE_QOS)
                           for f in m.contact_frames]
        self.pub_ground = None
        if self.k and self.sim.terrain is not None and self.publish_ground:
            self.pub_ground = self.create_publisher(Float64MultiArray, "~/contact_ground", GROUND_QOS)
            self._ground = np.zeros((self.k, 4))
            self._ground_msg = Float64MultiArray()
            self._ground_sent = -math.inf  # when it was last sent [s, monotonic]
            self.counters["ground_messages"] = 0
        self.pub_clock = self.create_publisher(Clock, "/clock", CLOCK_QOS)
        self.pub_status = self.create_publisher(DiagnosticArray, "~/status", STATE_QOS)
        # the commands are taken by the physics thread itself (not the executor): in lock-step
        # it waits for the one answering its state on a wait set of that subscription alone.
        # Through the executor each command cost a wait-set rebuild over every entity of the
        # node (~0.4 ms of Python holding the GIL the physics thread needs: lock-step ran at
        # 0.45-0.65 of real time)
        with self.handle:
            self._cmd_sub = _rclpy.Subscription(self.handle, Float64MultiArray, get("command_topic"),
                                                COMMAND_QOS.get_c_qos_profile(), None)
        self._cmd_wait = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, self.context.handle)
        self.add_on_set_parameters_callback(self._on_parameters)

        self._running = False
        self._thread: threading.Thread | None = None
        self._paused = bool(get("start_paused"))  # until the first command
        self._held = bool(get("paused"))  # while the parameter says so
        self._wall_start = 0.0
        self._sim_start = 0.0
        self.get_logger().info(
            f"{m!r} in MuJoCo at {self.rate_hz:g} Hz × {self.substeps} substeps, "
            f"{'real time' if self.real_time else ('lock-step' if self.lockstep else 'as fast as possible')}, "
            + (f"{self.sim.terrain.label}; " if self.sim.terrain is not None else
               f"ground μ={self.sim.friction:g} {'compliant' if self.sim.compliant else 'rigid'}; ")
            + f"commands on {get('command_topic')} for {list(self.command_joints)}"
            + ("; paused until the first command" if self._paused else "")
            + ("; paused until the parameter 'paused' is set false" if self._held else ""))

    # ------------------------------------------------------------------ commands
    def _take_commands(self, timeout: float) -> bool:
        """Take the commands that arrived, waiting up to ``timeout`` [s] for one; whether a
        good one came since the last step."""
        if not self._cmd_event.is_set() and timeout > 0.0:
            ws = self._cmd_wait
            ws.clear_entities()
            ws.add_subscription(self._cmd_sub)
            ws.wait(int(timeout * 1e9))
        while True:
            taken = self._cmd_sub.take_message(Float64MultiArray, False)
            if taken is None:
                break
            self._on_command(taken[0])
        return self._cmd_event.is_set()

    def _on_command(self, msg: Float64MultiArray) -> None:
        data = msg.data
        n = len(data)
        if n != len(self.command_joints):
            self.counters["rejected_length"] += 1
            self._log_throttled("length", f"ignored command with {n} values, expected "
                                f"{len(self.command_joints)} ({self.counters['rejected_length']} so far)")
            return
        values = np.frombuffer(data, dtype=float) if isinstance(data, array.array) else np.asarray(data, float)
        if not np.isfinite(values).all():
            self.counters["rejected_nonfinite"] += 1
            self._log_throttled("nonfinite", f"ignored command with NaN/inf "
                                f"({self.counters['rejected_nonfinite']} so far)")
            return
        with self._lock:
            self._tau_cmd[self._cmd_index] = values
            self._cmd_time = self.sim.time
            self._cmd_seq += 1
            self.counters["commands"] += 1
        self._cmd_event.set()

    def _on_parameters(self, params: list[Parameter]):
        from rcl_interfaces.msg import SetParametersResult

        for p in params:
            if p.name == "command_timeout":
                if not (isinstance(p.value, float) and 0.0 <= p.value <= 10.0):
                    return SetParametersResult(successful=False, reason="command_timeout must be in [0, 10] s")
                self.command_timeout = p.value
            elif p.name == "paused":
                if not isinstance(p.value, bool):
                    return SetParametersResult(successful=False, reason="paused must be a bool")
                if p.value != self._held:
                    self.get_logger().info("paused: physics held" if p.value else "unpaused")
                self._held = p.value
            elif p.name == "contact_threshold":
                if not (isinstance(p.value, float) and p.value >= 0.0):
                    return SetParametersResult(successful=False, reason="contact_threshold must be ≥ 0 N")
                self.contact_threshold = p.value
        return SetParametersResult(successful=True)

    def _log_throttled(self, key: str, text: str) -> None:
        now = time.monotonic()
        if now - self._log_times.get(key, 0.0) >= LOG_THROTTLE_S:
            self._log_times[key] = now
            self.get_logger().warning(text)

    # ------------------------------------------------------------------ loop
    def start(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._run, name="idyn_sim_physics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._running = False
        self._cmd_event.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        self._cmd_sub.destroy_when_not_in_use()

    def _hold(self) -> None:
        """Paused: re-publish the state every ``PAUSED_PUBLISH_S`` (the controller answers
        each) until a command has come (``start_paused``) and ``paused`` is false."""
        while self._running:
            if self._take_commands(PAUSED_PUBLISH_S) and self._paused:
                self._paused = False
                self.get_logger().info("first command received" + ("" if self._held else ": physics running"))
            if not (self._paused or self._held):
                return
            self._cmd_event.clear()  # held: the answer to the state published next is awaited
            self._publish_state()

    def _run(self) -> None:
        self._publish_state()
        self._hold()
        self._wall_start = time.monotonic()
        self._sim_start = self.sim.time
        next_status = self._wall_start + 1.0
        deadline = self._wall_start
        while self._running:
            if self._held:  # paused at run time
                self._hold()
                deadline = time.monotonic()
            if self.lockstep:
                self._wait_for_command()
            else:
                self._take_commands(0.0)
            self.step()
            if self.real_time:
                deadline += self.period_s
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    time.sleep(remaining)
                elif remaining < -0.1:  # far behind (debugger, overload): do not catch up in a burst
                    deadline = time.monotonic()
            now = time.monotonic()
            if now >= next_status or self._status_due:
                next_status = now + 1.0
                self._status_due = False
                self._publish_status(now)

    def _wait_for_command(self) -> None:
        """Lock-step: wait for the command answering the last state. A controller that
        subscribes best-effort may miss a state: re-publish it every ``LOCKSTEP_RESEND_S``
        (same stamp), and step anyway after ``lockstep_timeout``."""
        waited = 0.0
        while self._running and not self._cmd_event.is_set():
            if waited >= self.lockstep_timeout:
                self.counters["lockstep_timeouts"] += 1
                break
            if self._take_commands(LOCKSTEP_RESEND_S):
                break
            waited += LOCKSTEP_RESEND_S
            self.counters["lockstep_resends"] += 1
            self._publish_state()

    def step(self) -> None:
        """One control period: apply the command (or zero after the timeout), step, publish."""
        sim = self.sim
        with self._lock:
            fresh = sim.time - self._cmd_time <= self.command_timeout + 1e-9
            if fresh:
                self._tau_applied[:] = self._tau_cmd
        if not fresh:
            self._tau_applied[:] = 0.0
            if not self._timed_out:
                self.counters["timeouts"] += 1
                self._log_throttled("timeout", f"no command for more than {self.command_timeout * 1e3:g} ms "
                                    "(simulated): zero torque")
        self._timed_out = not fresh
        if self.push.push is not None:  # held over the period, as the lock-step runner does
            force = push_force(self.push, sim.time, self.weight)
            pushed = force is not None
            # the push's end is reported at once (~/status), not up to 1 s later: a run that
            # ended within that second reported it unfinished when its last status was lost
            self._status_due |= self._pushing and not pushed
            self._pushing = pushed
            self.counters["push_steps"] += pushed
            sim.push(force)
        sim.step_period(self._tau_applied, self.substeps, self._forces, self._normal)
        self.counters["steps"] += 1
        self._cmd_event.clear()  # what arrives from now on answers the state published next
        self._publish_state()

    def _resting_feet(self) -> np.ndarray | None:
        """Feet whose sphere rests on the flat ground at spawn: reported in contact until the
        first step, as a robot's estimator would (MuJoCo's force on a sphere that just touches
        is zero, so the force alone says "in the air", and a controller's first tick would
        hold no contact)."""
        if not self.k or not self.robot.floating_base or self.sim.terrain is not None:
            return None
        return np.array([self.sim.frame_position(c.frame)[2] <= c.radius + 1e-6 for c in self.sim.contacts])

    def _publish_state(self) -> None:
        sim, m = self.sim, self.robot
        q, v = sim.state()
        t = sim.time
        sec = int(t)
        nanosec = int(round((t - sec) * 1e9))
        if nanosec >= 1_000_000_000:
            sec, nanosec = sec + 1, nanosec - 1_000_000_000
        self._time.sec, self._time.nanosec = sec, nanosec
        self._clock_msg.set_stamp(sec, nanosec)
        self.pub_clock.publish(self._clock_msg.cdr())
        if m.floating_base:
            o = self._odom
            o.set_stamp(sec, nanosec)
            o.views["pose"][:] = q[:7]  # position, quaternion (x, y, z, w)
            o.views["twist"][:] = v[:6]  # base frame (REP-105)
            self.pub_odom.publish(o.cdr())
        if self.k:
            self._contacts.views["data"][:] = (self._normal > self.contact_threshold)
            if self._spawn_contacts is not None and self.counters["steps"] == 0:
                self._contacts.views["data"][self._spawn_contacts] = 1.0
            self.pub_contacts.publish(self._contacts.cdr())
            if self.pub_ground is not None:
                self._publish_ground(self._contacts.views["data"])
            if self.publish_wrenches:
                for i, (msg, pub) in enumerate(zip(self._wrenches, self.pub_wrench)):
                    msg.set_stamp(sec, nanosec)
                    msg.views["force"][:] = self._forces[i]
                    pub.publish(msg.cdr())
        js = self._js
        js.set_stamp(sec, nanosec)
        js.views["position"][:] = q[m.joint_q_index]
        js.views["velocity"][:] = v[m.n_base:]
        js.views["effort"][:] = np.clip(self._tau_applied, -m.tau_max, m.tau_max)  # what the motors applied
        self.pub_js.publish(js.cdr())

    def _publish_ground(self, in_contact: np.ndarray) -> None:
        """~/contact_ground when a foot in contact (or any foot, before the first message)
        stands on a new normal or μ: the map's ground truth under each foot's sphere centre."""
        first = self.counters["ground_messages"] == 0
        now = time.monotonic()
        changed = now - self._ground_sent >= GROUND_REPEAT_S
        for i in range(self.k):
            if first or in_contact[i]:
                normal, mu = self.sim.ground_under(i)
                row = self._ground[i]
                if mu != row[3] or (normal != row[:3]).any():
                    row[:3], row[3] = normal, mu
                    changed = True
        if changed:
            self._ground_msg.data = self._ground.ravel().tolist()
            self.pub_ground.publish(self._ground_msg)
            self.counters["ground_messages"] += 1
            self._ground_sent = now

    def _publish_status(self, now: float) -> None:
        wall = now - self._wall_start
        sim_elapsed = self.sim.time - self._sim_start
        values = {**self.counters, "sim_time_s": self.sim.time,
                  "real_time_factor": sim_elapsed / wall if wall > 0 else 0.0,
                  "mode": "real_time" if self.real_time else ("lockstep" if self.lockstep else "fast")}
        status = DiagnosticStatus(name=f"{self.get_name()}: simulation", hardware_id=self.robot_name,
                                  level=DiagnosticStatus.OK if not self._timed_out else DiagnosticStatus.WARN,
                                  message="command timeout: zero torque" if self._timed_out else "running")
        status.values = [KeyValue(key=k, value=f"{v:.6g}" if isinstance(v, float) else str(v))
                         for k, v in values.items()]
        msg = DiagnosticArray()
        msg.header.stamp = self._time
        msg.status = [status]
        self.pub_status.publish(msg)


def _root_link(model) -> str:
    """Name of the link on the free flyer (the URDF root)."""
    pm = model.pin_model
    for frame in pm.frames:
        if frame.parentJoint == 1 and frame.type == __import__("pinocchio").FrameType.BODY:
            return frame.name
    return "base_link"


def main(args=None) -> None:
    """Entry point of ``ros2 run idyn_control idyn_sim``."""
    signals.init(args)
    node = None
    try:
        node = SimBridgeNode()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        node.start()
        while rclpy.ok():  # the executor has little to wake it (no command callbacks): let signals in
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except IdynError as exc:
        print(f"idyn_sim: {exc}", flush=True)
    finally:
        if node is not None:
            node.stop()
            try:  # the final counters for whoever listens (the demo's report)
                node._publish_status(time.monotonic())
            except Exception:  # noqa: BLE001 - the context may be gone already
                pass
            node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
