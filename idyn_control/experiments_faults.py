"""``idyn-control experiments faults``: the quadruped under the faults of a real robot (issue 14).

Each cell stands 1 s, then stands or trots at 0.2 m/s to the end (5 s in all) in lock-step
MuJoCo, with one fault (:class:`~idyn_control.sim.faults.Faults`) active from the start or,
for the events, at 2.5 s; rigid ground, μ 0.7. Writes Markdown + JSON::

    idyn-control experiments faults [--quick] [--out DIR] [--only 'trot/*/qp_coulomb']

``--quick``: 3 s cells, events at 2 s.
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
    "gap200ms": ("200 ms without any input (watchdog: safe output)", {"gap": ("EVENT", 0.2)}),
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
            "fallback_ticks", "faults")
    return {**cell, "metrics": {k: m.get(k) for k in keep}, "wall_time_s": time.perf_counter() - t0}


def run(*, quick: bool = False, out: str | Path = DEFAULT_OUT, only: tuple[str, ...] = (), log=print) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for cell in cells(quick, only):
        r = run_cell(cell)
        m = r["metrics"]
        log(f"  {cell['id']:<28} {'FELL at %.2f s' % m['fall_time_s'] if m['fell'] else 'ok':<14} "
            f"speed {_fmt(m['speed_along_command_m_s'], '.3f')}  |q−q_ref| {_fmt(m['joint_position_error_rad'], '.4f')} rad"
            f"  ({r['wall_time_s']:.0f} s)")
        results.append(r)
    report = {"experiment": "faults", "quick": quick, "robot": "quadruped", "cells": results,
              "faults": {k: v[0] for k, v in FAULTS.items()}}
    (out / "faults.json").write_text(json.dumps(report, indent=1, ensure_ascii=False, default=float))
    (out / "faults.md").write_text(format_markdown(report))
    log(f"wrote {out}/faults.md, faults.json")
    return report


def _fmt(x, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def format_markdown(report: dict[str, Any]) -> str:
    by = {(c["task"], c["fault"], c["formulation"]): c for c in report["cells"]}
    lines = ["# Faults in closed loop (issue 14)", "",
             f"The project's quadruped (2.9 kg), lock-step MuJoCo, rigid ground μ 0.7; "
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
    lines += ["", "Faults as the controller meets them: a lost or delayed state leaves the controller "
              "ticking on the last one it received; after 50 ms without input (the node's watchdog) "
              "the command is the safe output, and fresh input resets controller and gait (the node's "
              "recovery). Contact flips last one tick. The mass error is in the controller's model only.", ""]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    only = tuple(p for p in getattr(args, "only", "").split(",") if p)
    if not cells(args.quick, only):
        print(f"idyn-control experiments: no cell matches {args.only!r}; cells: "
              + ", ".join(c["id"] for c in cells(args.quick)), file=sys.stderr)
        return 2
    run(quick=args.quick, out=args.out or DEFAULT_OUT, only=only, log=lambda m: print(m, flush=True))
    return 0
