"""Per-tick compute benchmarks (DESIGN.md §6): the ROS-free core, timed tick by tick.

A tick is everything the controller does between a state and a command: desired
accelerations from the references, the Pinocchio pass, contact terms, QP assembly and
solve. Statistics are p50/p99/p99.9/max over many ticks plus deadline misses at 1 kHz.
The same scenario is solved by the C++ peer (PlaCo's DynamicsSolver, in its own venv)
in the same run, and the ratio is reported. Never asserted in tests: machines are noisy.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import formulations, robots

DEADLINE_S = 1e-3
#: scenario shared with bench/peer_placo.py: posture PD and CoM task as PlaCo configures them
KP, KD = 100.0, 20.0
AMPLITUDE_RAD, FREQUENCY_HZ = 0.01, 1.0


def summarize(times_s: np.ndarray) -> dict:
    """p50/p99/p99.9/max [µs] and 1 kHz deadline misses of per-tick times [s]."""
    us = np.asarray(times_s) * 1e6
    return {
        "ticks": int(us.size),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "p999_us": float(np.percentile(us, 99.9)),
        "max_us": float(us.max()),
        "mean_us": float(us.mean()),
        "misses": int((us > DEADLINE_S * 1e6).sum()),
    }


def machine() -> dict:
    return {
        "node": platform.node(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def standing(formulation: str, *, robot: str = "solo12", ticks: int = 10_000, warmup: int = 500,
             **options) -> dict:
    """Robot standing on all feet with a slowly moving posture (the peer's scenario).

    Joint j follows q_stand + A sin(2π f t + j); the tick computes the posture PD
    acceleration, then solves. ``wbc_qp`` also tracks the CoM (weight 1, kp 100),
    as the peer does.
    """
    model = robots.load(robot)
    f = formulations.make(formulation, model, **options)
    q_stand = robots.standing_configuration(model, robot)
    if formulation == "wbc_qp":
        f.add_com_task(1.0)
        f.solve(q_stand, np.zeros(model.nv), np.zeros(model.nv), model.contact_frames)
        f.set_task_reference("com", f.tasks["com"].position.copy(), kp=KP, kd=KD)
    joints = model.joint_q_index
    phase0 = np.arange(model.na)
    contacts = model.contact_frames
    nb = model.n_base
    q, v, qdd_des = q_stand.copy(), np.zeros(model.nv), np.zeros(model.nv)
    times = np.empty(ticks)
    statuses: dict[str, int] = {}
    # as the node does after configure: collect, then freeze the survivors so the young
    # generations the tick's small garbage triggers stay cheap
    gc.collect()
    gc.freeze()
    for i in range(-warmup, ticks):
        t = i * f.dt
        phase = 2 * np.pi * FREQUENCY_HZ * t + phase0
        q[joints] = q_stand[joints] + AMPLITUDE_RAD * np.sin(phase)
        v[nb:] = 2 * np.pi * FREQUENCY_HZ * AMPLITUDE_RAD * np.cos(phase)
        t0 = time.perf_counter()
        qdd_des[nb:] = KP * (q_stand[joints] - q[joints]) - KD * v[nb:]
        result = f.solve(q, v, qdd_des, contacts)
        dt = time.perf_counter() - t0
        if i >= 0:
            times[i] = dt
            statuses[result.status] = statuses.get(result.status, 0) + 1
    gc.unfreeze()
    out = {"formulation": formulation, "backend": f.backend, "robot": robot, "contacts": len(contacts),
           "options": {k: v for k, v in options.items()}, "status": statuses}
    out.update(summarize(times))
    return out


def peer_python(root: Path | None = None) -> Path | None:
    """The PlaCo venv's interpreter, if ``bench/setup_peer.sh`` created it."""
    root = root or Path(__file__).resolve().parents[1]
    venv = Path(os.environ.get("IDYN_PEER_VENV", root / ".peer-venv"))
    if not venv.is_absolute():
        venv = root / venv
    python = venv / "bin" / "python"
    return python if python.exists() else None


def run_peer(ticks: int, *, setup: bool = False) -> dict | None:
    """Run bench/peer_placo.py in the peer venv; None when the peer is unavailable."""
    root = Path(__file__).resolve().parents[1]
    script = root / "bench" / "peer_placo.py"
    if not script.exists():
        return None
    if setup and peer_python(root) is None:
        subprocess.run(["bash", str(root / "bench" / "setup_peer.sh")], check=True)
    python = peer_python(root)
    if python is None:
        return None
    spec = robots.spec("solo12")
    out = root / "results" / "peer_placo.json"
    out.parent.mkdir(exist_ok=True)
    cmd = [str(python), str(script), "--urdf", str(spec.urdf_path()),
           "--package-dir", str(robots.example_robot_data_dir().parent), "--ticks", str(ticks), "--json", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"peer": "placo", "error": (proc.stderr or proc.stdout).strip()[-2000:]}
    return json.loads(out.read_text())


def run(formulation_names, *, robot="solo12", ticks=10_000, peer="auto", log=print) -> dict:
    """Benchmark formulations and (optionally) the peer; returns a JSON-ready report."""
    report = {"scenario": f"{robot} standing, all feet in contact, friction, torque limits",
              "machine": machine(), "results": []}
    for entry in formulation_names:
        # "name" or "name:backend" (e.g. wbc_qp:python to time the reference code)
        name, _, backend = entry.partition(":")
        log(f"  {entry} ...")
        report["results"].append(standing(name, robot=robot, ticks=ticks, **({"backend": backend} if backend else {})))
    if peer != "off" and robot == "solo12":
        log("  placo (peer) ...")
        p = run_peer(ticks, setup=(peer == "on"))
        if p is not None:
            report["peer"] = p
            if "p50_us" in p:
                for r in report["results"]:
                    r["ratio_p50_to_peer"] = r["p50_us"] / p["p50_us"]
                    r["ratio_p99_to_peer"] = r["p99_us"] / p["p99_us"]
    return report


def format_report(report: dict) -> str:
    lines = [f"scenario: {report['scenario']}",
             f"machine:  {report['machine']['processor']} ({report['machine']['cpus']} cpus)",
             f"{'formulation':<24}{'p50 µs':>9}{'p99 µs':>9}{'p99.9 µs':>10}{'max µs':>9}{'misses':>8}"
             f"{'p50/peer':>10}"]
    rows = list(report["results"])
    peer = report.get("peer")
    if peer and "p50_us" in peer:
        rows.append({"formulation": "placo (C++)", **peer})
    for r in rows:
        ratio = r.get("ratio_p50_to_peer")
        label = r["formulation"] + (f" ({r['backend']})" if "backend" in r else "")
        lines.append(f"{label:<24}{r['p50_us']:>9.1f}{r['p99_us']:>9.1f}{r['p999_us']:>10.1f}"
                     f"{r['max_us']:>9.1f}{r['misses']:>8d}{(f'{ratio:.2f}' if ratio else '-'):>10}")
    if peer and "error" in peer:
        lines.append(f"peer failed: {peer['error'].splitlines()[-1] if peer['error'] else '?'}")
    elif not peer:
        lines.append("peer: not run (bash bench/setup_peer.sh, or --peer on)")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    print(format_report(run(sys.argv[1:] or ["qp_coulomb", "wbc_qp"], ticks=2000)))
