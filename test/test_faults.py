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


def test_an_input_gap_trips_the_watchdog_after_its_timeout_and_recovers_once():
    inj = _injector(gap=(0.1, 0.2))
    seen, fresh = _feed(inj, 400)
    stale = np.flatnonzero(~fresh)
    assert stale[0] == 150 and stale[-1] == 299  # more than 50 ms after the last fresh input (t = 0.099 s)
    assert inj.counts["watchdog_trips"] == 1 and inj.counts["gap_ticks"] == 200
    np.testing.assert_array_equal(seen[100:300], 99.0)
    assert seen[300] == 300.0


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


@pytest.mark.xfail(strict=True, reason="200 ms blind while trotting: the held last torque (or gravity "
                   "compensation) for 150 ms throws the 2.9 kg quadruped; measured, not fixed")
def test_a_200ms_input_gap_while_trotting():
    [cell] = cells(quick=True, only=("trot/gap200ms/qp_coulomb",))
    run = run_scenario(robot="quadruped", formulation="qp_coulomb", duration=cell["duration"], trot_start=1.0,
                       faults=cell["faults"])
    assert not run.metrics["fell"]
