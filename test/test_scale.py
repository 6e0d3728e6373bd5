"""Scale-aware solving (issue 13 item 2): the same default options solve a 1 kg and a 90 kg
robot to the same relative accuracy.

``wbc_qp`` mixes newtons (base dynamics rows, torque limits) with m/s² (contact rows,
tasks) under one absolute tolerance; before its rows were divided by the robot's mass, on
ANYmal C (50 kg) and HyQ (87 kg) ProxQP stopped at its iteration cap or reported
"infeasible" on ordinary standing states and the controller fell back to damping (ANYmal C
fell 0.2 s into a trot, HyQ had 148 fallback ticks in 3 s).
"""

from __future__ import annotations

import itertools

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import formulations, robots
from idyn_control.sim.lockstep import run_scenario
from conftest import write_robot_file

#: 1.2 kg to 87 kg: the project's quadruped, Solo12, A1, Go2, ANYmal C, HyQ
ROBOTS = ("quadruped", "solo12", "a1", "go2", "anymal_c", "hyq")


def _load(name, tmp_path):
    source = write_robot_file(tmp_path, name) if name in ("a1", "hyq") else name
    return source, robots.load(source)


@pytest.mark.parametrize("backend", ("native", "python"))
@pytest.mark.parametrize("robot", ROBOTS)
def test_wbc_qp_solves_states_near_standing_at_every_scale(robot, backend, tmp_path):
    """Standing states with random velocities and desired accelerations, all four feet or
    any three down: solved within the iteration cap, the dynamics hold to 1e-9 of the
    robot's weight, forces in the friction pyramid; standing still, the feet carry the
    robot's weight."""
    source, model = _load(robot, tmp_path)
    mg = pin.computeTotalMass(model.pin_model) * 9.81
    f = formulations.make("wbc_qp", model, backend=backend)
    if backend == "native" and f._native is None:
        pytest.skip("compiled backend not built")
    q0 = robots.standing_configuration(model, source)
    rng = np.random.default_rng(7)
    frames = model.contact_frames
    subsets = [frames] + [c for c in itertools.combinations(frames, 3)]
    for trial in range(12):
        v = np.zeros(model.nv) if trial == 0 else rng.normal(0.0, 0.3, model.nv)
        a = np.zeros(model.nv) if trial == 0 else rng.normal(0.0, 2.0, model.nv)
        active = subsets[trial % len(subsets)]
        result = f.solve(q0, v, a, active)
        assert result.status == "solved", (trial, result.status, result.iterations)
        assert result.iterations < 100
        gen = f.terms.M @ result.qdd + f.terms.h
        gen[model.n_base:] -= result.tau
        for frame, force in zip(result.contact_frames, result.forces):
            gen -= f.contacts.J[model.contact_index(frame)].T @ force
        assert np.abs(gen).max() <= 1e-9 * mg, trial
        for frame, force in zip(result.contact_frames, result.forces):
            mu = model.contacts[model.contact_index(frame)].friction
            assert force[2] >= -1e-7 * mg
            assert max(abs(force[0]), abs(force[1])) <= mu * force[2] + 1e-7 * mg
        if trial == 0:
            assert result.forces[:, 2].sum() == pytest.approx(mg, rel=1e-4)  # w_force regularizes


@pytest.mark.parametrize("robot", ("anymal_c", "hyq"))
def test_heavy_robots_trot_with_default_solver_options(robot, tmp_path):
    """Lock-step, stand 1 s then trot 0.2 m/s for 2 s with wbc_qp's defaults: no fallback
    tick, the predicted forces within 5 % of the simulator's, the commanded speed."""
    source, _ = _load(robot, tmp_path)
    run = run_scenario(robot=str(source), formulation="wbc_qp", duration=3.0, trot_start=1.0)
    m = run.metrics
    assert not m["fell"], m
    assert m["fallback_ticks"] == 0, m
    assert m["force_error_sum_rel"] < 0.05, m
    assert m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.2), m


@pytest.mark.parametrize("backend", ("native", "python"))
@pytest.mark.parametrize("robot", ("solo12", "anymal_c"))
def test_wbc_qp_drops_torque_limits_no_torque_within_them_can_meet(robot, backend):
    """Legs all but passive (limits 1e-6 N·m) on ground of μ 0.01: no torque within the
    limits holds the feet with forces in their cones, standing or moving. wbc_qp solves
    without the limits (the controller clamps), counts every such tick, and the dynamics
    and the cones hold with what it returns. With its own limits nothing is dropped."""
    model = robots.load(robot)  # a fresh model: its limits are changed below
    own_limits = model.tau_max.copy()
    q0 = robots.standing_configuration(model, robot)
    for limit, expect_dropped in ((1e-6, True), (own_limits, False)):
        model.tau_max[:] = limit
        f = formulations.make("wbc_qp", model, backend=backend)
        if backend == "native" and f._native is None:
            pytest.skip("compiled backend not built")
        for i in range(len(model.contacts)):
            f.contacts.set_friction(i, 0.01)
        assert f.relaxations() == {"torque_limits_dropped": 0}
        rng = np.random.default_rng(3)
        for trial in range(10):
            v, a = rng.normal(0.0, 0.5, model.nv), rng.normal(0.0, 2.0, model.nv)
            if trial == 0:  # standing still
                v[:], a[:] = 0.0, 0.0
            result = f.solve(q0, v, a, model.contact_frames)
            assert result.ok, (trial, result.status)
            assert f.dynamics_residual(result) <= 1e-9
            fz = result.forces[:, 2]
            assert np.all(np.abs(result.forces[:, :2]) <= 0.01 * fz[:, None] + 1e-6 * max(1.0, fz.max()))
            assert f.relaxations()["torque_limits_dropped"] == (trial + 1 if expect_dropped else 0)
            if not expect_dropped:
                assert np.all(np.abs(result.tau) <= model.tau_max + 1e-6)
