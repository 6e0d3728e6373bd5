"""Known robots: where their URDFs are and how they touch the ground.

The project's own quadruped ships in ``urdf/``; the others come from the PyPI package
``example-robot-data`` (data only: found under the installed prefix).
"""

from __future__ import annotations

import site
import sys
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pinocchio as pin

from .errors import ModelError, UnknownNameError
from .model import RobotModel

PACKAGE = "idyn_control"


@lru_cache(maxsize=None)
def share_dir() -> Path:
    """The package's share directory (launch/, config/, urdf/).

    Order: a source checkout (this file's repository), the install prefix that pip or
    colcon used, then ament's index.
    """
    source = Path(__file__).resolve().parents[1]
    if (source / "urdf").is_dir() and (source / "package.xml").is_file():
        return source
    for prefix in (sys.prefix, sysconfig.get_paths()["data"], site.getuserbase()):
        candidate = Path(prefix) / "share" / PACKAGE
        if (candidate / "urdf").is_dir():
            return candidate
    try:
        from ament_index_python.packages import get_package_share_directory

        return Path(get_package_share_directory(PACKAGE))
    except Exception as exc:  # noqa: BLE001 - ament raises its own lookup errors
        raise ModelError(f"cannot find the share directory of {PACKAGE}: {exc}") from exc


@lru_cache(maxsize=None)
def example_robot_data_dir() -> Path:
    """``.../share/example-robot-data`` of the installed ``example-robot-data`` package."""
    roots = list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"]] + sys.path
    for root in roots:
        candidate = Path(root) / "cmeel.prefix" / "share" / "example-robot-data"
        if (candidate / "robots").is_dir():
            return candidate
    raise ModelError("example-robot-data is not installed: pip install example-robot-data")


@dataclass(frozen=True)
class RobotSpec:
    """Where a robot's URDF is and how the controller uses it."""

    name: str
    urdf: str  # relative to its source: "erd:" example-robot-data, "share:" this package
    contact_frames: tuple[str, ...] = ()
    effort_limit: float | None = None  # overrides URDF limits that are placeholders [N·m]
    friction: float = 0.7
    standing_joints: dict[str, float] = field(default_factory=dict)  # joint name → [rad]

    def urdf_path(self) -> Path:
        source, rel = self.urdf.split(":", 1)
        root = example_robot_data_dir() / "robots" if source == "erd" else share_dir()
        return root / rel

    def package_dirs(self) -> tuple[Path, ...]:
        if self.urdf.startswith("erd:"):
            return (example_robot_data_dir().parent,)
        return (share_dir().parent,)


def _legs(prefixes, names, values):
    return {f"{p}_{n}": v for p in prefixes for n, v in zip(names, values)}


ROBOTS: dict[str, RobotSpec] = {
    spec.name: spec
    for spec in (
        RobotSpec(
            "quadruped", "share:urdf/quadruped.urdf",
            ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT"),
            standing_joints=_legs(("LF", "RF", "LH", "RH"), ("HAA", "HFE", "KFE"), (0.0, 0.7, -1.4)),
        ),
        RobotSpec(
            "solo12", "erd:solo_description/robots/solo12.urdf",
            ("FL_FOOT", "FR_FOOT", "HL_FOOT", "HR_FOOT"), effort_limit=2.7,
            standing_joints={
                **_legs(("FL", "FR"), ("HAA", "HFE", "KFE"), (0.0, 0.8, -1.6)),
                **_legs(("HL", "HR"), ("HAA", "HFE", "KFE"), (0.0, -0.8, 1.6)),
            },
        ),
        RobotSpec(
            "anymal_c", "erd:anymal_c_simple_description/urdf/anymal.urdf",
            ("LF_FOOT", "RF_FOOT", "LH_FOOT", "RH_FOOT"),
            standing_joints={
                **_legs(("LF", "RF"), ("HAA", "HFE", "KFE"), (0.0, 0.6, -1.2)),
                **_legs(("LH", "RH"), ("HAA", "HFE", "KFE"), (0.0, -0.6, 1.2)),
            },
        ),
        RobotSpec(
            "go2", "erd:go2_description/urdf/go2.urdf",
            ("FL_foot", "FR_foot", "RL_foot", "RR_foot"),
            standing_joints=_legs(("FL", "FR", "RL", "RR"), ("hip_joint", "thigh_joint", "calf_joint"),
                                  (0.0, 0.8, -1.6)),
        ),
        RobotSpec("panda", "erd:panda_description/urdf/panda.urdf"),
        RobotSpec("ur5", "erd:ur_description/urdf/ur5_robot.urdf"),
    )
}


def names() -> tuple[str, ...]:
    """Names of the known robots."""
    return tuple(ROBOTS)


def spec(name: str) -> RobotSpec:
    try:
        return ROBOTS[name]
    except KeyError:
        raise UnknownNameError("robot", name, ROBOTS) from None


def load(name: str, *, friction: float | None = None, contact_frames=None) -> RobotModel:
    """Build the :class:`RobotModel` of a known robot."""
    s = spec(name)
    return RobotModel.from_urdf(
        s.urdf_path(),
        floating_base=bool(s.contact_frames),
        contact_frames=s.contact_frames if contact_frames is None else contact_frames,
        package_dirs=s.package_dirs(),
        friction=s.friction if friction is None else friction,
        effort_limits=s.effort_limit,
    )


def standing_configuration(model: RobotModel, name: str, *, foot_height: float = 0.0):
    """A standing configuration of a known robot: joints from the spec and, for a
    floating base, the base height at which the lowest contact frame is at
    ``foot_height`` [m] (e.g. the foot sphere radius in a simulator)."""
    s = spec(name)
    q = model.neutral()
    for joint, value in s.standing_joints.items():
        q[model.joint_q_index[model.joint_index(joint)]] = value
    if model.floating_base and model.contact_frame_ids:
        pm = model.pin_model
        data = pm.createData()
        pin.framesForwardKinematics(pm, data, q)
        lowest = min(data.oMf[i].translation[2] for i in model.contact_frame_ids)
        q[2] = foot_height - lowest
    return q
