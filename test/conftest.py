"""Shared fixtures: real robots from the project's urdf/ and example-robot-data."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest

from pathlib import Path

import yaml

from idyn_control import config, robots

FLOATING = ("quadruped", "solo12", "anymal_c", "go2")
FIXED = ("panda", "ur5")
ALL_ROBOTS = FLOATING + FIXED


@lru_cache(maxsize=None)
def _load(name: str):
    return robots.load(name)


@pytest.fixture
def load_robot():
    """Return a function name → RobotModel (cached: models are read-only)."""
    return _load


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_state(model, rng, *, scale_v=1.0, scale_a=2.0):
    """A random (q, v, q̈_des) inside joint limits."""
    q = model.random_configuration(rng)
    v = rng.normal(0.0, scale_v, model.nv)
    a = rng.normal(0.0, scale_a, model.nv)
    return q, v, a


def native_or_skip() -> None:
    """Skip the calling test module when the compiled tick is not built; fail instead when
    IDYN_REQUIRE_NATIVE is set (CI builds it, so a missing build is an error there)."""
    import os

    from idyn_control import native

    try:
        native.load()
    except native.NativeUnavailable as err:
        if os.environ.get("IDYN_REQUIRE_NATIVE"):
            raise RuntimeError(f"IDYN_REQUIRE_NATIVE is set but the native tick is unavailable: {err}") from None
        pytest.skip(f"native tick unavailable: {err}", allow_module_level=True)


def standing_state(name, model):
    """Standing configuration of a legged robot, zero velocity and acceleration."""
    q = robots.standing_configuration(model, name)
    return q, np.zeros(model.nv), np.zeros(model.nv)


def _unitree(model: str, thigh: float, calf: float) -> dict:
    """A Unitree-style quadruped of example-robot-data (A1, Go1, B1, Laikago): the same feet
    and joint names, every leg in the pose (0, thigh, calf)."""
    return dict(urdf=f"package://example-robot-data/robots/{model}_description/urdf/{model}.urdf",
                frames=["FL_foot", "FR_foot", "RL_foot", "RR_foot"],
                joints=[f"{leg}_{j}_joint" for leg in ("FL", "FR", "RL", "RR") for j in ("hip", "thigh", "calf")],
                positions=[0.0, thigh, calf] * 4)


#: standing poses from each robot's SRDF ("standing" group state in example-robot-data)
NEW_ROBOTS = {
    "a1": _unitree("a1", 0.8, -1.6),
    "hyq": dict(urdf="hyq_description/robots/hyq_no_sensors.urdf",  # relative to the file: see write_robot_file
                frames=["lf_foot", "rf_foot", "lh_foot", "rh_foot"],
                joints=[f"{leg}_{j}_joint" for leg in ("lf", "rf", "lh", "rh") for j in ("haa", "hfe", "kfe")],
                positions=[-0.2, 0.75, -1.5, -0.2, 0.75, -1.5, -0.2, -0.75, 1.5, -0.2, -0.75, 1.5]),
    # Unitree Go1 (13 kg) and B1 (50 kg): the standing poses of their SRDFs
    "go1": _unitree("go1", 0.8, -1.853),
    "b1": _unitree("b1", 0.8, -1.6),
}
#: more, tried only where a test says so: Laikago (25 kg) and ANYmal B (30 kg); ANYmal B's
#: pose is its SRDF's "standing", Laikago's (no SRDF) a crouch like A1's
MORE_ROBOTS = {
    "laikago": _unitree("laikago", 0.7, -1.4),
    "anymal_b": dict(urdf="anymal_b_simple_description/robots/anymal.urdf",
                     frames=["LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT"],
                     joints=[f"{leg}_{j}" for leg in ("LF", "RF", "LH", "RH") for j in ("HAA", "HFE", "KFE")],
                     positions=[-0.1, 0.7, -1.0, 0.1, 0.7, -1.0, -0.1, -0.7, 1.0, 0.1, -0.7, 1.0]),
    # Solo 8 (2.2 kg): two joints per leg, no abduction; its SRDF's "standing"
    "solo8": dict(urdf="solo_description/robots/solo.urdf",
                  frames=["FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"],
                  joints=[f"{leg}_{j}" for leg in ("FL", "FR", "HL", "HR") for j in ("HFE", "KFE")],
                  positions=[0.8, -1.6, 0.8, -1.6, -0.8, 1.6, -0.8, 1.6]),
}


def write_robot_file(tmp_path: Path, name: str, **extra) -> Path:
    """A user's robot file; HyQ's URDF is named by a path relative to the file (through a
    link to example-robot-data's robots/ beside it), A1's by a package:// URI."""
    r = NEW_ROBOTS[name] if name in NEW_ROBOTS else MORE_ROBOTS[name]
    urdf = r["urdf"]
    if not urdf.startswith("package://"):
        link = tmp_path / "descriptions"
        if not link.exists():
            link.symlink_to(robots.example_robot_data_dir() / "robots")
        urdf = f"descriptions/{urdf}"
    params = {"robot": name, "urdf_path": urdf, "contacts": {"frames": r["frames"]},
              "standing_pose": {"joints": r["joints"], "positions": r["positions"]}, **extra}
    return write_params_file(tmp_path, name, params)


def write_params_file(tmp_path: Path, name: str, params: dict) -> Path:
    """``<name>.yaml`` in ``tmp_path``: the node's ROS 2 params file with these parameters,
    as a user writes a robot's file."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({config.NODE_NAME: {"ros__parameters": params}}, sort_keys=False))
    return path


def switching_sequence(model, robot, rng, ticks):
    """Slowly varying states around standing (legged) or random (arms), with contact switches."""
    if robot in FLOATING:
        q0 = robots.standing_configuration(model, robot)
    else:
        q0 = model.random_configuration(rng)
    frames = model.contact_frames
    for i in range(ticks):
        q, v = q0.copy(), np.zeros(model.nv)
        phase = 2 * np.pi * i * 1e-2 + np.arange(model.na)
        q[model.joint_q_index] += 0.05 * np.sin(phase)
        v[model.n_base:] = 0.3 * np.cos(phase)
        a = rng.normal(0.0, 1.0, model.nv)
        # all feet, then one lifted, then none
        active = frames if i < ticks // 2 else (frames[1:] if i < ticks - 2 else ())
        yield q, v, a, active


def foot_slide(model, trace, start: int) -> float:
    """Largest horizontal displacement of a contact frame between tick ``start`` and the
    trace's last tick [m] (a lock-step :class:`~idyn_control.sim.lockstep.Trace`)."""
    import pinocchio as pin

    data = model.pin_model.createData()
    feet = []
    for n in (start, trace.n - 1):
        pin.framesForwardKinematics(model.pin_model, data, trace.q[n])
        feet.append([data.oMf[fid].translation[:2].copy() for fid in model.contact_frame_ids])
    return float(np.linalg.norm(np.array(feet[1]) - np.array(feet[0]), axis=1).max())
