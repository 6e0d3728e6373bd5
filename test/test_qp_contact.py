"""Seed 000 §6 specifics: Stage II removes torque chatter; the fast path is exact."""

from __future__ import annotations

import numpy as np
import pytest

from idyn_control import formulations, robots


def stance_sequence(model, name, rng, n=40, noise=1e-4):
    """Nearly identical four-foot stances: tiny joint perturbations of one pose."""
    q0 = robots.standing_configuration(model, name)
    for _ in range(n):
        q = q0.copy()
        q[model.joint_q_index] += rng.normal(0.0, noise, model.na)
        yield q


def torque_steps(f, model, states):
    zero = np.zeros(model.nv)
    taus = []
    for q in states:
        result = f.solve(q, zero, zero, model.contact_frames)
        assert result.ok and f.dynamics_residual(result) <= 1e-6
        taus.append(result.tau)
    return np.abs(np.diff(taus, axis=0)).max(axis=1)


def test_stage2_removes_torque_chatter(load_robot):
    """Seed 000 Fig. 6: on Solo12's symmetric four-foot stance Stage I alone, solved by a
    pivoting method as in the paper, jumps between equally optimal force distributions
    (two diagonal feet carrying the robot, then the other two); Stage II picks the
    minimum-torque distribution and the torques change orders of magnitude less."""
    model = load_robot("solo12")
    chatter, smooth = 0.0, 0.0
    for seed in (0, 1, 2):
        stage1 = formulations.make("qp_coulomb", model, stage2=False, stage1_solver="lemke")
        both = formulations.make("qp_coulomb", model, stage1_solver="lemke", fast_path=False)
        states = list(stance_sequence(model, "solo12", np.random.default_rng(seed), n=150))
        chatter = max(chatter, torque_steps(stage1, model, states).max())
        smooth = max(smooth, torque_steps(both, model, states).max())
    assert chatter > 0.5  # [N·m]: a whole leg's load moved to another leg
    assert chatter > 100 * smooth, (chatter, smooth)


@pytest.mark.parametrize("name", ["qp_coulomb", "qp_noslip"])
@pytest.mark.parametrize("robot", ["solo12", "anymal_c", "go2"])
def test_fast_path_equals_two_stages(name, robot, load_robot):
    model = load_robot(robot)
    fast = formulations.make(name, model)
    full = formulations.make(name, model, fast_path=False)
    zero = np.zeros(model.nv)
    for q in stance_sequence(model, robot, np.random.default_rng(5), n=5, noise=1e-2):
        a, b = fast.solve(q, zero, zero, model.contact_frames), full.solve(q, zero, zero, model.contact_frames)
        np.testing.assert_allclose(a.tau, b.tau, atol=1e-5 * max(1.0, np.abs(b.tau).max()))
        np.testing.assert_allclose(a.forces, b.forces, atol=1e-5 * max(1.0, np.abs(b.forces).max()))
    assert fast.fast_path_ticks == 5 and full.fast_path_ticks == 0


def test_lemke_and_qp_stage1_agree_after_stage2(load_robot):
    """Both Stage I solvers find the same optimal set; Stage II then picks the same point."""
    model = load_robot("solo12")
    zero = np.zeros(model.nv)
    for q in stance_sequence(model, "solo12", np.random.default_rng(7), n=5, noise=1e-2):
        results = [formulations.make("qp_coulomb", model, stage1_solver=s, fast_path=False)
                   .solve(q, zero, zero, model.contact_frames) for s in ("qp", "lemke")]
        np.testing.assert_allclose(results[0].tau, results[1].tau, atol=1e-4)
