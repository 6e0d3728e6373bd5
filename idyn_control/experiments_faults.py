"""``idyn-control experiments faults``: the quadruped under the faults of a real robot (issue 14).

Each cell stands 1 s, then stands or trots at 0.2 m/s to the end (5 s in all) in lock-step
MuJoCo, with one fault (:class:`~idyn_control.sim.faults.Faults`) active from the start or,
for the events, at 2.5 s; rigid ground, μ 0.7. Writes Markdown + JSON::

    idyn-control experiments faults [--quick] [--ros] [--out DIR] [--only 'trot/*/qp_coulomb']

``--quick``: 3 s cells, events at 2 s.

``--ros``: the same cells over ROS 2 (real DDS), as ``idyn-control demo`` runs them: the
MuJoCo bridge ``idyn_sim`` lock-step, the gait controller node, and between them the fault
relay (:mod:`idyn_control.ros.fault_relay`: lost, delayed and wrong inputs, the gap) with
the push in the bridge and the mass error in the controller's URDF. Writes
``faults_ros.md`` / ``faults_ros.json`` beside the lock-step table, each cell's logs and
MCAP under ``ros/<cell>/``; adds the controller's deadline misses and dropped inputs (its
/diagnostics), the relay's counts, and the commands checked for NaN/inf or over-limit
values on both sides of the relay.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = "results/experiments/faults"
FORMULATIONS = ("wbc_qp", "qp_coulomb")
TASKS = ("stand", "trot")
#: fault name → (description, Faults fields; "EVENT" stands for the event time)
FAULTS: dict[str, tuple[str, dict[str, Any]]] = {
    "none": ("no fault (baseline)", {}),
    "drop20": ("20 % of joint states lost", {"drop_state": 0.2}),
    "delay5ms": ("5 ms input delay", {"delay": 0.005}),
    "flip10": ("10 % of contact estimates wrong for single ticks", {"contact_flip": 0.1}),
    "gap200ms": ("200 ms without any input (bridged on the predicted state)", {"gap": ("EVENT", 0.2)}),
    "mass+10": ("model masses +10 %", {"mass_error": 0.1}),
    "mass-10": ("model masses −10 %", {"mass_error": -0.1}),
    "push30": ("lateral push, 30 % of body weight for 0.1 s", {"push": ("EVENT", 0.1, 0.3)}),
}


def cells(quick: bool = False, only: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    duration, event = (3.0, 2.0) if quick else (5.0, 2.5)
    out = []
    for task in TASKS:
        for fault, (_, fields) in FAULTS.items():
            for formulation in FORMULATIONS:
                cid = f"{task}/{fault}/{formulation}"
                if only and not any(fnmatch.fnmatch(cid, p) for p in only):
                    continue
                faults = {k: tuple(event if x == "EVENT" else x for x in v) if isinstance(v, tuple) else v
                          for k, v in fields.items()}
                out.append({"id": cid, "task": task, "fault": fault, "formulation": formulation,
                            "faults": faults, "duration": duration})
    return out


def run_cell(cell: dict[str, Any]) -> dict[str, Any]:
    from .sim.lockstep import run_scenario

    t0 = time.perf_counter()
    run = run_scenario(robot="quadruped", formulation=cell["formulation"], duration=cell["duration"],
                       trot_start=1.0 if cell["task"] == "trot" else 1e9, friction=0.7, faults=cell["faults"])
    m = run.metrics
    keep = ("fell", "fall_time_s", "speed_along_command_m_s", "joint_position_error_rad", "base_height_min_m",
            "fallback_ticks", "faults", "prediction_error_max")
    return {**cell, "metrics": {k: m.get(k) for k in keep}, "wall_time_s": time.perf_counter() - t0}


#: the ROS cells' extra metrics (the demo's report: controller /diagnostics, relay, commands)
ROS_KEEP = ("base_xy_drift_m", "deadline_misses", "controller_ticks", "tick_p99_us", "real_time_factor", "commands_checked",
            "unsafe_commands", "relay", "bridge_push_steps", "bridge_lockstep_timeouts", "failure")


def run_cell_ros(cell: dict[str, Any], out: Path, log=print, wall_timeout: float = 600.0) -> dict[str, Any]:
    """One cell over ROS 2: ``idyn-control demo`` with the cell's faults (stand 1 s, then
    trot at 0.2 m/s or keep standing to the end; no crouch, as the lock-step cell), given up
    after ``wall_timeout`` [s] of wall time (a failure in the metrics)."""
    from . import demo

    t0 = time.perf_counter()
    trot = cell["task"] == "trot"
    opts = demo.DemoOptions(robot="quadruped", formulation=cell["formulation"], duration=cell["duration"] - 1.0,
                            speed=0.2 if trot else 0.0, stand_time=1.0, stop_time=0.0, crouch=0.0, friction=0.7,
                            out=str(out / "ros" / cell["id"].replace("/", "_")), faults=dict(cell["faults"]),
                            wall_timeout=wall_timeout)
    report = demo.run(opts, log=lambda m: None)
    m = report["metrics"]
    keep = ("fell", "fall_time_s", "speed_along_command_m_s", "joint_position_error_rad", "base_height_min_m",
            "fallback_ticks") + ROS_KEEP
    metrics = {k: m.get(k) for k in keep}
    metrics["controller_dropped"] = {k[len("controller_dropped."):]: v for k, v in m.items()
                                     if k.startswith("controller_dropped.") and v}
    metrics["watchdog_trips"] = m.get("controller_watchdog_trips")
    for key in ("input_gaps", "predicted_ticks", "prediction_expired"):  # the node's prediction (/diagnostics)
        metrics[key] = m.get(f"controller_{key}")
    if not trot:
        metrics["speed_along_command_m_s"] = None
    return {**cell, "metrics": metrics, "wall_time_s": time.perf_counter() - t0}


def run(*, quick: bool = False, out: str | Path = DEFAULT_OUT, only: tuple[str, ...] = (), ros: bool = False,
        log=print) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for cell in cells(quick, only):
        r = run_cell_ros(cell, out) if ros else run_cell(cell)
        m = r["metrics"]
        extra = (f"  misses {m['deadline_misses']}  unsafe {m['unsafe_commands']}/{m['commands_checked']}"
                 f"  relay held {m['relay'].get('held', '?')}" if ros else "")
        log(f"  {cell['id']:<28} {'FELL at %.2f s' % m['fall_time_s'] if m['fell'] else 'ok':<14} "
            f"speed {_fmt(m['speed_along_command_m_s'], '.3f')}  |q−q_ref| {_fmt(m['joint_position_error_rad'], '.4f')} rad"
            f"{extra}  ({r['wall_time_s']:.0f} s)")
        results.append(r)
    report = {"experiment": "faults", "quick": quick, "robot": "quadruped", "ros": ros, "cells": results,
              "faults": {k: v[0] for k, v in FAULTS.items()}}
    name = "faults_ros" if ros else "faults"
    (out / f"{name}.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=float))
    (out / f"{name}.md").write_text(format_markdown(report))
    log(f"wrote {out}/{name}.md, {name}.json")
    return report


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def format_markdown(report: dict[str, Any]) -> str:
    by = {(c["task"], c["fault"], c["formulation"]): c for c in report["cells"]}
    ros = report.get("ros", False)
    lines = ["# Faults in closed loop (issue 14)" + (", over ROS 2" if ros else ""), "",
             "The project's quadruped (2.9 kg), "
             + ("MuJoCo bridge + fault relay + gait controller node over DDS (lock-step), " if ros else
                "lock-step MuJoCo, ") + "rigid ground μ 0.7; "
             f"{'3' if report['quick'] else '5'} s per cell (stand 1 s, then stand or trot 0.2 m/s). "
             "Events (gap, push) at " + ("2 s" if report["quick"] else "2.5 s") + ". "
             "Each cell: fell (time) or ok, speed along the command [m/s], E|q − q_ref| [rad].", ""]
    header = "| fault | " + " | ".join(f"{t} {f}" for t in TASKS for f in FORMULATIONS) + " |"
    lines += [header, "|---" * (1 + len(TASKS) * len(FORMULATIONS)) + "|"]
    for fault, (description, _) in FAULTS.items():
        row = [description]
        for task in TASKS:
            for formulation in FORMULATIONS:
                c = by.get((task, fault, formulation))
                if c is None:
                    row.append("")
                    continue
                m = c["metrics"]
                verdict = f"**fell {m['fall_time_s']:.2f} s**" if m["fell"] else "ok"
                speed = f", {m['speed_along_command_m_s']:.3f}" if task == "trot" and not m["fell"] else ""
                row.append(f"{verdict}{speed}, {_fmt(m['joint_position_error_rad'], '.3f')}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Faults as the controller meets them: a delayed state leaves the controller ticking on "
              "the last one it received; a lost state or the gap, on the state it predicts (the last one "
              "it received integrated with its own q̈: the quadruped file's prediction_horizon 0.25 s, as "
              "the node); without input for longer than that (and than the node's 50 ms watchdog) the "
              "command is the safe output, and fresh input resets controller and gait (the node's "
              "recovery). Contact flips last one tick. The mass error is in the controller's model only.", ""]
    if ros:
        lines[-2] = ("Over ROS the relay withholds a lost or gapped state: the controller (which ticks on "
                     "/joint_states) does not tick and the actuators keep its last command (the relay "
                     "sends it on so that the lock-step bridge steps). Once its input is 1.5 periods late "
                     "the controller ticks on its own on the state it predicts (prediction_horizon 0.25 s; "
                     "predicted ticks and gaps in its /diagnostics; its timers run on the simulated clock, so "
                     "it notices within 5 simulated periods), and from then on the relay hands the simulator "
                     "the controller's next command each period (\"followed\"), as a robot's drivers get "
                     "them, instead of one it holds. The periods before are paced in wall time; the "
                     "controller's watchdog is the demo's 2 s (wall-clock "
                     "stalls of the lock-step loop on a loaded machine are no gap). The mass error is in "
                     "the controller's URDF only, the "
                     "push is a force on the base in the bridge.")
        lines += ["| cell | fell | speed [m/s] | E\\|q − q_ref\\| [rad] | deadline misses | controller "
                  "dropped inputs | watchdog trips | predicted ticks / gaps | relay held (followed) / delivered | "
                  "unsafe / commands |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for c in report["cells"]:
            m = c["metrics"]
            relay = m.get("relay") or {}
            dropped = ", ".join(f"{k} {v}" for k, v in (m.get("controller_dropped") or {}).items()) or "0"
            lines.append(f"| {c['id']} | {'**%.2f s**' % m['fall_time_s'] if m['fell'] else 'no'} | "
                         f"{_fmt(m['speed_along_command_m_s'], '.3f')} | {_fmt(m['joint_position_error_rad'], '.4f')} | "
                         f"{_fmt(m.get('deadline_misses'), 'd')} | {dropped} | {_fmt(m.get('watchdog_trips'), 'd')} | "
                         f"{_fmt(m.get('predicted_ticks'), 'd')} / {_fmt(m.get('input_gaps'), 'd')} | "
                         f"{relay.get('held', '–')} ({relay.get('commands_followed', '–')}) / "
                         f"{relay.get('delivered', '–')} | "
                         f"{_fmt(m.get('unsafe_commands'), 'd')} / {_fmt(m.get('commands_checked'), 'd')} |")
        lines.append("")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    only = tuple(p for p in getattr(args, "only", "").split(",") if p)
    if not cells(args.quick, only):
        print(f"idyn-control experiments: no cell matches {args.only!r}; cells: "
              + ", ".join(c["id"] for c in cells(args.quick)), file=sys.stderr)
        return 2
    run(quick=args.quick, out=args.out or DEFAULT_OUT, only=only, ros=getattr(args, "ros", False),
        log=lambda m: print(m, flush=True))
    return 0
