"""Soak (issue 14 item 4): many ticks of the controller with contact switches and parameter
changes; memory growth (RSS) and tick-time drift as JSON.

    PYTHONPATH=. python bench/soak.py [--ticks 1000000] [--backends native,python]
        [--robot quadruped] [--formulation wbc_qp] [--windows 20] [--json results/soak.json]

Each backend runs ``Controller.update`` (the tick the node and the lock-step loop run:
kinematic layer, formulation, safety) on a moving standing state: joints and base
oscillate, a diagonal pair of feet swings (follows foot references, not held) for 150 of
every 300 ticks, alternating pairs; every 997 ticks the gains change
(``set_gains``: joint and base stiffness), every 1999 the friction of every contact
(``contacts.set_friction``, which rebuilds the friction blocks), every 4999 a formulation
option (wbc_qp ``w_base``; qp_coulomb ``friction_margin``), and every 100 000 the
formulation is rebuilt as the node does on an option change that needs it (the compiled
objects of the old one are freed). ``native`` = the compiled engine, kinematic layer and
formulation (one C++ call each, Python around them); ``python`` = the Python reference.

RSS (``/proc/self/statm``) and the tick time are sampled per window of ticks; growth is
the RSS after the last window minus the RSS after the first (warm-up: allocator pools,
caches), and minus the RSS after the first window that follows the first rebuild (the new
formulation is made while the old one still lives: a one-time high-water mark); drift is
the last window's median tick time over the first's, in wall time and in the thread's CPU
time (which the other processes of a shared machine disturb less). The garbage collector
is frozen after set-up, as in the node.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from idyn_control import formulations, robots
from idyn_control.controller import Controller, ControllerConfig, trim_heap

ROOT = Path(__file__).resolve().parents[1]
PAGE_KB = os.sysconf("SC_PAGE_SIZE") / 1024
#: ticks between rebuilds of the formulation
REBUILD_EVERY = 100_000
#: the option each formulation changes at run time, and the two values it alternates
OPTION_CHANGES = {"wbc_qp": ("w_base", 1.0, 2.0), "qp_coulomb": ("friction_margin", 0.2, 0.1),
                  "qp_noslip": ("friction_margin", 0.2, 0.1)}


def rss_kb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_KB


def soak(robot: str, formulation: str, backend: str, ticks: int, windows: int) -> dict:
    model = robots.load(robot)
    q0 = robots.standing_configuration(model, robot)
    config = ControllerConfig(formulation=formulation, formulation_options={"backend": backend})
    ctrl = Controller(model, config)
    if ctrl.formulation.backend != backend:
        raise SystemExit(f"{formulation} has no {backend} backend here ({ctrl.formulation.native_unavailable})")
    ctrl.reset(q0, np.zeros(model.nv))
    k, na, nv = len(model.contacts), model.na, model.nv
    option, *option_values = OPTION_CHANGES.get(formulation, (None, None, None))
    # feet positions at the start: the swing references lift them 1 cm
    ctrl.formulation.prepare(q0, np.zeros(nv), model.contact_frames)
    feet = ctrl.formulation.contacts.position.copy()
    pairs = (np.array([0, 3]), np.array([1, 2])) if k == 4 else (np.arange(0, k, 2), np.arange(1, k, 2))
    phase = np.linspace(0.0, 2.0 * math.pi, na, endpoint=False)
    q, v = q0.copy(), np.zeros(nv)
    mask = np.ones(k, dtype=bool)
    lift = np.zeros(3)
    window = max(1, ticks // windows)
    times, cpu = np.empty(window), np.empty(window)
    rows, counts = [], {"contact_switches": 0, "gain_changes": 0, "friction_changes": 0, "option_changes": 0,
                        "rebuilds": 0, "statuses": {}}
    gc.collect()
    gc.freeze()
    t_start = time.perf_counter()
    for i in range(ticks):
        t = i * 1e-3
        # the state: joints ±0.05 rad at 1 Hz, base ±1 cm and ±0.02 rad at 0.5 Hz
        s = np.sin(2.0 * math.pi * t + phase)
        q[model.joint_q_index] = q0[model.joint_q_index] + 0.05 * s
        v[6:] = 0.1 * math.pi * np.cos(2.0 * math.pi * t + phase)
        q[2] = q0[2] + 0.01 * math.sin(math.pi * t)
        v[2] = 0.01 * math.pi * math.cos(math.pi * t)
        if i % 150 == 0:  # contact switch: a diagonal pair lifts, or all four are down
            swing = pairs[(i // 300) % 2] if (i // 150) % 2 else ()
            mask[:] = True
            ctrl.swing[:] = False
            for j in swing:
                mask[j] = False
                lift[:] = feet[j]
                lift[2] += 0.01
                ctrl.set_foot_reference(j, lift)
            counts["contact_switches"] += 1
        if i % 997 == 996:
            ctrl.set_gains(joint_kp=400.0 + 100.0 * ((i // 997) % 2), base_kp=300.0 + 100.0 * ((i // 997) % 2))
            counts["gain_changes"] += 1
        if i % 1999 == 1998:
            mu = 0.8 if (i // 1999) % 2 else 0.6
            for j in range(k):
                ctrl.formulation.contacts.set_friction(j, mu)
            counts["friction_changes"] += 1
        if option is not None and i % 4999 == 4998:
            ctrl.formulation.set_option(option, option_values[(i // 4999) % 2])
            counts["option_changes"] += 1
        if i % REBUILD_EVERY == REBUILD_EVERY - 1:  # the node's rebuild on an option change
            ctrl.formulation = formulations.make(formulation, model, dt=config.dt, **config.formulation_options)
            ctrl.formulation.reset()
            trim_heap()  # as the node after a formulation change (node_loop._release_retired)
            counts["rebuilds"] += 1
        c0, t0 = time.thread_time(), time.perf_counter()
        cmd = ctrl.update(q, v, mask)
        times[i % window] = time.perf_counter() - t0
        cpu[i % window] = time.thread_time() - c0
        status = cmd.result.status if cmd.result is not None else "none"
        counts["statuses"][status] = counts["statuses"].get(status, 0) + 1
        if i % window == window - 1:
            us = times * 1e6
            rows.append({"tick": i + 1, "rss_kb": rss_kb(), "tick_us_p50": float(np.median(us)),
                         "tick_us_p99": float(np.percentile(us, 99)), "tick_us_max": float(us.max()),
                         "cpu_us_p50": float(np.median(cpu) * 1e6), "cpu_us_p99": float(np.percentile(cpu, 99) * 1e6)})
            print(f"{backend:6s} tick {i + 1:8d}  RSS {rows[-1]['rss_kb'] / 1024:8.2f} MB  "
                  f"wall p50 {rows[-1]['tick_us_p50']:7.1f} µs  p99 {rows[-1]['tick_us_p99']:7.1f} µs  "
                  f"CPU p50 {rows[-1]['cpu_us_p50']:7.1f} µs", flush=True)
    wall = time.perf_counter() - t_start
    gc.unfreeze()
    first, last = rows[0], rows[-1]
    settled = next((r for r in rows if r["tick"] > REBUILD_EVERY), first)
    return {"backend": backend, "robot": robot, "formulation": formulation, "ticks": ticks, "wall_s": wall,
            "rss_growth_kb": last["rss_kb"] - first["rss_kb"], "rss_first_window_kb": first["rss_kb"],
            "rss_growth_after_first_rebuild_kb": last["rss_kb"] - settled["rss_kb"],
            "rss_last_window_kb": last["rss_kb"], "rss_max_kb": max(r["rss_kb"] for r in rows),
            "tick_p50_drift": last["tick_us_p50"] / first["tick_us_p50"],
            "cpu_p50_drift": last["cpu_us_p50"] / first["cpu_us_p50"],
            "fallback_ticks": ctrl.counters["fallback"], "relaxations": ctrl.formulation.relaxations(),
            **counts, "windows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=1_000_000)
    ap.add_argument("--backends", default="native,python")
    ap.add_argument("--robot", default="quadruped")
    ap.add_argument("--formulation", default="wbc_qp")
    ap.add_argument("--windows", type=int, default=20)
    ap.add_argument("--json", default=str(ROOT / "results/soak.json"))
    args = ap.parse_args(argv)
    report = {"command": " ".join(["bench/soak.py", *(argv if argv is not None else sys.argv[1:])]),
              "machine": platform.platform(), "runs": []}
    for backend in args.backends.split(","):
        run = soak(args.robot, args.formulation, backend, args.ticks, args.windows)
        report["runs"].append(run)
        print(f"{backend}: {run['ticks']} ticks in {run['wall_s']:.0f} s, RSS growth {run['rss_growth_kb']:.0f} kB "
              f"({run['rss_growth_after_first_rebuild_kb']:.0f} kB after the first rebuild; first window "
              f"{run['rss_first_window_kb'] / 1024:.1f} MB), p50 drift x{run['tick_p50_drift']:.3f} wall, "
              f"x{run['cpu_p50_drift']:.3f} CPU, fallback ticks {run['fallback_ticks']}, statuses {run['statuses']}",
              flush=True)
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
