"""Faults in closed loop (issue 14): what the injector hands the controller, and the
quadruped standing and trotting through them in lock-step MuJoCo."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import robots
from idyn_control.errors import ConfigError
from idyn_control.experiments_faults import cells
from idyn_control.sim.faults import FaultInjector, Faults, scale_masses
from idyn_control.sim.lockstep import run_scenario

DT = 1e-3


def _injector(**faults) -> FaultInjector:
    return FaultInjector(Faults(**faults), DT, nq=3, nv=2, k=4)


def _feed(inj: FaultInjector, n: int):
    """n ticks whose measurement is the tick number; returns what the controller saw."""
    seen, fresh = [], []
    for i in range(n):
        fresh.append(inj.observe(i * DT, np.full(3, float(i)), np.full(2, float(i)), np.ones(4, bool)))
        seen.append(inj.q[0])
        inj.restore_mask()
    return np.array(seen), np.array(fresh)


def test_a_delay_hands_the_controller_the_state_of_that_many_ticks_ago():
    seen, fresh = _feed(_injector(delay=0.005), 50)
    assert fresh.all()
    np.testing.assert_array_equal(seen[5:], np.arange(45))
    np.testing.assert_array_equal(seen[:5], 0.0)  # before 5 ticks: the oldest there is


def test_lost_states_leave_the_last_received_one_at_the_drawn_rate():
    inj = _injector(drop_state=0.2, seed=3)
    seen, fresh = _feed(inj, 5000)
    assert fresh.all()  # a 20 % loss never starves the watchdog for 50 ms here
    lost = np.flatnonzero(seen != np.arange(5000))
    assert inj.counts["dropped_states"] == pytest.approx(1000, rel=0.1)
    assert len(lost) >= inj.counts["dropped_states"]  # a lost tick shows an older state
    assert np.all(np.diff(seen) >= 0)  # never a state from the future, never a jump back


def test_contact_flips_last_one_tick():
    inj = _injector(contact_flip=0.1, seed=1)
    wrong = 0
    for i in range(2000):
        inj.observe(i * DT, np.zeros(3), np.zeros(2), np.ones(4, bool))
        wrong += int((~inj.mask).sum())
        inj.restore_mask()
        assert inj.mask.all()  # restored: the next tick starts from the true estimate
    assert wrong == inj.counts["flipped_contacts"] == pytest.approx(800, rel=0.15)


@pytest.mark.parametrize("horizon", [0.0, 0.03])
def test_an_input_gap_trips_the_watchdog_after_its_timeout_and_recovers_once(horizon):
    """Without prediction, or with a horizon shorter than the 50 ms watchdog, the safe output
    starts 50 ms after the last input; the first 30 ms of the gap are predicted ticks."""
    inj = _injector(gap=(0.1, 0.2), prediction_horizon=horizon)
    seen, fresh = _feed(inj, 400)
    stale = np.flatnonzero(~fresh)
    assert stale[0] == 150 and stale[-1] == 299  # more than 50 ms after the last fresh input (t = 0.099 s)
    assert inj.counts["watchdog_trips"] == 1 and inj.counts["gap_ticks"] == 200
    assert inj.counts["predicted_ticks"] == round(horizon / DT)
    np.testing.assert_array_equal(seen[100:300], 99.0)
    assert seen[300] == 300.0


def test_a_gap_within_the_prediction_horizon_is_predicted_and_never_trips_the_watchdog():
    inj = _injector(gap=(0.1, 0.2), prediction_horizon=0.25)
    predicted = []
    for i in range(400):
        fresh = inj.observe(i * DT, np.zeros(3), np.zeros(2), np.ones(4, bool))
        assert fresh
        predicted.append(inj.predicted)
        inj.restore_mask()
    np.testing.assert_array_equal(np.flatnonzero(predicted), np.arange(100, 300))
    assert inj.counts["watchdog_trips"] == 0 and inj.counts["predicted_ticks"] == 200
    # longer than the horizon: predicted up to it, then the safe output
    inj = _injector(gap=(0.1, 0.4), prediction_horizon=0.25)
    _, fresh = _feed(inj, 600)
    assert inj.counts["predicted_ticks"] == 250 and np.flatnonzero(~fresh)[0] == 350
    assert inj.counts["watchdog_trips"] == 1


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
def test_the_predicted_state_follows_the_robot_and_stays_bounded(formulation):
    """Dead reckoning with the solve's own q̈ from a trotting state: finite, inside the joint
    limits, stopped at its horizon, and close to the robot it stands for: the 200 ms gap of
    the fault table drifts by millimetres (the robot's truth: lock-step MuJoCo)."""
    from idyn_control.prediction import StatePredictor

    [cell] = cells(quick=True, only=(f"trot/gap200ms/{formulation}",))
    run = run_scenario(robot="quadruped", formulation=formulation, duration=cell["duration"], trot_start=1.0,
                       faults=cell["faults"])
    err = run.metrics["prediction_error_max"]
    assert err["base_position_m"] < 0.02 and err["joint_rad"] < 0.3, err
    model = robots.load("quadruped")
    predictor = StatePredictor(model, horizon_s=0.01)
    q0 = run.trace.q[1500]
    predictor.start(q0, run.trace.v[1500])
    wild = np.full(model.nv, 1e9)
    wild[3] = np.nan
    steps = [predictor.step(wild, DT) for _ in range(12)]
    assert all(s is not None for s in steps[:10]) and steps[10] is None and steps[11] is None
    assert np.isfinite(predictor.q).all() and np.isfinite(predictor.v).all()
    joints = predictor.q[model.joint_q_index]
    assert (joints >= model.q_lower - 1e-12).all() and (joints <= model.q_upper + 1e-12).all()
    assert predictor.ticks == 10 and predictor.gaps == 1
    with pytest.raises(ConfigError):
        predictor.set_horizon(2.0)


@pytest.mark.parametrize("robot,stance", [("quadruped", [1, 0, 0, 1]), ("anymal_c", [1, 1, 1, 0]),
                                          ("g1", [1, 1, 1, 1, 0, 0, 0, 0])])
def test_the_prediction_stops_the_stance_points_as_an_inelastic_impact(robot, stance):
    """hold_stance: the stance points' velocity becomes zero (a sole's four corners too,
    redundant rows), by the smallest change in the kinetic-energy metric (the change is
    M-orthogonal to every velocity that keeps them still), and a velocity that already
    keeps them still is left as it is."""
    from idyn_control.prediction import StatePredictor

    model = robots.load(robot)
    pm, data = model.pin_model, model.pin_model.createData()
    rng = np.random.default_rng(3)
    q = robots.standing_configuration(model, robot)
    v = rng.normal(scale=0.5, size=model.nv)
    stance = np.array(stance, dtype=bool)
    predictor = StatePredictor(model, horizon_s=0.25)
    predictor.start(q, v)
    predictor.hold_stance(stance)
    pin.computeJointJacobians(pm, data, q)
    M = pin.crba(pm, data, q)
    M = np.triu(M) + np.triu(M, 1).T
    jac = lambda ids: np.vstack([pin.getFrameJacobian(pm, data, model.contact_frame_ids[i],  # noqa: E731
                                                      pin.LOCAL_WORLD_ALIGNED)[:3] for i in ids])
    J = jac(np.flatnonzero(stance))
    assert np.abs(J @ predictor.v).max() < 1e-9
    assert np.abs(J @ v).max() > 0.1  # it had to change
    null = np.linalg.svd(J)[2][np.linalg.matrix_rank(J):].T  # velocities that keep them still
    assert np.abs(null.T @ M @ (predictor.v - v)).max() < 1e-9
    if (~stance).any():  # the swinging points keep moving
        assert np.abs(jac(np.flatnonzero(~stance)) @ predictor.v).max() > 0.01
    still = predictor.v.copy()
    predictor.hold_stance(stance)
    np.testing.assert_allclose(predictor.v, still, atol=1e-12)


def test_a_mass_error_scales_the_controllers_model_only():
    model = robots.load("quadruped")
    mass = pin.computeTotalMass(model.pin_model)
    scale_masses(model.pin_model, 1.1)
    assert pin.computeTotalMass(model.pin_model) == pytest.approx(1.1 * mass)
    assert pin.computeTotalMass(robots.load("quadruped").pin_model) == pytest.approx(mass)


@pytest.mark.parametrize("bad", [{"drop_state": 1.0}, {"delay": -0.001}, {"gap": (1.0,)}, {"mass_error": 2.0},
                                 {"nope": 1}])
def test_bad_faults_are_config_errors(bad):
    with pytest.raises(ConfigError):
        Faults.from_dict(bad).validate()


#: (fault cell, task): the CI subset of `idyn-control experiments faults --quick`
SURVIVED = [("drop20", "trot"), ("delay5ms", "trot"), ("flip10", "trot"), ("mass+10", "trot"),
            ("mass-10", "trot"), ("push30", "trot"), ("gap200ms", "stand"), ("push30", "stand")]


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
@pytest.mark.parametrize("fault,task", SURVIVED)
def test_the_quadruped_keeps_standing_and_trotting_through_the_fault(fault, task, formulation):
    [cell] = cells(quick=True, only=(f"{task}/{fault}/{formulation}",))
    run = run_scenario(robot="quadruped", formulation=formulation, duration=cell["duration"],
                       trot_start=1.0 if task == "trot" else 1e9, faults=cell["faults"])
    m = run.metrics
    assert not m["fell"], m
    hit = {k: v for k, v in m["faults"].items() if v}
    assert hit, "the fault never happened"
    if task == "trot":
        assert m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.3), m
    else:
        assert np.abs(run.trace.q[-1, :2] - run.trace.q[0, :2]).max() < 0.05  # stood its ground


#: how long after 1 s the trot starts, so that the gap (at 2 s) begins at another phase of
#: the 0.3 s gait cycle: 0 (all four feet down), 0.06 (a diagonal pair touching down), 0.15,
#: 0.21. Before the prediction held its stance points still, a foot's touchdown velocity
#: persisted through the gap: wbc_qp fell at 0.06 and its prediction was 0.83 / 0.59 rad
#: off at 0.15 / 0.21 (0.10 at 0); over DDS, where the trot starts whenever /cmd_vel
#: arrives, 3 of 12 runs blew up
GAP_PHASES = (0.0, 0.06, 0.15, 0.21)


@pytest.mark.parametrize("formulation", ["qp_coulomb", "wbc_qp"])
@pytest.mark.parametrize("horizon,survives,late_start", [(None, True, d) for d in GAP_PHASES] + [(0.0, False, 0.0)])
def test_a_200ms_input_gap_while_trotting(formulation, horizon, survives, late_start):
    """The robot file's prediction_horizon (0.25 s) keeps the quadruped trotting at speed
    through 200 ms without any input, wherever in the gait cycle it begins, every command
    finite and within the effort limits, the prediction within 0.4 rad of the robot;
    without prediction (the watchdog's safe output, hold, after 50 ms) it falls."""
    [cell] = cells(quick=True, only=(f"trot/gap200ms/{formulation}",))
    run = run_scenario(robot="quadruped", formulation=formulation, duration=cell["duration"],
                       trot_start=1.0 + late_start, faults={**cell["faults"], "prediction_horizon": horizon})
    m = run.metrics
    assert m["faults"]["gap_ticks"] == 200
    assert m["fell"] is not survives, m
    if survives:
        assert m["faults"]["predicted_ticks"] == 200 and m["faults"]["watchdog_trips"] == 0, m
        assert m["speed_along_command_m_s"] == pytest.approx(0.2, rel=0.1), m
        assert m["prediction_error_max"]["joint_rad"] < 0.4, m["prediction_error_max"]
        tau_max = robots.load("quadruped").tau_max
        assert np.isfinite(run.trace.tau).all() and (np.abs(run.trace.tau) <= tau_max + 1e-9).all()
