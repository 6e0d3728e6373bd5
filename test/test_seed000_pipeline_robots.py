"""Seed 000's control pipeline on robots other than the project's quadruped (issue 10).

The waypoint task of ``idyn-control experiments seed000`` (§7.6: acceleration from rest,
turning in place, turning while moving) with each robot's own file, on seed 000's rigid
grounds (μ 0.1 and "infinite", the controllers told μ = 10), 12 s: Solo12 and Go2. The
paper's recommended controller and its LCP sibling, the sensed baseline ID(t_{i−1}) and
the PID baseline all walk; the ID(t_i) controllers predict the summed normal force within
3 % (issue 10 asks ≤ 5 % of QP,μ, ≤ 2 % of LCP,μ on the quadruped) and track the joints
better than PID, and QP,μ's torques change no faster than PID's (Tables 3–5). Each run is
a fresh interpreter with the grid's hash seed, as the grid runs its cells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

DURATION_S = 12.0
CONTROLLERS = ("qp_coulomb", "lcp_coulomb", "sensed_1", "pid")
KEYS = ("fell", "fall_time_s", "force_error_sum_rel", "joint_position_error_rad", "torque_rate_mean_Nm_s",
        "waypoints_reached", "speed_moving_ratio", "fallback_ticks", "ticks")


def _waypoints(robot: str, controller: str, ground: str) -> dict:
    code = ("import json, sys; from idyn_control import experiments as E; r, c, g, d = json.loads(sys.argv[1]); "
            "out = E.run_cell(E.Cell('planar', c, g, d, 'waypoints', robot=r)); "
            f"print(json.dumps(out.get('error') or {{k: out['metrics'].get(k) for k in {KEYS!r}}}))")
    out = subprocess.run([sys.executable, "-c", code, json.dumps([robot, controller, ground, DURATION_S])],
                         capture_output=True, text=True, check=True, env=dict(os.environ, PYTHONHASHSEED="0"))
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert isinstance(metrics, dict), f"{robot} {controller} {ground}: {metrics}"  # a cell that raised
    return metrics


@pytest.mark.parametrize("ground", ["rigid_mu0.1", "rigid_inf"])
@pytest.mark.parametrize("robot", ["solo12", "go2"])
def test_the_papers_controllers_walk_the_waypoint_task_on_other_quadrupeds(robot, ground):
    m = {c: _waypoints(robot, c, ground) for c in CONTROLLERS}
    for c, mc in m.items():
        assert not mc["fell"], (c, mc)
        assert mc["waypoints_reached"] >= 2, (c, mc)  # walked to one, turned, walked to the next
        assert mc["speed_moving_ratio"] == pytest.approx(1.0, abs=0.3), (c, mc)
    for c in ("qp_coulomb", "lcp_coulomb"):
        assert m[c]["fallback_ticks"] <= 1e-3 * m[c]["ticks"], (c, m[c])
        assert m[c]["force_error_sum_rel"] <= 0.03, (c, m[c])
        assert m[c]["joint_position_error_rad"] < m["pid"]["joint_position_error_rad"], (c, m)
    assert m["qp_coulomb"]["torque_rate_mean_Nm_s"] <= m["pid"]["torque_rate_mean_Nm_s"], m
