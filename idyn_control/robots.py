"""Known robots: where their URDFs are and how they touch the ground.

The project's own quadruped ships in ``urdf/``; the others come from the PyPI package
``example-robot-data`` (data only: found under the installed prefix).
"""

from __future__ import annotations

import math
import os
import site
import sys
import sysconfig
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pinocchio as pin

from .errors import ModelError, UnknownNameError
from .model import ContactConfig, FreeBox, RobotModel

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
    """``.../share/example-robot-data``, looked up in this order: the directory in
    ``$IDYN_EXAMPLE_ROBOT_DATA``; the ROS package (``ros-<distro>-example-robot-data``,
    found on ``$AMENT_PREFIX_PATH``, as the ament index does); pip's ``example-robot-data``
    (under its ``cmeel.prefix``)."""
    candidates = []
    if os.environ.get("IDYN_EXAMPLE_ROBOT_DATA"):
        candidates.append(Path(os.environ["IDYN_EXAMPLE_ROBOT_DATA"]))
    for prefix in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        candidates.append(Path(prefix) / "share" / "example-robot-data")
    for root in list(site.getsitepackages()) + [sysconfig.get_paths()["purelib"]] + sys.path:
        candidates.append(Path(root) / "cmeel.prefix" / "share" / "example-robot-data")
    for candidate in candidates:
        if (candidate / "robots").is_dir():
            return candidate
    raise ModelError("example-robot-data not found: on ROS 2, `rosdep install` (or apt install "
                     "ros-$ROS_DISTRO-example-robot-data); with pip, `pip install example-robot-data`; "
                     "or set IDYN_EXAMPLE_ROBOT_DATA to its share/example-robot-data directory")


@dataclass(frozen=True)
class HandSpec:
    """A hand mounted on an arm's flange, holding a free box (seed 000 §7.2.2, Fig. 9).

    ``urdf`` (same prefixes as :attr:`RobotSpec.urdf`) replaces the arm's own tool: the
    links in ``drop_links`` and their joints go, the hand's root link is fixed to
    ``mount_link``. Fingertip ``tips[i]`` touches the box face whose outward normal (box
    frame) is ``normals_box[i]``; the box starts with the mount link's orientation.
    """

    urdf: str
    mount_link: str
    drop_links: tuple[str, ...]
    tips: tuple[str, ...]
    normals_box: tuple[tuple[float, float, float], ...]
    box: FreeBox = FreeBox()


@dataclass(frozen=True)
class RobotSpec:
    """Where a robot's URDF is and how the controller uses it."""

    name: str
    urdf: str  # relative to its source: "erd:" example-robot-data, "share:" this package
    contact_frames: tuple[str, ...] = ()
    effort_limit: float | None = None  # overrides URDF limits that are placeholders [N·m]
    friction: float = 0.7
    standing_joints: dict[str, float] = field(default_factory=dict)  # joint name → [rad]
    hand: HandSpec | None = None  # a hand with a grasped free box instead of the arm's tool

    def urdf_path(self) -> Path:
        return _source_path(self.urdf)

    def package_dirs(self) -> tuple[Path, ...]:
        if self.urdf.startswith("erd:"):
            return (example_robot_data_dir().parent,)
        return (share_dir().parent,)


def _source_path(ref: str) -> Path:
    source, rel = ref.split(":", 1)
    root = example_robot_data_dir() / "robots" if source == "erd" else share_dir()
    return root / rel


def _finger_normals(n: int) -> tuple[tuple[float, float, float], ...]:
    """Outward box-face normals under n fingers spaced evenly about the box's z axis."""
    return tuple((round(math.cos(2 * math.pi * i / n), 12) + 0.0, round(math.sin(2 * math.pi * i / n), 12) + 0.0, 0.0)
                 for i in range(n))


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
        RobotSpec(
            "panda_grasp", "erd:panda_description/urdf/panda.urdf",
            hand=HandSpec(
                "share:urdf/four_finger_hand.urdf", "panda_link8",
                ("panda_hand", "panda_hand_tcp", "panda_leftfinger", "panda_rightfinger"),
                tips=tuple(f"finger_{i}_tip" for i in range(1, 5)), normals_box=_finger_normals(4),
            ),
        ),
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


def mount_hand(arm_xml: str, hand_xml: str, hand: HandSpec) -> str:
    """The arm's URDF with its tool replaced by the hand: one kinematic tree, one URDF."""
    arm, tool = ET.fromstring(arm_xml), ET.fromstring(hand_xml)
    drop = set(hand.drop_links)
    for link in arm.findall("link"):
        if link.get("name") in drop:
            arm.remove(link)
    for joint in arm.findall("joint"):
        if joint.find("child").get("link") in drop or joint.find("parent").get("link") in drop:
            arm.remove(joint)
    children = {j.find("child").get("link") for j in tool.findall("joint")}
    roots = [link.get("name") for link in tool.findall("link") if link.get("name") not in children]
    if len(roots) != 1:
        raise ModelError(f"the hand URDF must have one root link, has {roots}")
    for element in tool:
        if element.tag in ("link", "joint"):
            arm.append(element)
    mount = ET.SubElement(arm, "joint", {"name": f"{roots[0]}_mount", "type": "fixed"})
    ET.SubElement(mount, "parent", {"link": hand.mount_link})
    ET.SubElement(mount, "child", {"link": roots[0]})
    ET.SubElement(mount, "origin", {"xyz": "0 0 0", "rpy": "0 0 0"})
    return ET.tostring(arm, encoding="unicode")


def load(name: str, *, friction: float | None = None, contact_frames=None) -> RobotModel:
    """Build the :class:`RobotModel` of a known robot."""
    s = spec(name)
    if s.hand is not None:
        return _load_with_hand(s, s.friction if friction is None else friction)
    return RobotModel.from_urdf(
        s.urdf_path(),
        floating_base=bool(s.contact_frames),
        contact_frames=s.contact_frames if contact_frames is None else contact_frames,
        package_dirs=s.package_dirs(),
        friction=s.friction if friction is None else friction,
        effort_limits=s.effort_limit,
    )


def _load_with_hand(s: RobotSpec, friction: float) -> RobotModel:
    """Arm + hand + free box; the fingertips touch the box (seed 000 §7.2.2)."""
    hand = s.hand
    xml = mount_hand(s.urdf_path().read_text(), _source_path(hand.urdf).read_text(), hand)
    contacts = [ContactConfig(tip, friction=float(friction), body=hand.box.joint, normal_body=np.array(n))
                for tip, n in zip(hand.tips, hand.normals_box)]
    return RobotModel.from_urdf_with_box(xml, hand.box, contacts=contacts, package_dirs=s.package_dirs(),
                                         effort_limits=s.effort_limit)


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
