#!/usr/bin/env python3
"""The controller node's tick in one process, without DDS: its cost hot and after idling.

    .venv/bin/python bench/node_tick.py --json results/node_tick.json

Builds the real :class:`ControllerNode` from a robot YAML, activates it and calls its
/joint_states callback (triggered loop: read the CDR bytes → Controller.update → command
publish → bookkeeping) with serialized messages, as the middleware would. Each pass
sleeps ``gap`` µs before every call (a 1 kHz loop idles ~700 µs between ticks), optionally
busy-spinning the last ``spin`` µs of it. The difference between gap 0 and gap 700 is what
idling costs the next tick (wake-up, cold caches): on our 2-core VM it doubled the tick,
which is half of the in-node latency bench/ros_loop.py measures in loop_mode triggered (the
Python tick this script runs; loop_mode native runs the routine tick compiled).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default=str(ROOT / "config" / "solo12.yaml"))
    parser.add_argument("--robot", default="solo12")
    parser.add_argument("--ticks", type=int, default=3000)
    parser.add_argument("--passes", default="0:0,200:0,700:0,700:300,700:700",
                        help="comma-separated gap:spin pairs [µs]")
    parser.add_argument("--json", default=str(ROOT / "results" / "node_tick.json"))
    args = parser.parse_args(argv)

    import rclpy
    from nav_msgs.msg import Odometry
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from idyn_control import robots
    from idyn_control.ros.controller_node import ControllerNode

    rclpy.init(args=["--ros-args", "--params-file", args.params, "-p", "loop_priority:=0",
                     "-p", "loop_mode:=triggered", "-p", "middleware_priority:=0", "-p", "lock_memory:=false",
                     "-p", "command_topic:=/idyn_node_tick/commands"])
    node = ControllerNode()
    node.trigger_configure()
    node.trigger_activate()
    model = robots.load(args.robot)
    q = robots.standing_configuration(model, args.robot)
    js = JointState(name=list(model.joint_names), position=[float(q[i]) for i in model.joint_q_index],
                    velocity=[0.0] * model.na)
    odom = Odometry()
    odom.pose.pose.position.x, odom.pose.pose.position.y, odom.pose.pose.position.z = map(float, q[:3])
    odom.pose.pose.orientation.x, odom.pose.pose.orientation.y, odom.pose.pose.orientation.z, \
        odom.pose.pose.orientation.w = map(float, q[3:7])
    report = {"command": " ".join([Path(sys.executable).name] + sys.argv), "machine": platform.node(),
              "params": args.params, "ticks": args.ticks, "passes": []}
    stamp = 0
    try:
        for item in args.passes.split(","):
            gap_us, spin_us = (float(x) for x in item.split(":"))
            times = np.empty(args.ticks)
            for i in range(args.ticks):
                stamp += 1_000_000
                js.header.stamp.sec, js.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
                data = serialize_message(js)
                if model.floating_base:
                    node._on_odom(odom)
                if gap_us > spin_us:
                    time.sleep((gap_us - spin_us) * 1e-6)
                end = time.perf_counter() + spin_us * 1e-6
                while time.perf_counter() < end:
                    pass
                t0 = time.perf_counter()
                node._on_joint_states(data, None)
                times[i] = time.perf_counter() - t0
            us = times[args.ticks // 10:] * 1e6
            row = {"gap_us": gap_us, "spin_us": spin_us, "p50_us": float(np.percentile(us, 50)),
                   "p99_us": float(np.percentile(us, 99)), "max_us": float(us.max())}
            report["passes"].append(row)
            print(f"gap {gap_us:5.0f} µs, spin {spin_us:5.0f} µs: tick p50 {row['p50_us']:6.1f}  "
                  f"p99 {row['p99_us']:6.1f}  max {row['max_us']:7.1f} µs", flush=True)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
