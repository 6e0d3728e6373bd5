"""``idyn-control``: the command line of the ROS-free core.

    idyn-control solve --robot solo12 --formulation qp_coulomb
    idyn-control bench --scenarios standing,trot --rounds 5 --json results/bench.json
    idyn-control check-config config/solo12.yaml
    idyn-control experiments seed000 [--quick] [--workers N] [--out DIR]
    idyn-control experiments seed004 [--quick] [--ros] [--out DIR]
    idyn-control experiments faults [--quick] [--ros] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import formulations, robots
from .errors import IdynError
from .model import RobotModel
from .sim.terrain import RAMP_SLOPE_DEG, RAMP_SLOPE_RANGE_DEG


def _model(args) -> tuple[RobotModel, str | None]:
    if args.urdf:
        frames = tuple(f for f in (args.contacts or "").split(",") if f)
        return RobotModel.from_urdf(args.urdf, contact_frames=frames, friction=args.friction), None
    return robots.load(args.robot, friction=args.friction), args.robot


def cmd_solve(args) -> int:
    model, robot = _model(args)
    f = formulations.make(args.formulation, model, dt=args.dt)
    rng = np.random.default_rng(args.seed)
    if args.state == "standing" and robot is not None:
        q = robots.standing_configuration(model, robot)
        v, qdd = np.zeros(model.nv), np.zeros(model.nv)
    else:
        q = model.random_configuration(rng)
        v, qdd = rng.normal(0, 0.5, model.nv), rng.normal(0, 1.0, model.nv)
    result = f.solve(q, v, qdd, model.contact_frames)
    np.set_printoptions(precision=4, suppress=True, linewidth=120)
    print(f"robot        {model!r}")
    print(f"formulation  {args.formulation}   status {result.status}   iterations {result.iterations}")
    print(f"time         solve {result.solve_time_s * 1e6:.1f} µs, tick {result.compute_time_s * 1e6:.1f} µs "
          "(first call: includes warm-up)")
    print(f"residual     {f.dynamics_residual(result):.2e}  (‖M q̈ + h − Sᵀτ − Σ Jᵀf‖ relative)")
    print("tau [N·m]")
    for name, tau, limit in zip(model.joint_names, result.tau, model.tau_max):
        print(f"  {name:<24}{tau:>10.4f}   (limit {limit:g})")
    if result.contact_frames:
        print("contact forces, world frame [N]")
        for frame, force in zip(result.contact_frames, result.forces):
            print(f"  {frame:<24}{force}")
    print(f"base q̈       {result.qdd[:model.n_base]}" if model.floating_base else "")
    return 0 if result.ok else 1


def cmd_bench(args) -> int:
    from . import bench

    entries = [n for n in args.formulations.split(",") if n]
    if args.scenarios is None:  # a robot on flat feet does not trot: its balance task instead
        from . import robots

        args.scenarios = "standing,balance" if robots.spec(args.robot).surfaces else "standing,trot"
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in bench.SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r}; valid: {', '.join(bench.SCENARIOS)}")
    bench.parse_variants(entries)  # unknown names fail before minutes of benchmarking
    out = Path(args.json) if args.json else None
    print(f"benchmark: {args.robot} {', '.join(scenarios)}; {args.ticks} ticks per variant in {args.rounds} rounds "
          f"(blocks of {args.block}), interleaved with the peer's when it runs", flush=True)
    report = bench.run(entries, robot=args.robot, scenarios=scenarios, rounds=args.rounds, ticks=args.ticks,
                       block=args.block, warmup=args.warmup, peer=args.peer, sequence_ticks=args.sequence_ticks,
                       priority=args.priority,
                       out_dir=(out.parent if out else Path("results")) / "bench",
                       log=lambda m: print(m, flush=True))
    summary = bench.format_report(report)
    print(summary)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        out.with_suffix(".txt").write_text(summary + "\n")
        print(f"wrote {out} and {out.with_suffix('.txt')}")
    return 0


def cmd_check_config(args) -> int:
    """Validate a controller-node parameter file without ROS (idyn_control.config)."""
    from . import config

    params = config.load_params_file(args.file, node_name=args.node)
    problems = config.validate(params, check_model=not args.no_model)
    for problem in problems:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if problems:
        print(f"{args.file}: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    settings = config.resolve(params)
    if not args.no_model:
        for line in config.build_model(settings).effort_limit_warnings():
            print(f"{args.file}: warning: {line}", file=sys.stderr)
    source = settings["robot"] or settings["urdf_path"] or "robot_description"
    print(f"{args.file}: OK ({len(params)} parameters; {source}, formulation {settings['formulation']}, "
          f"{settings['update_rate']:g} Hz)")
    return 0


def cmd_demo(args) -> int:
    from . import demo

    opts = demo.DemoOptions(robot=args.robot, formulation=args.formulation, duration=args.duration,
                            speed=args.speed, ros=not args.no_ros, out=args.out, friction=args.friction,
                            compliant=args.compliant, terrain=args.terrain, terrain_seed=args.terrain_seed,
                            ramp_slope=args.ramp_slope, block_height=args.block_height, blind=args.blind,
                            task=args.task)
    report = demo.run(opts, log=lambda m: print(m, flush=True))
    m = report["metrics"]
    return 1 if m.get("fell") or m.get("failure") else 0


def cmd_bench_contacts(args) -> int:
    from . import bench, bench_contacts

    names = [n for n in args.formulations.split(",") if n]
    for n in names:
        formulations.get(n)
    counts = [int(c) for c in args.counts.split(",") if c]
    print(f"time vs contacts (seed 000 Fig. 19): {args.robot}, {args.ticks} ticks per point", flush=True)
    rows = bench_contacts.contact_scaling(names, counts, args.ticks, robot=args.robot)
    print(bench_contacts.format_scaling(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"machine": bench.machine(), "results": rows}, indent=2))
        print(f"wrote {args.json}")
    if args.png:
        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        bench_contacts.plot_scaling(rows, args.png)
        print(f"wrote {args.png}")
    return 0


def cmd_experiments(args) -> int:
    if args.robot is not None and args.name != "seed000":
        print(f"idyn-control experiments: --robot is seed000's ({args.name} runs its own robots)", file=sys.stderr)
        return 2
    if args.name == "seed004":
        from . import experiments_seed004

        return experiments_seed004.main(args)
    if args.name == "faults":
        from . import experiments_faults

        return experiments_faults.main(args)
    from . import experiments

    return experiments.main(args)


def cmd_build_native(args) -> int:
    from .native import build

    return build.main(["--force"] if args.force else [])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="idyn-control", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def add_robot(p, default="solo12"):
        p.add_argument("--robot", default=default,
                       help=f"a shipped robot: {', '.join(robots.names())} (config/<robot>.yaml)")
        p.add_argument("--config", dest="robot", metavar="PATH",
                       help="any robot's file instead (its controller params YAML: URDF, contacts, "
                            "standing pose, gains)")

    def robot_args(p):
        add_robot(p)
        p.add_argument("--urdf", help="URDF path instead of a known robot")
        p.add_argument("--contacts", help="comma-separated contact frames (with --urdf)")
        p.add_argument("--friction", type=float, default=None)

    p = sub.add_parser("solve", help="one inverse-dynamics solve, human-readable")
    robot_args(p)
    p.add_argument("--formulation", default="qp_coulomb", help=", ".join(formulations.names()))
    p.add_argument("--state", choices=("standing", "random"), default="standing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dt", type=float, default=1e-3)
    p.set_defaults(func=cmd_solve)

    p = sub.add_parser("bench", help="per-tick compute interleaved with the C++ peer (PlaCo): "
                                     "p50/p99/p99.9/max per side, ratio per round")
    add_robot(p)
    p.add_argument("--formulations", default="qp_coulomb,wbc_qp",
                   help="comma-separated name[:backend][@region]; backend native (default) or python "
                        "(the default, and the only one, of a formulation without a compiled tick: "
                        "lcp_coulomb, ...), region controller or compiled (default: both; python: controller)")
    p.add_argument("--scenarios", default=None,
                   help="comma-separated: standing, trot, balance (default: standing,trot; a robot on "
                        "flat feet, contacts.surfaces: standing,balance)")
    p.add_argument("--ticks", type=int, default=20_000, help="timed ticks per variant and scenario")
    p.add_argument("--rounds", type=int, default=10, help="rounds the ticks are split into (ratio spread)")
    p.add_argument("--block", type=int, default=250, help="ticks per block (peer and project alternate)")
    p.add_argument("--warmup", type=int, default=500, help="untimed ticks per side before the rounds")
    p.add_argument("--sequence-ticks", type=int, default=2000, help="length of the recorded scenario")
    p.add_argument("--peer", choices=("auto", "on", "off"), default="auto",
                   help="PlaCo peer: auto = if its venv exists, on = create it (bench/setup_peer.sh)")
    p.add_argument("--priority", type=int, default=0,
                   help="run both sides under SCHED_FIFO at this priority (as the node's loop_priority; "
                        "needs CAP_SYS_NICE); 0 = normal scheduling")
    p.add_argument("--json", help="write the machine-readable report here (and the summary beside it, .txt)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("bench-contacts", help="per-tick time vs number of contact points (seed 000 Fig. 19)")
    add_robot(p)
    p.add_argument("--formulations", default="lcp_noslip,qp_coulomb,qp_noslip")
    p.add_argument("--counts", default="4,8,12,16,20,24,28,32,36,40,44,48")
    p.add_argument("--ticks", type=int, default=1000)
    p.add_argument("--json", help="write the machine-readable results here")
    p.add_argument("--png", help="write the plot here")
    p.set_defaults(func=cmd_bench_contacts)

    p = sub.add_parser("check-config", help="validate a controller-node YAML (ROS 2 params file) without ROS")
    p.add_argument("file", help="e.g. config/solo12.yaml")
    p.add_argument("--node", default="idyn_controller", help="node name whose section is checked")
    p.add_argument("--no-model", action="store_true", help="skip loading the URDF (keys, types, ranges only)")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("demo", help="legged robot in MuJoCo through ROS 2: stand up, trot, stop (a humanoid: "
                                     "stand, shift the weight, squat); report, MCAP and plot")
    add_robot(p, "quadruped")
    p.add_argument("--formulation", default="wbc_qp", help=", ".join(formulations.names()))
    p.add_argument("--duration", type=float, default=10.0, help="trot duration [s, simulated]")
    p.add_argument("--speed", type=float, default=0.2, help="forward speed command [m/s]")
    p.add_argument("--friction", type=float, default=0.7, help="ground μ (inf = no slip)")
    p.add_argument("--compliant", action="store_true", help="compliant ground (≈1 mm at rest)")
    p.add_argument("--terrain", default="plane", choices=("plane", "heightmap", "ramp", "block", "stairs"),
                   help="heightmap: seed 000's rigid 3 cm bumps with per-patch μ ~ U(0.1, 1.5); ramp: up at "
                        "--ramp-slope, a flat top, as steeply down, μ 0.8; block: a vertical step up by "
                        "--block-height, a flat top, a step down, μ 0.8; stairs: 3 steps up by --block-height "
                        "each, a landing, 3 steps down, μ 0.8 (any: --friction and --compliant unused)")
    p.add_argument("--terrain-seed", type=int, default=0, help="seed of the height map")
    p.add_argument("--ramp-slope", type=float, default=RAMP_SLOPE_DEG,
                   help="slope of the ramp [°] (%g to %g)" % RAMP_SLOPE_RANGE_DEG)
    p.add_argument("--block-height", type=float, default=None,
                   help="height of the block, or each stair's rise [m] (default: 15 %%, stairs: 10 %% of the "
                        "robot's standing base height)")
    p.add_argument("--blind", action="store_true",
                   help="heightmap, ramp: do not tell the controller the normal and μ under its feet (it "
                        "assumes flat ground and --friction)")
    p.add_argument("--no-ros", action="store_true", help="lock-step in one process, no ROS")
    p.add_argument("--task", default="auto", choices=("auto", "trot", "balance"),
                   help="trot, or balance (stand, shift the weight, squat); auto: balance for a robot on flat "
                        "feet (contacts.surfaces), else trot")
    p.add_argument("--out", default="results/demo", help="output directory")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("experiments", help="regenerate a paper's experiments beside its numbers "
                                            "(Markdown + JSON + PNG), over local worker processes")
    from .experiments import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_experiments)

    p = sub.add_parser("build-native", help="rebuild the compiled tick in place (pip install / colcon build "
                                            "already build it; ~4 min)")
    p.add_argument("--force", action="store_true", help="recompile even if up to date")
    p.set_defaults(func=cmd_build_native)

    args = parser.parse_args(argv)
    if getattr(args, "friction", 0) is None:
        args.friction = 0.7
    try:
        return args.func(args)
    except IdynError as exc:
        print(f"idyn-control: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
