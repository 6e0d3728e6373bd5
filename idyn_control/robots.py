"""Robots as data: one YAML file per robot, the controller node's ROS 2 parameter file.

A robot file is a params file of the node (``config/<robot>.yaml``; ``idyn-control
check-config`` validates it) whose robot-description parameters every tool reads: the
lock-step simulator, the demo, the benchmarks, the simulation bridge and the gait node::

    idyn_controller:
      ros__parameters:
        robot: my_dog                       # its name (logs, diagnostics)
        urdf_path: package://my_dog_description/urdf/my_dog.urdf   # or a path (relative: to this file)
        package_dirs: [../share]            # extra roots of package:// URIs
        contacts: {frames: [FL_foot, FR_foot, HL_foot, HR_foot], friction: 0.7}
        effort_limit: 0.0                   # 0 = the URDF's limits
        standing_pose:
          joints: [FL_hip, FL_thigh, FL_calf, ...]
          positions: [0.0, 0.8, -1.6, ...]  # [rad]
        controller: {base_kp: 200.0, ...}   # gains (ControllerConfig)
        formulation_defaults:               # the robot's defaults of any formulation's options
          pid: {gain: [0.01], ki: 2.0}
        gait: {period: 0.3, duty_factor: 0.75, step_height: 0.015}

``spec("solo12")`` reads a shipped robot (``config/solo12.yaml``); ``spec("path/to/my_dog.yaml")``
any other. The project's quadruped ships in ``urdf/``; the other shipped robots come from
``example-robot-data`` (data only: found through ``$IDYN_EXAMPLE_ROBOT_DATA``, a ROS 2
install, or pip's prefix).
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
from typing import Any, Mapping

import numpy as np
import pinocchio as pin

from .errors import ConfigError, IdynError, ModelError, UnknownNameError
from .model import ContactConfig, ContactSurface, FreeBox, RobotModel

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
    ``$IDYN_EXAMPLE_ROBOT_DATA``; the package built in a ROS 2 workspace (its repository
    is a CMake package; no rosdep key or ros-<distro> package exists), found on
    ``$AMENT_PREFIX_PATH`` as the ament index does; pip's ``example-robot-data``
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
    raise ModelError("example-robot-data not found: `pip install example-robot-data`, or on ROS 2 build "
                     "its repository in the workspace (colcon build; it has no rosdep key), or set "
                     "IDYN_EXAMPLE_ROBOT_DATA to its share/example-robot-data directory")


@dataclass(frozen=True)
class HandSpec:
    """A hand mounted on an arm's flange, holding a free box (seed 000 §7.2.2, Fig. 9).

    ``urdf`` (a URI as :func:`resolve_uri` reads it) replaces the arm's own tool: the
    links in ``drop_links`` and their joints go, the hand's root link is fixed to
    ``mount_link``. Fingertip ``tips[i]`` touches the box face whose outward normal (box
    frame) is ``normals_box[i]`` (the tips are spaced evenly about the box's z axis); the
    box starts with the mount link's orientation.
    """

    urdf: str
    mount_link: str
    drop_links: tuple[str, ...]
    tips: tuple[str, ...]
    normals_box: tuple[tuple[float, float, float], ...]
    box: FreeBox = FreeBox()


@dataclass(frozen=True)
class RobotSpec:
    """A robot as its YAML file describes it (the node's ROS 2 parameter file).

    Attributes:
        name: the file's ``robot`` parameter (or the file's stem).
        urdf: ``urdf_path`` (a ``package://`` URI or an absolute path: a relative one is
            made absolute against the file's directory) or the ``robot_description`` XML.
        contact_frames: ``contacts.frames``; empty (and no surfaces) = a fixed-base robot.
        surfaces: ``contacts.surfaces.*``: flat feet whose polygon corners are contact
            points, after ``contact_frames`` (:class:`~idyn_control.model.ContactSurface`).
        effort_limit: ``effort_limit`` [N·m], overriding URDF limits that are placeholders.
        friction: ``contacts.friction``.
        standing_joints: ``standing_pose.joints`` → ``standing_pose.positions`` [rad]; the
            standing pose of a legged robot, the ready pose of an arm.
        hand: ``hand.*``: a hand holding a free box (lock-step experiments only).
        controller: the file's ``controller.*`` parameters (dotted names, as written).
        formulation_defaults: ``formulation_defaults.<formulation>.<option>``: the robot's
            own defaults of each formulation's options.
        gait: ``gait.*`` → :class:`~idyn_control.gait.GaitConfig` fields.
        joints: ``joints``: the order of per-joint values (empty = the model's order).
        package_dirs: ``package_dirs``: extra roots of ``package://`` URIs (absolute).
        origin: the YAML file (None for a spec built in code).
    """

    name: str
    urdf: str
    contact_frames: tuple[str, ...] = ()
    surfaces: tuple[ContactSurface, ...] = ()
    effort_limit: float | None = None
    friction: float = 0.7
    standing_joints: dict[str, float] = field(default_factory=dict)
    hand: HandSpec | None = None
    controller: dict[str, Any] = field(default_factory=dict)
    formulation_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    gait: dict[str, Any] = field(default_factory=dict)
    joints: tuple[str, ...] = ()
    package_dirs: tuple[str, ...] = ()
    origin: Path | None = None

    def urdf_path(self) -> Path | str:
        """The URDF file (or the ``robot_description`` XML text)."""
        if self.urdf.lstrip().startswith("<"):
            return self.urdf
        return resolve_uri(self.urdf, self.package_dirs)

    def search_dirs(self) -> tuple[Path, ...]:
        """Roots of the URDF's own ``package://`` URIs (meshes)."""
        dirs = [Path(d) for d in self.package_dirs]
        dirs.append(share_dir().parent)
        try:
            erd = example_robot_data_dir()
            dirs += [erd.parent, erd / "robots"]
        except ModelError:
            pass
        return tuple(dirs)

    def formulation_options(self, formulation: str) -> dict[str, Any]:
        """The robot's defaults of a formulation's options (a copy)."""
        return dict(self.formulation_defaults.get(formulation, {}))


def _relative(path: str, base: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def resolve_uri(uri: str, package_dirs=(), base_dir: Path | None = None) -> Path:
    """A file named by ``package://NAME/rest``, ``file://path``, an absolute path or a path
    relative to ``base_dir`` (the robot file's directory).

    ``package://`` roots, in order: ``package_dirs``; this package's share directory for
    ``idyn_control``; example-robot-data's share directory for ``example-robot-data`` and
    its ``robots/`` for the description packages it holds (``solo_description``, ...);
    ``share/`` of every prefix on ``$AMENT_PREFIX_PATH`` (a ROS 2 install).
    """
    if uri.startswith("file://"):
        return _relative(uri[len("file://"):], base_dir)
    if not uri.startswith("package://"):
        return _relative(uri, base_dir)
    package, _, rest = uri[len("package://"):].partition("/")
    roots: list[Path] = [_relative(d, base_dir) / package for d in package_dirs]
    if package == PACKAGE:
        roots.append(share_dir())
    try:
        erd = example_robot_data_dir()
        roots.append(erd if package == "example-robot-data" else erd / "robots" / package)
    except ModelError:
        pass
    roots += [Path(p) / "share" / package for p in filter(None, os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep))]
    for root in roots:
        if (root / rest).exists():
            return root / rest
    raise ModelError(f"cannot resolve {uri!r}: not under {[str(r) for r in roots]} "
                     "(add the directory holding the package to package_dirs)")


def config_dir() -> Path:
    """The shipped robot files: ``config/<robot>.yaml`` in the share directory."""
    return share_dir() / "config"


def _is_file_ref(ref: str | os.PathLike) -> bool:
    text = os.fspath(ref)
    return text.endswith((".yaml", ".yml")) or os.sep in text or "/" in text


@lru_cache(maxsize=None)
def names() -> tuple[str, ...]:
    """The shipped robots: ``config/<name>.yaml`` files whose ``robot`` is ``<name>``."""
    from . import config

    out = []
    for path in sorted(config_dir().glob("*.yaml")):
        try:
            params = config.load_params_file(path)
        except IdynError:
            continue  # a file of another node (ros2_controllers.yaml)
        if params.get("robot") == path.stem:
            out.append(path.stem)
    return tuple(out)


def spec(ref: str | os.PathLike) -> RobotSpec:
    """The robot a name (a shipped robot, :func:`names`) or a YAML file's path describes."""
    if isinstance(ref, RobotSpec):
        return ref
    if _is_file_ref(ref):
        return _spec_of_file(Path(ref).expanduser().resolve())
    if ref not in names():
        raise UnknownNameError("robot", ref, names())
    return _spec_of_file(config_dir() / f"{ref}.yaml")


@lru_cache(maxsize=None)
def _spec_of_file(path: Path) -> RobotSpec:
    from . import config

    if not path.is_file():
        raise ModelError(f"robot file not found: {path}")
    params = config.load_params_file(path)
    # what check-config reports (unknown keys, types, ranges): a misspelt gait or controller
    # key would otherwise be dropped silently and the robot run on the default
    problems = config.validate(params, check_model=False)
    if problems:
        raise ConfigError(str(path), f"{len(problems)} problem(s)", "; ".join(problems))
    return spec_from_params(params, origin=path)


def spec_from_params(params: Mapping[str, Any], origin: Path | None = None) -> RobotSpec:
    """A :class:`RobotSpec` from a node's flat parameters (``config.load_params_file``).

    A ``robot`` that names a shipped robot (in a file that is not that robot's own) gives
    what the parameters leave unset: the robot's URDF, contacts, limits, pose, gains.
    """
    from . import config

    name = str(params.get("robot") or (origin.stem if origin is not None else ""))
    base = None
    if name in names() and (origin is None or origin.resolve() != (config_dir() / f"{name}.yaml").resolve()):
        base = spec(name)
    urdf = str(params.get("urdf_path") or params.get("robot_description") or "")
    if not urdf:
        if base is None:
            raise ConfigError("urdf_path", "", f"robot {name!r}: set urdf_path (or robot_description), or "
                              f"name a shipped robot in robot ({', '.join(names())})")
        urdf = base.urdf
    elif not urdf.lstrip().startswith("<") and not urdf.startswith("package://"):
        urdf = str(_relative(urdf.removeprefix("file://"), origin.parent if origin else None))

    def get(key, attr):
        return params[key] if key in params else (getattr(base, attr) if base else None)

    joints, positions = params.get("standing_pose.joints"), params.get("standing_pose.positions")
    if (joints is None) != (positions is None) or (joints is not None and len(joints) != len(positions)):
        raise ConfigError("standing_pose", {"joints": joints, "positions": positions},
                          "needs joints and positions of the same length")
    standing = dict(zip(joints, map(float, positions))) if joints is not None else \
        (dict(base.standing_joints) if base else {})
    defaults = {f: dict(o) for f, o in (base.formulation_defaults if base else {}).items()}
    for key, value in params.items():
        if key.startswith(config.FORMULATION_DEFAULTS):
            formulation, _, option = key[len(config.FORMULATION_DEFAULTS):].partition(".")
            config.option_spec(formulation, option)  # unknown formulations and options raise
            default = config.formulation_class(formulation).defaults[option]
            defaults.setdefault(formulation, {})[option] = config.option_value(default, value)
    hand = base.hand if base else None
    if "hand.urdf" in params:
        tips = tuple(params.get("hand.tips", ()))
        hand_urdf = params["hand.urdf"]
        if not hand_urdf.startswith("package://"):
            hand_urdf = str(_relative(hand_urdf, origin.parent if origin else None))
        hand = HandSpec(hand_urdf, params.get("hand.mount_link", ""), tuple(params.get("hand.drop_links", ())),
                        tips, _finger_normals(len(tips)))
    effort = get("effort_limit", "effort_limit")
    package_dirs = tuple(str(_relative(d, origin.parent if origin else None)) for d in params.get("package_dirs", ()))
    if base is not None:
        package_dirs += base.package_dirs
    return RobotSpec(
        name=name,
        urdf=urdf,
        contact_frames=tuple(get("contacts.frames", "contact_frames") or ()),
        surfaces=(ContactSurface.from_flat(params["contacts.surfaces.links"], params.get("contacts.surfaces.corners", ()))
                  if "contacts.surfaces.links" in params else (base.surfaces if base else ())),
        effort_limit=float(effort) if effort else None,
        friction=float(get("contacts.friction", "friction") or 0.7),
        standing_joints=standing,
        hand=hand,
        controller={**(base.controller if base else {}),
                    **{k: v for k, v in params.items() if k.startswith("controller.")}},
        formulation_defaults=defaults,
        gait={**(base.gait if base else {}),
              **{k[len("gait."):]: v for k, v in params.items() if k in config.GAIT_FIELDS}},
        joints=tuple(get("joints", "joints") or ()),
        package_dirs=package_dirs,
        origin=origin,
    )


def _finger_normals(n: int) -> tuple[tuple[float, float, float], ...]:
    """Outward box-face normals under n fingers spaced evenly about the box's z axis."""
    return tuple((round(math.cos(2 * math.pi * i / n), 12) + 0.0, round(math.sin(2 * math.pi * i / n), 12) + 0.0, 0.0)
                 for i in range(n))


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


def load(ref: str | os.PathLike | RobotSpec, *, friction: float | None = None, contact_frames=None) -> RobotModel:
    """Build the :class:`RobotModel` of a robot: a shipped robot's name, a robot file's
    path, or a :class:`RobotSpec`."""
    s = spec(ref)
    if s.hand is not None:
        return _load_with_hand(s, s.friction if friction is None else friction)
    return RobotModel.from_urdf(
        s.urdf_path(),
        floating_base=bool(s.contact_frames or s.surfaces),
        contact_frames=s.contact_frames if contact_frames is None else contact_frames,
        contact_surfaces=s.surfaces if contact_frames is None else (),
        package_dirs=s.search_dirs(),
        friction=s.friction if friction is None else friction,
        effort_limits=s.effort_limit,
    )


def _load_with_hand(s: RobotSpec, friction: float) -> RobotModel:
    """Arm + hand + free box; the fingertips touch the box (seed 000 §7.2.2)."""
    hand = s.hand
    xml = mount_hand(Path(s.urdf_path()).read_text(), resolve_uri(hand.urdf, s.package_dirs).read_text(), hand)
    contacts = [ContactConfig(tip, friction=float(friction), body=hand.box.joint, normal_body=np.array(n))
                for tip, n in zip(hand.tips, hand.normals_box)]
    return RobotModel.from_urdf_with_box(xml, hand.box, contacts=contacts, package_dirs=s.search_dirs(),
                                         effort_limits=s.effort_limit)


def footprint_radius(model: RobotModel, q: np.ndarray) -> float:
    """Farthest horizontal distance [m] of a contact frame from the base's origin at ``q``
    (0 without contacts): how much flat ground a robot standing there needs."""
    if not model.contact_frame_ids:
        return 0.0
    pm = model.pin_model
    data = pm.createData()
    pin.framesForwardKinematics(pm, data, q)
    base = q[:2] if model.floating_base else np.zeros(2)
    return max(float(np.hypot(*(data.oMf[i].translation[:2] - base))) for i in model.contact_frame_ids)


def standing_footprint(model: RobotModel, ref: str | os.PathLike | RobotSpec) -> float:
    """:func:`footprint_radius` at the standing configuration of a legged robot (a floating
    base that is no grasped box); 0 for others: the flat ground a height map must start with."""
    if not model.floating_base or model.free_box is not None:
        return 0.0
    return footprint_radius(model, standing_configuration(model, ref))


def standing_configuration(model: RobotModel, ref: str | os.PathLike | RobotSpec, *, foot_height: float = 0.0):
    """A robot's standing (legged) or ready (arm) configuration: joints from its
    ``standing_pose`` and, for a floating base, the base height at which the lowest
    contact frame is at ``foot_height`` [m] (e.g. the foot sphere radius in a simulator)."""
    s = spec(ref)
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
