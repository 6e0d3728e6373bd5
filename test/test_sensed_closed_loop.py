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
    # forces of feet that were not touching entered nothing: predictions are the used
    # forces of the active contacts only (zero rows elsewhere)
    lifted = ~trace.contact
    np.testing.assert_array_equal(trace.f_pred[lifted], 0.0)


@pytest.mark.parametrize("friction", [math.inf, 0.7], ids=["mu_inf", "mu_0.7"])
@pytest.mark.parametrize("delay", DELAYS)
def test_sensed_stands_then_trots_on_rigid_ground(delay, friction):
    """Stand 1 s, trot 2 s at 0.2 m/s. Measured: ID(t_{i−1}) trots (6 s runs too, see the
    report); ID(t_{i−2}) stands, but its two-tick-old forces excite an alternating
    (500 Hz, Nyquist) force mode once contacts switch and it falls at about 2 s: the
    rigid-contact force loop f_{n} ≈ L f_{n−2} + c has eigenvalues of L in [0.5, 1]
    (1 on internal forces), so the delayed loop has eigenvalues ≈ ±√λ, barely damped."""
    run = LockstepRunner(_sensed(delay, duration=3.0, trot_start=1.0, friction=friction,
                                 velocity=(0.2, 0.0, 0.0))).run()
    m, trace = run.metrics, run.trace
    assert m["fallback_ticks"] <= 1, m  # only the first tick, before any measurement
    assert not trace.fallback[1:].any()
    assert m.get("fall_time_s", math.inf) > 1.0, m  # it stood the whole second
    standing = trace.t < 1.0
    assert np.ptp(trace.q[standing][200:, 2]) < 0.01  # steady height once risen
    # measured normal forces, tick to tick: the alternating mode shows as a second
    # difference about twice the first (ID(t_{i−1}): about equal)
    fz = trace.f_meas[(trace.t >= 1.0) & (trace.t < 1.5), :, 2]
    first = np.abs(np.diff(fz, axis=0)).mean()
    second = np.abs(np.diff(fz, n=2, axis=0)).mean()
    if delay == 1:
        assert not m["fell"], m
        assert m["speed_along_command_m_s"] == pytest.approx(0.2, abs=0.06), m
        assert second < 1.5 * first
    else:
        assert second > 1.5 * first
