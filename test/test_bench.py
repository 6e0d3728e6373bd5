"""The benchmark protocol's mechanics (idyn_control.bench, bench_peer, bench/peer_placo.py).

What the bench times must be the real tick: its compiled region (the node's compiled calls
chained without Python) gives Controller.update's torques, accelerations and forces along a
recorded trot with contact switches. Its report carries per-round statistics and the ratio's
spread. The peer (PlaCo, in its own venv) is tested only where bench/setup_peer.sh made that
venv (CI does not): it answers a block of ticks and its solutions pass their physical checks.
No timed assertions: speed is measured by `idyn-control bench`, which writes JSON.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from idyn_control import bench, bench_peer

from conftest import native_or_skip

native_or_skip()  # the bench times the compiled tick

PEER = bench_peer.peer_python()
needs_peer = pytest.mark.skipif(PEER is None, reason="no PlaCo venv (bash bench/setup_peer.sh)")


@pytest.fixture(scope="module")
def trot():
    return bench.trot_sequence("solo12", ticks=300)


def test_the_trot_sequence_moves_and_switches_contacts(trot, tmp_path):
    """The recorded trot has make and break events, swinging feet and a moving base
    reference, and survives the file both venvs read."""
    # one 0.3 s gait period: each diagonal pair lifts off and lands once (a pair's feet switch
    # on the same tick when they land together, as with gait.vertical_fraction > 0)
    assert trot.switches() >= 4
    assert trot.swing.any(axis=0).all()  # every foot swings
    assert (trot.active.sum(axis=1) >= 2).all()  # a trot: two feet or more always hold
    assert trot.base_position_ref[-1, 0] - trot.base_position_ref[0, 0] > 0.03  # 0.2 m/s for 0.3 s
    loaded = bench.TickSequence.load(trot.save(tmp_path / "trot.npz"))
    for name in ("q", "v", "contact", "swing", "foot_position_ref", "base_rotation_ref", "torque_limit_nm",
                 "measured_forces"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(trot, name))
    assert loaded.gains == trot.gains and loaded.contact_frames == trot.contact_frames


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
def test_the_compiled_region_computes_what_controller_update_computes(trot, formulation):
    """Tick by tick along the trot, the compiled calls the bench chains give the torques,
    accelerations and forces of Controller.update (same warm starts up to the first tick)."""
    api = bench.ProjectTick(trot, formulation, "controller")
    compiled = bench.ProjectTick(trot, formulation, "compiled")
    assert api.backend == compiled.backend == "native"
    fa, fc = api.ctrl.formulation, compiled.ctrl.formulation
    worst = 0.0
    for _ in range(trot.ticks):
        api.run_block(1)
        compiled.run_block(1)
        for a, c in ((fa.tau, fc.tau), (fa.qdd, fc.qdd), (fa.forces, fc.forces)):
            worst = max(worst, float(np.abs(a - c).max()) / max(1.0, float(np.abs(a).max())))
    assert worst < 1e-8
    assert api.status == {"solved": trot.ticks} and compiled.status == {"solved": trot.ticks}
    phases = compiled.phase_summary()
    assert phases["solver"]["p50_us"] >= phases["qp_solve"]["p50_us"] > 0.0


def test_a_report_without_the_peer_has_per_round_statistics(tmp_path):
    report = bench.run(["wbc_qp@compiled", "qp_coulomb@controller"], scenarios=("standing",), rounds=3, ticks=90,
                       block=10, warmup=5, peer="off", sequence_ticks=60, out_dir=tmp_path, log=lambda m: None)
    (scenario,) = report["scenarios"]
    assert [(r["formulation"], r["region"]) for r in scenario["project"]] == [("wbc_qp", "compiled"),
                                                                             ("qp_coulomb", "controller")]
    for row in scenario["project"]:
        assert len(row["rounds"]) == 3 and row["summary"]["ticks"] == 90
        assert row["summary"]["p50_us"] <= row["summary"]["p99_us"] <= row["summary"]["max_us"]
        assert "ratio_to_peer" not in row
    assert report["peer"] is None and "not run" in bench.format_report(report)
    json.dumps(report)


@pytest.mark.parametrize("formulation", ["lcp_coulomb", "lcp_noslip", "projected", "contact_lstsq", "sensed", "pid"])
def test_a_formulation_without_a_compiled_backend_is_timed_in_python(trot, formulation):
    """``bench --formulations lcp_coulomb`` times the formulations that exist in Python only
    (until 2026-11-29 the bench handed them a ``backend`` option they do not have and ran
    none of them): one variant, the controller region, backend python. Every replayed tick
    of the trot is solved, none falls back: ``sensed`` replays the simulator's forces the
    sequence recorded (before, it was given none and every tick failed). Asking for their
    compiled tick is an error that says what to run instead."""
    assert bench.parse_variants([formulation]) == [(formulation, "python", "controller")]
    tick = bench.ProjectTick(trot, formulation, "controller", "python")
    assert tick.backend == "python"
    tick.run_block(trot.ticks)
    assert tick.status == {"solved": trot.ticks} and tick.fallbacks == 0
    tau = tick.ctrl.formulation.tau
    assert np.all(np.isfinite(tau)) and np.all(np.abs(tau) <= tick.ctrl.model.tau_max + 1e-9)
    for entry in (f"{formulation}:native", f"{formulation}@compiled"):
        with pytest.raises(ValueError, match=formulation):
            bench.parse_variants([entry])


def test_a_heavy_robot_from_a_file_is_benchmarked_on_its_own_sequences(tmp_path):
    """``bench --config hyq.yaml``: HyQ (87 kg, described only by a file) is recorded standing
    and trotting (contact switches), both compiled variants replay it without a fallback,
    and the sequences are written under the output directory, named after the robot."""
    from conftest import write_robot_file

    path = write_robot_file(tmp_path, "hyq")
    out = tmp_path / "bench"
    report = bench.run(["qp_coulomb@compiled", "wbc_qp@compiled"], robot=str(path), scenarios=("standing", "trot"),
                       rounds=2, ticks=100, block=10, warmup=5, peer="off", sequence_ticks=300, out_dir=out,
                       log=lambda m: None)
    standing, trot = report["scenarios"]
    assert "error" not in trot, trot.get("error")
    assert trot["contact_switches"] >= 4 and standing["contact_switches"] == 0
    for sc in (standing, trot):
        assert sc["sequence"] == str(out / f"hyq_{sc['name']}.npz")
        assert [(r["formulation"], r["backend"]) for r in sc["project"]] == [("qp_coulomb", "native"),
                                                                             ("wbc_qp", "native")]
        for row in sc["project"]:
            assert set(row["status"]) == {"solved"} and row["fallbacks"] == 0, row["status"]


@needs_peer
def test_the_peer_answers_blocks_and_its_solutions_hold(trot, tmp_path):
    """The PlaCo subprocess replays the trot block by block (its cursor carries on) and its
    solves succeed within the torque limits and friction pyramids, carrying the weight."""
    peer = bench_peer.PeerProcess(PEER, trot.save(tmp_path / "trot.npz"), "solo12")
    try:
        assert peer.hello["ready"] and peer.hello["ticks"] == trot.ticks
        for _ in range(3):
            wall, cpu = peer.run_block(100)
            assert wall.shape == cpu.shape == (100,) and (wall > 0).all()
    finally:
        sanity = peer.close()
    assert sanity["solves"] == 300 and sanity["failed"] == 0
    assert sanity["ok"], sanity["failures"]


@needs_peer
def test_a_report_with_the_peer_has_the_ratio_per_round(tmp_path):
    report = bench.run(["wbc_qp@compiled"], scenarios=("standing",), rounds=2, ticks=60, block=15, warmup=5,
                       peer="auto", sequence_ticks=60, out_dir=tmp_path, log=lambda m: None)
    (scenario,) = report["scenarios"]
    peer = scenario["peer"]
    assert peer["sanity"]["ok"] and len(peer["rounds"]) == 2 and peer["summary"]["ticks"] == 60
    ratio = scenario["project"][0]["ratio_to_peer"]
    for stat in ("p50_us", "p99_us", "cpu_p50_us"):
        assert len(ratio[stat]["rounds"]) == 2
        assert ratio[stat]["min"] <= ratio[stat]["median"] <= ratio[stat]["max"]
    assert "placo" in bench.format_report(report)
    json.dumps(report)
