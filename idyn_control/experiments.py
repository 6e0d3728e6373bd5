"""``idyn-control experiments seed000``: seed 000 §7–8 regenerated beside the paper's numbers.

One command runs every closed-loop cell of seed 000's evaluation in the lock-step MuJoCo
loop (:mod:`idyn_control.sim.lockstep`), fanned out over local worker processes, and
writes Markdown + JSON + PNG (DESIGN.md §5)::

    idyn-control experiments seed000 [--quick] [--workers N] [--out DIR] [--only PATTERN,...]
                                     [--stabilization none|viip] [--robot NAME|FILE]

Cells (the project's quadruped, seed 000 §7.1's platform, or ``--robot``'s legged robot
with its own file; 1 kHz, seed 000 §7.3–7.6):

- planar grid: 7 controllers — ID(t_i)QP,μ, ID(t_i)QP,∞, ID(t_i)LCP,μ, ID(t_i)LCP,∞,
  ID(t_{i−1}), ID(t_{i−2}), PID — × 4 grounds — rigid/compliant × μ = 0.1/∞ — on the 30 s
  waypoint task (Fig. 17): Tables 3, 4, 5, Fig. 17;
- height map (§7.5, Fig. 16): ID(t_i)QP,μ, ID(t_{i−1}) and PID on three terrain seeds;
- the manipulator grasping a box (§7.2.2, §8.4.1, Fig. 18): Panda arm + four-finger hand
  holding a free 6000 kg/m³ box, sinusoidal arm trajectory, ID(t_i)QP,μ, ID(t_{i−1}) and
  PID × μ = ∞ / 1.0, 3 s (also with ``--quick``): tracking error, when the box drops and
  the fingertip normal-force prediction error beside the paper's qualitative result.

``--quick``: 3 s straight trot (no waypoints) on fewer cells, for a smoke check. Every cell
runs in a fresh process with one BLAS thread (a process's first run and its later ones can
differ by round-off, which a fall amplifies) and a fixed ``PYTHONHASHSEED``: without it,
``qp_coulomb`` cells diverged between two fresh processes within 0.6 s, ProxQP rounding
identical problems differently with its workspace at different addresses.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

DEFAULT_OUT = "results/experiments/seed000"
DEFAULT_ROBOT = "quadruped"  # seed 000 §7.1's platform (urdf/quadruped.urdf)

#: controllers of seed 000 §7.3: key → (paper label, formulation, formulation options)
CONTROLLERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "qp_coulomb": ("ID(t_i)QP,μ", "qp_coulomb", {}),
    "qp_noslip": ("ID(t_i)QP,∞", "qp_noslip", {}),
    "lcp_coulomb": ("ID(t_i)LCP,μ", "lcp_coulomb", {}),
    "lcp_noslip": ("ID(t_i)LCP,∞", "lcp_noslip", {}),
    "sensed_1": ("ID(t_i−1)", "sensed", {"delay_ticks": 1}),
    "sensed_2": ("ID(t_i−2)", "sensed", {"delay_ticks": 2}),
    "pid": ("PID", "pid", {}),
}

#: planar grounds of seed 000 §7.5: key → (paper label, Scenario overrides)
GROUNDS: dict[str, tuple[str, dict[str, Any]]] = {
    "rigid_mu0.1": ("Rigid, Low Friction", {"friction": 0.1, "compliant": False}),
    "rigid_inf": ("Rigid, High Friction", {"friction": math.inf, "compliant": False}),
    "compliant_mu0.1": ("Compliant, Low Friction", {"friction": 0.1, "compliant": True}),
    "compliant_inf": ("Compliant, High Friction", {"friction": math.inf, "compliant": True}),
}

HEIGHTMAP_CONTROLLERS = ("qp_coulomb", "sensed_1", "pid")
HEIGHTMAP_SEEDS = (0, 1, 2)
QUICK_CONTROLLERS = ("qp_coulomb", "lcp_coulomb", "sensed_1", "pid")
QUICK_GROUNDS = ("rigid_mu0.1", "rigid_inf")

#: the manipulator of seed 000 §8.4.1: controllers, box frictions (key → (label, μ)), duration
MANIPULATOR_CONTROLLERS = ("qp_coulomb", "sensed_1", "pid")
MANIPULATOR_FRICTIONS: dict[str, tuple[str, float]] = {"mu_inf": ("μ = ∞", math.inf), "mu1.0": ("μ = 1.0", 1.0)}
MANIPULATOR_DURATION_S = 3.0

#: seed 000 §8, transcribed from the paper (None: "–", the quadruped fell)
PAPER: dict[str, Any] = {
    # Table 3: (E[E|θ − θ_des|] [rad], E[E|θ̇ − θ̇_des|] [rad/s])
    "table3": {
        "rigid_mu0.1": {"qp_coulomb": (0.0310, 1.9425), "qp_noslip": (0.0483, 2.6295),
                        "lcp_coulomb": (0.0239, 1.8386), "lcp_noslip": None, "pid": (0.0895, 1.5569),
                        "sensed_1": (0.0325, 1.7952), "sensed_2": (0.0328, 1.7830)},
        "rigid_inf": {"qp_coulomb": (0.0486, 2.2596), "qp_noslip": (0.0654, 2.5737),
                      "lcp_coulomb": (0.0259, 1.8784), "lcp_noslip": (0.0260, 1.8950), "pid": (0.0916, 1.4653),
                      "sensed_1": (0.1317, 2.5585), "sensed_2": (0.1316, 2.5608)},
        "compliant_mu0.1": {"qp_coulomb": (0.0217, 2.0365), "qp_noslip": None,
                            "lcp_coulomb": (0.0219, 2.0786), "lcp_noslip": None, "pid": (0.0850, 1.5845),
                            "sensed_1": (0.0265, 1.8858), "sensed_2": (0.0267, 1.8742)},
        "compliant_inf": {"qp_coulomb": (0.0342, 2.9360), "qp_noslip": (0.0446, 3.9779),
                          "lcp_coulomb": (0.0226, 2.1243), "lcp_noslip": None, "pid": (0.0850, 1.5845),
                          "sensed_1": (0.1270, 4.4377), "sensed_2": (0.1270, 4.2061)},
    },
    # Table 4: (E|Δτ|, E|τ|), one value per controller (the paper does not say which ground)
    "table4": {"qp_coulomb": (52.5718, 0.2016), "qp_noslip": (245.5117, 0.4239),
               "lcp_coulomb": (677.9693, 0.8351), "lcp_noslip": (351.1803, 0.4055),
               "sensed_1": (974.3312, 0.9918), "sensed_2": (17528.0, 2.7416), "pid": (100.1571, 0.3413)},
    # Table 5: (absolute [N], relative) error of the summed normal force
    "table5": {
        "rigid_mu0.1": {"qp_coulomb": (3.8009, 0.1253), "qp_noslip": (8.4567, 0.2226),
                        "lcp_coulomb": (0.9371, 0.0194), "lcp_noslip": None},
        "rigid_inf": {"qp_coulomb": (13.8457, 0.2748), "qp_noslip": (12.4153, 0.2526),
                      "lcp_coulomb": (1.2768, 0.0155), "lcp_noslip": (0.3572, 0.0116)},
        "compliant_mu0.1": {"qp_coulomb": (7.8260, 0.1712), "qp_noslip": None,
                            "lcp_coulomb": (4.6385, 0.0637), "lcp_noslip": None},
        "compliant_inf": {"qp_coulomb": (14.9225, 0.3086), "qp_noslip": (15.1897, 0.3066),
                          "lcp_coulomb": (12.4896, 0.2400), "lcp_noslip": None},
    },
    "table5_weight_N": 47.0882,
    "heightmap_note": "Fig. 16: ID(t_i) reduced tracking error below PID by 19 %; only ID(t_i−1) tracked better",
    # §8.4.1 and Fig. 18 (qualitative only: the paper gives no numbers)
    "manipulator": {
        "mu_inf": {"pid": "large tracking errors while grasping",
                   "sensed_1": "large errors: excessive forces on the sticky object",
                   "qp_coulomb": "Table 6 (appendix): PASS"},
        "mu1.0": {"pid": "drops the box at about 1.5 s; tracking error stays high after the drop",
                  "sensed_1": "does not drop the box in 3 s; same accuracy as ID(t_i)QP,μ",
                  "qp_coulomb": "drops the box at about 1.5 s; tracking error converges to zero after the drop "
                                "(Table 6: PASS †)"},
    },
}

#: how our metrics are computed (printed in the report beside the tables)
METRIC_DEFINITIONS = {
    "Table 3": "joint_position_error_rad = mean over ticks and joints of |θ − θ_des| (θ_des: the gait's IK "
               "joint reference); joint_velocity_error_rad_s likewise with θ̇ — the paper's E[E|θ − θ_des|] "
               "and E[E|θ̇ − θ̇_des|]. Over the whole run (stand-up included), up to the fall if any.",
    "Table 4": "E|Δτ| = torque_rate_mean_Nm_s = mean over ticks and joints of |τ_k − τ_(k−1)| / Δt [N·m/s] "
               "(a time derivative, as the paper's Fig. 15 'time derivative torque'); E|τ| = torque_mean_Nm = "
               "mean |τ| [N·m]. The commanded torque after the safety layer.",
    "Table 5": "force_error_sum_N = mean over loaded ticks (measured Σ normal > 20 % of the weight) of "
               "|Σ_feet f_pred,z − Σ_feet f_meas,z| [N], f_meas = MuJoCo's contact forces averaged over the "
               "control period that follows the prediction; relative = that mean / the mean measured sum "
               "(flat ground: normal = world z); per-tick relative = the mean over those ticks of |Σ f_pred,z − "
               "Σ f_meas,z| / Σ f_meas,z (the paper's absolute over relative errors, 30–82 N for its 47 N robot, "
               "suggest it averaged such ratios; which it used is not stated). Only ticks where the formulation "
               "answered (fallback ticks predict 0). 'at unseen touchdowns' = the share of that error on ticks "
               "where a foot touched down that the contact estimate (the previous period's forces; with --contact-estimate touching "
               "the feet the simulator finds touching, so none) did not count yet, so no "
               "formulation predicts its impact; 'other ticks' = the relative error over the rest.",
    "Manipulator": "box dropped: first tick its centre is > 2 cm from the fingertips' centroid; arm error = "
                   "Σ over the 7 arm joints of |θ − θ_des| [rad], mean over the run, over the ticks the box is "
                   "held, and over the last 0.5 s; fingertip normal error = mean |f_pred·n − f_meas·n| per "
                   "touching fingertip (n: the box face normal) while held, relative to the mean measured one.",
}


@dataclass(frozen=True)
class Cell:
    """One closed-loop run of the experiment.

    Attributes:
        group: "planar", "heightmap" or "manipulator".
        controller: a key of :data:`CONTROLLERS`.
        ground: a key of :data:`GROUNDS` (planar), "seed<k>" (height map) or of
            :data:`MANIPULATOR_FRICTIONS` (the box's μ).
        duration_s: simulated time [s].
        task: "waypoints" (seed 000 §7.6), "trot" (straight, ``--quick``) or "grasp".
        terrain_seed: seed of the height map.
        stabilization: the controller's balance stabilization (``none`` or ``viip``, seed
            000 §7.3; :mod:`idyn_control.stabilization`), legged cells only.
        robot: the legged cells' robot (a shipped name or a robot file's path).
    """

    group: str
    controller: str
    ground: str
    duration_s: float
    task: str
    terrain_seed: int = 0
    stabilization: str = "none"
    contact_estimate: str = "force"
    robot: str = DEFAULT_ROBOT

    @property
    def id(self) -> str:
        return f"{self.group}/{self.ground}/{self.controller}"


def cells(quick: bool = False, only: tuple[str, ...] = (), stabilization: str = "none",
          contact_estimate: str = "force", robot: str = DEFAULT_ROBOT) -> list[Cell]:
    """The experiment's cells (``only``: fnmatch patterns on :attr:`Cell.id`;
    ``stabilization``, ``contact_estimate`` and ``robot``: of the legged cells)."""
    duration, task = (3.0, "trot") if quick else (30.0, "waypoints")
    legged = {"stabilization": stabilization, "contact_estimate": contact_estimate, "robot": robot}
    out = [Cell("planar", c, g, duration, task, **legged)
           for g in (QUICK_GROUNDS if quick else GROUNDS) for c in (QUICK_CONTROLLERS if quick else CONTROLLERS)]
    seeds = HEIGHTMAP_SEEDS[:1] if quick else HEIGHTMAP_SEEDS
    out += [Cell("heightmap", c, f"seed{k}", duration, task, terrain_seed=k, **legged)
            for k in seeds for c in HEIGHTMAP_CONTROLLERS]
    out += [Cell("manipulator", c, g, MANIPULATOR_DURATION_S, "grasp")
            for g in MANIPULATOR_FRICTIONS for c in MANIPULATOR_CONTROLLERS]
    if only:
        out = [c for c in out if any(fnmatch.fnmatch(c.id, p) for p in only)]
    return out


def check_robot(robot: str) -> str:
    """The legged cells' robot as the workers load it: a shipped name as given, a robot
    file as its absolute path. Raises :class:`~idyn_control.errors.ConfigError` (or the
    loader's error for an unknown name or a bad file) unless the robot stands on point feet
    (``contacts.frames``; no flat feet, no hand) and its feet move sideways (the task turns
    it): the gait trots, as seed 000's quadruped."""
    from . import robots
    from .errors import ConfigError
    from .gait import feet_move_sideways

    spec = robots.spec(robot)
    if not spec.contact_frames or spec.surfaces or spec.hand is not None:
        raise ConfigError("robot", robot, "seed 000's legged cells trot a robot on point feet "
                                          "(contacts.frames; no contacts.surfaces, no hand)")
    model = robots.load(spec)
    if not feet_move_sideways(model, robots.standing_configuration(model, spec)):
        raise ConfigError("robot", robot, "seed 000's waypoint task turns the robot, and its feet cannot "
                                          "move sideways (legs without abduction): the gait would only trot straight")
    return robot if robot in robots.names() else str(Path(robot).resolve())


# ====================================================================== one cell (worker)
def legged_scenario(cell: Cell):
    """The lock-step :class:`~idyn_control.sim.lockstep.Scenario` of a planar or height-map cell."""
    from .sim.lockstep import Scenario

    _, formulation, options = CONTROLLERS[cell.controller]
    overrides = GROUNDS[cell.ground][1] if cell.group == "planar" else {"terrain": "heightmap",
                                                                       "terrain_seed": cell.terrain_seed}
    return Scenario(robot=cell.robot, formulation=formulation, formulation_options=dict(options),
                    duration=cell.duration_s, task=cell.task, velocity=(0.2, 0.0, 0.0),
                    controller={"stabilization": cell.stabilization}, contact_estimate=cell.contact_estimate,
                    **overrides)


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run one cell in this process; a JSON-ready summary (metrics, fall, series for the figures)."""
    import pinocchio as pin

    if cell.group == "manipulator":
        return _run_manipulator_cell(cell)
    scenario = legged_scenario(cell)
    out, runner, run = _run_lockstep(cell, scenario, CONTROLLERS[cell.controller][0])
    if run is None:
        return out
    tr, m = run.trace, run.metrics
    n = tr.n
    # figure series: joint tracking error (Fig. 16) at 100 Hz, CoM path (Fig. 17) at 50 Hz
    err = np.abs(tr.q[:n, 7:] - tr.q_ref[:n]).mean(axis=1)
    data = runner.robot.pin_model.createData()
    com = np.array([pin.centerOfMass(runner.robot.pin_model, data, tr.q[i])[:2] for i in range(0, n, 20)])
    t_err, joint_error = _block_means(tr.t[:n], err, scenario.dt)
    out.update(metrics=_json_safe(m), fell=bool(m.get("fell")), fall_time_s=m.get("fall_time_s"),
               series={"t_err": t_err, "joint_error_rad": joint_error,
                       "t_com": tr.t[:n:20].round(3).tolist(), "com_xy": com.round(5).tolist()})
    return out


def _run_lockstep(cell: Cell, scenario, label: str):
    """Run ``scenario``: (the cell's summary so far, the runner, the run), the run None
    when it raised (the summary then carries the error: a broken cell is reported, it
    does not stop the experiment)."""
    from .sim.lockstep import LockstepRunner

    out: dict[str, Any] = {"id": cell.id, "cell": asdict(cell), "label": label}
    wall0 = time.perf_counter()
    try:
        runner = LockstepRunner(scenario)
        run = runner.run()
    except Exception as exc:  # noqa: BLE001 - an experiment reports a broken cell, it does not stop
        out.update(error=f"{type(exc).__name__}: {exc}", wall_time_s=time.perf_counter() - wall0)
        return out, None, None
    n = run.trace.n
    out.update(simulated_s=float(n * scenario.dt), wall_time_s=time.perf_counter() - wall0,
               fallback_fraction=float(run.trace.fallback[:n].mean()) if n else 0.0)
    return out, runner, run


def _block_means(t: np.ndarray, err: np.ndarray, dt: float, step: int = 10) -> tuple[list, list]:
    """A per-tick series decimated for a figure: means over blocks of ``step`` ticks,
    stamped at the blocks' centres."""
    blocks = len(err) // step
    return ((t[:blocks * step:step] + 0.5 * step * dt).round(4).tolist(),
            err[:blocks * step].reshape(blocks, step).mean(axis=1).round(6).tolist())


def _run_manipulator_cell(cell: Cell) -> dict[str, Any]:
    """The grasp of seed 000 §8.4.1 in lock-step MuJoCo; series: the arm's tracking error."""
    from .sim.lockstep import Scenario

    label, formulation, options = CONTROLLERS[cell.controller]
    scenario = Scenario(robot="panda_grasp", formulation=formulation, formulation_options=dict(options),
                        duration=cell.duration_s, friction=MANIPULATOR_FRICTIONS[cell.ground][1])
    out, runner, run = _run_lockstep(cell, scenario, label)
    if run is None:
        return out
    tr, m = run.trace, run.metrics
    n = tr.n
    arm = np.array(["finger" not in j for j in runner.robot.joint_names])
    err = np.abs(tr.q[:n, 7:][:, arm] - tr.q_ref[:n, arm]).sum(axis=1)
    t_err, arm_error = _block_means(tr.t[:n], err, scenario.dt)
    out.update(metrics=_json_safe(m), fell=False, box_dropped=bool(m["box_dropped"]),
               box_drop_time_s=m["box_drop_time_s"], series={"t_err": t_err, "arm_error_rad": arm_error})
    return out


def _json_safe(d: dict[str, Any]) -> dict[str, Any]:
    def conv(v):
        if isinstance(v, (np.floating, float)):
            return None if not math.isfinite(float(v)) else float(v)
        if isinstance(v, (np.integer,)):
            return int(v)
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v

    return {k: conv(v) for k, v in d.items()}


# ====================================================================== orchestration
def run(*, quick: bool = False, workers: int | None = None, out: str | Path = DEFAULT_OUT,
        only: tuple[str, ...] = (), hash_seed: int = 0, stabilization: str = "none",
        contact_estimate: str = "force", robot: str = DEFAULT_ROBOT,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the cells over ``workers`` processes (default: all CPUs) and write the report.

    ``hash_seed``: the workers' PYTHONHASHSEED (see below); another value replays every cell
    with other round-off, a check of how robust a result is. ``stabilization``: the
    quadruped's (``none``, the default, or ``viip``; README "Balance stabilization").
    ``contact_estimate``: the legged cells' (``force``, the default, or ``touching``; see
    :class:`~idyn_control.sim.lockstep.Scenario`). ``robot``: the legged cells' (a shipped
    name or a robot file; the paper's numbers stay its quadruped's); see :func:`check_robot`."""
    robot = check_robot(robot)
    todo = cells(quick, only, stabilization, contact_estimate, robot)
    workers = max(1, min(workers or os.cpu_count() or 1, max(len(todo), 1)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    log(f"seed000: {len(todo)} cells ({'quick: 3 s straight trot' if quick else '30 s waypoint task'}; "
        f"manipulator {MANIPULATOR_DURATION_S:g} s) "
        f"on {workers} worker process(es) -> {out}")
    # one BLAS thread per worker, one fresh process per cell: reproducible cell by cell.
    # A fixed hash seed too: string hashing decides dict layouts, hence the heap addresses
    # ProxQP's workspace lands on, and its AVX-512 kernels round differently on differently
    # aligned data (identical QPs gave different last bits in two processes), which a fall
    # amplifies into a different run.
    for var, value in (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
                       ("PYTHONHASHSEED", str(hash_seed))):
        os.environ[var] = value
    import multiprocessing

    wall0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:
        futures = {pool.submit(run_cell, c): c for c in todo}
        for k, fut in enumerate(as_completed(futures), 1):
            c = futures[fut]
            try:
                r = fut.result()
            except Exception as exc:  # noqa: BLE001 - a crashed worker is a reported cell
                r = {"id": c.id, "cell": asdict(c), "label": CONTROLLERS[c.controller][0],
                     "error": f"{type(exc).__name__}: {exc}"}
            results[c.id] = r
            log(f"  [{k}/{len(todo)}] {c.id:<34} {_outcome(r)}  ({r.get('wall_time_s', float('nan')):.1f} s wall)")
    ordered = [results[c.id] for c in todo]
    report = {
        "experiment": "seed000",
        "meta": {"quick": quick, "workers": workers, "cells": len(todo), "wall_time_s": time.perf_counter() - wall0,
                 "commit": _git_commit(), "hash_seed": hash_seed, "machine": f"{os.cpu_count()} CPUs, {sys.platform}",
                 "robot": robot, "control_rate_hz": 1000, "task": todo[0].task if todo else None,
                 "stabilization": stabilization, "contact_estimate": contact_estimate},
        "paper": PAPER,
        "metric_definitions": METRIC_DEFINITIONS,
        "cells": [{k: v for k, v in r.items() if k != "series"} for r in ordered],
    }
    (out / "seed000.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out / "series.json").write_text(json.dumps({r["id"]: r.get("series") for r in ordered}))
    figures = plot_figures(ordered, out)
    (out / "seed000.md").write_text(format_markdown(report, figures))
    log(f"wrote {out / 'seed000.md'}, {out / 'seed000.json'}, {out / 'series.json'}"
        + "".join(f", {out / f}" for f in figures))
    log(f"total {report['meta']['wall_time_s']:.0f} s wall")
    return report


def _outcome(r: dict[str, Any]) -> str:
    if "error" in r:
        return f"ERROR {r['error']}"
    if r["cell"]["group"] == "manipulator":
        if r.get("box_dropped"):
            return f"dropped the box at {r['box_drop_time_s']:.2f} s"
        return f"held the box {r['simulated_s']:.1f} s"
    if r.get("fell"):
        return f"fell at {r['fall_time_s']:.2f} s"
    m = r.get("metrics", {})
    extra = f", {m['waypoints_reached']} waypoints" if "waypoints_reached" in m else ""
    return f"walked {r['simulated_s']:.1f} s{extra}"


def _note(c: dict[str, Any]) -> str:
    """Why a cell's numbers may not mean what the paper's do."""
    if "error" in c:
        return "the cell raised: see the JSON"
    if c.get("fallback_fraction", 0.0) > 0.5:
        return "the formulation failed on most ticks (safety output instead)"
    return ""


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# ====================================================================== report
def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def _paper(value, i: int, spec: str) -> str:
    return "–" if value is None else format(value[i], spec)


def format_markdown(report: dict[str, Any], figures: list[str]) -> str:
    """The report: each of our values beside the paper's."""
    by_id = {c["id"]: c for c in report["cells"]}
    meta = report["meta"]
    robot = meta.get("robot", DEFAULT_ROBOT)
    lines = [f"# seed 000 §7–8 reproduced ({'quick' if meta['quick'] else 'full'})", "",
             f"{'Quadruped' if robot == DEFAULT_ROBOT else f'Robot {robot} (its own file; the paper: its quadruped)'}, "
             f"1 kHz lock-step MuJoCo, task: {meta['task']}, stabilization: "
             f"{meta.get('stabilization', 'none')}, contact estimate: {meta.get('contact_estimate', 'force')}; "
             f"{meta['cells']} cells on "
             f"{meta['workers']} workers, {meta['wall_time_s']:.0f} s wall; commit {meta['commit']}.",
             "Each cell: ours, then the paper's value in parentheses. \"–\": the robot fell (ours: Tables 3–4 "
             "are still computed up to the fall and marked †; Table 5 prints – as the paper does).", ""]
    lines += ["## How the metrics are computed", ""]
    lines += [f"- **{k}**: {v}" for k, v in report["metric_definitions"].items()] + [""]

    def cell(ground: str, ctrl: str, group: str = "planar"):
        return by_id.get(f"{group}/{ground}/{ctrl}")

    grounds = [g for g in GROUNDS if any(cell(g, c) for c in CONTROLLERS)]
    # outcome table
    lines += ["## Walks / falls", "", "| cell | outcome | waypoints | speed while walking [m/s] (cmd 0.2) "
              "| fallback ticks | wall [s] | note |", "|---|---|---|---|---|---|---|"]
    for c in report["cells"]:
        if c["cell"]["group"] == "manipulator":
            continue
        m = c.get("metrics", {})
        speed = m.get("speed_moving_m_s", m.get("speed_along_command_m_s"))
        lines.append(f"| {c['id']} ({c['label']}) | {_outcome(c)} | {m.get('waypoints_reached', '')} | "
                     f"{_fmt(speed, '.3f')} | {100 * c.get('fallback_fraction', 0):.0f} % | "
                     f"{c.get('wall_time_s', float('nan')):.1f} | {_note(c)} |")
    lines.append("")
    # Table 3
    lines += ["## Table 3: joint tracking error", ""]
    for g in grounds:
        lines += [f"### {GROUNDS[g][0]}", "", "| controller | position [rad] (paper) | velocity [rad/s] (paper) |",
                  "|---|---|---|"]
        for ctrl, (label, _, _) in CONTROLLERS.items():
            c = cell(g, ctrl)
            if c is None:
                continue
            p = report["paper"]["table3"][g].get(ctrl)
            m = c.get("metrics", {})
            mark = " †" if c.get("fell") else ""
            lines.append(f"| {label} | {_fmt(m.get('joint_position_error_rad'), '.4f')}{mark} ({_paper(p, 0, '.4f')}) | "
                         f"{_fmt(m.get('joint_velocity_error_rad_s'), '.4f')}{mark} ({_paper(p, 1, '.4f')}) |")
        lines.append("")
    lines += ["† fell before the end: the mean is over the run up to the fall.", ""]
    # Table 4
    lines += ["## Table 4: torque smoothness", "",
              "The paper gives one value per controller (ground not stated); ours per ground.", "",
              "| controller | paper E\\|Δτ\\| | " + " | ".join(f"{GROUNDS[g][0]} E\\|Δτ\\| [N·m/s]" for g in grounds)
              + " | paper E\\|τ\\| | " + " | ".join(f"{GROUNDS[g][0]} E\\|τ\\| [N·m]" for g in grounds) + " |",
              "|---|" + "---|" * (2 * len(grounds) + 2)]
    for ctrl, (label, _, _) in CONTROLLERS.items():
        cs = [cell(g, ctrl) for g in grounds]
        if not any(cs):
            continue
        p = report["paper"]["table4"][ctrl]

        def val(c, key, spec):
            if c is None or "metrics" not in c:
                return "n/a"
            return _fmt(c["metrics"].get(key), spec) + (" †" if c.get("fell") else "")

        lines.append(f"| {label} | {p[0]:g} | " + " | ".join(val(c, "torque_rate_mean_Nm_s", ".1f") for c in cs)
                     + f" | {p[1]:g} | " + " | ".join(val(c, "torque_mean_Nm", ".3f") for c in cs) + " |")
    lines.append("")
    # Table 5
    lines += ["## Table 5: contact-force prediction error (summed normal force)", "",
              f"The paper's quadruped weighs {PAPER['table5_weight_N']} N; ours: see measured_normal_sum_N in the JSON.", ""]
    for g in grounds:
        lines += [f"### {GROUNDS[g][0]}", "",
                  "| controller | absolute [N] (paper) | relative (paper) | per-tick relative | of it at unseen touchdowns | other ticks |",
                  "|---|---|---|---|---|---|"]
        for ctrl in ("qp_coulomb", "qp_noslip", "lcp_coulomb", "lcp_noslip"):
            c = cell(g, ctrl)
            if c is None:
                continue
            p = report["paper"]["table5"][g].get(ctrl)
            m = c.get("metrics", {})
            ok = not c.get("fell") and "force_error_sum_N" in m
            ab = _fmt(m.get("force_error_sum_N") if ok else None, ".3f")
            rel = "–" if not ok or m.get("force_error_sum_rel") is None else f"{100 * m['force_error_sum_rel']:.2f} %"
            tick = "–" if not ok or m.get("force_error_sum_rel_per_tick") is None \
                else f"{100 * m['force_error_sum_rel_per_tick']:.2f} %"
            prel = "–" if p is None else f"{100 * p[1]:.2f} %"
            share = "–" if not ok or "force_error_unseen_share" not in m else f"{100 * m['force_error_unseen_share']:.0f} %"
            known = "–" if not ok or "force_error_sum_known_rel" not in m else f"{100 * m['force_error_sum_known_rel']:.2f} %"
            lines.append(f"| {CONTROLLERS[ctrl][0]} | {ab} ({_paper(p, 0, '.4f')}) | {rel} ({prel}) | {tick} | {share} | {known} |")
        lines.append("")
    # height map
    hm = [c for c in report["cells"] if c["cell"]["group"] == "heightmap"]
    if hm:
        lines += ["## Height map (§7.5, Fig. 16): bumps ≤ 3 cm, per-patch μ ~ U(0.1, 1.5)", "",
                  f"Paper: {PAPER['heightmap_note']}.", "",
                  "| cell | outcome | position [rad] | velocity [rad/s] | E\\|Δτ\\| [N·m/s] | surface updates |",
                  "|---|---|---|---|---|---|"]
        for c in hm:
            m = c.get("metrics", {})
            lines.append(f"| {c['id']} ({c['label']}) | {_outcome(c)} | {_fmt(m.get('joint_position_error_rad'), '.4f')} | "
                         f"{_fmt(m.get('joint_velocity_error_rad_s'), '.4f')} | {_fmt(m.get('torque_rate_mean_Nm_s'), '.1f')} | "
                         f"{m.get('surface_updates', '')} |")
        lines.append("")
    lines += _manipulator_markdown(report)
    if figures:
        lines += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    return "\n".join(lines)


def _manipulator_markdown(report: dict[str, Any]) -> list[str]:
    """§8.4.1: per box friction and controller, ours beside the paper's qualitative result."""
    cs = [c for c in report["cells"] if c["cell"]["group"] == "manipulator"]
    lines = ["## Manipulator grasping a box (§8.4.1, Fig. 18)", ""]
    if not cs:
        return lines + ["not run (no manipulator cell selected).", ""]
    lines += ["Panda arm (7 DoF) + four 1-DoF fingers with spherical tips holding a free 5 cm box of "
              "6000 kg/m³ (0.75 kg); every arm joint follows a 0.1 rad, 3 Hz sinusoid (ramped in over "
              "0.5 s), the fingers hold (zero velocity and acceleration) and the hand's grip, a finger "
              "torque 3 N·m/rad × 0.05 rad towards closing (1.9 N at each fingertip), is added to "
              "every controller's output (Pacer's grasp component); the inverse dynamics does not "
              "model it, so the fingertip normal error includes the grip. The controller is told "
              "which fingertips touch the box (closest features ≤ 0.5 mm). 3 s, 1 kHz lock-step "
              "MuJoCo.", "",
              "| box μ | controller | outcome | arm error mean / while held / last 0.5 s [rad] "
              "| fingertip normal error (rel.) | paper (qualitative) |", "|---|---|---|---|---|---|"]
    for c in cs:
        g, ctrl = c["cell"]["ground"], c["cell"]["controller"]
        m = c.get("metrics", {})
        rel = m.get("tip_normal_error_rel")
        force = (f"{_fmt(m.get('tip_normal_error_N'), '.2f')} N ({100 * rel:.0f} % of "
                 f"{_fmt(m.get('tip_normal_measured_N'), '.2f')} N)") if rel is not None else "–"
        if ctrl == "pid" and rel is not None:
            force += " (PID: what τ would produce, not a prediction it uses)"
        paper = report["paper"]["manipulator"].get(g, {}).get(ctrl, "")
        lines.append(f"| {MANIPULATOR_FRICTIONS[g][0]} | {c['label']} | {_outcome(c)} | "
                     f"{_fmt(m.get('arm_error_sum_rad_mean'), '.4f')} / {_fmt(m.get('arm_error_sum_rad_mean_held'), '.4f')}"
                     f" / {_fmt(m.get('arm_error_sum_rad_last_0_5s'), '.4f')} | {force} | {paper} |")
    return lines + [""]


def plot_figures(results: list[dict[str, Any]], out: Path) -> list[str]:
    """Fig. 16 (joint tracking error over time on the height map) and Fig. 17 (CoM paths)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .sim.tasks import SEED000_WAYPOINTS

    written = []
    hm = [r for r in results if r["cell"]["group"] == "heightmap" and r.get("series")]
    if hm:
        seeds = sorted({r["cell"]["ground"] for r in hm})
        fig, axes = plt.subplots(len(seeds), 1, figsize=(8, 2.6 * len(seeds)), squeeze=False, sharex=True)
        for ax, seed in zip(axes[:, 0], seeds):
            for r in hm:
                if r["cell"]["ground"] == seed:
                    s = r["series"]
                    tag = f" (fell {r['fall_time_s']:.1f} s)" if r.get("fell") else ""
                    ax.plot(s["t_err"], s["joint_error_rad"], lw=0.8, label=r["label"] + tag)
            ax.set_ylabel("E|θ − θ_des| [rad]")
            ax.set_title(f"rigid height map, {seed}", fontsize=9)
            ax.legend(fontsize=7)
        axes[-1, 0].set_xlabel("t [s]")
        fig.suptitle("seed 000 Fig. 16: joint tracking on a rigid height map, μ ~ U(0.1, 1.5)", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "fig16_heightmap_tracking.png", dpi=110)
        plt.close(fig)
        written.append("fig16_heightmap_tracking.png")
    panels = [(g, GROUNDS[g][0]) for g in ("rigid_inf", "rigid_mu0.1")]
    planar = [r for r in results if r["cell"]["group"] == "planar" and r.get("series")]
    if planar:
        fig, axes = plt.subplots(1, 2, figsize=(11, 5))
        wp = np.array(SEED000_WAYPOINTS)
        for ax, (g, title) in zip(axes, panels):
            for r in planar:
                if r["cell"]["ground"] == g:
                    xy = np.array(r["series"]["com_xy"])
                    if xy.size:
                        ax.plot(xy[:, 0], xy[:, 1], lw=0.8, label=r["label"] + (" (fell)" if r.get("fell") else ""))
            ax.plot(wp[:, 0], wp[:, 1], "k*", ms=10, label="waypoints")
            ax.set_title(f"{title} ({'μ = ∞' if g == 'rigid_inf' else 'μ = 0.1'})", fontsize=9)
            ax.set_xlabel("x [m]")
            ax.set_ylabel("y [m]")
            ax.set_aspect("equal", adjustable="datalim")
            ax.legend(fontsize=7)
        fig.suptitle("seed 000 Fig. 17: centre-of-mass path between waypoints", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "fig17_com_paths.png", dpi=110)
        plt.close(fig)
        written.append("fig17_com_paths.png")
    man = [r for r in results if r["cell"]["group"] == "manipulator" and r.get("series")]
    if man:
        grounds = [g for g in MANIPULATOR_FRICTIONS if any(r["cell"]["ground"] == g for r in man)]
        fig, axes = plt.subplots(len(grounds), 1, figsize=(8, 2.8 * len(grounds)), squeeze=False, sharex=True)
        for ax, g in zip(axes[:, 0], grounds):
            for r in man:
                if r["cell"]["ground"] == g:
                    s = r["series"]
                    tag = f" (drops box {r['box_drop_time_s']:.2f} s)" if r.get("box_dropped") else " (holds box)"
                    line, = ax.plot(s["t_err"], s["arm_error_rad"], lw=0.8, label=r["label"] + tag)
                    if r.get("box_dropped"):
                        ax.axvline(r["box_drop_time_s"], color=line.get_color(), ls=":", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylabel("Σ|θ − θ_des| [rad]")
            ax.set_title(f"box {MANIPULATOR_FRICTIONS[g][0]}", fontsize=9)
            ax.legend(fontsize=7)
        axes[-1, 0].set_xlabel("t [s]")
        fig.suptitle("seed 000 Fig. 18: arm joint tracking while grasping a 6000 kg/m³ box", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / "fig18_manipulator_tracking.png", dpi=110)
        plt.close(fig)
        written.append("fig18_manipulator_tracking.png")
    return written


# ====================================================================== command line
def add_arguments(p: argparse.ArgumentParser) -> None:
    from .sim import CONTACT_ESTIMATES  # not the simulator: the package's names load it lazily

    p.add_argument("name", choices=("seed000", "seed004", "faults"),
                   help="which experiment (seed004: idyn_control.experiments_seed004; faults: the quadruped "
                        "under lost, delayed and wrong inputs, a model mass error and a push, "
                        "idyn_control.experiments_faults)")
    p.add_argument("--quick", action="store_true", help="3 s straight trot on fewer cells (smoke check)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: os.cpu_count())")
    p.add_argument("--out", default=None, help="output directory (default: results/experiments/<name>)")
    p.add_argument("--only", default="", help="comma-separated fnmatch patterns on cell ids, "
                                              "e.g. 'planar/rigid_mu0.1/*,heightmap/seed0/pid'")
    p.add_argument("--ros", action="store_true",
                   help="seed004: also run every cell through the ROS 2 nodes (MuJoCo bridge + controller "
                        "node over DDS, the desired force streamed to the node) and report both; faults: over "
                        "ROS 2 (bridge, fault relay and controller nodes over DDS, lock-step) instead of in "
                        "one process")
    p.add_argument("--hash-seed", type=int, default=0,
                   help="PYTHONHASHSEED of the workers (default 0): runs are reproducible for one value; "
                        "others replay them with other round-off (seed000)")
    p.add_argument("--stabilization", default="none", choices=("none", "viip"),
                   help="the quadruped's balance stabilization (seed000; default none: README "
                        "'Balance stabilization' says why)")
    p.add_argument("--robot", default=None,
                   help=f"seed000: the legged cells' robot, a shipped name or a robot file (default "
                        f"{DEFAULT_ROBOT}, seed 000's platform; the paper's values stay its quadruped's); "
                        "the report goes to results/experiments/seed000_<robot> unless --out says")
    p.add_argument("--contact-estimate", default="force", choices=CONTACT_ESTIMATES,
                   help="the legged cells' contact estimate (seed000): force = a foot the ground pushed "
                        "over the last period (as the bridge node publishes), touching = the feet "
                        "MuJoCo's collision detection finds touching at the current state")


def default_out(robot: str) -> str:
    """Where a run for ``robot`` writes by default: the quadruped's under DEFAULT_OUT, any
    other robot's beside it, named after its file's ``robot`` parameter."""
    if robot == DEFAULT_ROBOT:
        return DEFAULT_OUT
    from . import robots

    return f"{DEFAULT_OUT}_{robots.spec(robot).name}"


def main(args: argparse.Namespace) -> int:
    from .errors import IdynError

    robot = args.robot or DEFAULT_ROBOT
    try:
        robot = check_robot(robot)
    except IdynError as exc:
        print(f"idyn-control experiments: {exc}", file=sys.stderr)
        return 2
    only = tuple(p for p in args.only.split(",") if p)
    if not cells(args.quick, only):
        print(f"idyn-control experiments: no cell matches {args.only!r}; cells: "
              + ", ".join(c.id for c in cells(args.quick)), file=sys.stderr)
        return 2
    report = run(quick=args.quick, workers=args.workers, out=args.out or default_out(robot), only=only,
                 hash_seed=args.hash_seed, stabilization=args.stabilization,
                 contact_estimate=args.contact_estimate, robot=robot, log=lambda m: print(m, flush=True))
    return 1 if any("error" in c for c in report["cells"]) else 0
