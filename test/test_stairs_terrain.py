"""Terrain "stairs": three steps up, a landing, three steps down.

The same gait as on a block (``test_block_terrain.py``), several faces in a row: told the
ground, each swing that crosses a face rises over it and its foothold keeps off the edges;
blind, each foot trips on each face up and the footholds' plane lifts the base step by
step, and on the way down the feet that find no ground where they expected it go on down
(``gait.late_descent_speed``).
"""

from __future__ import annotations

import math

import pytest

from conftest import MORE_ROBOTS, NEW_ROBOTS, write_robot_file
from idyn_control import robots
from idyn_control.errors import ConfigError
from idyn_control.sim.lockstep import LockstepRunner, Scenario
from idyn_control.sim.terrain import STAIR_RISE_FRACTION, STAIR_STEPS, STAIR_TREAD_M, Stairs, block_height, \
    make_terrain

SPEED_M_S = 0.2


def test_the_stairs_go_up_step_by_step_then_down():
    stairs = Stairs(rise_m=0.04, tread_m=0.25, steps=3, start_m=0.3, landing_m=0.6)
    assert stairs.faces_m == pytest.approx([0.3, 0.55, 0.8, 1.4, 1.65, 1.9])
    for x, level in ((0.0, 0), (0.29, 0), (0.31, 1), (0.54, 1), (0.56, 2), (0.81, 3), (1.1, 3), (1.39, 3),
                     (1.41, 2), (1.66, 1), (1.89, 1), (1.91, 0), (2.5, 0)):
        assert stairs.height(x, 0.1) == pytest.approx(0.04 * level), x
    assert stairs.height(1.0, 0.5 * stairs.config.size_m - 0.1) == 0.0  # they end before the map's edge
    assert stairs.friction(1.0, 0.0) == pytest.approx(0.8)
    assert "3 × 4.0 cm" in stairs.label
    for bad in ({"rise_m": 0.0}, {"tread_m": math.nan}, {"steps": 0}, {"steps": 1.5}, {"landing_m": -1.0},
                {"mu": 0.0}):
        with pytest.raises(ConfigError):
            Stairs(**bad)


def test_the_stairs_are_sized_by_the_robot():
    model = robots.load("anymal_c")
    standing = robots.standing_configuration(model, "anymal_c")[2]
    assert block_height(model, "anymal_c", terrain="stairs") == pytest.approx(STAIR_RISE_FRACTION * standing,
                                                                               abs=1e-4)
    footprint = robots.standing_footprint(model, "anymal_c")
    stairs = make_terrain("stairs", 0, footprint, rise_m=0.05)
    assert stairs.steps == STAIR_STEPS and stairs.rise_m == 0.05
    assert stairs.tread_m == pytest.approx(max(STAIR_TREAD_M, footprint))  # a long robot gets long treads
    assert stairs.start_m > footprint + 0.1 and stairs.landing_m >= 2.5 * footprint


def _climb(robot: str, formulation: str, fraction: float, tmp_path, **scenario):
    """Stand 1 s, trot at 0.2 m/s up stairs of ``fraction`` of the standing base height per
    step and down again; the run, the runner, the stairs and the robot's footprint."""
    source = str(write_robot_file(tmp_path, robot)) if robot in {**NEW_ROBOTS, **MORE_ROBOTS} else robot
    model = robots.load(source)
    footprint = robots.standing_footprint(model, source)
    rise = round(fraction * robots.standing_configuration(model, source)[2], 4)
    stairs = make_terrain("stairs", 0, footprint, rise_m=rise)
    duration = 1.0 + (stairs.faces_m[-1] + 2.0 * footprint + 0.2) / SPEED_M_S
    runner = LockstepRunner(Scenario(robot=source, formulation=formulation, duration=duration, trot_start=1.0,
                                     terrain="stairs", block_height_m=rise, velocity=(SPEED_M_S, 0.0, 0.0),
                                     **scenario))
    return runner.run(), runner, stairs, footprint


def _assert_up_and_down(run, runner, stairs, footprint) -> None:
    """No fall, past the last face down at the commanded speed, the base up by most of the
    flight's height on the landing and back down at the end, the forces predicted."""
    m, tr = run.metrics, run.trace
    assert not m["fell"], m
    assert tr.q[tr.n - 1, 0] > stairs.faces_m[-1] + footprint, tr.q[tr.n - 1, 0]
    assert m["speed_along_command_m_s"] == pytest.approx(SPEED_M_S, rel=0.15), m
    flight = stairs.steps * stairs.rise_m
    assert tr.q[:tr.n, 2].max() > runner.q_standing[2] + 0.8 * flight, (tr.q[:tr.n, 2].max(), flight)
    assert abs(tr.q[tr.n - 1, 2] - runner.q_standing[2]) < 0.3 * flight  # down again
    assert m["force_error_sum_rel"] < 0.1, m


KNOWN_CELLS = [("solo12", "qp_coulomb"), ("go2", "wbc_qp"), ("anymal_c", "wbc_qp"), ("a1", "qp_coulomb"),
               ("b1", "qp_coulomb"), ("hyq", "wbc_qp"), ("laikago", "qp_coulomb"), ("anymal_b", "wbc_qp")]


@pytest.mark.parametrize("robot, formulation", KNOWN_CELLS)
def test_each_quadruped_climbs_stairs_it_is_told_and_goes_down_them(robot, formulation, tmp_path):
    """Steps of 15 % of the standing base height (Solo12 3.3 cm, ANYmal C 7.0 cm, HyQ 8.7 cm;
    three of them: 45 %), told to the gait and the controller: every foot goes over every
    face up with the obstacle swing."""
    run, runner, stairs, footprint = _climb(robot, formulation, 0.15, tmp_path)
    _assert_up_and_down(run, runner, stairs, footprint)
    assert run.metrics["obstacle_swings"] >= stairs.steps * len(runner.robot.contacts), run.metrics


BLIND_CELLS = [("solo12", "wbc_qp"), ("go2", "qp_coulomb"), ("anymal_c", "qp_coulomb"), ("a1", "wbc_qp"),
               ("go1", "qp_coulomb"), ("b1", "wbc_qp"), ("laikago", "wbc_qp"), ("anymal_b", "qp_coulomb")]


@pytest.mark.parametrize("robot, formulation", BLIND_CELLS)
def test_blind_each_quadruped_trips_up_stairs_and_walks_down_them(robot, formulation, tmp_path):
    """Steps of 15 % of the standing base height (the default is 10 %), the gait and the
    controller told nothing, each tick compiled as the node's loop runs it: the feet strike
    each face up and swing again over it (the trip reflex), and find the steps down by going
    on down. With the contact estimate on the force's vertical part (until 2026-11-29),
    which misses a foot pressed against a face, 15 of 18 such runs walked (now 18)."""
    run, runner, stairs, footprint = _climb(robot, formulation, 0.15, tmp_path, terrain_known=False, compiled=True)
    _assert_up_and_down(run, runner, stairs, footprint)
    assert run.metrics["compiled_tick_fraction"] > 0.999, run.metrics["compiled_tick_fraction"]
    assert run.metrics["trips"] >= stairs.steps, run.metrics["trips"]
