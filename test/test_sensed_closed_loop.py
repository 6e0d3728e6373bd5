"""The sensed-force reference controllers ID(t_{i−1}) and ID(t_{i−2}) in the lock-step closed
loop (seed 000 §7.3), with real MuJoCo physics: the simulator's exact contact forces of the
previous one or two control periods drive the ``sensed`` formulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from idyn_control.sim.lockstep import LockstepRunner, Scenario

DELAYS = (1, 2)


def _sensed(delay: int, **fields) -> Scenario:
    return Scenario(robot="quadruped", formulation="sensed", formulation_options={"delay_ticks": delay},
                    **fields)


def _record_forces_used(runner: LockstepRunner) -> list[np.ndarray]:
    """The measured forces each solve of the runner's formulation used [N, world], per tick."""
    f = runner.controller.formulation
    used: list[np.ndarray] = []
    compute = f._compute

    def recording_compute():
        out = compute()
        used.append(f.forces_used.copy())
        return out

    f._compute = recording_compute
    return used


@pytest.mark.parametrize("delay", DELAYS)
def test_the_solve_at_tick_n_uses_the_simulator_forces_of_tick_n_minus_delay(delay):
    """ID(t_{i−1}): f_meas of tick n − 1; ID(t_{i−2}): of tick n − 2 — exactly, through
    the stand and the first contact switches of the trot (whose ticks must not throw)."""
    runner = LockstepRunner(_sensed(delay, duration=0.6, trot_start=0.3, friction=0.7))
    used = _record_forces_used(runner)
    trace = runner.run().trace
    n = trace.n
    assert n == 600 and len(used) == n  # one solve per tick, none skipped by an exception
    switches = np.flatnonzero(np.any(trace.contact[1:] != trace.contact[:-1], axis=1))
    assert switches.size >= 2  # feet lifted and landed: contacts went inactive and active
    used = np.array(used)
    np.testing.assert_array_equal(used[0], 0.0)  # no measurement before the first period
    if delay == 2:  # start-up: the only measurement there is
        np.testing.assert_array_equal(used[1], trace.f_meas[0])
    np.testing.assert_array_equal(used[delay:], trace.f_meas[: n - delay])
    assert trace.fallback[0] and not trace.fallback[1:].any()
    lifted = ~trace.contact  # the loop's contact estimate (last period's normal force)
    if delay == 1:
        # forces of feet that were not touching entered nothing: predictions are the
        # used forces of the active contacts only (zero rows elsewhere)
        np.testing.assert_array_equal(trace.f_pred[lifted], 0.0)
    else:
        # the two-tick-old measurement enters whole, at its contacts, even on a foot the
        # estimate (one tick old) says has lifted since: the forces reported are exactly
        # the forces used, every contact, every tick
        stale = lifted[delay:] & (np.abs(used[delay:]).sum(axis=2) > 0.0)
        assert stale.any()  # lift-offs happened: the case was exercised
        np.testing.assert_array_equal(trace.f_pred[1:], used[1:])


@pytest.mark.parametrize("delay, friction", [
    (1, math.inf), (1, 0.1), (1, 0.7), (2, math.inf), (2, 0.1), (2, 0.7)],
    ids=["1-mu_inf", "1-mu_0.1", "1-mu_0.7", "2-mu_inf", "2-mu_0.1", "2-mu_0.7"])
def test_sensed_stands_then_trots_on_rigid_ground(delay, friction):
    """Stand 1 s, trot 2 s at 0.2 m/s on rigid ground without falling.

    ID(t_{i−2}) feeds the forces of tick n − 2 to tick n: the rigid-contact force loop
    f_n ≈ L f_{n−2} + c (L's eigenvalues in [0.55, 1] for this quadruped, 1 on internal
    forces) has eigenvalues ≈ ±√λ, so an alternating (500 Hz) force pattern rides on the
    trot, barely damped; it stays bounded once the older measurement's forces enter whole
    (before, dropping the force of a foot lifted or swung since the measurement kicked it
    at every contact switch and the robot fell at about 2 s on every ground)."""
    run = LockstepRunner(_sensed(delay, duration=3.0, trot_start=1.0, friction=friction,
                                 velocity=(0.2, 0.0, 0.0))).run()
    m, trace = run.metrics, run.trace
    assert m["fallback_ticks"] <= 1, m  # only the first tick, before any measurement
    assert not trace.fallback[1:].any()
    assert not m["fell"], m
    standing = trace.t < 1.0
    assert np.ptp(trace.q[standing][200:, 2]) < 0.01  # steady height once risen
    # the base stays upright while trotting (a fall tilts it past 57°)
    R33 = 1.0 - 2.0 * (trace.q[:, 3] ** 2 + trace.q[:, 4] ** 2)  # quaternion (x, y, z, w)
    assert R33[trace.t >= 1.0].min() > np.cos(np.radians(20.0))
    # measured normal forces, tick to tick: the alternating mode of ID(t_{i−2}) shows as
    # a second difference about twice the first (ID(t_{i−1}): about equal or less)
    fz = trace.f_meas[(trace.t >= 1.0) & (trace.t < 1.5), :, 2]
    first = np.abs(np.diff(fz, axis=0)).mean()
    second = np.abs(np.diff(fz, n=2, axis=0)).mean()
    if delay == 1:
        assert second < 1.5 * first
    else:
        assert second > 1.5 * first
    assert m["speed_along_command_m_s"] == pytest.approx(0.2, abs=0.06), m
