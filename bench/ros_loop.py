"""End-to-end timing of the controller node through real DDS, one run per loop design.

    .venv/bin/python bench/ros_loop.py 60 --rounds 3 --json results/ros_loop.json

For each ``loop_mode`` (native, triggered) it starts the node in its own
process (``python -m idyn_control.ros.controller_node`` with a robot YAML) and, in this
process, a 1 kHz publisher of /joint_states, /odom and ~/contact_states (Solo12 standing)
plus subscribers, all in one thread (publishing from the spin loop: no GIL hand-offs
that would distort receive times). Each JointState carries its send time
(CLOCK_MONOTONIC, shared by all processes of the machine) in ``header.stamp``; the node
stamps ``~/state`` with the stamp of the input it used and publishes it right after the
command (``monitor_rate_hz`` = update rate for the run, so every tick yields a two-hop
sample; ``--monitor-rate 50``, the node's default, measures the node as deployed, with
monitoring decimated and two-hop samples only every 20th tick). ``--node-cpus 1`` gives the
node a core of its own (its ``cpu_affinity``) and runs this process on the others.
Three latencies are reported:

- ``in_node_input_to_command_us`` — the quantity issue 4 names, "joint state in → command
  out", measured inside the node: from the moment the node's middleware received the
  /joint_states sample (rmw ``received_timestamp``, stamped by the DDS receive thread) to
  the moment the command computed from it was handed to the middleware (right after
  ``publish()``), both on the system clock (CLOCK_REALTIME, the clock the rmw stamps use).
  Each input counts once, at its first command. Pooled over the measured window from the
  node's cumulative histogram in /diagnostics (``HIST_BIN_US`` bins; each percentile is the
  upper edge of its bin). It includes the executor wake-up and Python dispatch of the
  input, and the tick; it excludes the wire and the
  command's own delivery to the effort controller (which is C++ on a robot).
  ``in_node_split_us`` splits it (last /diagnostics window of each round): dispatch =
  middleware receive → Python callback start, wait = callback start → tick start.
- ``two_hop_latency_us`` = receive time of ``~/state`` here − send time of the JointState it
  was computed from: /joint_states publish → DDS → node → command publish → ``~/state``
  publish → DDS → here. Two DDS hops into Python callbacks plus the ~/state publish: an
  upper bound of the above, not the quantity itself. ``~/state`` is subscribed best effort,
  depth 1, so a receiver backlog is dropped rather than counted as latency.
- ``one_hop_floor_us`` = publish → receive of the bench's own /joint_states in this
  process: what one DDS hop into a Python callback costs under the same load (the two-hop
  path has two of them).
- command period jitter = deviation of the command inter-arrival times from 1/rate.
- receiver gaps = command inter-arrival gaps > 1.5 periods (slots lost as seen here).
- node deadline misses, tick compute time and start lateness come from the node's
  /diagnostics (its own monotonic clock; see idyn_control.ros.loop_stats).

``--scenario trot`` measures the robot while it trots, in closed loop: the node is the gait
controller node (``idyn_control.ros.gait_controller_node``, the same parameters), and this
process simulates the robot in MuJoCo at the rate instead of publishing a standing state:
each period it applies the command that answered the last state, steps the physics (1 ms),
and publishes the state it reached (joint states, odometry, contact estimates from the
simulated normal forces, every period). The state goes out on the period's deadline, or
when the answer comes if it comes later (at most ``LOCKSTEP_WAIT_S``): on a loaded machine
the robot then slows down instead of falling for a late command of this process's own
(its stamps are the simulated clock, the gait's; send times are kept apart for the
latencies). After ``TROT_AFTER_S`` of standing up it commands /cmd_vel
(``--speed`` forward, 20 Hz): feet lift and land, contact estimates switch, and the node's
gait plans swings, footholds and joint references every tick. ``compiled_tick_fraction`` is
the share of the node's ticks in the window that ran compiled (``native``); the JSON also
gives the distance the simulated robot walked in the window and whether it fell.

The first ``--warmup`` seconds of every run are discarded. ``--rounds R`` interleaves the
designs in R rounds so that load drift on a shared machine hits all of them alike; the
in-node latency is reported pooled and per round, with each percentile's median, min and
max over the rounds (``in_node_per_round_us``). There is no peer here: PlaCo ships no ROS
node; its per-tick compute is compared with the project's by ``idyn-control bench``.
``<mode>@<prio>`` runs a design with ``loop_priority`` (SCHED_FIFO), as on a robot (and as
the YAMLs' default, 50); a plain ``<mode>`` runs with ``loop_priority`` 0 (normal scheduling).
``+name=value`` suffixes set more node parameters for that run (``native@50+loop_spin_us=300.0``,
``native@50+middleware_priority=0``), ``+env:NAME=value`` an environment variable of the node
(e.g. a Fast DDS profile: ``+env:FASTDDS_DEFAULT_PROFILES_FILE=config/fastdds_rt.xml``).
Numbers depend on the machine and its load: the JSON names the machine and records the
load average and the time of ``Controller.update`` alone before each round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODES = ("native", "triggered")  # "<mode>@<prio>" adds SCHED_FIFO priority


def percentiles(x, ps=(50, 99, 99.9)):
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return {}
    out = {f"p{p:g}": float(np.percentile(x, p)) for p in ps}
    out["max"] = float(x.max())
    out["mean"] = float(x.mean())
    out["n"] = int(x.size)
    return out


TROT_AFTER_S = 1.5  # trot scenario: stand up this long (wall) before /cmd_vel
LOCKSTEP_WAIT_S = 0.05  # trot scenario: longest wait for the command answering a state


class Simulation:
    """The trot scenario's robot: MuJoCo stepped once per published state with the latest
    command, as the simulation bridge does (idyn_control.ros.sim_bridge_node)."""

    def __init__(self, robot: str, params: str):
        from idyn_control import config, robots
        from idyn_control.sim import build_mujoco
        from idyn_control.sim.lockstep import CONTACT_THRESHOLD_N

        self.model = model = robots.load(robot)
        self.sim = build_mujoco(model, timestep=1e-3)
        q0 = robots.standing_configuration(model, robot, foot_height=self.sim.contacts[0].radius)
        self.sim.set_state(q0, np.zeros(model.nv))
        joints = config.load_params_file(params).get("command_joints") or list(model.joint_names)
        self.cmd_index = model.joint_order(joints)  # command entry i → model joint
        self.tau = np.zeros(model.na)
        self.forces = np.zeros((len(model.contacts), 3))
        self.threshold = CONTACT_THRESHOLD_N
        self.started = False
        self.x0 = float(q0[0])

    def command(self, data) -> None:
        values = np.asarray(data, dtype=float)
        if values.size == self.tau.size and np.isfinite(values).all():
            self.tau[self.cmd_index] = values
            self.started = True  # the physics runs from the first command on

    def step(self):
        """One period (once commanding); returns q, v (Pinocchio conventions), contact mask."""
        if self.started:
            self.sim.step(self.tau)
        q, v = self.sim.state()
        mask = self.sim.contact_forces_array(self.forces)[:, 2] > self.threshold
        return q, v, mask


class Feeder:
    """Publishes the robot's state at ``rate`` Hz and records what comes back."""

    def __init__(self, node, robot: str, rate: float, sim: Simulation | None = None, speed: float = 0.0):
        from nav_msgs.msg import Odometry
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray
        from diagnostic_msgs.msg import DiagnosticArray

        from idyn_control import robots

        model = robots.load(robot)
        q = robots.standing_configuration(model, robot)
        self.node, self.period = node, 1.0 / rate
        self.js = JointState()
        self.js.name = list(model.joint_names)
        self.js.position = [float(q[i]) for i in model.joint_q_index]
        self.js.velocity = [0.0] * model.na
        self.odom = Odometry()
        self.odom.header.frame_id, self.odom.child_frame_id = "odom", "base_link"
        p, o = self.odom.pose.pose.position, self.odom.pose.pose.orientation
        p.x, p.y, p.z = (float(v) for v in q[:3])
        o.x, o.y, o.z, o.w = (float(v) for v in q[3:7])
        self.contacts = Float64MultiArray(data=[1.0] * len(model.contacts))
        self.model, self.sim, self.speed = model, sim, speed
        self._first_command = 0.0
        self._awaiting = False  # trot: the last state's command has not come yet
        self._sent_at = 0.0
        self._t0_ns = time.monotonic_ns()
        self._send_ns: dict[int, int] = {}  # trot: stamp (simulated clock) → send time [ns]
        best_effort = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.pub_js = node.create_publisher(JointState, "/joint_states", best_effort)
        self.pub_odom = node.create_publisher(Odometry, "/odom", best_effort)
        self.pub_contacts = node.create_publisher(Float64MultiArray, "/idyn_controller/contact_states", best_effort)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.latency_ns: list[int] = []
        self.cmd_times_ns: list[int] = []
        self.diagnostics: dict[str, str] = {}
        self.recording = False
        self.sent = 0
        self.commands_seen = 0
        self._k = 0
        self._next = time.monotonic()
        # best effort, depth 1: a receiver that falls behind drops samples instead of queueing
        # them, so its backlog never shows up as controller latency
        node.create_subscription(JointState, "/idyn_controller/state", self._on_state, best_effort)
        # the measurement floor: our own /joint_states, one DDS hop into this process
        self.hop_ns: list[int] = []
        node.create_subscription(JointState, "/joint_states", self._on_own_joint_state, best_effort)
        node.create_subscription(Float64MultiArray, "/effort_controller/commands", self._on_cmd, reliable)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, reliable)
        if sim is not None:
            from geometry_msgs.msg import Twist

            self.twist = Twist()
            self.twist.linear.x = float(speed)
            self.pub_cmd_vel = node.create_publisher(Twist, "/cmd_vel", 10)

    def _sent(self, stamp: int) -> int | None:
        """Send time [ns, monotonic] of the state stamped ``stamp``."""
        return self._send_ns.get(stamp) if self.sim is not None else stamp

    def _on_state(self, msg):
        now = time.monotonic_ns()
        sent = self._sent(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
        if self.recording and sent:
            self.latency_ns.append(now - sent)

    def _on_own_joint_state(self, msg):
        now = time.monotonic_ns()
        sent = self._sent(msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec)
        if self.recording and sent:
            self.hop_ns.append(now - sent)

    def _on_cmd(self, msg):
        self.commands_seen += 1
        if self.sim is not None:
            self.sim.command(msg.data)
            self._first_command = self._first_command or time.monotonic()
            self._awaiting = False
        if self.recording:
            self.cmd_times_ns.append(time.monotonic_ns())

    def _on_diag(self, msg):
        for status in msg.status:
            if status.name.startswith("idyn_controller"):
                self.diagnostics = {kv.key: kv.value for kv in status.values}

    def publish_due(self) -> float:
        """Publish if the next send time has come; return the time of the next one."""
        now = time.monotonic()
        if self.sim is not None and self._awaiting and now - self._sent_at < LOCKSTEP_WAIT_S:
            return now + 5e-5  # the answer to the last state first (trot)
        if now >= self._next:
            now_ns = time.monotonic_ns()
            stamp_ns = now_ns
            if self.sim is not None:
                self._simulate()
                stamp_ns = self._t0_ns + self._k * int(round(self.period * 1e9))  # the simulated clock
                self._send_ns[stamp_ns] = now_ns
                self._send_ns.pop(stamp_ns - 4096 * int(round(self.period * 1e9)), None)
                self._awaiting, self._sent_at = self.sim.started, now
            sec, nsec = divmod(stamp_ns, 1_000_000_000)
            trotting = self._first_command and now - self._first_command > TROT_AFTER_S
            if trotting and self._k % 50 == 0:  # /cmd_vel at 20 Hz, like a teleop
                self.pub_cmd_vel.publish(self.twist)
            if self._k % 2 == 0 or self.sim is not None:  # standing: odometry and contacts at 500 Hz, like a typical estimator
                self.odom.header.stamp.sec, self.odom.header.stamp.nanosec = sec, nsec
                self.pub_odom.publish(self.odom)
                self.pub_contacts.publish(self.contacts)
            self.js.header.stamp.sec, self.js.header.stamp.nanosec = sec, nsec
            self.pub_js.publish(self.js)  # its stamp is the send time (standing)
            self.sent += 1
            self._k += 1
            self._next += self.period
            if self.sim is not None:  # trot: a late answer delays the next state, no burst after it
                self._next = max(self._next, now + 0.5 * self.period)
            if now - self._next > 0.1:  # fell far behind (machine stalled): re-anchor
                self._next = now + self.period
        return self._next


    def _simulate(self) -> None:
        """Step the simulated robot and put its state into the messages."""
        q, v, mask = self.sim.step()
        m = self.model
        self.js.position = [float(x) for x in q[m.joint_q_index]]
        self.js.velocity = [float(x) for x in v[6:]]
        p, o = self.odom.pose.pose.position, self.odom.pose.pose.orientation
        p.x, p.y, p.z = (float(x) for x in q[:3])
        o.x, o.y, o.z, o.w = (float(x) for x in q[3:7])
        lin, ang = self.odom.twist.twist.linear, self.odom.twist.twist.angular
        lin.x, lin.y, lin.z = (float(x) for x in v[:3])  # base frame (REP-105)
        ang.x, ang.y, ang.z = (float(x) for x in v[3:6])
        self.contacts.data = [float(c) for c in mask]


def core_compute_reference(params: str, formulation: str = "", ticks: int = 1500) -> dict:
    """Controller.update alone, in this process, right now: the load-dependent floor of a tick."""
    from idyn_control import config, robots
    from idyn_control.controller import Controller

    values = config.load_params_file(params)
    if formulation:
        values["formulation"] = formulation
    settings = config.resolve(values)
    model = config.build_model(settings)
    ctrl = Controller(model, config.controller_config(settings, model))
    robot = settings["robot"]
    q = robots.standing_configuration(model, robot) if robot else model.neutral()
    v, mask = np.zeros(model.nv), np.ones(len(model.contacts), dtype=bool)
    ctrl.reset(q, v)
    times = []
    for _ in range(ticks):
        t = time.perf_counter()
        ctrl.update(q, v, mask)
        times.append(time.perf_counter() - t)
    return percentiles(np.array(times[100:]) * 1e6, (50, 99))


def run_mode(mode: str, args, env, seconds: float) -> dict:
    """One round of one design: raw samples and node counters over ``seconds``."""
    import rclpy
    from rclpy.experimental import EventsExecutor

    core_ref = core_compute_reference(args.params, args.formulation)
    design, *overrides = mode.split("+")  # "native@50+loop_spin_us=300": parameter overrides
    node_env = dict(env, **dict(o[4:].split("=", 1) for o in overrides if o.startswith("env:")))
    overrides = [o for o in overrides if not o.startswith("env:")]
    loop_mode, _, priority = design.partition("@")  # "thread@80": SCHED_FIFO priority 80
    module = "gait_controller_node" if args.scenario == "trot" else "controller_node"
    cmd = [sys.executable, "-m", f"idyn_control.ros.{module}", "--ros-args",
           "--params-file", str(args.params), "-p", f"loop_mode:={loop_mode}",
           "-p", f"loop_priority:={int(priority or 0)}",
           *(x for o in overrides for x in ("-p", o.replace("=", ":=", 1))),
           "-p", f"monitor_rate_hz:={args.monitor_rate or args.rate}", "-p", "diagnostics_rate_hz:=2.0",
           "-p", f"update_rate:={args.rate}"]
    if args.formulation:
        cmd += ["-p", f"formulation:={args.formulation}"]
    if args.node_cpus:
        cmd += ["-p", f"cpu_affinity:=[{args.node_cpus}]"]
    tag = "".join(c if c.isalnum() or c in "_-." else "_" for c in mode.replace("@", "_fifo"))[:80]
    log = open(Path(args.json).with_suffix(f".{tag}.log"), "w")
    proc = subprocess.Popen(cmd, env=node_env, stdout=log, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=int(env["ROS_DOMAIN_ID"]))
    node = rclpy.create_node("ros_loop_bench", context=context)
    executor = EventsExecutor(context=context)
    executor.add_node(node)
    sim = Simulation(args.robot, args.params) if args.scenario == "trot" else None
    feeder = Feeder(node, args.robot, args.rate, sim, args.speed)
    def spin_for(seconds: float) -> None:
        """Publish and receive in this one thread (no GIL hand-offs distorting receive times)."""
        end = time.monotonic() + seconds
        while True:
            next_pub = feeder.publish_due()
            now = time.monotonic()
            if now >= end:
                return
            executor.spin_once(timeout_sec=max(0.0, min(next_pub, end) - now))

    try:
        started = time.monotonic()
        while feeder.commands_seen == 0 or not feeder.diagnostics:  # node up and commanding
            spin_for(0.1)
            if time.monotonic() - started > 60.0 or proc.poll() is not None:
                raise RuntimeError(f"node ({mode}) did not command within 60 s; see its log")
        spin_for(args.warmup + (TROT_AFTER_S + 1.0 if sim is not None else 0.0))  # trot: up and trotting
        diag_start = dict(feeder.diagnostics)
        x_start = float(sim.sim.state()[0][0]) if sim is not None else 0.0
        sent_start = feeder.sent
        feeder.recording = True
        spin_for(seconds)
        feeder.recording = False
        sent = feeder.sent - sent_start
        spin_for(1.2)  # one more /diagnostics message
        diag_end = dict(feeder.diagnostics)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
        log.close()

    times = np.asarray(feeder.cmd_times_ns, dtype=float) / 1e9

    def num(d, key):
        try:
            return float(d[key])
        except (KeyError, ValueError):
            return 0.0 if d is diag_start else float("nan")

    from idyn_control.ros.loop_stats import decode_histogram

    hist = (decode_histogram(diag_end.get("input_to_command_hist", ""))
            - decode_histogram(diag_start.get("input_to_command_hist", "")))
    return {
        "latency_us": np.asarray(feeder.latency_ns, dtype=float) / 1e3,
        "input_hist": hist,
        "node_max_us_all": num(diag_end, "input_to_command_max_us_all"),
        "input_split_us": {k: num(diag_end, k) for k in (
            "input_dispatch_p50_us", "input_dispatch_p99_us", "input_wait_p50_us", "input_wait_p99_us",
            "input_to_command_p50_us", "input_to_command_p99_us")},
        "reused_input_ticks": num(diag_end, "reused_input_ticks") - num(diag_start, "reused_input_ticks"),
        "overwritten_inputs": num(diag_end, "overwritten_inputs") - num(diag_start, "overwritten_inputs"),
        "one_hop_us": np.asarray(feeder.hop_ns, dtype=float) / 1e3,
        "gaps_s": np.diff(times) if times.size > 1 else np.zeros(0),
        "commands": int(times.size), "sent": sent, "seconds": seconds,
        "ticks": num(diag_end, "ticks") - num(diag_start, "ticks"),
        "misses": num(diag_end, "deadline_misses") - num(diag_start, "deadline_misses"),
        "skipped": num(diag_end, "skipped_slots") - num(diag_start, "skipped_slots"),
        "compute_p50_us": num(diag_end, "compute_p50_us"),
        "compute_p99_us": num(diag_end, "compute_p99_us"),
        "compute_max_us": num(diag_end, "compute_max_us"),
        "start_late_p99_us": num(diag_end, "start_late_p99_us"),
        "watchdog_trips": num(diag_end, "watchdog_trips"),
        "last_source": diag_end.get("last_source"),
        "native_loop_compiled_ticks": num(diag_end, "native_loop.compiled_ticks"),
        "native_loop_python_ticks": num(diag_end, "native_loop.python_ticks"),
        "window_compiled_ticks": num(diag_end, "native_loop.compiled_ticks") - num(diag_start, "native_loop.compiled_ticks"),
        "window_python_ticks": num(diag_end, "native_loop.python_ticks") - num(diag_start, "native_loop.python_ticks"),
        "fallback_ticks": sum(num(diag_end, f"source.{s}") - num(diag_start, f"source.{s}")
                              for s in ("zero", "damping", "gravity", "hold")),
        "loadavg_1min": os.getloadavg()[0],
        "core_update_us": core_ref,
        "walked_m": float(sim.sim.state()[0][0]) - x_start if sim is not None else 0.0,
        "base_height_end_m": float(sim.sim.state()[0][2]) if sim is not None else float("nan"),
    }


def _per_round(rounds: list[dict]) -> dict:
    """In-node input → command p50/p99/p99.9 of each round, with median, min and max over rounds."""
    from idyn_control.ros.loop_stats import histogram_percentiles

    per = [histogram_percentiles(np.asarray(r["input_hist"])) for r in rounds]
    out = {}
    for key in ("p50", "p99", "p99.9"):
        values = [p[key] for p in per if key in p]
        if values:
            out[key] = {"rounds": values, "median": float(np.median(values)), "min": float(min(values)),
                        "max": float(max(values))}
    return out


def summarize(mode: str, rounds: list[dict], rate: float) -> dict:
    """One design's rounds → the reported numbers (samples pooled, counters summed)."""
    from idyn_control.ros.loop_stats import HIST_BIN_US, histogram_percentiles

    period = 1.0 / rate
    hist = np.sum([r["input_hist"] for r in rounds], axis=0)
    in_node = histogram_percentiles(hist)
    if in_node:
        top = np.flatnonzero(hist)[-1]
        in_node["max"] = float((top + 1) * HIST_BIN_US)  # upper edge of the top bin
        if top == hist.size - 1:  # the overflow bin: the max is only known to be beyond it
            in_node["max"] = float("inf")
            in_node["beyond_histogram"] = int(hist[top])
        # the node's own max since start-up (includes the warm-up and the 1 s after the window)
        in_node["node_max_since_start_us"] = max(r["node_max_us_all"] for r in rounds)
    lat = np.concatenate([r["latency_us"] for r in rounds])
    gaps = np.concatenate([r["gaps_s"] for r in rounds])
    lost = int(np.sum(np.maximum(np.round(gaps / period) - 1, 0)[gaps > 1.5 * period]))
    commands = sum(r["commands"] for r in rounds)
    seconds = sum(r["seconds"] for r in rounds)
    ticks, misses, skipped = (sum(r[k] for r in rounds) for k in ("ticks", "misses", "skipped"))
    compiled = sum(r["window_compiled_ticks"] for r in rounds)
    python = sum(r["window_python_ticks"] for r in rounds)
    return {
        "mode": mode,
        "rounds": len(rounds),
        "seconds": seconds,
        "loadavg_1min": [r["loadavg_1min"] for r in rounds],
        "core_update_p50_us": [r["core_update_us"].get("p50") for r in rounds],
        "joint_states_sent": sum(r["sent"] for r in rounds),
        "commands_received": commands,
        "command_rate_hz": commands / seconds,
        # middleware receive of /joint_states in the node → command published (module docstring)
        "in_node_input_to_command_us": in_node,
        # the same per round, and each percentile's spread over the rounds (median, min, max):
        # the designs run interleaved, so a load change shows as a spread, not as a difference
        "in_node_per_round_us": _per_round(rounds),
        "in_node_split_us": [r["input_split_us"] for r in rounds],
        "in_node_reused_input_ticks": sum(r["reused_input_ticks"] for r in rounds),
        "in_node_overwritten_inputs": sum(r["overwritten_inputs"] for r in rounds),
        # bench publish → node → ~/state → bench receive: two DDS hops, an upper bound
        "two_hop_latency_us": percentiles(lat),
        # publish → receive of the bench's own /joint_states: the floor of one DDS hop into a
        # Python subscriber under the same load; the two-hop path has two such hops
        "one_hop_floor_us": percentiles(np.concatenate([r["one_hop_us"] for r in rounds])),
        "command_period_us": percentiles(gaps * 1e6),
        "command_jitter_us": percentiles(np.abs(gaps - period) * 1e6),
        "receiver_lost_slots": lost,
        "receiver_lost_rate": lost / max(1, commands + lost),
        "node": {
            "ticks": ticks,
            "deadline_misses": misses,
            "skipped_slots": skipped,
            "deadline_miss_rate": misses / max(1.0, ticks + skipped),
            "compute_p50_us_per_round": [r["compute_p50_us"] for r in rounds],
            "compute_p99_us_max_over_rounds": max(r["compute_p99_us"] for r in rounds),
            "compute_max_us": max(r["compute_max_us"] for r in rounds),
            "start_late_p99_us_max_over_rounds": max(r["start_late_p99_us"] for r in rounds),
            "watchdog_trips": sum(r["watchdog_trips"] for r in rounds),
            "native_loop_compiled_ticks": rounds[-1]["native_loop_compiled_ticks"],
            "compiled_tick_fraction": compiled / (compiled + python) if compiled + python else float("nan"),
            "window_python_ticks": python,
            "fallback_ticks": sum(r["fallback_ticks"] for r in rounds),
            "walked_m_per_round": [r["walked_m"] for r in rounds],
            "base_height_end_m_per_round": [r["base_height_end_m"] for r in rounds],
            "native_loop_python_ticks": rounds[-1]["native_loop_python_ticks"],
            "last_source": rounds[-1]["last_source"],
        },
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("duration", nargs="?", type=float, default=60.0, help="seconds measured per design")
    parser.add_argument("--duration", dest="duration_opt", type=float, help="same as the positional")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="comma-separated loop_mode values; <mode>@<prio> also sets loop_priority")
    parser.add_argument("--robot", default="solo12")
    parser.add_argument("--params", default=str(ROOT / "config" / "solo12.yaml"))
    parser.add_argument("--formulation", default="", help="override the YAML's formulation")
    parser.add_argument("--scenario", choices=("stand", "trot"), default="stand",
                        help="stand: the standing state; trot: the gait node trotting on a replayed trot")
    parser.add_argument("--speed", type=float, default=0.2, help="trot: /cmd_vel forward speed [m/s]")
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--node-cpus", default="",
                        help="comma-separated CPUs for the node (its cpu_affinity); this process "
                             "then runs on the others, as a robot keeps a core for its controller")
    parser.add_argument("--monitor-rate", type=float, default=0.0,
                        help="the node's monitor_rate_hz (~/state, wrenches); default = --rate")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=1,
                        help="split the duration into interleaved rounds of every design")
    parser.add_argument("--json", default=str(ROOT / "results" / "ros_loop.json"))
    args = parser.parse_args(argv)
    if args.duration_opt:
        args.duration = args.duration_opt
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(101, 200)))
    os.environ["ROS_DOMAIN_ID"] = env["ROS_DOMAIN_ID"]
    env["PYTHONUNBUFFERED"] = "1"
    from idyn_control.ros.controller_node import set_timer_slack

    set_timer_slack()  # this process's timed waits as precise as the node's
    if args.node_cpus:
        others = os.sched_getaffinity(0) - {int(c) for c in args.node_cpus.split(",")}
        if others:
            os.sched_setaffinity(0, others)
    report = {
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "machine": {"node": platform.node(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_start": os.getloadavg()},
        "robot": args.robot, "params": str(args.params), "formulation_override": args.formulation,
        "scenario": args.scenario, "speed_m_s": args.speed if args.scenario == "trot" else 0.0,
        "rate_hz": args.rate, "monitor_rate_hz": args.monitor_rate or args.rate, "node_cpus": args.node_cpus,
        "duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
        "results": [],
    }
    modes = [m for m in args.modes.split(",") if m]
    raw: dict[str, list[dict]] = {m: [] for m in modes}
    for k in range(args.rounds):  # interleaved: load drift on a shared machine hits every design alike
        for mode in modes:
            print(f"ros_loop: round {k + 1}/{args.rounds}, {mode} for {args.duration / args.rounds:g} s ...",
                  flush=True)
            raw[mode].append(run_mode(mode, args, env, args.duration / args.rounds))
    for mode in modes:
        r = summarize(mode, raw[mode], args.rate)
        report["results"].append(r)
        lat, n, own = r["two_hop_latency_us"], r["node"], r["in_node_input_to_command_us"]
        nan = float("nan")
        spread = "".join(f" {k} {v['median']:.0f} [{v['min']:.0f}, {v['max']:.0f}]"
                         for k, v in r["in_node_per_round_us"].items() if len(v["rounds"]) > 1)
        print(f"{mode:>12}: in-node input→command p50 {own.get('p50', nan):.0f} p99 {own.get('p99', nan):.0f} "
              f"max {own.get('max', nan):.0f} µs{' (per round, median [min, max]:' + spread + ')' if spread else ''}"
              f" | two-hop p50 {lat.get('p50', nan):.0f} "
              f"p99 {lat.get('p99', nan):.0f} max {lat.get('max', nan):.0f} µs (one-hop floor p50 "
              f"{r['one_hop_floor_us'].get('p50', nan):.0f} p99 {r['one_hop_floor_us'].get('p99', nan):.0f}) "
              f"| commands {r['command_rate_hz']:.0f} Hz, "
              f"jitter p99 {r['command_jitter_us'].get('p99', float('nan')):.0f} µs, "
              f"lost {r['receiver_lost_rate'] * 100:.2f} % | node misses {n['deadline_miss_rate'] * 100:.3f} % "
              f"| compiled ticks {n['compiled_tick_fraction'] * 100:.3f} % "
              f"| load {np.mean(r['loadavg_1min']):.1f}, Controller.update alone p50 "
              f"{np.mean([x for x in r['core_update_p50_us'] if x]):.0f} µs", flush=True)
    report["machine"]["loadavg_end"] = os.getloadavg()
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
