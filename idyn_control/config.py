"""The controller node's parameters: one table, validation, and the objects they build.

ROS-free on purpose: ``idyn-control check-config FILE`` validates a ROS 2 parameter
file with this module without starting ROS, and the node (:mod:`idyn_control.ros`) turns
the same table into ``declare_parameter`` calls. One source of truth::

    params = config.load_params_file("config/solo12.yaml")    # flat {"contacts.frames": [...], ...}
    problems = config.validate(params)                         # [] when the file is good
    settings = config.resolve(params)                          # defaults filled in, typed
    model = config.build_model(settings)                       # RobotModel
    ctrl_config = config.controller_config(settings, model)    # ControllerConfig

Types follow ROS 2 parameter types strictly, as rclpy enforces them when it declares a
parameter from a file: ``400`` is an integer and is rejected for a ``double`` parameter
(write ``400.0``), ``[1, 2]`` is an integer array.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from . import formulations, robots
from .controller import SAFE_OUTPUTS, ControllerConfig
from .gait import GaitConfig
from .sim.tasks import BalanceConfig
from .stabilization import STABILIZATIONS, VIIP_OUTPUTS
from .errors import ConfigError, IdynError
from .model import ContactSurface, RobotModel
from .prediction import MAX_HORIZON_S

NODE_NAME = "idyn_controller"

#: ROS 2 parameter types used here (rcl_interfaces/ParameterType names, lower case)
BOOL, INT, DOUBLE, STRING = "bool", "integer", "double", "string"
DOUBLE_ARRAY, STRING_ARRAY, INT_ARRAY, BOOL_ARRAY = "double_array", "string_array", "integer_array", "bool_array"

LOOP_MODES = ("triggered", "native")
FLOATING_BASE = ("auto", "floating", "fixed")
TWIST_FRAMES = ("child", "parent")
GAIT_TASKS = ("cmd_vel", "balance")
FORMULATION_OPTIONS = "formulation_options."
FORMULATION_DEFAULTS = "formulation_defaults."


@dataclass(frozen=True)
class ParamSpec:
    """One node parameter.

    Attributes:
        name: dotted ROS parameter name (nested YAML keys joined by ".").
        default: default value (an empty list means "not set": see the description).
        type: ROS 2 parameter type (``BOOL``, ``INT``, ``DOUBLE``, ``STRING``, ``*_ARRAY``).
        description: one line, with units.
        range: (low, high) inclusive bounds of a number, or of every array element.
        read_only: structural (sizes, topics, model): fixed after start-up.
        choices: the valid values of a string parameter.
        controller_field: the :class:`ControllerConfig` field it sets, if any.
    """

    name: str
    default: Any
    type: str
    description: str
    range: tuple[float, float] | None = None
    read_only: bool = False
    choices: tuple[str, ...] | None = None
    controller_field: str | None = None


def _gain(name, default, description, field_name=None, high=1e6):
    return ParamSpec(f"controller.{name}", default, DOUBLE, description, (0.0, high),
                     controller_field=field_name or name)


_CFG = ControllerConfig()
_GAIT = GaitConfig()
_BALANCE = BalanceConfig()

#: every parameter of the node, in README order
PARAMETERS: tuple[ParamSpec, ...] = (
    # ---------------------------------------------------------------- robot model
    ParamSpec("robot", "", STRING,
              "the robot's name; when it names a shipped robot (idyn_control.robots.names(): "
              "config/<robot>.yaml) the robot parameters this file leaves unset (URDF, contact frames, "
              "effort limit, standing pose) come from that robot's file; otherwise set urdf_path or "
              "robot_description", read_only=True),
    ParamSpec("urdf_path", "", STRING,
              "the URDF: a package://NAME/path URI (package_dirs, this package, example-robot-data, "
              "$AMENT_PREFIX_PATH) or a file path (the tools read a relative one against the YAML "
              "file's directory, the node against its working directory)", read_only=True),
    ParamSpec("robot_description", "", STRING,
              "URDF XML text (used when robot and urdf_path are empty)", read_only=True),
    ParamSpec("package_dirs", [], STRING_ARRAY,
              "directories searched for package:// URIs in the URDF", read_only=True),
    ParamSpec("floating_base", "auto", STRING,
              "root joint: floating (free flyer), fixed, or auto = floating when contacts.frames "
              "is not empty", read_only=True, choices=FLOATING_BASE),
    ParamSpec("effort_limit", 0.0, DOUBLE,
              "override of every joint's URDF effort limit [N·m]; 0 = URDF (or robot) limits",
              (0.0, 1e5), read_only=True),
    ParamSpec("joints", [], STRING_ARRAY,
              "the model's actuated joints in the order of per-joint gains and ~/state; every name "
              "must be a model joint and every model joint listed; empty = model order", read_only=True),
    ParamSpec("command_joints", [], STRING_ARRAY,
              "joint order of the effort command = the JointGroupEffortController's joints; "
              "empty = joints", read_only=True),
    ParamSpec("standing_pose.joints", [], STRING_ARRAY,
              "joints of the standing pose (legged robots) or ready pose (arms); others stay at the "
              "URDF's neutral position", read_only=True),
    ParamSpec("standing_pose.positions", [], DOUBLE_ARRAY,
              "their positions [rad], one per standing_pose.joints entry (the gait node stands the "
              "robot in this pose; the simulators spawn it so)", (-100.0, 100.0), read_only=True),
    ParamSpec("hand.urdf", "", STRING,
              "a hand holding a free box replaces the arm's tool (lock-step grasp experiment of seed "
              "000 §7.2.2 only: the node refuses a robot with a hand): its URDF (as urdf_path)",
              read_only=True),
    ParamSpec("hand.mount_link", "", STRING, "the arm link the hand's root is fixed to", read_only=True),
    ParamSpec("hand.drop_links", [], STRING_ARRAY, "the arm's tool links the hand replaces", read_only=True),
    ParamSpec("hand.tips", [], STRING_ARRAY,
              "fingertip frames, spaced evenly about the box's z axis; each touches the box face under it",
              read_only=True),
    # ---------------------------------------------------------------- contacts
    ParamSpec("contacts.frames", [], STRING_ARRAY,
              "contact frames, in the order of ~/contact_states; empty = the robot's feet "
              "(robot set) or none", read_only=True),
    ParamSpec("contacts.surfaces.links", [], STRING_ARRAY,
              "flat feet (soles): links (or frames) whose contact is the polygon contacts.surfaces.corners; "
              "each corner becomes a contact point <link>_corner_<i>, after contacts.frames in the "
              "order of ~/contact_states", read_only=True),
    ParamSpec("contacts.surfaces.corners", [], DOUBLE_ARRAY,
              "the soles' polygon: x0, y0, z0, x1, y1, z1, ... [m] in each link's frame (the same for "
              "every link of contacts.surfaces.links)", (-10.0, 10.0), read_only=True),
    ParamSpec("contacts.friction", 0.7, DOUBLE, "Coulomb friction coefficient μ of every contact",
              (1e-3, 10.0), read_only=True),
    ParamSpec("contacts.normal", [0.0, 0.0, 1.0], DOUBLE_ARRAY,
              "world-frame surface normal at every contact (flat ground)", (-1.0, 1.0), read_only=True),
    ParamSpec("contacts.threshold", 0.5, DOUBLE,
              "a contact is active when its ~/contact_states estimate is ≥ this", (0.0, 1.0)),
    ParamSpec("contacts.measured_wrench_topic", "~/measured_wrench/{frame}", STRING,
              "geometry_msgs/WrenchStamped topic of each contact's measured force ({frame} = the "
              "contact frame), read by formulations that use measured forces (sensed: seed 000 "
              "§7.3); header.frame_id must be the contact frame or contacts.world_frame",
              read_only=True),
    ParamSpec("contacts.ground_topic", "~/contact_ground", STRING,
              "std_msgs/Float64MultiArray topic of the ground under each contact (a terrain map or "
              "perception): one row nx, ny, nz, μ per contact in the order of ~/contact_states (world-frame "
              "normal, Coulomb μ in [0.001, 1000]); a row changes that contact's friction pyramid from "
              "the next tick until the next message (seed 000 §7.4–7.5); before any message, "
              "contacts.normal and contacts.friction; empty = no subscription", read_only=True),
    ParamSpec("contacts.world_frame", "odom", STRING,
              "header.frame_id of measured and desired wrenches given in the world frame (the "
              "simulator's or state estimator's odom frame)", read_only=True),
    ParamSpec("contacts.desired_wrench_topic", "~/desired_wrench/{frame}", STRING,
              "geometry_msgs/WrenchStamped topic of the desired force of each force contact "
              "({frame} = the contact frame; formulations that take desired forces, pidc_qp: one "
              "per formulation_options.force_contacts entry): the force of the ground on the foot "
              "[N], header.frame_id the contact frame or contacts.world_frame; the torque must be "
              "zero (point contact); the last accepted value is held", read_only=True),
    ParamSpec("contacts.desired_wrench_timeout", 0.0, DOUBLE,
              "a desired force older than this [s] goes back to zero (the value before any "
              "reference arrived), for a reference streamed at the control rate whose sender may "
              "stop; 0 = hold the last reference however old", (0.0, 3600.0)),
    ParamSpec("contacts.max_desired_force", 0.0, DOUBLE,
              "a desired force whose norm exceeds this [N] is rejected (the previous one is held); "
              "0 = no bound", (0.0, 1e6)),
    # ---------------------------------------------------------------- formulation and loop
    ParamSpec("formulation", _CFG.formulation, STRING,
              "inverse-dynamics formulation, one of idyn_control.formulations.names() (see "
              "Formulations); its options are formulation_options.<key>", read_only=True),
    ParamSpec("update_rate", 1000.0, DOUBLE, "control loop rate [Hz]; the formulation's dt is 1/rate",
              (10.0, 10000.0), read_only=True),
    ParamSpec("loop_mode", "native", STRING,
              "loop design: native = one tick per /joint_states message on a compiled loop thread "
              "(the routine tick runs without Python, anything else falls back to the triggered "
              "tick on that thread; needs the compiled loop, which the package's build makes when ROS 2 "
              "is installed first, else triggered with a warning; lowest input → command latency); "
              "triggered = the same in the executor's /joint_states callback, in Python (the state "
              "publisher's clock drives the loop, like ros2_control's read → update → write)",
              read_only=True, choices=LOOP_MODES),
    ParamSpec("loop_priority", 50, INT,
              "SCHED_FIFO priority of the compiled loop thread (native) or of the executor "
              "thread (triggered), as ros2_control's thread_priority (same default); 0 = normal "
              "scheduling; needs CAP_SYS_NICE or an rtprio limit, else a warning and normal scheduling",
              (0, 99), read_only=True),
    ParamSpec("middleware_priority", 49, INT,
              "SCHED_FIFO priority given to the middleware's threads (the DDS receive threads that "
              "deliver /joint_states to the loop) when the loop starts; keeps a busy machine from "
              "delaying an input before the loop sees it; 0 = leave them as they are",
              (0, 99), read_only=True),
    ParamSpec("loop_spin_us", 0.0, DOUBLE,
              "native mode: poll for the next /joint_states from this long before it is due (the "
              "last one + 1/update_rate) to this long after, instead of sleeping [µs]: the loop is "
              "running and its core warm when the input arrives, at the cost of about 2x this per "
              "period of CPU time; for a core of its own (on our shared 2-core VM it cut the median "
              "but not the p99); 0 = always sleep", (0.0, 100000.0), read_only=True),
    ParamSpec("loop_cpu", -1, INT,
              "native mode: the CPU of the compiled loop's thread and of the middleware's threads "
              "that deliver its input (one CPU: the input wakes the loop by a local preemption, "
              "not an inter-processor interrupt; on our 2-core VM p99 ~330 → 235–270 µs); -1 = the last "
              "CPU the node may use (after cpu_affinity), -2 = leave them unpinned", (-2, 1023),
              read_only=True),
    ParamSpec("lock_memory", True, BOOL,
              "lock the process's memory (mlockall) when the loop starts, as ros2_control's "
              "lock_memory (same default): no page fault in the tick; needs CAP_IPC_LOCK or a "
              "memlock limit large enough, else a warning", read_only=True),
    ParamSpec("cpu_affinity", [], INT_ARRAY,
              "CPUs the node's threads may run on (all of them: executor, loop, middleware), as "
              "ros2_control's cpu_affinity; empty = any (a robot computer keeps cores for its "
              "controllers; bench/ros_loop.py --node-cpus measures it)", (0, 1023), read_only=True),
    ParamSpec("autostart", True, BOOL, "configure and activate at start-up (no lifecycle manager needed)",
              read_only=True),
    ParamSpec("command_topic", "/effort_controller/commands", STRING,
              "std_msgs/Float64MultiArray effort command topic (JointGroupEffortController)", read_only=True),
    ParamSpec("odom_twist_frame", "child", STRING,
              "frame of the /odom twist: child = base frame (REP-105), parent = world frame",
              read_only=True, choices=TWIST_FRAMES),
    # ---------------------------------------------------------------- safety and monitoring
    ParamSpec("watchdog_timeout", 0.05, DOUBLE,
              "inputs older than this trip the watchdog → safe output [s] (after prediction_horizon when "
              "that is longer)", (1e-3, 10.0)),
    ParamSpec("prediction_horizon", 0.0, DOUBLE,
              "input gaps up to this long [s] are bridged on the state the controller predicts itself (the "
              "last accepted state integrated with its own q̈, the gait's clock running on): when /joint_states "
              "is late the node ticks on its own at update_rate on that state (predicted_ticks, input_gaps in "
              "/diagnostics); inputs older than this (and than watchdog_timeout) give the safe output; 0 = no "
              "prediction (late input: no tick, the effort controller holds the last command)",
              (0.0, MAX_HORIZON_S)),
    ParamSpec("monitor_rate_hz", 50.0, DOUBLE,
              "rate of ~/state and ~/contact_wrench/<frame> [Hz]; 0 = off", (0.0, 10000.0)),
    ParamSpec("diagnostics_rate_hz", 2.0, DOUBLE, "rate of /diagnostics [Hz]; 0 = off", (0.0, 100.0)),
    # ---------------------------------------------------------------- controller (run-time)
    ParamSpec("controller.joint_kp", [float(_CFG.joint_kp)], DOUBLE_ARRAY,
              "joint PD stiffness [1/s²]: one value for all joints or one per joint (joints order)",
              (0.0, 1e6), controller_field="joint_kp"),
    ParamSpec("controller.joint_kd", [float(_CFG.joint_kd)], DOUBLE_ARRAY,
              "joint PD damping [1/s]: one value or one per joint (joints order)", (0.0, 1e6),
              controller_field="joint_kd"),
    _gain("base_kp", _CFG.base_kp, "base pose stiffness [1/s²]"),
    _gain("base_kd", _CFG.base_kd, "base pose damping [1/s]"),
    _gain("foot_kp", _CFG.foot_kp, "swing-foot stiffness [1/s²]"),
    _gain("foot_kd", _CFG.foot_kd, "swing-foot damping [1/s]"),
    _gain("stance_weight", _CFG.stance_weight, "kinematic layer: weight of stance feet at zero acceleration"),
    _gain("base_weight", _CFG.base_weight, "kinematic layer: weight of the base task"),
    _gain("swing_weight", _CFG.swing_weight, "kinematic layer: weight of swing-foot tasks"),
    _gain("posture_weight", _CFG.posture_weight, "kinematic layer: weight of the joint posture task"),
    _gain("damping", _CFG.damping, "kinematic layer: Tikhonov regularization", high=1.0),
    ParamSpec("controller.safe_output", _CFG.safe_output, STRING,
              "output when a solve fails, the watchdog trips or the node deactivates",
              choices=SAFE_OUTPUTS, controller_field="safe_output"),
    _gain("safe_damping", _CFG.safe_damping, "joint damping of safe_output = damping [N·m·s/rad]", high=1e4),
    _gain("torque_rate_limit", _CFG.torque_rate_limit, "max |Δτ|/Δt per joint [N·m/s]; 0 = off", high=1e7),
    _gain("contact_ramp_time", _CFG.contact_ramp_time,
          "contact make/break: the contact's normal-force bound ramps over this time [s] (from zero to the "
          "robot's weight on a make, from its force to zero on a break), so a switch never steps the "
          "torque; 0 = switched", high=1.0),
    ParamSpec("controller.stabilization", _CFG.stabilization, STRING,
              "balance stabilization shared by every formulation (seed 000 §7.3): viip = virtual "
              "compressive forces along the held feet's normals from the base pose error (an inverted "
              "pendulum with a PD impedance), only what pushing on the ground can produce; none = off "
              "(viip runs in Python: the tick is not compiled)", choices=STABILIZATIONS,
              controller_field="stabilization"),
    ParamSpec("controller.viip_kp", list(_CFG.viip_kp), DOUBLE_ARRAY,
              "VIIP stiffness [1/s²] per base axis x, y, z, roll, pitch, yaw (world), one value or six",
              (0.0, 1e6), controller_field="viip_kp"),
    ParamSpec("controller.viip_kd", list(_CFG.viip_kd), DOUBLE_ARRAY,
              "VIIP damping [1/s] per base axis x, y, z, roll, pitch, yaw (world), one value or six",
              (0.0, 1e6), controller_field="viip_kd"),
    ParamSpec("controller.viip_output", _CFG.viip_output, STRING,
              "where the VIIP forces enter: acceleration = the base acceleration they give, into q̈_des "
              "(seed 000 §7.3); torque = the joint torques pressing them into the ground, added to the "
              "formulation's torques (Pacer's experiment configuration)", choices=VIIP_OUTPUTS,
              controller_field="viip_output"),
    ParamSpec("controller.effort_limit_scale", _CFG.effort_limit_scale, DOUBLE,
              "commanded |τ| ≤ scale · effort limit", (1e-3, 1.0), controller_field="effort_limit_scale"),
    # ---------------------------------------------------------------- gait (idyn_gait_controller)
    ParamSpec("gait.enabled", True, BOOL,
              "idyn_gait_controller: run the gait generator (floating-base robots with contact frames)",
              read_only=True),
    ParamSpec("gait.period", _GAIT.period, DOUBLE, "gait cycle [s] (seed 000 §7.6)", (0.05, 5.0), read_only=True),
    ParamSpec("gait.duty_factor", _GAIT.duty_factor, DOUBLE, "fraction of the cycle a foot is in stance",
              (0.05, 0.95), read_only=True),
    ParamSpec("gait.step_height", _GAIT.step_height, DOUBLE, "swing apex height [m]", (0.0, 0.3), read_only=True),
    ParamSpec("gait.touchdown_depth", _GAIT.touchdown_depth, DOUBLE,
              "the swing ends this far below the ground [m] (0: on it), so a foot lagging its reference "
              "(gait.velocity_product false) still lands on time",
              (0.0, 0.1), read_only=True),
    ParamSpec("gait.touchdown_speed", _GAIT.touchdown_speed, DOUBLE,
              "the swing's reference ends going down this fast [m/s] (0: at rest), so a foot meets the ground "
              "at that speed on time", (0.0, 2.0), read_only=True),
    ParamSpec("gait.velocity_product", _GAIT.velocity_product, BOOL,
              "the gait's joint accelerations carry the feet's velocity-product term (J_j a_j = a_foot − J̇v); "
              "false: a_foot alone, as seed 000's pipeline (Pacer) computes them", read_only=True),
    ParamSpec("gait.follow_ground", _GAIT.follow_ground, BOOL,
              "the gait fits a plane through the footholds: the swings aim at it and the base keeps its standing "
              "height above it (ramps, slopes); false: the ground stays at the level the robot started on",
              read_only=True),
    ParamSpec("gait.ground_tilt", _GAIT.ground_tilt, DOUBLE,
              "with gait.follow_ground, the base's pitch and roll follow this fraction of the footholds' plane's "
              "slope (1: parallel to the ground, 0: level)", (0.0, 1.0), read_only=True),
    ParamSpec("gait.touchdown_reach", _GAIT.touchdown_reach, DOUBLE,
              "a contact before the swing's final descent ends the swing only within this fraction of the "
              "swing's travel from its foothold (farther, the foot tripped and swings on); 10: any contact",
              (0.0, 10.0), read_only=True),
    ParamSpec("gait.late_descent_speed", _GAIT.late_descent_speed, DOUBLE,
              "a swing foot that has not met the ground when its swing ends keeps going down this fast "
              "[m/s] (for at most 0.1 s) before it is declared stance", (0.0, 2.0), read_only=True),
    ParamSpec("gait.vertical_fraction", _GAIT.vertical_fraction, DOUBLE,
              "the first and last this fraction of a swing move the foot only up and down (it travels to its "
              "foothold in between), so it leaves and meets the ground vertically",
              (0.0, 0.45), read_only=True),
    ParamSpec("gait.cmd_vel_timeout", 0.5, DOUBLE,
              "idyn_gait_controller: stop trotting when /cmd_vel is older than this [s, wall]", (0.0, 60.0),
              read_only=True),
    ParamSpec("gait.task", "cmd_vel", STRING,
              "idyn_gait_controller: what commands the gait: cmd_vel = trot on /cmd_vel; balance = stand, shift "
              "the weight from foot to foot and squat (the lock-step loop's BalanceTask, gait.balance.*, timed "
              "from activation; /cmd_vel ignored), e.g. a humanoid on flat feet", choices=GAIT_TASKS,
              read_only=True),
    ParamSpec("gait.balance.stand_s", _BALANCE.stand_s, DOUBLE, "gait.task balance: stand still first [s]",
              (0.0, 3600.0), read_only=True),
    ParamSpec("gait.balance.shift_cycles", _BALANCE.shift_cycles, INT,
              "gait.task balance: left-right weight shifts (one sine each)", (0, 1000), read_only=True),
    ParamSpec("gait.balance.shift_period_s", _BALANCE.shift_period_s, DOUBLE,
              "gait.task balance: period of a weight shift [s]", (0.1, 60.0), read_only=True),
    ParamSpec("gait.balance.shift_fraction", _BALANCE.shift_fraction, DOUBLE,
              "gait.task balance: the base moves this fraction of the half distance between the left and right "
              "feet toward each (1 = over the foot)", (0.0, 0.99), read_only=True),
    ParamSpec("gait.balance.squat_cycles", _BALANCE.squat_cycles, INT,
              "gait.task balance: squats after the shifts (1 − cos each)", (0, 1000), read_only=True),
    ParamSpec("gait.balance.squat_period_s", _BALANCE.squat_period_s, DOUBLE,
              "gait.task balance: period of a squat [s]", (0.1, 60.0), read_only=True),
    ParamSpec("gait.balance.squat_depth_m", _BALANCE.squat_depth_m, DOUBLE,
              "gait.task balance: how far a squat lowers the base [m]", (0.0, 0.5), read_only=True),
)

SPEC: dict[str, ParamSpec] = {p.name: p for p in PARAMETERS}
#: parameters that change at run time and map onto ControllerConfig fields
CONTROLLER_FIELDS: dict[str, str] = {p.name: p.controller_field for p in PARAMETERS if p.controller_field}
#: parameters that map onto GaitConfig fields (the robot's gait)
GAIT_FIELDS = frozenset(("gait.period", "gait.duty_factor", "gait.step_height", "gait.touchdown_depth",
                         "gait.touchdown_speed", "gait.velocity_product", "gait.touchdown_reach",
                         "gait.follow_ground", "gait.ground_tilt", "gait.late_descent_speed", "gait.vertical_fraction"))
#: gait.balance.<field> → BalanceConfig.<field> (gait.task balance)
BALANCE_PREFIX = "gait.balance."


# ====================================================================== types
def ros_type_of(value: Any) -> str | None:
    """The ROS 2 parameter type rclpy infers for a YAML value (None when it has none)."""
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return INT
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return STRING
    if isinstance(value, (list, tuple)):
        if not value:
            return None  # empty: fits any array type
        for kind, t in ((BOOL_ARRAY, bool), (INT_ARRAY, int), (DOUBLE_ARRAY, float), (STRING_ARRAY, str)):
            if all(isinstance(v, t) and not (t is int and isinstance(v, bool)) for v in value):
                return kind
        return "mixed_array"
    return type(value).__name__


#: formulation options the node builds subscriptions from (one desired wrench topic per
#: force contact): read-only parameters, changed by reconfiguring
STRUCTURAL_OPTIONS = frozenset({"force_contacts"})


#: valid ranges of the numeric formulation options (by name, for every formulation that
#: has one): tolerances must be positive (eps_abs ≤ 0 makes every solve run to its
#: iteration limit), weights and gains non-negative, delays what the formulation keeps
OPTION_RANGES: dict[str, tuple[float, float]] = {
    "eps_abs": (1e-14, 1.0), "lcp_tol": (1e-15, 1.0), "consistency_tol": (1e-15, 1.0), "rank_tol": (1e-12, 1.0),
    "rcond": (0.0, 1.0), "friction_margin": (0.0, 0.99), "cop_margin": (0.0, 0.99), "delay_ticks": (1, 2), "max_pivots": (0, 10_000_000),
    "slack_refinements": (0, 100), "contact_gain": (0.0, 1e6), "force_regularization": (0.0, 1e6),
    "internal_force_weight": (0.0, 1e6), "regularization": (0.0, 1e6), "slack_weight": (0.0, 1e12),
    "w_base": (0.0, 1e6), "w_force": (0.0, 1e6), "w_posture": (0.0, 1e6), "gain": (0.0, 1e6),
    "ki": (0.0, 1e4), "integral_limit": (0.0, 1e6),
}


#: formulation options whose ROS type is not their default's: ``sensed``'s sensor layout
#: (None = every component measured) is one "<frame>: <components>" entry per measured
#: contact, e.g. ["FL_FOOT: n", "FR_FOOT: t1 t2 n"]; empty = None
OPTION_TYPES: dict[str, str] = {"measured_components": STRING_ARRAY}


def option_choices(key: str) -> tuple[str, ...] | None:
    """The valid values of a string formulation option (None: not a string option with choices)."""
    from . import qp
    from .formulations.lcp_coulomb import _DIRECTIONS
    from .formulations.lcp_noslip import CONTACT_TARGETS
    from .formulations.projected import INTERNAL_FORCES
    from .formulations.qp_contact import DISSIPATION

    return {
        "backend": ("auto", "native", "python"), "solver": qp.solver_names(), "stage1_solver": ("qp", "lemke"),
        "dissipation": tuple(DISSIPATION), "contact_target": tuple(CONTACT_TARGETS),
        "friction_cone": tuple(_DIRECTIONS), "spread_friction": ("torque", "load", ""),  # "": off
        "internal_forces": INTERNAL_FORCES,
    }.get(key)


def option_spec(formulation: str, key: str) -> ParamSpec:
    """The parameter ``formulation_options.<key>`` of a formulation, typed from its default
    (or :data:`OPTION_TYPES`), with its range (:data:`OPTION_RANGES`) or choices
    (:func:`option_choices`).

    A ``None`` default (e.g. ``pid``'s ``gain``) is a double array whose empty value means None.
    """
    cls = formulation_class(formulation)
    if key not in cls.defaults:
        raise ConfigError(FORMULATION_OPTIONS + key, "(set)",
                          f"not an option of {formulation!r}; valid: {sorted(cls.defaults) or 'none'}")
    default = cls.defaults[key]
    if key in OPTION_TYPES:
        kind, value = OPTION_TYPES[key], []
    elif default is None:
        kind, value = DOUBLE_ARRAY, []
    elif isinstance(default, (list, tuple)):
        kind = ros_type_of(list(default)) or (STRING_ARRAY if key.endswith(("contacts", "frames")) else DOUBLE_ARRAY)
        value = list(default)
    else:
        kind, value = ros_type_of(default), default
    structural = key in STRUCTURAL_OPTIONS
    return ParamSpec(FORMULATION_OPTIONS + key, value, kind,
                     f"option {key!r} of formulation {formulation!r} (see its defaults)"
                     + ("; the node subscribes per entry: fixed once configured" if structural else ""),
                     range=OPTION_RANGES.get(key), read_only=structural,
                     choices=option_choices(key) if kind == STRING else None)


def default_spec(formulation: str, key: str) -> ParamSpec:
    """The parameter ``formulation_defaults.<formulation>.<key>``: a robot's default of that
    option (a robot file tunes every formulation; ``formulation_options.<key>`` wins)."""
    option = option_spec(formulation, key)
    return ParamSpec(f"{FORMULATION_DEFAULTS}{formulation}.{key}", option.default, option.type,
                     f"this robot's default of formulation_options.{key} when formulation is {formulation!r}",
                     range=option.range, read_only=True)


def default_specs(formulation: str) -> tuple[ParamSpec, ...]:
    """All ``formulation_defaults.<formulation>.*`` parameters of a formulation."""
    return tuple(default_spec(formulation, key) for key in formulation_class(formulation).defaults)


def formulation_class(name: str):
    """The formulation class, with a clear error for unknown or not yet installed ones."""
    try:
        return formulations.get(name)
    except ImportError as exc:
        raise ConfigError("formulation", name, f"is registered but cannot be imported: {exc}") from None


def option_specs(formulation: str) -> tuple[ParamSpec, ...]:
    """All ``formulation_options.*`` parameters of a formulation."""
    return tuple(option_spec(formulation, key) for key in formulation_class(formulation).defaults)


def check_value(spec: ParamSpec, value: Any) -> str | None:
    """Why ``value`` is not valid for ``spec`` (None when it is)."""
    got = ros_type_of(value)
    if got is None and spec.type.endswith("_array"):
        return None
    if got != spec.type:
        hint = ""
        if spec.type in (DOUBLE, DOUBLE_ARRAY) and got in (INT, INT_ARRAY):
            hint = " (write numbers with a decimal point, e.g. 400.0)"
        return f"expected {spec.type}, got {got}{hint}"
    items = value if isinstance(value, (list, tuple)) else [value]
    if spec.type in (DOUBLE, DOUBLE_ARRAY, INT, INT_ARRAY):
        for x in items:
            if not math.isfinite(x):
                return f"{x!r} is not finite"
            if spec.range is not None and not (spec.range[0] <= x <= spec.range[1]):
                return f"{x!r} is outside [{spec.range[0]:g}, {spec.range[1]:g}]"
    if spec.choices is not None and value not in spec.choices:
        return f"{value!r} is not one of {', '.join(spec.choices)}"
    return None


# ====================================================================== files
def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested YAML mappings → dotted parameter names."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


class _RclLoader(yaml.SafeLoader):
    """YAML as rcl reads parameter files: ``1e-8`` is a double (PyYAML's YAML 1.1 says string)."""


_RclLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_params_file(path: str | Path, node_name: str = NODE_NAME) -> dict[str, Any]:
    """The flat parameters of ``node_name`` in a ROS 2 parameter file.

    Sections ``/**``, ``<node>`` and ``/<node>`` apply (later ones win, like rcl).
    """
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(), Loader=_RclLoader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError("params file", str(path), f"cannot be read: {exc}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError("params file", str(path), "is not a mapping of node names")
    params: dict[str, Any] = {}
    found = False
    for key in ("/**", node_name, "/" + node_name):
        section = doc.get(key)
        if section is None:
            continue
        if not isinstance(section, Mapping) or not isinstance(section.get("ros__parameters"), Mapping):
            raise ConfigError(key, section, "needs a 'ros__parameters' mapping")
        params.update(flatten(section["ros__parameters"]))
        found = True
    if not found:
        raise ConfigError("params file", str(path),
                          f"has no section for node {node_name!r} (keys: {', '.join(map(str, doc))})")
    return _paths_relative_to(params, path.resolve().parent)


#: parameters naming files or directories: a relative one is relative to the YAML file for
#: the tools (the node, which does not know its params file, reads them against its cwd)
_PATH_PARAMETERS = ("urdf_path", "package_dirs", "hand.urdf")


def _paths_relative_to(params: dict[str, Any], base: Path) -> dict[str, Any]:
    def absolute(p):
        if not isinstance(p, str) or not p or "://" in p or Path(p).expanduser().is_absolute():
            return p
        return str(base / p)

    for name in _PATH_PARAMETERS:
        if name in params:
            params[name] = [absolute(p) for p in params[name]] if isinstance(params[name], list) \
                else absolute(params[name])
    return params


# ====================================================================== validation
@dataclass(frozen=True)
class Settings:
    """Every parameter with its value (file value or default), typed."""

    values: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def formulation_options(self) -> dict[str, Any]:
        """Options for ``formulations.make`` (empty arrays of None-default options → None)."""
        cls = formulation_class(self.values["formulation"])
        out = {}
        for name, value in self.values.items():
            if name.startswith(FORMULATION_OPTIONS):
                key = name[len(FORMULATION_OPTIONS):]
                out[key] = option_value(cls.defaults[key], value)
        return out


def option_value(default: Any, value: Any) -> Any:
    """ROS parameter value → the formulation option (tuple/None conventions of its default)."""
    if default is None and isinstance(value, (list, tuple)) and len(value) == 0:
        return None
    if isinstance(default, tuple):
        return tuple(value)
    if isinstance(value, (list, tuple)) and not isinstance(default, (list, tuple)):
        return list(value)
    return value


def validate(params: Mapping[str, Any], *, check_model: bool = True) -> list[str]:
    """Every problem of a flat parameter dict, one readable line each ([] = valid).

    Checks unknown keys, types, ranges and choices, the formulation and its options, and
    (``check_model``) that the robot/URDF loads and the joints and contact frames exist.
    """
    problems: list[str] = []
    formulation = params.get("formulation", SPEC["formulation"].default)
    options_known = True
    try:
        formulation_class(formulation) if isinstance(formulation, str) else None
    except IdynError as exc:
        problems.append(f"formulation: {exc}")
        options_known = False
    for name, value in params.items():
        if name in ("use_sim_time", "qos_overrides") or name.startswith("qos_overrides."):
            continue  # declared by rclpy itself
        if name.startswith(FORMULATION_OPTIONS):
            if not options_known:
                continue
            try:
                spec = option_spec(formulation, name[len(FORMULATION_OPTIONS):])
            except IdynError as exc:
                problems.append(str(exc))
                continue
        elif name.startswith(FORMULATION_DEFAULTS):
            try:
                spec = default_spec(*name[len(FORMULATION_DEFAULTS):].partition(".")[::2])
            except IdynError as exc:
                problems.append(f"{name}: {exc}")
                continue
        else:
            spec = SPEC.get(name)
            if spec is None:
                close = [p for p in SPEC if p.split(".")[-1] == name.split(".")[-1]]
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(f"{name}: unknown parameter{hint}")
                continue
        reason = check_value(spec, value)
        if reason:
            problems.append(f"{name}: {reason}")
    joints, positions = params.get("standing_pose.joints"), params.get("standing_pose.positions")
    if isinstance(joints, list) and isinstance(positions, list) and len(joints) != len(positions):
        problems.append(f"standing_pose: {len(joints)} joints but {len(positions)} positions")
    for name in ("contacts.measured_wrench_topic", "contacts.desired_wrench_topic"):
        topic = params.get(name)
        if isinstance(topic, str) and "{frame}" not in topic:
            problems.append(f"{name}: {topic!r} must contain {{frame}} (one topic per contact frame)")
    if problems or not check_model:
        return problems
    settings = resolve(params)
    try:
        model = build_model(settings)
        controller_config(settings, model).validate()
        joint_orders(settings, model)
        formulations.make(settings["formulation"], model, dt=1.0 / settings["update_rate"],
                          **settings.formulation_options)
    except IdynError as exc:
        problems.append(str(exc))
    except (ValueError, TypeError) as exc:  # option values of the wrong kind for a formulation
        problems.append(f"formulation_options: {exc}")
    return problems


def resolve(params: Mapping[str, Any]) -> Settings:
    """Defaults filled in for every declared parameter and the formulation's options."""
    values = {p.name: p.default for p in PARAMETERS}
    values.update({k: v for k, v in params.items() if k in SPEC})
    formulation = values["formulation"]
    for spec in option_specs(formulation):
        key = spec.name[len(FORMULATION_OPTIONS):]
        values[spec.name] = params.get(spec.name, params.get(f"{FORMULATION_DEFAULTS}{formulation}.{key}", spec.default))
    return Settings(values)


# ====================================================================== building
def build_model(settings: Settings) -> RobotModel:
    """The :class:`RobotModel` the parameters describe (raises IdynError subclasses)."""
    robot = settings["robot"]
    frames = tuple(settings["contacts.frames"])
    surfaces = ContactSurface.from_flat(settings["contacts.surfaces.links"], settings["contacts.surfaces.corners"])
    urdf: str | Path
    package_dirs = [Path(d) for d in settings["package_dirs"]]
    effort = settings["effort_limit"] or None
    if settings["hand.urdf"]:
        raise ConfigError("hand.urdf", settings["hand.urdf"], "a hand holding a free box runs in the lock-step "
                          "experiments only (idyn-control experiments seed000), not in the node")
    if settings["urdf_path"]:
        urdf = robots.resolve_uri(settings["urdf_path"], settings["package_dirs"])
        if not Path(urdf).is_file():
            raise ConfigError("urdf_path", settings["urdf_path"], "file not found")
    elif settings["robot_description"].strip():
        urdf = settings["robot_description"]
    elif robot in robots.names():
        spec = robots.spec(robot)
        urdf = spec.urdf_path()
        if not Path(urdf).is_file():
            raise ConfigError("robot", robot, f"URDF not found at {urdf}")
        if not frames and not surfaces:
            frames, surfaces = spec.contact_frames, spec.surfaces
        effort = effort or spec.effort_limit
    elif robot:
        raise ConfigError("robot", robot, f"is not a shipped robot ({', '.join(robots.names())}): set urdf_path "
                          "or robot_description")
    else:
        raise ConfigError("robot", "", "set one of robot, urdf_path or robot_description")
    if robot in robots.names():
        package_dirs += list(robots.spec(robot).search_dirs())
    else:
        package_dirs += list(robots.RobotSpec(robot, str(urdf)).search_dirs())
    base = settings["floating_base"]
    floating = None if base == "auto" else base == "floating"
    return RobotModel.from_urdf(
        urdf, floating_base=floating, contact_frames=frames, package_dirs=package_dirs,
        friction=settings["contacts.friction"], effort_limits=effort,
        contact_normal=settings["contacts.normal"], contact_surfaces=surfaces)


def joint_orders(settings: Settings, model: RobotModel) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(joints, command_joints) resolved against the model (configure-time errors)."""
    joints = tuple(settings["joints"]) or model.joint_names
    unknown = [j for j in joints if j not in model.joint_names]
    if unknown:
        raise ConfigError("joints", unknown, f"not actuated joints of the model; valid: {list(model.joint_names)}")
    missing = [j for j in model.joint_names if j not in joints]
    if missing or len(set(joints)) != len(joints):
        raise ConfigError("joints", list(joints), f"must list every model joint once; missing {missing}")
    command = tuple(settings["command_joints"]) or joints
    unknown = [j for j in command if j not in model.joint_names]
    if unknown:
        raise ConfigError("command_joints", unknown,
                          f"not actuated joints of the model; valid: {list(model.joint_names)}")
    if len(set(command)) != len(command):
        raise ConfigError("command_joints", list(command), "lists a joint twice")
    return joints, command


def per_joint(value: Sequence[float], joints: Sequence[str], model: RobotModel, name: str) -> np.ndarray:
    """One value or one per joint (in ``joints`` order) → model-order array."""
    arr = np.asarray(value, dtype=float)
    if arr.size == 1:
        return np.full(model.na, float(arr.reshape(-1)[0]))
    if arr.shape != (len(joints),):
        raise ConfigError(name, list(value), f"needs 1 or {len(joints)} values (one per joint)")
    out = np.empty(model.na)
    out[model.joint_order(joints)] = arr
    return out


def controller_fields(settings: Mapping[str, Any] | Settings, model: RobotModel,
                      joints: Sequence[str]) -> dict[str, Any]:
    """ControllerConfig keyword arguments from the ``controller.*`` parameters."""
    values = settings.values if isinstance(settings, Settings) else settings
    out: dict[str, Any] = {}
    for name, field_name in CONTROLLER_FIELDS.items():
        if name not in values:
            continue
        value = values[name]
        if field_name in ("joint_kp", "joint_kd"):
            value = per_joint(value, joints, model, name)
        out[field_name] = value
    return out


def controller_config(settings: Settings, model: RobotModel) -> ControllerConfig:
    """The :class:`ControllerConfig` the parameters describe (not yet validated)."""
    joints = tuple(settings["joints"]) or model.joint_names
    return ControllerConfig(
        formulation=settings["formulation"],
        formulation_options=settings.formulation_options,
        dt=1.0 / settings["update_rate"],
        **controller_fields(settings, model, joints),
    )


def markdown_table() -> str:
    """The README "Parameters" table (kept in sync by a test)."""
    def fmt(v):
        return "`" + (yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()
                      if not isinstance(v, str) else repr(v)) + "`"
    rows = ["| name | type | default | description |", "|---|---|---|---|"]
    for p in PARAMETERS:
        extra = []
        if p.range is not None:
            extra.append(f"range [{p.range[0]:g}, {p.range[1]:g}]")
        if p.choices is not None:
            extra.append("one of " + ", ".join(p.choices))
        extra.append("read-only" if p.read_only else "run time")
        desc = p.description.replace("|", "\\|")
        rows.append(f"| `{p.name}` | {p.type} | {fmt(p.default)} | {desc} ({'; '.join(extra)}) |")
    rows.append("| `formulation_options.<key>` | from the option's default | the formulation's "
                "`defaults` | one per option of the chosen formulation, e.g. "
                "`formulation_options.eps_abs`; an option whose default is None is a double array, "
                "empty = None (run time: the formulation is rebuilt, warm start lost once) |")
    rows.append("| `formulation_defaults.<formulation>.<key>` | as `formulation_options.<key>` | – | the robot's "
                "own default of an option of any formulation (e.g. `formulation_defaults.pid.ki`), used "
                "when that formulation runs and `formulation_options.<key>` keeps its default (read-only) |")
    return "\n".join(rows)


def robot_parameter(spec: "robots.RobotSpec", name: str) -> Any:
    """A node parameter as a robot's file sets it, else its default (e.g. the
    ``prediction_horizon`` the lock-step runner and the demo give the controller)."""
    params = load_params_file(spec.origin) if spec.origin is not None else {}
    return params.get(name, SPEC[name].default)


def balance_config(settings: Mapping[str, Any]) -> BalanceConfig:
    """The :class:`BalanceConfig` of ``gait.balance.*`` (``gait.task`` balance)."""
    values = {name[len(BALANCE_PREFIX):]: settings[name] for name in SPEC if name.startswith(BALANCE_PREFIX)}
    config = BalanceConfig(**values)
    config.validate()
    return config
