"""Seed 004 §IV through the nodes: the MuJoCo bridge and the controller node over real DDS,
the desired force streamed to the node's ~/desired_wrench/LF_FOOT at the control rate, the
force measured by the simulator at the foot (the bridge's contact wrench)."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

pytest.importorskip("rclpy")

from conftest import native_or_skip  # noqa: E402

native_or_skip()

from idyn_control.ros.force_tracking import run_force_tracking_ros  # noqa: E402

RMSE_BOUND_N = 2.0  # issue 11 acceptance, per axis
DURATION_S = 2.0    # the sine profile's first 2 s (0.5 s settling left out of the errors)


@lru_cache(maxsize=None)
def node_run(name, tmp_root):
    return run_force_tracking_ros(formulation=name, profile="sine", duration=DURATION_S,
                                  out=f"{tmp_root}/{name}", wall_timeout=120.0)


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("seed004_ros"))


def test_proposed_through_the_node_tracks_the_force_and_holds_the_torso(tmp_root):
    run = node_run("pidc_qp", tmp_root)
    m, ros = run.metrics, run.metrics["ros"]
    assert ros["failure"] is None and not m["fell"]
    # the run reached its end; a recorder behind on a loaded machine may have lost a few ticks
    assert run.t[-1] == pytest.approx(DURATION_S - run.scenario.dt)
    assert ros["unrecorded_ticks"] <= 0.05 * run.t.size, ros
    assert m["fallback_ticks"] == 0
    assert max(m["rmse_N"]) <= RMSE_BOUND_N, m["rmse_N"]
    assert m["base_position_drift_max_m"] <= 0.01
    assert m["base_orientation_drift_max_deg"] <= 1.0
    assert ros["saturated_joint_ticks"] == 0 and m["tau_max_abs_Nm"] <= run.tau_limit.max()
    assert np.ptp(run.f_meas[run.t > 0.5, 2]) >= 40.0  # the measured force follows the profile
    # the streamed reference kept the node's loop compiled: Python ran the first ticks only
    assert ros["backend"] == "native"
    assert ros["compiled_ticks"] >= 0.99 * (ros["compiled_ticks"] + ros["python_ticks"]), ros


@pytest.mark.parametrize("name", ["pidc_qp_howsm", "pidcwcu"])
def test_baselines_through_the_node_miss_the_force_by_far_more(name, tmp_root):
    proposed = np.array(node_run("pidc_qp", tmp_root).metrics["rmse_N"])
    run = node_run(name, tmp_root)
    baseline = np.array(run.metrics["rmse_N"])
    assert run.metrics["ros"]["failure"] is None
    assert (baseline >= 3.0 * proposed).all(), (baseline, proposed)
    assert baseline.max() >= 5.0
