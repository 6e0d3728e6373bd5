"""Seed 004 §IV in closed loop: ANYmal C presses the ground with its left-front foot in
MuJoCo (real URDF, real contact), forces measured by the simulator at the foot."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from idyn_control import formulations, robots
from idyn_control.sim.force_tracking import desired_force, run_force_tracking, standing_at_height

RMSE_BOUND_N = 2.0  # issue 11 acceptance, per axis


@lru_cache(maxsize=None)
def sine_run(name):
    return run_force_tracking(formulation=name, profile="sine", duration=3.0)


def test_profiles_are_the_papers():
    f = desired_force("sine", np.pi / 2)
    np.testing.assert_allclose(f, [30 * np.sin(0.1 * np.pi), 20.0, 140.0 - 50 * np.sin(np.pi)], atol=1e-12)
    levels = [desired_force("step", t, 2.0)[2] for t in (0.0, 2.5, 4.5, 6.5, 9.9, 12.0)]
    assert levels == [100.0, 130.0, 160.0, 130.0, 100.0, 100.0]


def test_stance_is_at_the_papers_height():
    model = robots.load("anymal_c")
    q = standing_at_height(model, "anymal_c", 0.57, 0.03)
    assert q[2] == pytest.approx(0.57, abs=1e-9)


def test_proposed_tracks_the_measured_force_and_holds_the_torso():
    run = sine_run("pidc_qp")
    m = run.metrics
    assert m["fallback_ticks"] == 0
    assert max(m["rmse_N"]) <= RMSE_BOUND_N, m["rmse_N"]
    assert m["base_position_drift_max_m"] <= 0.01
    assert m["base_orientation_drift_max_deg"] <= 1.0
    assert m["ticks_over_torque_limit"] == 0
    # the force measured follows the profile, not a constant: Fz swings by ±50 N
    assert np.ptp(run.f_meas[run.t > 0.5, 2]) >= 60.0


@pytest.mark.parametrize("name", ["pidc_qp_howsm", "pidcwcu"])
def test_baselines_miss_the_force_by_far_more(name):
    proposed = np.array(sine_run("pidc_qp").metrics["rmse_N"])
    baseline = np.array(sine_run(name).metrics["rmse_N"])
    assert (baseline >= 3.0 * proposed).all(), (baseline, proposed)
    assert baseline.max() >= 5.0


def test_support_feet_internal_forces_stay_inside_the_cone():
    """Stage II chooses the support legs' internal forces (blind to the tracking cost) with
    least tangential force: without it (weight 0) a support foot sits at the cone's edge."""
    model = robots.load("anymal_c")
    q = standing_at_height(model, "anymal_c", 0.57, 0.03)
    zero = np.zeros(model.nv)
    ratios = {}
    for weight in (0.0, 1e-3):
        f = formulations.make("pidc_qp", model, force_contacts=("LF_FOOT",), internal_force_weight=weight)
        f.set_desired_forces({"LF_FOOT": [12.0, 18.0, 185.0]})
        r = f.solve(q, zero, zero, model.contact_frames)
        assert r.ok
        # exact either way (a support foot's facet binds without the term: QP accuracy)
        assert np.linalg.norm(r.forces[0] - [12.0, 18.0, 185.0]) <= 1e-5 * 185.0
        assert np.abs(r.qdd[:6]).max() <= 1e-6
        support = r.forces[1:]
        ratios[weight] = (np.linalg.norm(support[:, :2], axis=1) / support[:, 2]).max()
    assert ratios[0.0] >= 0.5
    assert ratios[1e-3] <= 0.5 * ratios[0.0]
