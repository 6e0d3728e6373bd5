"""Run time against the number of contact points (seed 000 §4.7, Fig. 19).

A legged robot's feet are replaced by patches of contact points (a horizontal circle of
``points_per_foot`` points around each foot frame, as a sole would give), and every
formulation is timed standing on all of them. Benchmarks, not tests: the numbers are
per-tick p50/p99 on this machine, to be compared as ratios (DESIGN.md §6).

Run with ``OPENBLAS_NUM_THREADS=1``: on these small matrices a multi-threaded BLAS was
2–5× slower per tick on the (loaded, 2-CPU) development machine.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from typing import Iterable, Sequence

import numpy as np
import pinocchio as pin

from . import formulations, robots
from .model import ContactConfig, RobotModel

DEFAULT_COUNTS = tuple(range(4, 49, 4))


def multi_contact_model(points_per_foot: int, *, robot: str = "solo12",
                        radius: float = 0.01) -> tuple[RobotModel, np.ndarray]:
    """A copy of ``robot`` whose contacts are ``points_per_foot`` points per foot.

    With one point per foot the robot's own foot frames are used. Otherwise the points
    are new frames on the foot's parent joint, on a circle of ``radius`` [m] around the
    foot frame, horizontal in the standing configuration.

    Returns:
        (model, standing configuration).
    """
    if points_per_foot < 1:
        raise ValueError(f"points_per_foot must be ≥ 1, got {points_per_foot}")
    spec = robots.spec(robot)
    base = robots.load(robot)
    q_stand = robots.standing_configuration(base, robot)
    if points_per_foot == 1:
        return base, q_stand
    pm = pin.Model(base.pin_model)  # copy: the cached robot stays untouched
    data = pm.createData()
    pin.framesForwardKinematics(pm, data, q_stand)
    names = []
    for foot in base.contact_frames:
        fid = pm.getFrameId(foot)
        frame = pm.frames[fid]
        R_world = data.oMf[fid].rotation
        for j in range(points_per_foot):
            angle = 2.0 * np.pi * j / points_per_foot
            offset_world = radius * np.array([np.cos(angle), np.sin(angle), 0.0])
            placement = frame.placement * pin.SE3(np.eye(3), R_world.T @ offset_world)
            name = f"{foot}_{j}"
            pm.addFrame(pin.Frame(name, frame.parentJoint, fid, placement, pin.FrameType.OP_FRAME))
            names.append(name)
    contacts = [ContactConfig(name, friction=spec.friction) for name in names]
    model = RobotModel(pm, urdf_xml=base.urdf_xml, contacts=contacts,
                       effort_limits=spec.effort_limit, package_dirs=base.package_dirs)
    return model, q_stand


def contact_scaling(formulation_names: Iterable[str], counts: Sequence[int] = DEFAULT_COUNTS,
                    ticks: int = 1000, *, robot: str = "solo12", dt: float = 1e-3,
                    q_noise: float = 0.0, warmup: int = 200, seed: int = 0) -> list[dict]:
    """Time each formulation standing on ``counts`` contact points.

    Args:
        formulation_names: registry names; names that are unknown or cannot be
            imported yet are reported as ``{"formulation": name, "skipped": reason}``.
        counts: total contact points; each must be a multiple of the number of feet.
        ticks: timed solves per (formulation, count), after ``warmup`` untimed ones.
        robot: a legged robot of :mod:`idyn_control.robots`.
        dt: control period [s].
        q_noise: std of a joint-configuration noise added every tick [rad] (0: still).
        seed: seed of that noise.

    Returns:
        JSON-ready dicts: formulation, robot, contacts, ticks, p50_us, p99_us, max_us
        (whole ``solve`` per tick, time.perf_counter), solver_p50_us (the LCP/QP part),
        iterations_p50, max_dynamics_residual, status (counts per status).
    """
    feet = len(robots.spec(robot).contact_frames)
    for count in counts:
        if count % feet:
            raise ValueError(f"contact count {count} is not a multiple of the {feet} feet of {robot}")
    names = list(formulation_names)
    available, rows = [], []
    for name in names:
        try:
            formulations.get(name)
            available.append(name)
        except (KeyError, ImportError, AttributeError) as exc:
            rows.append({"formulation": name, "skipped": str(exc)})
    for count in counts:
        model, q_stand = multi_contact_model(count // feet, robot=robot)
        v = np.zeros(model.nv)
        qdd_des = np.zeros(model.nv)
        frames = model.contact_frames
        forms = [formulations.make(name, model, dt=dt) for name in available]
        stats = [{"times": [], "solver": [], "iterations": [], "residual": 0.0, "status": Counter()}
                 for _ in forms]
        rng = np.random.default_rng(seed)
        q = q_stand.copy()
        gc.collect()
        gc.freeze()  # as the node does after configure
        # round robin: every formulation solves the same state in the same tick, so load
        # bursts on a shared machine hit all of them alike
        for tick in range(warmup + ticks):
            if q_noise:
                q[model.joint_q_index] = q_stand[model.joint_q_index] + rng.normal(0.0, q_noise, model.na)
            for form, st in zip(forms, stats):
                t0 = time.perf_counter()
                result = form.solve(q, v, qdd_des, frames)
                elapsed = time.perf_counter() - t0
                if tick < warmup:
                    continue
                st["times"].append(elapsed)
                st["solver"].append(result.solve_time_s)
                st["iterations"].append(result.iterations)
                st["status"][result.status] += 1
                if form.predicts_forces:
                    st["residual"] = max(st["residual"], form.dynamics_residual(result))
        gc.unfreeze()
        for name, st in zip(available, stats):
            t_us = np.asarray(st["times"]) * 1e6
            rows.append({
                "formulation": name,
                "robot": robot,
                "contacts": int(count),
                "ticks": int(ticks),
                "p50_us": float(np.percentile(t_us, 50)),
                "p99_us": float(np.percentile(t_us, 99)),
                "max_us": float(t_us.max()),
                "solver_p50_us": float(np.percentile(np.asarray(st["solver"]) * 1e6, 50)),
                "iterations_p50": float(np.percentile(st["iterations"], 50)),
                "max_dynamics_residual": float(st["residual"]),
                "status": dict(st["status"]),
            })
    return rows


__all__ = ["DEFAULT_COUNTS", "contact_scaling", "format_scaling", "multi_contact_model", "plot_scaling"]


def format_scaling(rows: Sequence[dict]) -> str:
    """A table: one row per contact count, p50 [µs] per formulation (p99 in brackets)."""
    names = sorted({r["formulation"] for r in rows if "p50_us" in r})
    counts = sorted({r["contacts"] for r in rows if "p50_us" in r})
    cell = {(r["formulation"], r["contacts"]): r for r in rows if "p50_us" in r}
    lines = ["contacts" + "".join(f"{n:>24}" for n in names)]
    for c in counts:
        parts = []
        for n in names:
            r = cell.get((n, c))
            parts.append(f"{r['p50_us']:>12.0f} ({r['p99_us']:>7.0f})" if r else f"{'-':>24}")
        lines.append(f"{c:>8}" + "".join(f"{p:>24}" for p in parts))
    lines.append("per-tick p50 (p99) [µs]; seed 000 Fig. 19's bar: 1 ms")
    return "\n".join(lines)


def plot_scaling(rows: Sequence[dict], path) -> None:
    """Seed 000 Fig. 19: per-tick time against the number of contacts, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name in sorted({r["formulation"] for r in rows if "p50_us" in r}):
        pts = sorted((r["contacts"], r["p50_us"], r["p99_us"]) for r in rows if r["formulation"] == name and "p50_us" in r)
        c, p50, p99 = (np.array(x) for x in zip(*pts))
        line, = ax.plot(c, p50 / 1e3, marker="o", label=f"{name} p50")
        ax.plot(c, p99 / 1e3, linestyle=":", color=line.get_color(), label=f"{name} p99")
    ax.axhline(1.0, color="k", linewidth=0.8, label="1 kHz deadline")
    ax.set_xlabel("contact points")
    ax.set_ylabel("time per tick [ms]")
    ax.set_title("Inverse dynamics time vs contacts (seed 000 Fig. 19)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
