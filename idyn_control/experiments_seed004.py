"""``idyn-control experiments seed004``: seed 004 §IV (Figs. 3–4) in closed loop.

ANYmal C stands on three legs at a constant torso pose while its left-front foot presses
the ground with the sine and the step force profile (:mod:`idyn_control.sim.force_tracking`),
for the proposed controller and its two baselines, in lock-step MuJoCo and, with ``--ros``,
also through the ROS 2 nodes (:mod:`idyn_control.ros.force_tracking`: the MuJoCo bridge, the
controller node in its compiled loop, the desired force streamed over DDS at the control
rate). Writes Markdown + JSON + PNG::

    idyn-control experiments seed004 [--quick] [--ros] [--out DIR] [--only 'sine/*,step/pidc_qp']

Full runs: the sine profile over one period of its slowest component (F_x, 2π/0.2 =
31.4 s), the step profile 5 levels × 2 s. ``--quick``: 3 s of each.
The paper publishes figures only (no numbers): its claims are quoted beside ours.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_OUT = "results/experiments/seed004"
AXES = ("x", "y", "z")
#: controllers of seed 004 §IV: formulation → paper label
CONTROLLERS = {"pidc_qp": "Proposed", "pidc_qp_howsm": "HOWSM", "pidcwcu": "PIDCWCU"}
PROFILES = ("sine", "step")
#: what seed 004 §IV says about each (Figs. 3–4; no table of numbers is published)
PAPER = {
    "pidc_qp": "accurate in every direction, slight errors; minimal base motion",
    "pidc_qp_howsm": "deviates: the pressing leg also serves the motion task",
    "pidcwcu": "deviates: the underactuation term (I−P)τ_u disturbs the force",
}
SERIES_STRIDE = 10  # ticks between samples kept in the JSON series (10 ms)
#: how a cell runs: lock-step in one process, or through the ROS 2 nodes over DDS
LOOPS = {"lockstep": "lock-step", "ros": "node (DDS)"}


def cells(quick: bool = False, only: tuple[str, ...] = (), ros: bool = False) -> list[dict[str, Any]]:
    out = []
    for profile in PROFILES:
        for name in CONTROLLERS:
            cid = f"{profile}/{name}"
            if only and not any(fnmatch.fnmatch(cid, p) for p in only):
                continue
            for loop in ("lockstep", "ros") if ros else ("lockstep",):
                out.append({"id": cid, "profile": profile, "formulation": name, "loop": loop,
                            "duration": 3.0 if quick else None})
    return out


def run_cell(cell: dict[str, Any], out: Path | None = None, log=lambda _: None) -> dict[str, Any]:
    from .sim.force_tracking import run_force_tracking

    t0 = time.perf_counter()
    options = dict(formulation=cell["formulation"], profile=cell["profile"], duration=cell["duration"])
    if cell.get("loop") == "ros":
        from .ros.force_tracking import run_force_tracking_ros

        logs = Path(out or DEFAULT_OUT) / "ros" / cell["id"].replace("/", "_")
        run = run_force_tracking_ros(out=logs, log=log, **options)
    else:
        run = run_force_tracking(**options)
    s = slice(None, None, SERIES_STRIDE)
    series = {"t": run.t[s], "f_des": run.f_des[s], "f_meas": run.f_meas[s], "f_pred": run.f_pred[s],
              "base_pos": run.base_pos[s], "base_rpy": run.base_rpy[s], "tau": run.tau[s]}
    return {**cell, "metrics": run.metrics, "wall_time_s": time.perf_counter() - t0,
            "tau_limit_Nm": run.tau_limit.tolist(),
            "series": {k: np.round(v, 5).tolist() for k, v in series.items()}}


def run(*, quick: bool = False, out: str | Path = DEFAULT_OUT, only: tuple[str, ...] = (), ros: bool = False,
        log=print) -> dict[str, Any]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for cell in cells(quick, only, ros):
        log(f"running {cell['id']} ({LOOPS[cell['loop']]}) ...")
        r = run_cell(cell, out, log)
        m = r["metrics"]
        log(f"  {cell['id']}: {'FELL at %.2f s, ' % m['fall_time_s'] if m['fell'] else ''}RMSE {np.round(m['rmse_N'], 2).tolist()} N, base drift "
            f"{1e3 * m['base_position_drift_max_m']:.2f} mm / {m['base_orientation_drift_max_deg']:.3f}°, "
            f"{r['wall_time_s']:.0f} s")
        results.append(r)
    report = {"experiment": "seed004", "quick": quick, "commit": _git_commit(),
              "cells": [{k: v for k, v in r.items() if k != "series"} for r in results], "paper": PAPER}
    _add_ratios(report)
    (out / "seed004.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out / "series.json").write_text(json.dumps({_key(r): r["series"] for r in results}))
    figures = plot_figures(results, out)
    (out / "seed004.md").write_text(format_markdown(report, figures))
    log(f"wrote {out}/seed004.md, seed004.json, series.json, " + ", ".join(figures))
    return report


def _key(cell: dict[str, Any]) -> str:
    """A cell's name in the series file: its id, and the loop when it ran through the nodes."""
    return cell["id"] if cell.get("loop", "lockstep") == "lockstep" else f"{cell['id']}@{cell['loop']}"


def _add_ratios(report: dict[str, Any]) -> None:
    """Baseline RMSE / proposed RMSE per axis (the acceptance asks ≥ 3 where they deviate),
    against the proposed controller run the same way (lock-step or through the nodes)."""
    by_id = {(c["id"], c.get("loop", "lockstep")): c for c in report["cells"]}
    for c in report["cells"]:
        ref = by_id.get((f"{c['profile']}/pidc_qp", c.get("loop", "lockstep")))
        if ref is None or c["formulation"] == "pidc_qp":
            continue
        c["rmse_ratio_to_proposed"] = [b / a if a > 0 else math.inf
                                       for a, b in zip(ref["metrics"]["rmse_N"], c["metrics"]["rmse_N"])]


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def format_markdown(report: dict[str, Any], figures: list[str]) -> str:
    lines = ["# Seed 004 §IV in closed loop: ANYmal C force tracking (MuJoCo)", "",
             f"Commit `{report['commit']}`{' — QUICK (3 s per cell)' if report['quick'] else ''}. "
             "Measured = the force MuJoCo applied to the left-front foot (averaged over each 1 ms period); "
             "errors after the settling window (0.5 s after the start and after every step). "
             "Base gains Kp = 2000, Kd = 100 (acceleration gains, all six axes); μ = 0.7; the controller's "
             "contact Jacobian is the foot centre's, as in the paper. Loop: lock-step = controller and "
             "MuJoCo in one process; node (DDS) = the MuJoCo bridge and the controller node over DDS, "
             "the desired force streamed to the node at the control rate (`--ros`).", "",
             "| profile | controller | loop | RMSE x / y / z [N] | max error x / y / z [N] | settling [s] | "
             "base drift [mm] / [°] | max |τ| [N·m] (limit) | fallback ticks | RMSE ÷ proposed | paper (Figs. 3–4) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in report["cells"]:
        m = c["metrics"]
        ratio = c.get("rmse_ratio_to_proposed")
        lines.append(
            f"| {c['profile']} | {CONTROLLERS[c['formulation']]} | {LOOPS[c.get('loop', 'lockstep')]} | "
            + " / ".join(f"{x:.2f}" for x in m["rmse_N"]) + " | "
            + " / ".join(f"{x:.2f}" for x in m["max_error_N"]) + " | "
            + _settling(m["settling_times_s"]) + " | "
            + (f"FELL at {m['fall_time_s']:.2f} s; " if m["fell"] else "") + f"{1e3 * m['base_position_drift_max_m']:.2f} / "
            f"{m['base_orientation_drift_max_deg']:.3f} | {m['tau_max_abs_Nm']:.1f} ({c['tau_limit_Nm'][0]:.0f}) | "
            f"{m['fallback_ticks']} | " + (" / ".join(_ratio(x) for x in ratio) if ratio else "—")
            + f" | {report['paper'][c['formulation']]} |")
    lines += ["", "Settling: per reference jump, the time until every axis's error stays within 2 N. "
              "Base drift: largest distance from (0, 0, 0.57) m and largest rotation angle over the whole run. "
              "A run stops when the torso falls (below half its height or tilted > 1 rad); its errors are "
              "those before the fall.", ""]
    ros_cells = [c for c in report["cells"] if c.get("loop") == "ros"]
    if ros_cells:
        lines += ["Through the nodes (the controller node's /diagnostics and the recorded topics): compiled / "
                  "Python ticks of its loop, input → command latency in the node, joints clamped to their "
                  "effort limit, real-time factor of the lock-step simulation over DDS, and which reference "
                  "the ticks used (among the ticks whose predicted force equals a reference: the previous "
                  "tick's, this tick's, the next tick's; the stream is asynchronous to the node by one hop), "
                  "ticks whose messages the recorder lost (the bridge's publishers keep 10 samples; left out "
                  "of the errors).", "",
                  "| profile | controller | compiled / Python ticks | input → command p50 / p99 [µs] | "
                  "clamped joint-ticks | real-time factor | reference used: previous / this / next | "
                  "ticks not recorded |",
                  "|---|---|---|---|---|---|---|---|"]
        for c in ros_cells:
            r = c["metrics"].get("ros", {})
            lag = r.get("reference_lag", {})
            lines.append(
                f"| {c['profile']} | {CONTROLLERS[c['formulation']]} | {r.get('compiled_ticks', math.nan):.0f} / "
                f"{r.get('python_ticks', math.nan):.0f} | {r.get('input_to_command_p50_us', math.nan):.0f} / "
                f"{r.get('input_to_command_p99_us', math.nan):.0f} | {r.get('saturated_joint_ticks', math.nan):.0f} | "
                f"{r.get('real_time_factor', math.nan):.2f} | {lag.get('previous_tick', 0)} / "
                f"{lag.get('this_tick', 0)} / {lag.get('next_tick', 0)} | {r.get('unrecorded_ticks', 0)} |")
        lines.append("")
    prop = next((c for c in report["cells"] if c["id"] == "sine/pidc_qp"), None)
    if prop is not None:
        k = np.array(prop["metrics"]["error_per_tangential_force"])
        lines += ["What the foot-centre Jacobian costs (proposed, sine): MuJoCo applies the force at the bottom "
                  "of the 3 cm foot sphere, the controller models it at the centre, so a tangential force "
                  "has an unmodelled moment r × f_t. The error follows the tangential force: per newton of "
                  f"F_x, {k[0, 0]:+.3f} / {k[1, 0]:+.3f} / {k[2, 0]:+.3f} N on x / y / z; per newton of F_y, "
                  f"{k[0, 1]:+.3f} / {k[1, 1]:+.3f} / {k[2, 1]:+.3f} N. With no tangential force (step profile) "
                  "the measured force is exact.", ""]
    lines += [f"![{f}]({f})" for f in figures]
    return "\n".join(lines) + "\n"


def _ratio(x: float) -> str:
    """A baseline's RMSE over the proposed one's; beyond 1000 the proposed error is round-off."""
    return "> 1000" if x > 1000 else f"{x:.0f}"


def _settling(times: list[float]) -> str:
    return "never" if any(math.isnan(x) for x in times) else f"{max(times):.3f}"


def plot_figures(results: list[dict[str, Any]], out: Path) -> list[str]:
    """Figs. 3 (sine) and 4 (step): force per axis for the three controllers; base motion
    and torques of the proposed controller."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for profile, fig_name in (("sine", "fig3_sine_force_tracking.png"), ("step", "fig4_step_force_tracking.png")):
        rs = [r for r in results if r["profile"] == profile]
        if not rs:
            continue
        fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
        for r in rs:
            s = r["series"]
            t, f = np.array(s["t"]), np.array(s["f_meas"])
            ros = r.get("loop") == "ros"
            for i in range(3):
                axes[i].plot(t, f[:, i], ":" if ros else "-", lw=1.5 if ros else 1,
                             label=CONTROLLERS[r["formulation"]] + (" (node)" if ros else ""))
        s0 = rs[0]["series"]
        t0, fd = np.array(s0["t"]), np.array(s0["f_des"])
        for i in range(3):
            axes[i].plot(t0, fd[:, i], "k--", lw=1, label="desired")
            axes[i].set_ylabel(f"F{AXES[i]} [N]")
        axes[0].legend(ncol=4, fontsize=8)
        prop = next((r for r in rs if r["formulation"] == "pidc_qp" and r.get("loop", "lockstep") == "lockstep"), None)
        if prop is not None:
            s = prop["series"]
            t = np.array(s["t"])
            pos, rpy = np.array(s["base_pos"]), np.array(s["base_rpy"])
            for i, a in enumerate(AXES):
                axes[3].plot(t, 1e3 * (pos[:, i] - (0.57 if i == 2 else 0.0)), label=f"{a} [mm]", lw=1)
                axes[3].plot(t, np.degrees(rpy[:, i]), "--", label=("roll", "pitch", "yaw")[i] + " [°]", lw=1)
            axes[3].set_ylabel("base (proposed)")
            axes[3].legend(ncol=6, fontsize=7)
            axes[4].plot(t, np.array(s["tau"]), lw=0.7)
            axes[4].set_ylabel("τ proposed [N·m]")
        axes[4].set_xlabel("t [s]")
        fig.suptitle(f"seed 004 §IV, {profile} profile: measured (MuJoCo) vs desired LF foot force")
        fig.tight_layout()
        fig.savefig(out / fig_name, dpi=100)
        plt.close(fig)
        written.append(fig_name)
    return written


def main(args: argparse.Namespace) -> int:
    only = tuple(p for p in getattr(args, "only", "").split(",") if p)
    if not cells(args.quick, only):
        print(f"idyn-control experiments: no cell matches {args.only!r}; cells: "
              + ", ".join(c["id"] for c in cells(args.quick)), file=sys.stderr)
        return 2
    out = args.out or DEFAULT_OUT
    run(quick=args.quick, out=out, only=only, ros=getattr(args, "ros", False), log=lambda m: print(m, flush=True))
    return 0
