"""Always a usable answer, measured: random physically possible cases over robots and QP
formulations (issue 14 item 1; the invariants are idyn_control.robustness's).

    PYTHONPATH=. python bench/robustness.py [--cases 10000] [--seed 0]
        [--robots quadruped,solo12,anymal_c,go2,bench/robots/a1.yaml,bench/robots/hyq.yaml,solo12+toe_heel]
        [--formulations wbc_qp,...] [--json results/robustness.json]

Each case is one tick (joint positions inside their limits, any base orientation or one
within 45° of upright, moderate velocities, random desired accelerations, a random subset of
held contacts, a random desired force for pidc_qp and its baselines); the cases are spread
evenly over robots × formulations, each pair solving its cases in sequence (warm starts
carry over). Prints and writes per pair: statuses, invariant violations, silent failures
(a "solved" answer that violates one, or an exception), relaxations (Result.relaxed) and
tick times; exit status 1 if any answer violates the dynamics or fails silently.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from idyn_control import robustness

ROOT = Path(__file__).resolve().parents[1]
ROBOTS = ("quadruped", "solo12", "anymal_c", "go2", str(ROOT / "bench/robots/a1.yaml"),
          str(ROOT / "bench/robots/hyq.yaml"), "solo12" + robustness.TOE_HEEL_SUFFIX)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--robots", default=",".join(ROBOTS))
    ap.add_argument("--formulations", default=",".join(robustness.FORMULATIONS))
    ap.add_argument("--json", default=str(ROOT / "results/robustness.json"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = robustness.run(args.robots.split(","), args.formulations.split(","), args.cases, args.seed)
    report["wall_s"] = time.perf_counter() - t0
    report["machine"] = platform.platform()
    report["command"] = " ".join(["bench/robustness.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"{'robot/formulation':40s} {'cases':>6s} {'!solved':>7s} {'silent':>6s} {'worst resid':>11s}  relaxed")
    for key, s in report["per_pair"].items():
        relaxed = ", ".join(f"{k} {n} (max {s['relaxed_max'][k]:.3g})" for k, n in s["relaxed"].items())
        print(f"{key:40s} {s['cases']:6d} {s['not_solved']:7d} {s['silent_failures']:6d} "
              f"{s['worst_residual']:11.1e}  {relaxed}")
    print("total", json.dumps(report["total"]), f"wall {report['wall_s']:.0f} s")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    total = report["total"]
    return 1 if total["silent_failures"] or total["dynamics_violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
