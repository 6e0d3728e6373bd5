"""Seed 004 §IV through the node: ANYmal C presses the ground in MuJoCo behind the simulation
bridge, the controller node runs ``pidc_qp`` (or a baseline), and this process streams the
desired force over DDS.

Three parties on a private ``ROS_DOMAIN_ID`` (:mod:`idyn_control.ros.launch`):

- ``idyn_sim`` (lock-step: each state waits for the command answering it) spawns the robot
  at the experiment's stance (torso at ``base_height``, a robot file whose standing pose is
  :func:`~idyn_control.sim.force_tracking.standing_at_height`'s) and publishes the force the
  ground applied to each foot over each period, ``/idyn_sim/contact_wrench/<frame>``;
- ``idyn_controller`` (``loop_mode`` native by default: the compiled loop, its solver reading
  each new desired force in place) with the gains of the lock-step run
  (:func:`~idyn_control.sim.force_tracking.controller_config`), on simulated time;
- this process: on the state of tick k (``/joint_states``, which the node ticks on) it
  publishes λ_d(t_k + Δt) as geometry_msgs/WrenchStamped (frame ``odom``) on the node's
  ``~/desired_wrench/<force frame>``, so the reference of tick k+1 is in flight while the
  node computes tick k: the control rate, one reference per tick. It records the bridge's
  topics as raw CDR bytes and builds the run's per-tick arrays afterwards.

The arrays are those of the lock-step run (:class:`ForceTrackingRun`) and the metrics the
same function's (:func:`~idyn_control.sim.force_tracking.summarize`): measured force =
the bridge's contact wrench of the pressing foot, torque = the effort the bridge applied
(its ``/joint_states``), base pose = ``/odom``, predicted force = the node's
``~/contact_wrench/<frame>`` (published at ``monitor_rate_hz``, decimated in native mode:
the ticks without one keep zero and are left out of the predicted-force error). The node's
/diagnostics add what only it knows: fallback ticks, joints clamped to their limits,
compiled and Python ticks, input → command latency. ``reference_lag`` counts, among the
ticks with a predicted force equal to a reference (nothing bound), those that used the
previous tick's, this tick's and the next tick's (the stream is asynchronous to the node by
one DDS hop; the node is activated once the first reference is in).
"""

from __future__ import annotations

import math
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pinocchio as pin

from .. import config
from ..sim.force_tracking import (ForceTrackingRun, ForceTrackingScenario, allocate_run, base_rpy, controller_config,
                                  desired_force, fallen, pressing_stance, settled_mask, summarize, trim)
from .launch import BRIDGE, CONTROLLER, Processes, bridge_command, node_command, private_environment

#: wall seconds without simulated progress before a run is given up
STALL_S = 60.0
#: odometry messages between checks for a fall (the run stops after one; 50 ms at 1 kHz)
FALL_CHECK_EVERY = 50


def controller_params(s: ForceTrackingScenario, q_stance: np.ndarray, model, *, loop_mode: str) -> dict[str, Any]:
    """The node's params file for scenario ``s`` (the robot file the bridge spawns from too):
    the stance as the standing pose, the lock-step run's controller, lock-step timing."""
    cfg = controller_config(s)
    gains: dict[str, Any] = {}
    for name, field_name in config.CONTROLLER_FIELDS.items():
        value = getattr(cfg, field_name)
        key = name.split(".", 1)[1]
        if isinstance(value, str):
            gains[key] = value
        elif np.ndim(value) or field_name in ("joint_kp", "joint_kd"):  # arrays (per joint, per axis)
            gains[key] = [float(x) for x in np.atleast_1d(value)]
        else:
            gains[key] = float(value)
    joints = list(model.joint_names)
    params = {
        "robot": s.robot,
        "standing_pose": {"joints": joints, "positions": [float(q_stance[model.joint_q_index[i]])
                                                          for i in range(model.na)]},
        "contacts": {"friction": float(s.friction), "desired_wrench_timeout": 0.0},
        "formulation": s.formulation,
        "formulation_options": {k: (list(v) if isinstance(v, tuple) else v)
                                for k, v in cfg.formulation_options.items()},
        "update_rate": 1.0 / s.dt,
        "loop_mode": loop_mode,
        # lock-step on simulated time beside the bridge and this process: only the loop
        # thread raised, memory unlocked, a wall-clock watchdog a loaded machine cannot trip
        "middleware_priority": 0,
        "lock_memory": False,
        "autostart": False,  # activated once the first desired force is in (run_force_tracking_ros)
        "use_sim_time": True,
        "command_joints": list(joints),  # a copy: yaml would write an alias, which rcl rejects
        "odom_twist_frame": "child",
        "watchdog_timeout": 2.0,
        "monitor_rate_hz": 1.0 / s.dt,
        "diagnostics_rate_hz": 2.0,
        "controller": gains,
    }
    return {CONTROLLER: {"ros__parameters": params}}


def run_force_tracking_ros(scenario: ForceTrackingScenario | None = None, *, out: Path | str,
                           loop_mode: str = "native", domain_id: int | None = None, wall_timeout: float = 900.0,
                           log: Callable[[str], None] = lambda _: None, **overrides: Any) -> ForceTrackingRun:
    """Run seed 004 §IV's experiment through the bridge and the controller node (see the
    module doc); logs and the params file go to ``out``. The run's ``metrics`` hold
    :func:`summarize`'s and ``ros`` (the node's and the stream's numbers)."""
    import rclpy
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import WrenchStamped
    from lifecycle_msgs.msg import Transition
    from nav_msgs.msg import Odometry
    from rclpy.experimental import EventsExecutor
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState

    s = replace(scenario or ForceTrackingScenario(), **overrides)
    s.validate()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model, _, q_stance = pressing_stance(s)
    params = out / "controller_params.yaml"
    params.write_text(yaml.safe_dump(controller_params(s, q_stance, model, loop_mode=loop_mode), sort_keys=False))
    env = private_environment(domain_id)
    frames = model.contact_frames
    bridge_topics = ["/odom", "/joint_states"] + [f"/{BRIDGE}/contact_wrench/{f}" for f in frames]
    predicted_topic = f"/{CONTROLLER}/contact_wrench/{s.force_frame}"
    records: dict[str, list[bytes]] = {t: [] for t in (*bridge_topics, predicted_topic)}
    diag: dict[str, str] = {}
    ticks = int(round(s.length_s / s.dt))
    state = {"t_ns": -1, "started": 0.0, "fell": False}

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=env.domain_id)
    node = rclpy.create_node("idyn_seed004", context=context)
    executor = EventsExecutor(context=context)  # the 1 kHz callbacks at a fraction of the cost
    executor.add_node(node)
    reliable = QoSProfile(depth=2000, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
    wrench_pub = node.create_publisher(WrenchStamped, f"/{CONTROLLER}/desired_wrench/{s.force_frame}",
                                       QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE))
    reference = WrenchStamped()
    reference.header.frame_id = "odom"
    f_next = np.zeros(3)

    def on_joint_states(data: bytes) -> None:
        sec, nanosec = struct.unpack_from("<iI", data, 4)  # CDR: encapsulation, then header.stamp
        t_ns = sec * 1_000_000_000 + nanosec
        # the next tick's reference, in flight while the node computes this one (the paused
        # state at t = 0, re-published until the first command: the first tick's)
        desired_force(s.profile, t_ns * 1e-9 + (s.dt if t_ns > 0 else 0.0), s.step_level_s, out=f_next)
        reference.header.stamp.sec, reference.header.stamp.nanosec = sec, nanosec
        force = reference.wrench.force
        force.x, force.y, force.z = float(f_next[0]), float(f_next[1]), float(f_next[2])
        wrench_pub.publish(reference)
        records["/joint_states"].append(data)
        if t_ns > state["t_ns"]:
            state["t_ns"] = t_ns
            if not state["started"] and t_ns > 0:
                state["started"] = time.monotonic()

    def recorder(topic: str):
        keep = records[topic]
        return keep.append

    node.create_subscription(JointState, "/joint_states", on_joint_states, reliable, raw=True)
    odometry = records["/odom"]

    def on_odom(data: bytes) -> None:
        odometry.append(data)
        if len(odometry) % FALL_CHECK_EVERY == 0 and not state["fell"]:  # the run stops once the torso fell
            pose = deserialize_message(data, Odometry).pose.pose
            p, r = pose.position, pose.orientation
            state["fell"] = fallen(np.array([p.x, p.y, p.z, r.x, r.y, r.z, r.w]), s.base_height)

    node.create_subscription(Odometry, "/odom", on_odom, reliable, raw=True)
    for topic in (*bridge_topics[2:], predicted_topic):
        node.create_subscription(WrenchStamped, topic, recorder(topic), reliable, raw=True)

    bridge_diag: dict[str, str] = {}

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith(f"{CONTROLLER}:"):
                diag.update({kv.key: kv.value for kv in status.values})
            elif status.name.startswith(f"{BRIDGE}:"):
                bridge_diag.update({kv.key: kv.value for kv in status.values})

    node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, QoSProfile(depth=50))
    node.create_subscription(DiagnosticArray, f"/{BRIDGE}/status", on_diag, QoSProfile(depth=50))
    failure = None
    wall0 = time.monotonic()
    processes = Processes(out, env.variables)
    try:
        processes.start("bridge", bridge_command(str(params), friction=s.friction))
        # the bridge re-publishes its paused state: once heard, start the controller (whose
        # first command starts the physics), so its first tick has the first reference
        while state["t_ns"] < 0 and time.monotonic() - wall0 < STALL_S and not processes.dead():
            executor.spin_once(timeout_sec=0.05)
        processes.start("controller", node_command("idyn_control.ros.controller_node", params))
        # configure; activate once the node's desired-wrench subscription has the first
        # reference (the stream re-sends it with each paused state): no tick without it
        failure = _lifecycle(node, executor, Transition.TRANSITION_CONFIGURE, processes)
        deadline = time.monotonic() + STALL_S
        while not failure and wrench_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        settle = time.monotonic() + 0.1  # two more re-sends, matched
        while time.monotonic() < settle:
            executor.spin_once(timeout_sec=0.01)
        failure = failure or _lifecycle(node, executor, Transition.TRANSITION_ACTIVATE, processes)
        if failure:
            raise RuntimeError(f"seed 004 through the node: {failure} (logs in {out}/)")
        log(f"    ROS_DOMAIN_ID={env.domain_id}: idyn_sim and idyn_controller ({loop_mode}) up; logs in {out}/")
        end_ns = int(round((ticks + 1) * s.dt * 1e9))
        progress_wall, progress_ns = time.monotonic(), 0
        while state["t_ns"] < end_ns and not state["fell"]:
            executor.spin_once(timeout_sec=0.01)
            now = time.monotonic()
            if state["t_ns"] > progress_ns:
                progress_wall, progress_ns = now, state["t_ns"]
            if processes.dead():
                failure = f"{', '.join(processes.dead())} exited early (see {out}/)"
            elif now - progress_wall > STALL_S:
                failure = f"no simulated progress for {STALL_S:g} s at t = {state['t_ns'] * 1e-9:.3f} s"
            elif now - wall0 > wall_timeout:
                failure = f"wall-clock timeout after {wall_timeout:g} s at t = {state['t_ns'] * 1e-9:.3f} s"
            if failure:
                break
        wall_end = time.monotonic()
        # the simulation stops; the node's next /diagnostics (2 Hz) count the run's ticks
        processes.stop("bridge")
        settle = time.monotonic() + 1.2
        while time.monotonic() < settle and "controller" not in processes.dead():
            executor.spin_once(timeout_sec=0.05)
    finally:
        processes.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
    if failure:
        log(f"    {failure}")
    run, predicted = _build_run(s, model, records, ticks)
    if not run.t.size:
        raise RuntimeError(f"seed 004 through the node: no tick recorded ({failure or 'no state'}; logs in {out}/)")
    sim_s = state["t_ns"] * 1e-9
    unrecorded = run.metrics["unrecorded_ticks"]
    run.metrics = summarize(run)
    keep = settled_mask(run) & predicted  # the predicted force where the node published it
    error = (run.f_pred - run.f_des)[keep]
    run.metrics["predicted_rmse_N"] = np.sqrt((error ** 2).mean(axis=0)).tolist() if error.size else [math.nan] * 3
    run.metrics["ros"] = _node_numbers(diag, run, predicted, sim_s,
                                       wall_end - state["started"] if state["started"] else math.nan, failure,
                                       env.domain_id, loop_mode)
    run.metrics["ros"]["unrecorded_ticks"] = unrecorded
    run.metrics["ros"]["bridge"] = {k: float(bridge_diag[k]) for k in
                                    ("steps", "commands", "lockstep_resends", "lockstep_timeouts", "timeouts")
                                    if k in bridge_diag}
    if "fallback" in run.metrics["ros"]:  # the node counts the ticks its safety layer replaced
        run.metrics["fallback_ticks"] = run.metrics["ros"]["fallback"]
    return run


def _lifecycle(node, executor, transition: int, processes: Processes) -> str | None:
    """Ask the controller node for a lifecycle transition; None when it succeeded, else why not."""
    from lifecycle_msgs.srv import ChangeState

    client = node.create_client(ChangeState, f"/{CONTROLLER}/change_state")
    try:
        deadline = time.monotonic() + STALL_S
        while not client.service_is_ready():
            if processes.dead() or time.monotonic() > deadline:
                return "the controller node's lifecycle service did not come up"
            executor.spin_once(timeout_sec=0.05)
        request = ChangeState.Request()
        request.transition.id = transition
        future = client.call_async(request)
        while not future.done():
            if processes.dead() or time.monotonic() > deadline:
                return f"lifecycle transition {transition} got no answer"
            executor.spin_once(timeout_sec=0.05)
        return None if future.result().success else f"lifecycle transition {transition} failed"
    finally:
        node.destroy_client(client)


def _build_run(s: ForceTrackingScenario, model, records: dict[str, list[bytes]],
               ticks: int) -> tuple[ForceTrackingRun, np.ndarray]:
    """The per-tick arrays from the recorded messages (indexed by their simulated stamps): the
    bridge stamps the state of tick k with t_k, and the force and torque applied over
    [t_k, t_k+1] with t_k+1; the node stamps its predicted wrench with its input's t_k.
    Returns the run and which of its ticks have a predicted force."""
    from geometry_msgs.msg import WrenchStamped
    from nav_msgs.msg import Odometry
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import JointState

    def tick(stamp) -> int:
        return int(round((stamp.sec + stamp.nanosec * 1e-9) / s.dt))

    n = ticks + 1
    q = np.full((n, model.nq), np.nan)
    tau_applied = np.full((n, model.na), np.nan)
    frames = model.contact_frames
    f_meas = np.full((n, len(frames), 3), np.nan)
    f_pred_local = np.full((n, 3), np.nan)
    for data in records["/odom"]:
        msg = deserialize_message(data, Odometry)
        i = tick(msg.header.stamp)
        if 0 <= i < n:
            p, r = msg.pose.pose.position, msg.pose.pose.orientation
            q[i, :7] = (p.x, p.y, p.z, r.x, r.y, r.z, r.w)
    order = None
    for data in records["/joint_states"]:
        msg = deserialize_message(data, JointState)
        if order is None:
            order = [list(msg.name).index(j) for j in model.joint_names]
        i = tick(msg.header.stamp)
        if 0 <= i < n:
            q[i, model.joint_q_index] = np.asarray(msg.position)[order]
            if i > 0:
                tau_applied[i - 1] = np.asarray(msg.effort)[order]
    for c, frame in enumerate(frames):
        for data in records[f"/{BRIDGE}/contact_wrench/{frame}"]:
            msg = deserialize_message(data, WrenchStamped)
            i = tick(msg.header.stamp) - 1  # the force over the period after tick i
            if 0 <= i < n:
                f = msg.wrench.force
                f_meas[i, c] = (f.x, f.y, f.z)
    for data in records[f"/{CONTROLLER}/contact_wrench/{s.force_frame}"]:
        msg = deserialize_message(data, WrenchStamped)
        i = tick(msg.header.stamp)
        if 0 <= i < n:
            f = msg.wrench.force
            f_pred_local[i] = (f.x, f.y, f.z)
    k = model.contact_index(s.force_frame)
    # the ticks whose state and what followed it were all recorded, up to the last one the
    # run reached: the bridge's publishers keep 10 samples, so a recorder that fell behind
    # on a loaded machine lost a few (those ticks are left out, and counted)
    complete = ~(np.isnan(q).any(axis=1) | np.isnan(tau_applied).any(axis=1) | np.isnan(f_meas).any(axis=(1, 2)))
    complete[ticks:] = False
    reached = int(np.flatnonzero(complete)[-1]) + 1 if complete.any() else 0
    kept = np.flatnonzero(complete)
    m = kept.size
    run = allocate_run(s, m, model.na, model.tau_max)
    run.metrics["unrecorded_ticks"] = reached - m
    pm, data = model.pin_model, model.pin_model.createData()
    fid = model.contact_frame_ids[k]
    support = np.arange(len(frames)) != k
    foot0 = None
    predicted = np.zeros(m, dtype=bool)
    for j, i in enumerate(kept):
        qi = q[i]
        pin.framesForwardKinematics(pm, data, qi)
        foot = data.oMf[fid]
        foot0 = foot.translation.copy() if foot0 is None else foot0
        run.t[j] = i * s.dt
        desired_force(s.profile, run.t[j], s.step_level_s, out=run.f_des[j])
        run.f_meas[j] = f_meas[i, k]
        run.f_support[j] = f_meas[i, support].sum(axis=0)
        run.base_pos[j] = qi[:3]
        run.base_rpy[j] = base_rpy(qi)
        run.tau[j] = run.tau_raw[j] = tau_applied[i]
        run.slip[j] = float(np.linalg.norm((foot.translation - foot0)[:2]))
        if not np.isnan(f_pred_local[i]).any():
            run.f_pred[j] = foot.rotation @ f_pred_local[i]  # contact frame → world
            predicted[j] = True
        if fallen(qi, s.base_height):
            run.fall_time_s = run.t[j] + s.dt
            trim(run, j + 1)
            predicted = predicted[:j + 1]
            break
    return run, predicted


def _node_numbers(diag: dict[str, str], run: ForceTrackingRun, predicted: np.ndarray, sim_s: float, wall_s: float,
                  failure: str | None, domain_id: int, loop_mode: str) -> dict[str, Any]:
    """What the node's /diagnostics and the recorded stream say about the run."""
    def number(key: str) -> float:
        try:
            return float(diag[key])
        except (KeyError, ValueError):
            return math.nan

    out: dict[str, Any] = {"loop_mode": loop_mode, "ros_domain_id": domain_id, "simulated_s": sim_s,
                           "real_time_factor": sim_s / wall_s if wall_s > 0 else math.nan, "failure": failure}
    if diag:
        out["fallback"] = int(sum(float(v) for k, v in diag.items()
                                  if k.startswith("source.") and k != "source.formulation"))
        for key in ("ticks", "saturated_joint_ticks", "native_loop.compiled_ticks", "native_loop.python_ticks",
                    "input_to_command_p50_us", "input_to_command_p99_us", "compute_p50_us", "compute_p99_us"):
            out[key.replace("native_loop.", "")] = number(key)
        out["backend"] = diag.get("backend")
        out["friction_elastic_ticks"] = number("relaxed.friction_elastic")
    # the reference each sampled tick's predicted force followed: this tick's (λ_d(t_k)) or
    # the previous one's (the stream's message came after the node's tick), where nothing
    # bound (the predicted force then equals the reference to 1e-6 N)
    sc = run.scenario
    counts = {"previous_tick": 0, "this_tick": 0, "next_tick": 0}
    ref = np.zeros(3)
    for i in np.flatnonzero(predicted):
        errors = {}
        for name, shift in (("previous_tick", -1), ("this_tick", 0), ("next_tick", 1)):
            desired_force(sc.profile, max(run.t[i] + shift * sc.dt, 0.0), sc.step_level_s, out=ref)
            errors[name] = float(np.abs(run.f_pred[i] - ref).max())
        best = min(errors, key=errors.get)
        if errors[best] < 1e-3 and sorted(errors.values())[1] > errors[best]:
            counts[best] += 1
    out["reference_lag"] = {"sampled_ticks": int(predicted.sum()), **counts}
    return out
