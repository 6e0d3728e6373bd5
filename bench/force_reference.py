"""pidc_qp in the node with a desired force streamed at the control rate, through real DDS.

    PYTHONPATH=. python bench/force_reference.py [--loop-mode native|triggered] [--send stream|once]
                                                 [--backend auto|python] [--seconds 8] [--warmup 4]
                                                 [--json results/force_reference.json]

Starts the node in its own process with ``config/anymal_c_force.yaml`` (ANYmal C, pidc_qp,
LF_FOOT force-controlled; ``loop_mode`` overridden) and, in this process and one thread,
publishes /joint_states and /odom (standing, 1 kHz) and the desired wrench of LF_FOOT
(F_z = 140 − 50 sin 2t N; every period with ``stream``, once a second with ``once``).
Prints, over the window after ``--warmup`` (from the node's /diagnostics): ticks per
second, deadline miss rate, input → command latency p50/p99 (whole run) and how the native
loop ran the ticks (compiled / handed to Python); ``--json`` appends them to a JSON list.
``--backend python`` runs pidc_qp's Python code (``formulation_options.backend``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import WrenchStamped
from nav_msgs.msg import Odometry
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from idyn_control import robots

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop-mode", default="native")
    ap.add_argument("--send", choices=("stream", "once"), default="stream")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--backend", choices=("auto", "python"), default="auto")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    domain = random.randint(1, 200)
    proc = subprocess.Popen(
        [sys.executable, "-m", "idyn_control.ros.controller_node", "--ros-args", "--params-file",
         str(ROOT / "config" / "anymal_c_force.yaml"), "-p", f"loop_mode:={args.loop_mode}",
         "-p", "diagnostics_rate_hz:=5.0", "-p", "contacts.desired_wrench_timeout:=0.0",
         "-p", f"formulation_options.backend:={args.backend}"],
        env=dict(os.environ, ROS_DOMAIN_ID=str(domain)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("force_reference_bench", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    reliable = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    pub_js = node.create_publisher(JointState, "/joint_states", QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT))
    pub_odom = node.create_publisher(Odometry, "/odom", reliable)
    pub_w = node.create_publisher(WrenchStamped, "/idyn_controller/desired_wrench/LF_FOOT", reliable)
    diag: dict[str, str] = {}
    node.create_subscription(
        DiagnosticArray, "/diagnostics",
        lambda msg: diag.update({kv.key: kv.value for s in msg.status if s.name.startswith("idyn_controller:")
                                 for kv in s.values}), QoSProfile(depth=10))
    m = robots.load("anymal_c")
    q = robots.standing_configuration(m, "anymal_c")
    js = JointState(name=list(m.joint_names), position=[float(x) for x in q[m.joint_q_index]], velocity=[0.0] * m.na)
    odom = Odometry()
    p, o = odom.pose.pose.position, odom.pose.pose.orientation
    p.x, p.y, p.z = map(float, q[:3])
    o.x, o.y, o.z, o.w = map(float, q[3:7])
    wrench = WrenchStamped()
    wrench.header.frame_id = "odom"

    def run(seconds: float) -> None:
        start = next_pub = time.monotonic()
        last_once = -1
        while time.monotonic() < start + seconds:
            now = time.monotonic()
            if now >= next_pub:
                next_pub += 1e-3
                if args.send == "stream" or int(now) != last_once:
                    last_once = int(now)
                    wrench.wrench.force.z = 140.0 - 50.0 * math.sin(2.0 * now)
                    pub_w.publish(wrench)
                pub_odom.publish(odom)
                js.header.stamp.sec, js.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
                pub_js.publish(js)
            executor.spin_once(timeout_sec=max(0.0, next_pub - time.monotonic()))

    try:
        while not diag.get("mode") == "active":  # node up and ticking
            run(0.2)
            if proc.poll() is not None:
                raise SystemExit(proc.stdout.read())
        run(args.warmup)
        before = dict(diag)
        run(args.seconds)
        after = dict(diag)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
        rclpy.shutdown(context=context)

    def delta(key: str) -> float:
        return float(after.get(key, "nan")) - float(before.get(key, "nan"))

    ticks = delta("ticks")
    result = {"loop_mode": args.loop_mode, "send": args.send, "backend": args.backend, "seconds": args.seconds,
              "ticks_per_s": ticks / args.seconds, "deadline_miss_rate": delta("deadline_misses") / max(ticks, 1),
              "input_to_command_p50_us": float(after["input_to_command_p50_us"]),
              "input_to_command_p99_us": float(after["input_to_command_p99_us"]),
              "native_compiled_ticks": delta("native_loop.compiled_ticks"),
              "native_python_ticks": delta("native_loop.python_ticks"), "compute_p50_us": float(after.get("compute_p50_us", "nan"))}
    if args.json is not None:
        runs = json.loads(args.json.read_text()) if args.json.exists() else []
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(runs + [result], indent=1))
    print(f"loop_mode {args.loop_mode} ({args.backend}), desired wrench {args.send}: {ticks / args.seconds:.0f} ticks/s "
          f"(1000 wanted), deadline misses {delta('deadline_misses') / max(ticks, 1):.0%}, "
          f"input→command p50 {float(after['input_to_command_p50_us']):.0f} µs "
          f"p99 {float(after['input_to_command_p99_us']):.0f} µs, "
          f"native compiled/python ticks {delta('native_loop.compiled_ticks'):.0f}/{delta('native_loop.python_ticks'):.0f}, "
          f"last source {after.get('last_source')}")


if __name__ == "__main__":
    main()
