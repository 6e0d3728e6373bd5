"""Contact events of seed 000's planar cells in lock-step, measured (issue 10): how touchdowns
load a landing foot and unload the others, for the sensed baselines against ID(t_i).

    PYTHONPATH=. python bench/sensed_contacts.py [--cells compliant_inf/sensed_1,...]
        [--duration 6] [--json results/sensed_contacts.json]

Each cell is the ``experiments seed000`` scenario (30 s waypoint task, run for
``--duration`` s). Over the trot before any fall (1.5 s to the end, minus 0.3 s) it
reports, per touchdown (a foot's measured normal force rising above the contact threshold
after ≥ 5 ticks without contact): the landing foot's normal velocity, its peak normal force
in the next 10 ms and the tick of that peak, and whether a foot that was loaded and planned
in stance at the touchdown lost contact within 25 ms; and over all ticks: the fraction of
planned-stance foot-ticks without contact, the summed normal force (mean, std, max; the
robot weighs ``weight_N``), the base height's std and the knee tracking error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pinocchio as pin

from idyn_control.experiments import Cell, legged_scenario
from idyn_control.sim.lockstep import CONTACT_THRESHOLD_N, LockstepRunner

CELLS = ("compliant_inf/qp_coulomb", "compliant_inf/sensed_1", "compliant_inf/sensed_2",
         "compliant_mu0.1/sensed_1", "rigid_inf/sensed_1", "rigid_mu0.1/sensed_2")
PEAK_WINDOW = 10      # ticks after a touchdown searched for the landing foot's peak force
UNLOAD_WINDOW = 25    # ticks after a touchdown in which a loaded stance foot may lose contact
QUIET_TICKS = 5       # ticks without contact before a touchdown


def measure(ground: str, controller: str, duration: float) -> dict:
    """Run one cell and return its contact-event statistics (JSON-ready)."""
    scenario = legged_scenario(Cell("planar", controller, ground, duration, "waypoints"))
    runner = LockstepRunner(scenario)
    run = runner.run()
    tr = run.trace
    n = tr.n
    end = n - int(0.3 / scenario.dt) if run.metrics["fell"] else n
    window = np.flatnonzero((tr.t[:end] >= 1.5))
    fz = tr.f_meas[:, :, 2]
    touching = fz > CONTACT_THRESHOLD_N
    pm = runner.robot.pin_model
    data = pm.createData()
    frames = runner.robot.contact_frame_ids
    landing_vz, peak, peak_tick, unloaded = [], [], [], []
    for k in window:
        if k < QUIET_TICKS or k + UNLOAD_WINDOW > n:
            continue
        for i in np.flatnonzero(touching[k] & ~touching[k - QUIET_TICKS:k].any(axis=0)):
            pin.forwardKinematics(pm, data, tr.q[k], tr.v[k])
            v = pin.getFrameVelocity(pm, data, frames[i], pin.ReferenceFrame.LOCAL_WORLD_ALIGNED).linear
            landing_vz.append(float(v[2]))
            seg = fz[k:k + PEAK_WINDOW, i]
            peak.append(float(seg.max()))
            peak_tick.append(int(seg.argmax()))
            others = [j for j in range(fz.shape[1]) if j != i and tr.planned_stance[k, j] and touching[k - 1, j]]
            unloaded.append(any((~touching[k:k + UNLOAD_WINDOW, j]).any() for j in others))
    planned = tr.planned_stance[window]
    total = fz[window].sum(axis=1)
    robot = runner.robot
    knees = np.array([i for i, name in enumerate(robot.joint_names) if "KFE" in name])
    knee_err = np.abs(tr.q[window][:, robot.joint_q_index[knees]] - tr.q_ref[window][:, knees])
    if not peak:  # fell before any touchdown of the trot
        landing_vz, peak, peak_tick, unloaded = [np.nan], [np.nan], [np.nan], [np.nan]
    return {
        "cell": f"{ground}/{controller}", "fell": bool(run.metrics["fell"]),
        "fall_time_s": run.metrics.get("fall_time_s"), "weight_N": float(runner.weight),
        "touchdowns": int(np.isfinite(peak).sum()), "landing_vz_mean_m_s": float(np.mean(landing_vz)),
        "peak_normal_N_mean": float(np.mean(peak)), "peak_normal_N_max": float(np.max(peak)),
        "peak_tick_mean": float(np.mean(peak_tick)), "stance_foot_lost_fraction": float(np.mean(unloaded)),
        "planned_stance_off_ground": float((planned & ~touching[window]).sum() / planned.sum()),
        "sum_normal_N": [float(total.mean()), float(total.std()), float(total.max())],
        "base_height_std_mm": float(1e3 * tr.q[window, 2].std()),
        "knee_error_rad_mean": float(knee_err.mean()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    rows = []
    print("| cell | outcome | touchdowns | landing v_z [m/s] | peak f_n [N] mean / max (tick) | stance foot "
          "lost ≤ 25 ms | planned stance off ground | Σf_n [N] mean / std / max | z std [mm] | knee error [rad] |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cell in args.cells.split(","):
        ground, controller = cell.split("/")
        r = measure(ground, controller, args.duration)
        rows.append(r)
        outcome = f"fell {r['fall_time_s']:.2f} s" if r["fell"] else f"{args.duration:g} s"
        s = r["sum_normal_N"]
        print(f"| {r['cell']} | {outcome} | {r['touchdowns']} | {r['landing_vz_mean_m_s']:+.2f} | "
              f"{r['peak_normal_N_mean']:.1f} / {r['peak_normal_N_max']:.1f} ({r['peak_tick_mean']:.1f}) | "
              f"{r['stance_foot_lost_fraction']:.0%} | {r['planned_stance_off_ground']:.0%} | "
              f"{s[0]:.1f} / {s[1]:.1f} / {s[2]:.0f} | {r['base_height_std_mm']:.1f} | "
              f"{r['knee_error_rad_mean']:.3f} |", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
