"""``idyn-control demo``: a quadruped stands up, trots and stops in MuJoCo, through ROS 2.

    idyn-control demo                           # project quadruped, real ROS 2 topics
    idyn-control demo --robot solo12 --formulation qp_coulomb --duration 10
    idyn-control demo --no-ros                  # the same scenario lock-step, one process
    idyn-control demo --robot g1                # a humanoid: stand, shift the weight, squat

With ROS (default) three processes talk over DDS on a private ``ROS_DOMAIN_ID``: the
simulation bridge ``idyn_sim`` (MuJoCo, lock-step: it publishes the state and steps when
the command for it arrives), the controller node with the gait generator
(``idyn_gait_controller``, ``use_sim_time``, one tick per ``/joint_states``), and this
process, which publishes ``/cmd_vel`` on the simulated-time schedule and records every
topic. Timeline (simulated): stand up from a crouch during ``stand_time``, trot at
``speed`` for ``duration`` seconds, stop, stand ``stop_time`` seconds. Task ``balance``
(the default for a robot on flat feet, ``contacts.surfaces``: the gait trots point feet
only) replaces the trot: the gait node's ``gait.task`` balance runs the lock-step loop's
:class:`~idyn_control.sim.tasks.BalanceTask` (stand, shift the weight from foot to foot,
squat; ``balance`` overrides its :class:`~idyn_control.sim.tasks.BalanceConfig`), then the
robot stands ``stop_time`` seconds; the report adds each sole's loading
(:func:`~idyn_control.sim.metrics.sole_metrics`).

Outputs in ``--out`` (default results/demo): ``demo.mcap`` (ROS 2 messages with their
schemas: joint states, commands, odometry, contact estimates, predicted and measured
contact wrenches, references, diagnostics, /cmd_vel), ``demo.png`` (torques, predicted vs
simulated contact forces, base motion and path), ``report.json`` / ``report.txt``.
"""

from __future__ import annotations

import gc
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pinocchio as pin

from . import config, robots
from .errors import ConfigError
from .sim.faults import Faults, scaled_urdf
from .sim.metrics import Trace, compute_metrics, format_metrics, sole_metrics
from .sim.tasks import BalanceConfig
from .sim.terrain import RAMP_SLOPE_DEG, RAMP_SLOPE_RANGE_DEG, TERRAINS

CONTROLLER = "idyn_controller"
BRIDGE = "idyn_sim"
COMMAND_TOPIC = "/effort_controller/commands"
CONTACT_STATES_TOPIC = f"/{CONTROLLER}/contact_states"
RELAY = "idyn_fault_relay"
#: longest wait for the demo's processes to discover each other before the physics runs [s, wall]
DISCOVERY_TIMEOUT_S = 60.0
#: the Faults fields the relay injects (the others: the bridge's push, the controller's model)
RELAY_FAULTS = ("drop_state", "delay", "contact_flip", "gap", "seed", "watchdog_timeout")
RECORDER_NICE = 5  # the recording process's niceness during the ROS run
SOLE_SETTLE_S = 0.1  # soles are scored from this time on: the spawned robot settles on them first [s]


@dataclass
class DemoOptions:
    """What the demo runs (times in simulated seconds)."""

    robot: str = "quadruped"
    formulation: str = "wbc_qp"
    duration: float = 10.0      # trot [s]
    speed: float = 0.2          # [m/s] forward
    stand_time: float = 1.0     # stand up before trotting [s]
    stop_time: float = 1.0      # stand after the stop command [s]
    crouch: float = 0.02        # initial base height below standing [m]
    friction: float = 0.7
    compliant: bool = False
    terrain: str = "plane"      # or "heightmap" (seed 000 §7.5; friction and compliant then unused)
    terrain_seed: int = 0
    ramp_slope: float = RAMP_SLOPE_DEG  # terrain "ramp": its slope [°]
    # terrain "block": its height, "stairs": each step's rise [m]; None: 15 % (stairs 10 %) of the
    # standing base height
    block_height: float | None = None
    blind: bool = False         # heightmap: the controller is not told the ground under its feet
    ros: bool = True
    out: str = "results/demo"
    wall_timeout: float = 600.0  # give up after this long [s, wall]
    domain_id: int | None = None
    task: str = "auto"          # trot, balance; auto: balance on flat feet (contacts.surfaces), else trot
    balance: dict[str, Any] = field(default_factory=dict)  # BalanceConfig fields (task balance)
    #: sim.faults.Faults fields: with ROS, the fault relay between the bridge and the
    #: controller (lost, delayed, wrong inputs, a gap), the push in the bridge, the mass
    #: error in the controller's URDF (idyn-control experiments faults --ros)
    faults: dict[str, Any] | None = None

    @property
    def balance_config(self) -> BalanceConfig:
        config = BalanceConfig(**self.balance)
        config.validate()
        return config

    @property
    def total(self) -> float:
        if self.task == "balance":
            return self.balance_config.duration_s + self.stop_time
        return self.stand_time + self.duration + self.stop_time

    @property
    def trot_window(self) -> tuple[float, float]:
        if self.task == "balance":  # no trot: /cmd_vel stays zero
            return self.total, self.total
        return self.stand_time, self.stand_time + self.duration

    def resolved(self) -> "DemoOptions":
        """The options with ``task`` decided (auto → balance for a robot on flat feet)."""
        task, flat_feet = self.task, bool(robots.spec(self.robot).surfaces)
        if task == "auto":
            task = "balance" if flat_feet else "trot"
        if task not in TASKS:
            raise ConfigError("task", self.task, f"must be one of {('auto', *TASKS)}")
        if self.terrain not in TERRAINS:
            raise ConfigError("terrain", self.terrain, f"must be one of {TERRAINS}")
        if self.terrain != "plane" and self.compliant:
            raise ConfigError("compliant", self.compliant, f"the {self.terrain} is rigid")
        low, high = RAMP_SLOPE_RANGE_DEG
        if not (math.isfinite(self.ramp_slope) and low <= self.ramp_slope <= high):
            raise ConfigError("ramp_slope", self.ramp_slope, f"must be in [{low:g}, {high:g}] [°] (the bridge's range)")
        if self.block_height is not None and not (math.isfinite(self.block_height) and 0.0 < self.block_height <= 1.0):
            raise ConfigError("block_height", self.block_height, "must be in (0, 1] [m] (the bridge's range)")
        climbing = self.terrain in ("ramp", "block", "stairs")
        if climbing and not robots.spec(self.robot).gait.get("follow_ground", True):
            raise ConfigError("robot", self.robot, "climbs a ramp, block or stairs only with gait.follow_ground true "
                              "(its file sets it false): try --robot solo12, go2 or anymal_c")
        # flat feet start standing: from a crouch G1's soles land on their edges
        crouch = 0.0 if flat_feet else self.crouch
        return replace(self, task=task, crouch=crouch, speed=0.0 if task == "balance" else self.speed)


TASKS = ("trot", "balance")


# ====================================================================== entry point
def run(opts: DemoOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the demo, write its files, return the report (metrics + file paths)."""
    spec = robots.spec(opts.robot)
    if not (spec.contact_frames or spec.surfaces):
        raise ConfigError("robot", opts.robot, "the demo runs a legged robot: its file needs contacts.frames "
                          "or contacts.surfaces")
    opts = opts.resolved()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    wall0 = time.perf_counter()
    if opts.task == "balance":
        b = opts.balance_config
        plan = (f"stand {b.stand_s:g} s → {b.shift_cycles} weight shift(s) of {b.shift_period_s:g} s → "
                f"{b.squat_cycles} squat(s) of {b.squat_depth_m * 100:g} cm → stand {opts.stop_time:g} s")
    else:
        plan = f"stand {opts.stand_time:g} s → trot {opts.speed:g} m/s for {opts.duration:g} s → stop"
    log(f"demo: {opts.robot}, {opts.formulation}, {plan} "
        f"({'ROS 2 topics, lock-step' if opts.ros else 'lock-step, no ROS'}); output in {out}/")
    if opts.ros:
        trace, extra = _run_ros(opts, out, log)
    elif opts.faults is not None:
        raise ConfigError("faults", opts.faults, "the demo injects faults over ROS only (without ROS: "
                          "idyn-control experiments faults)")
    else:
        trace, extra = _run_lockstep(opts, out, log)
    model = robots.load(opts.robot, friction=opts.friction if math.isfinite(opts.friction) else 1e3)
    weight = 9.81 * pin.computeTotalMass(model.pin_model)
    t0, t1 = opts.trot_window
    metrics = compute_metrics(trace, dt=1e-3, weight=weight, floating_base=True,
                              speed_window=(min(t0 + 1.0, 0.5 * (t0 + t1)), t1) if t1 > t0 else (None, None),
                              command_velocity=(opts.speed, 0.0, 0.0), fell=extra.pop("fell", False),
                              fall_time=extra.pop("fall_time", None), force_ticks=trace.meta.get("forces_complete"))
    if spec.surfaces:  # each sole's loading, once it stood up from the crouch
        metrics.update(sole_metrics(trace, model, spec.surfaces, settle_s=SOLE_SETTLE_S,
                                    measured=trace.meta.get("measured_complete")))
    metrics.update(extra)
    if trace.n:  # how far the base went over the run, horizontally [m]
        metrics["base_xy_drift_m"] = float(np.abs(trace.q[trace.n - 1, :2] - trace.q[0, :2]).max())
    png = out / "demo.png"
    plot(trace, opts, png)
    metrics["wall_clock_s"] = time.perf_counter() - wall0
    report = {"options": asdict(opts), "metrics": metrics,
              "files": {"mcap": str(out / "demo.mcap"), "png": str(png), "report": str(out / "report.json")}}
    text = format_report(report)
    (out / "report.json").write_text(json.dumps(report, indent=2, default=float))
    (out / "report.txt").write_text(text + "\n")
    log(text)
    return report


def format_report(report: dict[str, Any]) -> str:
    o, m = report["options"], report["metrics"]
    task = ("balance (stand, weight shifts, squats)" if o.get("task") == "balance"
            else f"trot {o['speed']:g} m/s for {o['duration']:g} s")
    lines = [f"demo report: {o['robot']}, {o['formulation']}, {task}, "
             f"{'ROS 2 (bridge + controller nodes, lock-step over DDS)' if o['ros'] else 'lock-step without ROS'}",
             format_metrics(m)]
    if "tick_source" in m:
        lines.append(f"  {'(tick times from':<34}{m['tick_source']})")
    if "real_time_factor" in m:
        lines.append(f"  {'real-time factor':<34}{m['real_time_factor']:.2f} (simulated / wall time, physics running)")
    if "compiled_tick_fraction" in m:
        lines.append(f"  {'compiled ticks':<34}{100 * m['compiled_tick_fraction']:.2f} % of the controller's ticks")
    lines.append(f"  {'wall clock':<34}{m['wall_clock_s']:.1f} s for {m.get('duration_s', 0):.2f} s simulated")
    for key, path in report["files"].items():
        lines.append(f"  {key:<34}{path}")
    return "\n".join(lines)


# ====================================================================== without ROS
def _run_lockstep(opts: DemoOptions, out: Path, log) -> tuple[Trace, dict[str, Any]]:
    from .sim.lockstep import Scenario, run_scenario

    t0, t1 = opts.trot_window
    # flat feet stand whatever the command, as the gait node ignores /cmd_vel for them
    trot = opts.task == "trot" and not robots.spec(opts.robot).surfaces
    scenario = Scenario(robot=opts.robot, formulation=opts.formulation, duration=opts.total,
                        velocity=(opts.speed, 0.0, 0.0), gait=trot, trot_start=t0, trot_stop=t1,
                        friction=opts.friction, compliant=opts.compliant, crouch=opts.crouch,
                        terrain=opts.terrain, terrain_seed=opts.terrain_seed, ramp_slope_deg=opts.ramp_slope,
                        block_height_m=opts.block_height,
                        terrain_known=not opts.blind,
                        task=opts.task, balance=opts.balance,
                        compiled=True)  # as the node's compiled loop: the gait's tick included
    run = run_scenario(scenario, progress=lambda p: log(
        f"  t={p['t']:5.1f} s  x={p['x']:+.3f} m  speed={p['speed']:+.3f} m/s  ticks={p['ticks']}  "
        f"misses={p['misses']}"))
    trace = run.trace
    _write_mcap_from_trace(trace, opts, out / "demo.mcap")
    extra = {"fell": run.metrics["fell"], "fall_time": run.metrics.get("fall_time_s"),
             "tick_source": "perf_counter around the controller's tick (compiled), every tick",
             "real_time_factor": run.metrics["real_time_factor"]}
    return trace, extra


def _write_mcap_from_trace(trace: Trace, opts: DemoOptions, path: Path) -> None:
    """The lock-step run as the ROS topics the ROS demo records (same names and types)."""
    from .recording import McapRecorder

    model = robots.load(opts.robot)
    pm = model.pin_model
    data = pm.createData()
    try:  # real message classes + rclpy's C serializer when ROS 2 is installed (fast)
        from geometry_msgs.msg import Twist, WrenchStamped
        from nav_msgs.msg import Odometry
        from rclpy.serialization import serialize_message
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        have_ros = True
    except ImportError:
        have_ros = False
    stride = 1 if have_ros else 10  # the pure-Python encoder: 100 Hz is what it can do

    def msg(obj_cls, d):
        return obj_cls() if have_ros else d

    # simulated time starts at 0: stamp the log at the wall time the file is written
    with McapRecorder(path, time_offset_ns=time.time_ns()) as rec:
        def put(topic, datatype, m):
            if have_ros:
                rec.write_cdr(topic, datatype, serialize_message(m), t_ns)
            else:
                rec.write(topic, datatype, m, t_ns)

        cmd_prev = None
        t0, t1 = opts.trot_window
        for n in range(0, trace.n, stride):
            t = float(trace.t[n])
            t_ns = int(round(t * 1e9))
            sec, nsec = divmod(t_ns, 1_000_000_000)
            q, v = trace.q[n], trace.v[n]
            cmd = opts.speed if t0 <= t < t1 else 0.0
            if have_ros:
                js = JointState()
                js.header.stamp.sec, js.header.stamp.nanosec = sec, nsec
                js.name = list(model.joint_names)
                js.position = q[model.joint_q_index].tolist()
                js.velocity = v[6:].tolist()
                js.effort = trace.tau[n].tolist()
                put("/joint_states", "sensor_msgs/msg/JointState", js)
                od = Odometry()
                od.header.stamp = js.header.stamp
                od.header.frame_id, od.child_frame_id = "odom", "base"
                p, r = od.pose.pose.position, od.pose.pose.orientation
                p.x, p.y, p.z = map(float, q[:3])
                r.x, r.y, r.z, r.w = map(float, q[3:7])
                tw = od.twist.twist
                tw.linear.x, tw.linear.y, tw.linear.z = map(float, v[:3])
                tw.angular.x, tw.angular.y, tw.angular.z = map(float, v[3:6])
                put("/odom", "nav_msgs/msg/Odometry", od)
                c = Float64MultiArray()
                c.data = trace.tau[n].tolist()
                put(COMMAND_TOPIC, "std_msgs/msg/Float64MultiArray", c)
                cs = Float64MultiArray()
                cs.data = trace.contact[n].astype(float).tolist()
                put(CONTACT_STATES_TOPIC, "std_msgs/msg/Float64MultiArray", cs)
                ref = JointState()
                ref.header.stamp = js.header.stamp
                ref.name = list(model.joint_names)
                ref.position = trace.q_ref[n].tolist()
                ref.velocity = trace.v_ref[n].tolist()
                put(f"/{CONTROLLER}/reference", "sensor_msgs/msg/JointState", ref)
                pin.framesForwardKinematics(pm, data, q)
                for i, frame in enumerate(model.contact_frames):
                    R = data.oMf[model.contact_frame_ids[i]].rotation
                    for topic, f, frame_id in ((f"/{BRIDGE}/contact_wrench/{frame}", trace.f_meas[n, i], "odom"),
                                               (f"/{CONTROLLER}/contact_wrench/{frame}",
                                                R.T @ trace.f_pred[n, i], frame)):
                        w = WrenchStamped()
                        w.header.stamp = js.header.stamp
                        w.header.frame_id = frame_id
                        w.wrench.force.x, w.wrench.force.y, w.wrench.force.z = map(float, f)
                        put(topic, "geometry_msgs/msg/WrenchStamped", w)
                if cmd != cmd_prev:
                    twist = Twist()
                    twist.linear.x = float(cmd)
                    put("/cmd_vel", "geometry_msgs/msg/Twist", twist)
            else:
                stamp = {"sec": sec, "nanosec": nsec}
                hdr = {"stamp": stamp, "frame_id": ""}
                put("/joint_states", "sensor_msgs/msg/JointState",
                    {"header": hdr, "name": list(model.joint_names), "position": q[model.joint_q_index].tolist(),
                     "velocity": v[6:].tolist(), "effort": trace.tau[n].tolist()})
                put(COMMAND_TOPIC, "std_msgs/msg/Float64MultiArray",
                    {"layout": {"dim": [], "data_offset": 0}, "data": trace.tau[n].tolist()})
                for i, frame in enumerate(model.contact_frames):
                    for topic, f in ((f"/{BRIDGE}/contact_wrench/{frame}", trace.f_meas[n, i]),
                                     (f"/{CONTROLLER}/contact_wrench/{frame}", trace.f_pred[n, i])):
                        put(topic, "geometry_msgs/msg/WrenchStamped",
                            {"header": {"stamp": stamp, "frame_id": "odom"},
                             "wrench": {"force": dict(zip("xyz", map(float, f))),
                                        "torque": {"x": 0.0, "y": 0.0, "z": 0.0}}})
            cmd_prev = cmd


# ====================================================================== with ROS
def controller_params(opts: DemoOptions) -> dict[str, Any]:
    """The controller node's parameters for the demo (ROS 2 params-file layout)."""
    spec = robots.spec(opts.robot)
    model = robots.load(spec)
    params = {
        # the robot file's description, explicit (so any robot file works, shipped or not)
        "robot": spec.name,
        "urdf_path": str(spec.urdf_path()),
        "package_dirs": [str(d) for d in spec.search_dirs()],
        "contacts": {"frames": list(spec.contact_frames), "friction": float(min(opts.friction, 10.0))},
        "standing_pose": {"joints": list(spec.standing_joints),
                          "positions": [float(v) for v in spec.standing_joints.values()]},
        "formulation": opts.formulation,
        "update_rate": 1000.0,
        # one tick per /joint_states (lock-step with the bridge), every routine tick compiled:
        # the gait, contact switches and the monitoring run in the loop's C++ thread
        "loop_mode": "native",
        # lock-step in simulated time: the bridge and the recorder share the machine with the
        # controller, so only its loop thread is raised (not the middleware's), memory unlocked
        "middleware_priority": 0,
        "lock_memory": False,
        "autostart": True,
        "use_sim_time": True,
        "command_topic": COMMAND_TOPIC,
        "command_joints": list(model.joint_names),
        "odom_twist_frame": "child",
        "watchdog_timeout": 2.0,     # wall seconds: lock-step in simulated time, a loaded machine stalls
        # input gaps bridged on the predicted state: the robot file's (measured in simulated
        # time by the node, so a lock-step step that waits is no gap)
        "prediction_horizon": float(config.robot_parameter(spec, "prediction_horizon")),
        # the robot file's gait (as the lock-step runner's); /cmd_vel comes from the recorder
        # at 20 Hz (wall): a stall of it must not stop the trot
        "gait": {**{k: float(v) if config.SPEC[f"gait.{k}"].type == config.DOUBLE else v
                    for k, v in spec.gait.items()}, "cmd_vel_timeout": 2.0},
        "monitor_rate_hz": 1000.0,   # predicted wrenches and ~/state every tick, for scoring
        "diagnostics_rate_hz": 2.0,
    }
    if not spec.contact_frames:  # a parameter file cannot type an empty list
        del params["contacts"]["frames"]
    if spec.surfaces:  # flat feet: one polygon for every sole link (ContactSurface.from_flat)
        params["contacts"]["surfaces"] = {"links": [s.link for s in spec.surfaces],
                                          "corners": [float(x) for c in spec.surfaces[0].corners for x in c]}
    if opts.task == "balance":  # the gait node runs the lock-step loop's BalanceTask
        params["gait"]["task"] = "balance"
        default = BalanceConfig()  # ROS types are strict: 1 is no double
        params["gait"]["balance"] = {k: type(getattr(default, k))(v) for k, v in asdict(opts.balance_config).items()}
    if spec.effort_limit:
        params["effort_limit"] = float(spec.effort_limit)
    # the robot's gains and its defaults of this formulation's options, as the lock-step
    # runner uses them; ROS parameter files reject an empty mapping: only non-empty ones
    if spec.controller:
        params["controller"] = {k.split(".", 1)[1]: v for k, v in spec.controller.items()}
    options = spec.formulation_options(opts.formulation)
    if options:
        params["formulation_defaults"] = {opts.formulation: options}
    if opts.faults is not None:
        faults = Faults.from_dict(dict(opts.faults))
        params["command_topic"] = f"/{RELAY}/commands"  # the relay passes the commands on
        # a gap: the relay paces it in wall time, the node bridges it on its prediction (measured
        # in simulated time too) and the watchdog keeps the demo's 2 s: a 50 ms wall-clock one
        # tripped on this machine's stalls of the lock-step loop (the stand cell: 200 s without
        # input once), and its reset mid-stride threw the trotting robot. The safe output after
        # the horizon is tested on the node itself (test_ros_node)
        if faults.gap is not None and faults.prediction_horizon == 0.0:
            params["watchdog_timeout"] = faults.watchdog_timeout  # no prediction: the watchdog's gap
        if faults.prediction_horizon is not None:
            params["prediction_horizon"] = float(faults.prediction_horizon)
    return {CONTROLLER: {"ros__parameters": params}}


def _fault_processes(opts: DemoOptions, out: Path, params: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """With faults: (the bridge's extra arguments, the controller's remaps, the relay's
    command line); the controller's URDF gets the mass error (written to ``out``)."""
    faults = Faults.from_dict(dict(opts.faults))
    faults.validate()
    bridge: list[str] = []
    if faults.push is not None:
        bridge += ["-p", f"push:={[float(x) for x in faults.push]}",
                   "-p", f"push_direction:={[float(x) for x in faults.push_direction]}"]
    if faults.mass_error:
        p = params[CONTROLLER]["ros__parameters"]
        urdf = out / f"model_mass{100 * faults.mass_error:+.0f}pct.urdf"
        text = p["urdf_path"] if p["urdf_path"].lstrip().startswith("<") else Path(p["urdf_path"]).read_text()
        urdf.write_text(scaled_urdf(text, 1.0 + faults.mass_error))
        p["urdf_path"] = str(urdf.resolve())
    defaults = Faults()
    relay_fields = {k: v for k, v in asdict(faults).items() if k in RELAY_FAULTS and v != getattr(defaults, k)}
    # the relay's watchdog counts model the controller's: with its prediction horizon
    relay_fields["prediction_horizon"] = params[CONTROLLER]["ros__parameters"]["prediction_horizon"]
    remaps = ["-r", f"/joint_states:=/{RELAY}/joint_states", "-r", f"/odom:=/{RELAY}/odom",
              "-r", f"~/contact_states:=/{RELAY}/contact_states"]
    relay = [sys.executable, "-m", "idyn_control.ros.fault_relay", "--ros-args",
             "-p", f"faults:='{json.dumps(relay_fields)}'", "-p", f"contact_states_in:={CONTACT_STATES_TOPIC}",  # quoted: a YAML string
             "-p", f"command_out:={COMMAND_TOPIC}"]
    return bridge, remaps, relay


def _free_domain_id() -> int:
    return random.Random(os.getpid() ^ time.time_ns()).randint(100, 230)


def set_remote_parameter(node, spin: Callable[[], None], target: str, name: str, value: bool, timeout: float,
                         dead: Callable[[], str | None] = lambda: None) -> str | None:
    """Set the bool parameter ``name`` of the node ``target`` through its SetParameters
    service, asked again every second until it answers (a response can be lost while DDS
    discovery is still settling); ``spin`` runs ``node``'s callbacks once, ``dead`` names a
    process that died meanwhile. Returns None, or why it was not set."""
    from rcl_interfaces.msg import Parameter as ParameterMsg, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    end = time.monotonic() + timeout
    client = node.create_client(SetParameters, f"/{target}/set_parameters")
    request = SetParameters.Request(parameters=[ParameterMsg(
        name=name, value=ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value))])
    future, asked = None, 0.0
    try:
        while time.monotonic() < end:
            spin()
            died = dead()
            if died:
                return died
            if not client.service_is_ready():
                continue
            if future is not None and future.done():
                result = future.result()
                if result is not None and result.results[0].successful:
                    return None
                future = None
            if future is None or time.monotonic() - asked > 1.0:
                if future is not None:
                    client.remove_pending_request(future)
                future, asked = client.call_async(request), time.monotonic()
        return f"{target} did not set {name} within {timeout:g} s"
    finally:
        node.destroy_client(client)


def _unpause_when_matched(node, executor, matched: dict[str, Callable[[], bool]], procs, timeout: float) -> str | None:
    """Spin until every check in ``matched`` holds, then set the bridge's ``paused`` false.
    Returns a failure, or None."""
    end = time.monotonic() + timeout
    spin = lambda: executor.spin_once(timeout_sec=0.02)  # noqa: E731

    def dead() -> str | None:
        names = [name for name, p in procs.items() if p.poll() is not None]
        return f"{', '.join(names)} exited before the physics started" if names else None

    while not all(check() for check in matched.values()):
        if time.monotonic() > end:
            waiting = [name for name, check in matched.items() if not check()]
            return f"the nodes did not discover each other within {timeout:g} s (unmatched: {', '.join(waiting)})"
        spin()
        died = dead()
        if died:
            return died
    return set_remote_parameter(node, spin, BRIDGE, "paused", False, max(end - time.monotonic(), 1.0), dead)


def _run_ros(opts: DemoOptions, out: Path, log) -> tuple[Trace, dict[str, Any]]:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist, WrenchStamped
    from nav_msgs.msg import Odometry
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    import yaml

    from .ros.conversions import cdr_stamp_ns

    model = robots.load(opts.robot)
    domain = opts.domain_id if opts.domain_id is not None else int(os.environ.get("IDYN_DEMO_DOMAIN_ID", 0)) \
        or _free_domain_id()
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED="1")
    params = out / "controller_params.yaml"
    ctrl_params = controller_params(opts)
    fault_bridge, fault_remaps, relay_cmd = _fault_processes(opts, out, ctrl_params) if opts.faults is not None else ([], [], None)
    params.write_text(yaml.safe_dump(ctrl_params, sort_keys=False))
    friction = opts.friction if math.isfinite(opts.friction) else 1e3
    bridge_cmd = [sys.executable, "-m", "idyn_control.ros.sim_bridge_node", "--ros-args",
                  "-p", f"robot:={opts.robot}", "-p", "real_time:=false", "-p", "lockstep:=true", "-p", "paused:=true",
                  "-p", f"spawn_crouch:={opts.crouch}", "-p", f"friction:={float(friction)}",
                  "-p", f"compliant:={str(opts.compliant).lower()}",
                  "-p", f"terrain:={opts.terrain}", "-p", f"terrain_seed:={int(opts.terrain_seed)}",
                  "-p", f"ramp_slope:={float(opts.ramp_slope)}",
                  "-p", f"block_height:={float(opts.block_height or 0.0)}",
                  "-p", f"publish_ground:={str(not opts.blind).lower()}",
                  "-p", f"contact_states_topic:={CONTACT_STATES_TOPIC}", "-p", f"command_topic:={COMMAND_TOPIC}",
                  *fault_bridge]
    ctrl_cmd = [sys.executable, "-m", "idyn_control.ros.gait_controller_node", "--ros-args",
                "--params-file", str(params), *fault_remaps]
    if opts.formulation == "sensed":  # the bridge's contact forces (world frame, odom) for ID(t_{i-1})
        for frame in model.contact_frames:
            ctrl_cmd += ["-r", f"~/measured_wrench/{frame}:=/{BRIDGE}/contact_wrench/{frame}"]
    if opts.terrain != "plane" and not opts.blind:  # the map's normal and μ under the feet
        ctrl_cmd += ["-r", f"~/contact_ground:=/{BRIDGE}/contact_ground"]
    logs = {name: open(out / f"{name}.log", "w") for name in ("bridge", "controller", "relay")[:3 if relay_cmd else 2]}
    procs = {"bridge": subprocess.Popen(bridge_cmd, env=env, stdout=logs["bridge"], stderr=subprocess.STDOUT)}
    if relay_cmd:
        procs["relay"] = subprocess.Popen(relay_cmd, env=env, stdout=logs["relay"], stderr=subprocess.STDOUT)

    # the recorder yields the CPU to the bridge and the controller (the lock-step cycle):
    # it only has to keep up on average, the subscriptions buffer 2000 messages each
    os.nice(max(0, RECORDER_NICE - os.nice(0)))  # once: runs in one process (experiments) do not add up
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("idyn_demo", context=context)
    qos = QoSProfile(depth=2000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
    topics: dict[str, tuple[type, str]] = {
        "/joint_states": (JointState, "sensor_msgs/msg/JointState"),
        "/odom": (Odometry, "nav_msgs/msg/Odometry"),
        COMMAND_TOPIC: (Float64MultiArray, "std_msgs/msg/Float64MultiArray"),
        CONTACT_STATES_TOPIC: (Float64MultiArray, "std_msgs/msg/Float64MultiArray"),
        f"/{CONTROLLER}/state": (JointState, "sensor_msgs/msg/JointState"),
        f"/{CONTROLLER}/reference": (JointState, "sensor_msgs/msg/JointState"),
        "/diagnostics": (DiagnosticArray, "diagnostic_msgs/msg/DiagnosticArray"),
        f"/{BRIDGE}/status": (DiagnosticArray, "diagnostic_msgs/msg/DiagnosticArray"),
        "/cmd_vel": (Twist, "geometry_msgs/msg/Twist"),
    }
    for frame in model.contact_frames:
        topics[f"/{BRIDGE}/contact_wrench/{frame}"] = (WrenchStamped, "geometry_msgs/msg/WrenchStamped")
        topics[f"/{CONTROLLER}/contact_wrench/{frame}"] = (WrenchStamped, "geometry_msgs/msg/WrenchStamped")
    if relay_cmd:  # what the controller commanded (before the relay) and the relay's counts
        topics[f"/{RELAY}/commands"] = (Float64MultiArray, "std_msgs/msg/Float64MultiArray")
        topics[f"/{RELAY}/status"] = (DiagnosticArray, "diagnostic_msgs/msg/DiagnosticArray")
    from .recording import McapRecorder, qos_yaml, rclpy_qos

    sim = {"t_ns": 0, "heard": False, "odom": None, "started": 0.0}
    # the run keeps the raw messages (CDR bytes) with their simulated time and nothing else:
    # the MCAP and the per-tick trace are made from them afterwards, so the recorder keeps
    # up with the 1 kHz topics without taking the machine from the nodes
    records: list[tuple[str, int, bytes]] = []
    channel_qos: dict[str, str] = {}  # the publishers' offered QoS, asked once at the first message

    def make_cb(topic):
        def cb(data: bytes) -> None:
            sim["heard"] = True
            if topic not in channel_qos:
                offers = [rclpy_qos(e.qos_profile) for e in node.get_publishers_info_by_topic(topic)]
                channel_qos[topic] = qos_yaml(offers or [{}])
            if topic == "/odom":  # the simulated time: its stamp (the bridge publishes the
                # step's odometry before its contact estimates, wrenches and joint states)
                sim["odom"] = data  # for the progress line
                sim["t_ns"] = cdr_stamp_ns(data)
                if not sim["started"] and sim["t_ns"] > 0:
                    sim["started"] = time.monotonic()  # the physics runs (real-time factor from here)
            records.append((topic, sim["t_ns"], data))
        return cb

    for topic, (cls, _) in topics.items():
        node.create_subscription(cls, topic, make_cb(topic), qos, raw=True)

    cmd_pub = node.create_publisher(Twist, "/cmd_vel", 10)
    # the teleop's clock: the newest /clock, taken directly from a depth-1 subscription of a
    # node no executor spins. The simulated time of the recordings lags behind on a loaded
    # machine (the executor works through its queue of 1 kHz messages, this process niced):
    # a /cmd_vel decided on it started the trot up to 2 s late (speed 0.12 of 0.2 m/s)
    clock_node = rclpy.create_node("idyn_demo_clock", context=context)
    clock_sub = clock_node.create_subscription(
        Clock, "/clock", lambda _: None,
        QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT), raw=True)

    def newest_sim_ns(last: int) -> int:
        while True:
            with clock_sub.handle:
                taken = clock_sub.handle.take_message(Clock, True)
            if taken is None or taken[0] is None:
                return last
            last = max(last, cdr_stamp_ns(taken[0]))
    diag: dict[str, dict[str, str]] = {}

    def on_diag(msg: DiagnosticArray) -> None:
        for s in msg.status:
            diag[s.name.split(":")[0]] = {kv.key: kv.value for kv in s.values}

    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, qos)
    node.create_subscription(DiagnosticArray, f"/{BRIDGE}/status", on_diag, qos)
    if relay_cmd:
        node.create_subscription(DiagnosticArray, f"/{RELAY}/status", on_diag, qos)
    from rclpy.experimental import EventsExecutor
    from rclpy.serialization import deserialize_message

    executor = EventsExecutor(context=context)  # dispatches the 1 kHz callbacks at a fraction of the cost
    executor.add_node(node)
    # the bridge starts paused and re-publishes its state: once this recorder hears it,
    # start the controller (whose first command starts the physics), so no tick is missed
    wait_start = time.monotonic()
    while not sim["heard"] and time.monotonic() - wait_start < 60.0 and procs["bridge"].poll() is None:
        executor.spin_once(timeout_sec=0.05)
    procs["controller"] = subprocess.Popen(ctrl_cmd, env=env, stdout=logs["controller"], stderr=subprocess.STDOUT)
    log(f"  ROS_DOMAIN_ID={domain}: idyn_sim (pid {procs['bridge'].pid}) up, started idyn_gait_controller "
        f"(pid {procs['controller'].pid})" + (f" behind {RELAY} (pid {procs['relay'].pid}, faults "
                                              f"{opts.faults})" if relay_cmd else "") + f"; logs in {out}/")
    # the bridge holds the physics (paused) until this process is matched with every node: the
    # gait node's /cmd_vel subscription and the controller's (and relay's) topics. DDS discovery
    # can take seconds on a loaded machine (a lost announcement waits for the next one); before,
    # such a run trotted late or not at all, and the recorder missed its start
    matched = {"/cmd_vel → gait node": lambda: cmd_pub.get_subscription_count() > 0,
               f"/{CONTROLLER}/state": lambda: node.count_publishers(f"/{CONTROLLER}/state") > 0}
    if relay_cmd:
        matched[f"/{RELAY}/commands"] = lambda: node.count_publishers(f"/{RELAY}/commands") > 0
    failure = _unpause_when_matched(node, executor, matched, procs, timeout=DISCOVERY_TIMEOUT_S)
    t0, t1 = opts.trot_window
    total_ns = int(opts.total * 1e9)
    wall_start = time.monotonic()
    next_print, last_x, last_cmd_pub, clock_ns = 1.0, 0.0, 0.0, 0
    gc.disable()  # the records list grows by ~15k objects a second: no collections meanwhile
    try:
        while failure is None and sim["t_ns"] < total_ns:
            executor.spin_once(timeout_sec=0.01)
            now = time.monotonic()
            t = sim["t_ns"] * 1e-9
            if now - last_cmd_pub > 0.05 and opts.task == "trot":  # 20 Hz (wall), like a joystick teleop
                clock_ns = newest_sim_ns(max(clock_ns, sim["t_ns"]))
                twist = Twist()
                twist.linear.x = float(opts.speed) if t0 <= clock_ns * 1e-9 < t1 else 0.0
                cmd_pub.publish(twist)
                last_cmd_pub = now
            if t >= next_print:
                ctrl = diag.get(CONTROLLER, {})
                x = deserialize_message(sim["odom"], Odometry).pose.pose.position.x if sim["odom"] else 0.0
                log(f"  t={t:5.1f} s  x={x:+.3f} m  speed={x - last_x:+.3f} m/s  "
                    f"ticks={ctrl.get('ticks', '?')}  misses={ctrl.get('deadline_misses', '?')}  "
                    f"(wall {now - wall_start:.0f} s)")
                last_x = x
                next_print += 1.0
            dead = [name for name, p in procs.items() if p.poll() is not None]
            if dead:
                failure = f"{', '.join(dead)} exited early (see {out}/{dead[0]}.log)"
                break
            if now - wall_start > opts.wall_timeout:
                failure = f"wall-clock timeout after {opts.wall_timeout:g} s at t = {t:.2f} s"
                break
            if sim["t_ns"] == 0 and now - wall_start > 60.0:
                failure = "no simulated time after 60 s: the bridge or the controller did not start"
                break
    finally:
        wall_end = time.monotonic()
        sim_end_ns = sim["t_ns"]
        gc.enable()
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs.values():
            f.close()
        # the last diagnostics, some published as the nodes stopped
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            executor.spin_once(timeout_sec=0.05)
        executor.shutdown()
        clock_node.destroy_node()
        node.destroy_node()
        rclpy.shutdown(context=context)
    if failure:
        log(f"  demo: {failure}")
    # log time: the simulated time at arrival + the wall time the simulation started at
    builder = _TraceBuilder(topics, model, opts)
    with McapRecorder(out / "demo.mcap", time_offset_ns=time.time_ns()) as mcap:
        for topic, t_ns, data in records:
            mcap.write_cdr(topic, topics[topic][1], data, t_ns, qos=channel_qos.get(topic))
            builder.add(topic, t_ns, data)
    trace, fell, fall_time = builder.finish()
    extra: dict[str, Any] = {"fell": fell, "fall_time": fall_time, "ros_domain_id": domain,
                             "tick_source": "controller node /diagnostics (compute time, last 4096 ticks)"}
    if sim["started"]:  # simulated time over the wall time it took, from the first step on
        extra["real_time_factor"] = sim_end_ns * 1e-9 / max(wall_end - sim["started"], 1e-9)
    ctrl = diag.get(CONTROLLER, {})
    for key, name in (("compute_p50_us", "tick_p50_us"), ("compute_p99_us", "tick_p99_us"),
                      ("compute_max_us", "tick_max_us"), ("deadline_misses", "deadline_misses"),
                      ("ticks", "controller_ticks"), ("input_to_command_p99_us", "input_to_command_p99_us"),
                      ("input_to_command_max_us_all", "input_to_command_max_us")):
        if key in ctrl:
            extra[name] = float(ctrl[key]) if name != "deadline_misses" else int(float(ctrl[key]))
    compiled, python = (float(ctrl.get(f"native_loop.{k}", "nan")) for k in ("compiled_ticks", "python_ticks"))
    if compiled + python > 0:  # the controller's ticks that ran compiled (loop_mode native)
        extra["compiled_tick_fraction"] = compiled / (compiled + python)
    sources = [k for k in ctrl if k.startswith("source.") and k != "source.formulation"]
    if sources:  # ticks where the safety layer replaced the formulation's torque
        extra["fallback_ticks"] = int(sum(float(ctrl[k]) for k in sources))
    bridge = diag.get(BRIDGE, {})
    for key in ("steps", "commands", "timeouts", "lockstep_timeouts", "rejected_length", "rejected_nonfinite",
                "ground_messages"):
        if key in bridge:
            extra[f"bridge_{key}"] = int(float(bridge[key]))
    for key, value in ctrl.items():  # inputs the controller refused (/diagnostics dropped.<input>.<reason>)
        if key.startswith("dropped.") or key in ("watchdog_trips", "rejected_parameters", "input_gaps",
                                                 "predicted_ticks", "prediction_expired", "ground_updates"):
            extra[f"controller_{key}"] = int(float(value))
    if relay_cmd:
        extra["relay"] = {k: int(float(v)) for k, v in diag.get(RELAY, {}).items()}
        extra["bridge_push_steps"] = int(float(bridge.get("push_steps", 0)))
    extra.update(_command_safety(records, model, [COMMAND_TOPIC] + ([f"/{RELAY}/commands"] if relay_cmd else [])))
    if failure:
        extra["failure"] = failure
    return trace, extra


def _command_safety(records, model, topics: list[str]) -> dict[str, int]:
    """Commands seen on ``topics`` and how many were unsafe: a NaN/inf entry, the wrong
    length, or a torque beyond the model's effort limits."""
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import Float64MultiArray

    wanted = set(topics)
    seen = unsafe = 0
    for topic, _, data in records:
        if topic not in wanted:
            continue
        tau = np.asarray(deserialize_message(data, Float64MultiArray).data, dtype=float)
        seen += 1
        unsafe += bool(tau.size != model.na or not np.isfinite(tau).all()
                       or np.any(np.abs(tau) > model.tau_max + 1e-9))
    return {"commands_checked": seen, "unsafe_commands": unsafe}


class _TraceBuilder:
    """Per-tick arrays from the recorded topics, filled message by message.

    Ticks are indexed by the stamps (simulated time): the bridge stamps the state of tick
    k with t_k and the force it applied over [t_k, t_k+1] with t_k+1; the controller
    stamps ~/state, ~/reference and its predicted wrenches with the input's stamp t_k;
    the unstamped contact estimates arrive just before /joint_states of their tick.
    """

    def __init__(self, topics, model, opts: DemoOptions):
        from rclpy.serialization import deserialize_message

        self._deserialize = deserialize_message
        self.topics, self.model, self.opts = topics, model, opts
        self.dt = 1e-3
        self.n = n = int(round(opts.total / self.dt)) + 2
        k, na = len(model.contacts), model.na
        self.trace = Trace.allocate(n, model.nq, model.nv, na, k, robot=opts.robot, formulation=opts.formulation)
        self.have_js = np.zeros(n, dtype=bool)
        self.have_odom = np.zeros(n, dtype=bool)
        self.have_pred = np.zeros(n, dtype=bool)
        self.meas_count = np.zeros(n, dtype=int)  # the bridge's contact wrenches of each tick received
        self.pred_count = np.zeros(n, dtype=int)  # the controller's predicted wrenches of each tick received
        self.have_ref = np.zeros(n, dtype=bool)
        self.pred_local = np.zeros((n, k, 3))
        self.frame_index = {f: i for i, f in enumerate(model.contact_frames)}
        self._joint_index: dict[tuple, list[int]] = {}

    def _tick(self, stamp) -> int:
        i = int(round((stamp.sec + stamp.nanosec * 1e-9) / self.dt))
        return i if 0 <= i < self.n else -1

    def _order(self, names) -> list[int]:
        key = tuple(names)
        if key not in self._joint_index:
            self._joint_index[key] = [key.index(j) for j in self.model.joint_names]
        return self._joint_index[key]

    def add(self, topic: str, t_ns: int, raw: bytes) -> None:
        tr, m_ = self.trace, self.model
        if topic == "/joint_states":
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp)
            if i >= 0:
                idx = self._order(msg.name)
                tr.q[i, m_.joint_q_index] = np.asarray(msg.position)[idx]
                tr.v[i, 6:] = np.asarray(msg.velocity)[idx]
                self.have_js[i] = True
        elif topic == "/odom":
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp)
            if i >= 0:
                p, r = msg.pose.pose.position, msg.pose.pose.orientation
                tr.q[i, :7] = (p.x, p.y, p.z, r.x, r.y, r.z, r.w)
                lin, ang = msg.twist.twist.linear, msg.twist.twist.angular
                tr.v[i, :6] = (lin.x, lin.y, lin.z, ang.x, ang.y, ang.z)
                self.have_odom[i] = True
        elif topic == f"/{CONTROLLER}/state":
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp)
            if i >= 0:
                tr.tau[i] = np.asarray(msg.effort)[self._order(msg.name)]
        elif topic == f"/{CONTROLLER}/reference":
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp)
            if i >= 0:
                tr.q_ref[i] = msg.position
                tr.v_ref[i] = msg.velocity
                self.have_ref[i] = True
        elif topic == CONTACT_STATES_TOPIC:
            msg = self._deserialize(raw, self.topics[topic][0])
            i = int(round(t_ns * 1e-9 / self.dt))
            if 0 <= i < self.n and len(msg.data) == len(self.frame_index):
                tr.contact[i] = np.asarray(msg.data) > 0.5
        elif topic.startswith(f"/{BRIDGE}/contact_wrench/"):
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp) - 1  # the force over the period after tick i
            if 0 <= i < self.n:
                f = msg.wrench.force
                tr.f_meas[i, self.frame_index[topic.rsplit("/", 1)[1]]] = (f.x, f.y, f.z)
                self.meas_count[i] += 1
        elif topic.startswith(f"/{CONTROLLER}/contact_wrench/"):
            msg = self._deserialize(raw, self.topics[topic][0])
            i = self._tick(msg.header.stamp)
            if i >= 0:
                f = msg.wrench.force
                self.pred_local[i, self.frame_index[topic.rsplit("/", 1)[1]]] = (f.x, f.y, f.z)
                self.have_pred[i] = True
                self.pred_count[i] += 1

    def finish(self) -> tuple[Trace, bool, float | None]:
        """The trace of the ticks that have a state; fall detection as in the lock-step runner."""
        from .sim.lockstep import FALL_HEIGHT_FRACTION, FALL_TILT_RAD

        tr, model, opts = self.trace, self.model, self.opts
        pm, data = model.pin_model, model.pin_model.createData()
        ticks = np.flatnonzero(self.have_js & self.have_odom)
        # a tick the controller did not run (its input lost, as under injected faults) or whose
        # reference the recorder missed: the reference it held, the last one it published
        have = np.flatnonzero(self.have_ref)
        if have.size:
            last = np.maximum.accumulate(np.where(self.have_ref, np.arange(self.n), have[0]))
            tr.q_ref[:] = tr.q_ref[last]
            tr.v_ref[:] = tr.v_ref[last]
        for i in np.flatnonzero(self.have_pred & self.have_js & self.have_odom):
            pin.framesForwardKinematics(pm, data, tr.q[i])  # contact frame → world
            for c, fid in enumerate(model.contact_frame_ids):
                tr.f_pred[i, c] = data.oMf[fid].rotation @ self.pred_local[i, c]
        tr.t = ticks * self.dt
        for name in ("q", "v", "q_ref", "v_ref", "tau", "f_pred", "f_meas", "contact", "planned_stance",
                     "base_ref", "tick_s", "fallback"):
            setattr(tr, name, getattr(tr, name)[ticks])
        tr.n = ticks.size
        tr.meta["lost_states"] = int(ticks[-1] + 1 - ticks.size) if ticks.size else 0
        # ticks whose every measured wrench arrived (the recorder may lose some under load)
        k = len(self.frame_index)
        tr.meta["measured_complete"] = self.meas_count[ticks] == k
        tr.meta["forces_complete"] = tr.meta["measured_complete"] & (self.pred_count[ticks] == k)
        fell, fall_time = False, None
        if ticks.size:
            pin.framesForwardKinematics(pm, data, tr.q[0])
            ground = float(np.mean([data.oMf[f].translation[2] for f in model.contact_frame_ids]))
            z_stand = tr.q[0, 2] + opts.crouch  # it spawned crouched
            low = tr.q[:, 2] - ground < FALL_HEIGHT_FRACTION * (z_stand - ground)
            up = np.array([1.0 - 2.0 * (q[3] ** 2 + q[4] ** 2) for q in tr.q])  # R[2, 2]
            bad = np.flatnonzero(low | (up < math.cos(FALL_TILT_RAD)))
            if bad.size:
                fell, fall_time = True, float(tr.t[bad[0]])
        return tr, fell, fall_time


# ====================================================================== plot
def plot(trace: Trace, opts: DemoOptions, path: Path) -> None:
    """Torques, predicted vs simulated contact forces, base motion and path (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = robots.load(opts.robot)
    t = trace.t[:trace.n]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8), constrained_layout=True)
    ax = axes[0, 0]
    for j, name in enumerate(model.joint_names):
        ax.plot(t, trace.tau[:trace.n, j], lw=0.6, label=name)
    ax.set(title=f"joint torque commands ({opts.formulation})", xlabel="t [s]", ylabel="τ [N·m]")
    ax.legend(fontsize=6, ncol=4, loc="upper right")
    ax = axes[0, 1]
    pred = trace.f_pred[:trace.n, :, 2].copy()
    meas = trace.f_meas[:trace.n, :, 2].copy()
    complete = trace.meta.get("forces_complete")
    if complete is not None:  # a lost message is no force: leave a gap
        pred[~complete], meas[~complete] = np.nan, np.nan
    ax.plot(t, meas.sum(axis=1), lw=0.8, color="k", label="Σ normal, MuJoCo (measured)")
    ax.plot(t, pred.sum(axis=1), lw=0.8, color="tab:red", alpha=0.8, label="Σ normal, predicted")
    ax.plot(t, meas[:, 0], lw=0.5, color="tab:gray", label=f"{model.contact_frames[0]} measured")
    ax.plot(t, pred[:, 0], lw=0.5, color="tab:orange", alpha=0.8, label=f"{model.contact_frames[0]} predicted")
    ax.set(title="contact normal forces: predicted vs simulator", xlabel="t [s]", ylabel="f_n [N]")
    ax.legend(fontsize=7, loc="upper right")
    ax = axes[1, 0]
    x = trace.q[:trace.n, 0]
    if opts.task == "balance":  # the weight shifts sideways
        ax.plot(t, trace.q[:trace.n, 1], color="tab:blue", label="base y [m]")
        ax.set(title="base motion", xlabel="t [s]", ylabel="y [m]")
    else:
        ax.plot(t, x, color="tab:blue", label="base x [m]")
        t0, t1 = opts.trot_window
        ref_x = np.clip(t - t0, 0.0, t1 - t0) * opts.speed + x[0]
        ax.plot(t, ref_x, "--", color="tab:blue", lw=0.8, label=f"x of {opts.speed:g} m/s from t={t0:g} s")
        ax.set(title="base motion", xlabel="t [s]", ylabel="x [m]")
    ax2 = ax.twinx()
    ax2.plot(t, trace.q[:trace.n, 2], color="tab:green", lw=0.8, label="base z [m]")
    ax2.set_ylabel("z [m]")
    ax.legend(loc="upper left", fontsize=7)
    ax2.legend(loc="lower right", fontsize=7)
    ax = axes[1, 1]
    ax.plot(trace.q[:trace.n, 0], trace.q[:trace.n, 1], color="tab:blue", label="base path")
    ax.plot(x[0], trace.q[0, 1], "o", color="tab:green", label="start")
    ax.plot(x[-1], trace.q[trace.n - 1, 1], "s", color="tab:red", label="end")
    ax.set(title="base path (top view)", xlabel="x [m]", ylabel="y [m]")
    ax.axis("equal")
    ax.legend(fontsize=7)
    what = ("stand, shift the weight, squat" if opts.task == "balance"
            else f"stand up, trot {opts.speed:g} m/s for {opts.duration:g} s, stop")
    fig.suptitle(f"{opts.robot}: {what} "
                 f"({'ROS 2' if opts.ros else 'lock-step'})")
    fig.savefig(path, dpi=110)
    plt.close(fig)
