"""Terrain "block": a vertical step up onto a block and off it.

Told the ground, a swing whose path crosses a step's face rises first to ``step_height``
above the block, over a longer swing, and footholds are moved off the edges
(``gait.OBSTACLE_*``, ``FOOTHOLD_*``). Before, with the usual 1.5 cm swing, a block of 20 %
of the standing base height made 19 of 20 robot × formulation runs fall (10 quadrupeds); at
10 %, 8 of 20. Blind, a swing foot that strikes the face swings again over it (the trip
reflex, ``gait.TRIP_*``); before, every blind run on a block of 10 % fell at the face.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import MORE_ROBOTS, NEW_ROBOTS, write_robot_file
from idyn_control import robots
from idyn_control.errors import ConfigError
from idyn_control.gait import STEEP_SLOPE, obstacle_profile
from idyn_control.sim.lockstep import LockstepRunner, Scenario
from idyn_control.sim.terrain import BLOCK_HEIGHT_FRACTION, Block, HeightMap, block_height, heightmap_config, \
    make_terrain

SPEED_M_S = 0.2
#: the block's height in these runs, as a fraction of the standing base height (default 0.15)
HEIGHT_FRACTION = 0.2


def test_the_block_is_flat_then_one_step_up_a_flat_top_and_one_step_down():
    block = Block(rise_m=0.05, start_m=0.4, top_m=0.6)
    assert block.height(0.0, 0.0) == 0.0 and block.height(0.38, 0.0) == 0.0
    assert block.height(0.42, 0.1) == pytest.approx(0.05) and block.height(0.98, -0.1) == pytest.approx(0.05)
    assert block.height(1.02, 0.0) == 0.0 and block.height(1.5, 0.0) == 0.0
    assert block.height(0.7, 0.5 * block.config.size_m - 0.1) == 0.0  # its sides end before the map's edge
    assert block.friction(0.7, 0.0) == pytest.approx(0.8)
    for bad in ({"rise_m": 0.0}, {"rise_m": math.nan}, {"top_m": -1.0}, {"mu": 0.0}):
        with pytest.raises(ConfigError):
            Block(**bad)


def test_the_blocks_default_height_is_a_fraction_of_the_robots_standing_height():
    model = robots.load("go2")
    standing = robots.standing_configuration(model, "go2")[2]
    assert block_height(model, "go2") == pytest.approx(BLOCK_HEIGHT_FRACTION * standing, abs=1e-4)
    assert block_height(model, "go2", 0.07) == 0.07
    footprint = robots.standing_footprint(model, "go2")
    block = make_terrain("block", 0, footprint, rise_m=0.04)
    assert block.rise_m == 0.04 and block.start_m > footprint + 0.1 and block.top_m >= 2.5 * footprint


def test_seed000s_height_maps_have_no_edges_so_their_swings_are_as_before():
    """The obstacle swings and the moved footholds are for step faces (steeper than
    ``STEEP_SLOPE``); raised over seed 000's smooth bumps they made the quadruped fall on
    all three maps. The maps' steepest grid cell is well below it."""
    for seed in range(3):
        h = HeightMap(heightmap_config(robots.standing_footprint(robots.load("quadruped"), "quadruped")), seed=seed)
        s = h.config.spacing_m
        steepest = max(np.abs(np.diff(h.heights, axis=0)).max(), np.abs(np.diff(h.heights, axis=1)).max()) / s
        assert steepest < 0.6 * STEEP_SLOPE, (seed, steepest)
    run = LockstepRunner(Scenario(robot="solo12", formulation="qp_coulomb", duration=4.0, trot_start=1.0,
                                  terrain="heightmap", velocity=(SPEED_M_S, 0.0, 0.0)))
    m = run.run().metrics
    assert not m["fell"] and m["obstacle_swings"] == 0 and m["footholds_moved"] == 0, m


def test_the_obstacle_profile_rises_holds_and_lands_smoothly():
    z0, z1, apex = 0.02, 0.07, 0.1
    assert obstacle_profile(0.0, z0, z1, apex) == pytest.approx((z0, 0.0, 0.0))
    assert obstacle_profile(1.0, z0, z1, apex) == pytest.approx((z1, 0.0, 0.0))
    assert obstacle_profile(0.5, z0, z1, apex) == (apex, 0.0, 0.0)
    s = np.linspace(0.0, 1.0, 2001)
    z = np.array([obstacle_profile(x, z0, z1, apex) for x in s])
    assert z[:, 0].min() >= z0 - 1e-12 and z[:, 0].max() <= apex + 1e-12
    # continuous value and slope (the numeric derivative is the analytic one)
    assert np.abs(np.diff(z[:, 0])).max() < 1e-3
    assert np.allclose(np.gradient(z[:, 0], s)[5:-5], z[5:-5, 1], atol=2e-3)


CELLS = [("quadruped", "qp_coulomb"), ("solo12", "qp_coulomb"), ("go2", "wbc_qp"), ("anymal_c", "qp_coulomb"),
         ("a1", "qp_coulomb"), ("go1", "wbc_qp"), ("b1", "wbc_qp"), ("hyq", "qp_coulomb"), ("laikago", "wbc_qp"),
         ("anymal_b", "qp_coulomb")]


@pytest.mark.parametrize("robot, formulation", CELLS)
def test_each_quadruped_steps_onto_a_block_and_off_it(robot, formulation, tmp_path):
    """A block of 20 % of the standing base height (Solo12 4.5 cm, ANYmal C 9.3 cm, HyQ
    11.6 cm), told to the gait and the controller: stand 1 s, trot at 0.2 m/s over the block
    and off it. No fall, the speed, every foot went up over a face with the obstacle swing
    (down, a swing may clear the edge as it is), the base rose with the footholds (but the project quadruped's, whose file
    keeps the start level: seed 000's pipeline), and the summed normal force within 10 %."""
    source = str(write_robot_file(tmp_path, robot)) if robot in {**NEW_ROBOTS, **MORE_ROBOTS} else robot
    model = robots.load(source)
    footprint = robots.standing_footprint(model, source)
    rise = round(HEIGHT_FRACTION * robots.standing_configuration(model, source)[2], 4)
    block = make_terrain("block", 0, footprint, rise_m=rise)
    far_face = block.start_m + block.top_m
    duration = 1.0 + (far_face + 2.0 * footprint + 0.2) / SPEED_M_S
    runner = LockstepRunner(Scenario(robot=source, formulation=formulation, duration=duration, trot_start=1.0,
                                     terrain="block", block_height_m=rise, velocity=(SPEED_M_S, 0.0, 0.0)))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["fallback_ticks"] <= 1e-3 * m["ticks"], m["fallback_ticks"]
    assert tr.q[tr.n - 1, 0] > far_face + footprint, tr.q[tr.n - 1, 0]
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["obstacle_swings"] >= len(model.contacts), m["obstacle_swings"]  # each foot went up
    if runner.gait.config.follow_ground:
        assert tr.q[:tr.n, 2].max() > runner.q_standing[2] + 0.5 * rise
    assert m["force_error_sum_rel"] < 0.1, m


def test_the_project_quadruped_with_wbc_qp_falls_off_a_block_it_is_told_of(tmp_path):
    """Known weak, a strict expected failure: the project quadruped keeps its base at the
    level it started on (``follow_ground`` false, seed 000's pipeline), and with ``wbc_qp``
    on a block of 20 % (2.6 cm) all four feet leave the ground at once 3.3 s in, as a pair
    lands on the block; a hind foot is then driven into the block's face. Since the contact
    estimate counts a foot pressed against a face (the force along the contact normal, not
    its vertical part: 2026-11-29), that foot counts as a stance contact with the ground's
    upward normal, and the robot falls (also at 15 % and 30 %; it walks at 10 % and 25 %).
    With the former estimate the face contact went unseen and it walked. ``qp_coulomb``
    walks (above)."""
    m = LockstepRunner(Scenario(robot="quadruped", formulation="wbc_qp", duration=8.0, trot_start=1.0,
                                terrain="block", block_height_m=0.026, velocity=(SPEED_M_S, 0.0, 0.0))).run().metrics
    if m["fell"]:
        pytest.xfail(f"fell at {m['fall_time_s']:.2f} s")
    raise AssertionError("the quadruped's wbc_qp walked the told block: update the README's Blocks and this test")


BLIND_CELLS = [("solo12", "qp_coulomb"), ("go2", "wbc_qp"), ("anymal_c", "qp_coulomb"), ("a1", "wbc_qp"),
               ("b1", "qp_coulomb"), ("laikago", "qp_coulomb"), ("hyq", "wbc_qp"), ("go1", "qp_coulomb")]


@pytest.mark.parametrize("robot, formulation", BLIND_CELLS)
def test_blind_each_quadruped_trips_onto_a_block_and_steps_off_it(robot, formulation, tmp_path):
    """The same block at 15 % of the standing base height (the default: Solo12 3.3 cm,
    ANYmal C 7.0 cm, HyQ 8.7 cm), the gait and the controller told nothing of it, each tick
    compiled as the node's loop runs it. The swing feet strike its face; each swings again
    from where it struck, over an obstacle a fifth of the leg's height above that point
    (``gait.TRIP_*``), lands on the block, and the plane through the footholds lifts the
    base. Before the reflex, every one of these fell at the face of a 10 % block (3.0–4.5 s);
    with it but the contact estimate on the force's vertical part, Solo12 and HyQ fell at
    15 %."""
    source = str(write_robot_file(tmp_path, robot)) if robot in {**NEW_ROBOTS, **MORE_ROBOTS} else robot
    model = robots.load(source)
    footprint = robots.standing_footprint(model, source)
    rise = round(BLOCK_HEIGHT_FRACTION * robots.standing_configuration(model, source)[2], 4)
    block = make_terrain("block", 0, footprint, rise_m=rise)
    far_face = block.start_m + block.top_m
    duration = 1.0 + (far_face + 2.0 * footprint + 0.2) / SPEED_M_S
    runner = LockstepRunner(Scenario(robot=source, formulation=formulation, duration=duration, trot_start=1.0,
                                     terrain="block", block_height_m=rise, terrain_known=False, compiled=True,
                                     velocity=(SPEED_M_S, 0.0, 0.0)))
    run = runner.run()
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert m["compiled_tick_fraction"] > 0.999, m["compiled_tick_fraction"]
    assert tr.q[tr.n - 1, 0] > far_face + footprint, tr.q[tr.n - 1, 0]
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    assert m["trips"] >= 2, m["trips"]
    assert tr.q[:tr.n, 2].max() > runner.q_standing[2] + 0.5 * rise
    assert m["force_error_sum_rel"] < 0.1, m
