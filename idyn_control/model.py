"""The robot model: URDF → Pinocchio model, joint-name maps, limits, contact configuration.

Layer 1 of DESIGN.md §3. Nothing here changes per tick; per-tick quantities live in
:class:`idyn_control.dynamics.DynamicsTerms` and :class:`idyn_control.contacts.ContactSet`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pinocchio as pin

from .errors import ConfigError, ModelError, UnknownNameError

#: an effort limit above this multiple of the torque that holds the whole robot's weight at the
#: joint's reach is taken for a placeholder (Solo's and Bolt's URDFs give 1000 N·m to 1–3 kg
#: robots: 125–410 times that torque; ANYmal, HyQ, Talos, Panda, Tiago, iCub: at most 5)
PLACEHOLDER_EFFORT_RATIO = 20.0
_PACKAGE_URI = re.compile(r"package://([^/\"'<>\s]+)/([^\"'<>\s]*)")


def resolve_package_uris(urdf_xml: str, package_dirs: Sequence[str | os.PathLike]) -> str:
    """Rewrite ``package://NAME/rest`` to an absolute path when ``<dir>/NAME/rest`` exists.

    URIs that cannot be resolved are left as they are (Pinocchio's dynamic model does
    not read meshes; only the MuJoCo conversion needs them).
    """
    dirs = [Path(d) for d in package_dirs]

    def replace(match: re.Match) -> str:
        for d in dirs:
            candidate = d / match.group(1) / match.group(2)
            if candidate.exists():
                return str(candidate)
        return match.group(0)

    return _PACKAGE_URI.sub(replace, urdf_xml)


def _read_urdf(urdf: str | os.PathLike) -> tuple[str, Path | None]:
    """Return (xml, path) for a path or an XML string."""
    text = os.fspath(urdf)
    if text.lstrip().startswith("<"):
        return text, None
    path = Path(text)
    if not path.is_file():
        raise ModelError(f"URDF file not found: {text!r}")
    return path.read_text(), path


@dataclass(frozen=True)
class ContactConfig:
    """One contact point: frame, world-frame surface normal, friction coefficient μ.

    A point can touch the fixed environment (``body`` None: ``normal_world`` is the
    ground's normal) or a free body of the model (``body``: the name of that body's
    free-flyer joint, e.g. a grasped box, seed 000 §7.2.2). Against a body, the contact
    Jacobian is the velocity of the point relative to the body's material point under it,
    the force acts on the point and its opposite on the body, and the normal is
    ``normal_body`` (the body's surface normal in the body's frame, pointing at the point),
    rotated into the world every tick.
    """

    frame: str
    normal_world: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, 1.0]))
    friction: float = 0.7
    body: str | None = None
    normal_body: np.ndarray | None = None


@dataclass(frozen=True)
class ContactSurface:
    """A flat foot (a humanoid's sole) as contact points at the corners of its polygon.

    Each corner is a frame added to the model on ``link`` (a link or any frame of the
    URDF) at ``corners[i]`` [m, in that frame], named ``<link>_corner_<i>``. The corner
    points are ordinary contact points: unilateral, each in its friction pyramid, so the
    centre of pressure of the foot stays inside the polygon (seed 000 §7.1 models feet as
    contact points too). Points on one rigid body are held together: ``wbc_qp`` constrains
    the body's spatial acceleration once instead of each point's (see ContactSet.groups).
    """

    link: str
    corners: tuple[tuple[float, float, float], ...]

    def point_names(self) -> tuple[str, ...]:
        return tuple(f"{self.link}_corner_{i}" for i in range(len(self.corners)))

    def add_frames(self, pin_model: pin.Model) -> list[str]:
        """Add the corner frames to ``pin_model`` (once); their names."""
        if not pin_model.existFrame(self.link):
            raise UnknownNameError("contact surface link", self.link, [f.name for f in pin_model.frames])
        corners = np.asarray(self.corners, dtype=float)
        if corners.ndim != 2 or corners.shape[1] != 3 or len(corners) < 1 or not np.isfinite(corners).all():
            raise ConfigError("contacts.surfaces.corners", self.corners, "must be finite (x, y, z) triples [m]")
        parent_id = pin_model.getFrameId(self.link)
        parent = pin_model.frames[parent_id]
        names = []
        for name, corner in zip(self.point_names(), corners):
            if not pin_model.existFrame(name):
                placement = parent.placement * pin.SE3(np.eye(3), corner)
                pin_model.addFrame(pin.Frame(name, parent.parentJoint, parent_id, placement, pin.FrameType.OP_FRAME))
            names.append(name)
        return names

    @staticmethod
    def from_flat(links: Sequence[str], corners_flat: Sequence[float]) -> tuple["ContactSurface", ...]:
        """Surfaces of the same polygon on each link, from ROS parameters: ``corners_flat``
        is x0, y0, z0, x1, y1, z1, ... [m] in the link frame (``contacts.surfaces.*``)."""
        flat = np.asarray(corners_flat, dtype=float)
        if links and (flat.size == 0 or flat.size % 3):
            raise ConfigError("contacts.surfaces.corners", list(corners_flat), "needs 3 numbers (x, y, z) per corner")
        corners = tuple(tuple(map(float, c)) for c in flat.reshape(-1, 3))
        return tuple(ContactSurface(str(link), corners) for link in links)


@dataclass(frozen=True)
class FreeBox:
    """An unactuated rigid box inside the model (seed 000 §7.2.2: the grasped box).

    It is the model's first joint, a free flyer named ``joint`` attached to the world,
    so its 6 velocity DoF are the unactuated coordinates the formulations already
    treat as a floating base. ``half_extents`` [m] along the box frame's axes,
    ``density`` [kg/m³]; the box frame is at its centre.
    """

    joint: str = "box"
    half_extents: tuple[float, float, float] = (0.025, 0.025, 0.025)
    density: float = 6000.0

    @property
    def mass(self) -> float:
        """[kg]"""
        a, b, c = self.half_extents
        return 8.0 * a * b * c * self.density

    def inertia(self) -> pin.Inertia:
        """Spatial inertia about the box centre, box frame."""
        a, b, c = (2.0 * e for e in self.half_extents)
        return pin.Inertia.FromBox(self.mass, a, b, c)


class RobotModel:
    """A rigid-body model built from a URDF, with the ROS ↔ Pinocchio joint maps.

    Attributes:
        pin_model: the :class:`pinocchio.Model`.
        floating_base: True when the root is a free flyer (first 6 velocity entries
            are the base twist in the base frame, Pinocchio's convention).
        joint_names: actuated joint names, in Pinocchio velocity order.
        nq, nv, na: configuration, velocity and actuated dimensions.
        tau_max: effort limits of the actuated joints [N·m or N], shape (na,).
        q_lower, q_upper: position limits of the actuated joints, shape (na,).
        contacts: the configured contact points, in order.
        urdf_xml: the URDF text with ``package://`` URIs resolved where possible.
    """

    def __init__(
        self,
        pin_model: pin.Model,
        *,
        urdf_xml: str = "",
        contacts: Sequence[ContactConfig] = (),
        effort_limits: float | Mapping[str, float] | None = None,
        package_dirs: Sequence[str] = (),
        free_box: FreeBox | None = None,
    ):
        self.pin_model = pin_model
        self.urdf_xml = urdf_xml
        self.package_dirs = tuple(str(d) for d in package_dirs)
        self.floating_base = pin_model.njoints > 1 and pin_model.joints[1].shortname() == "JointModelFreeFlyer"
        self.free_box = free_box
        if free_box is not None and not (self.floating_base and pin_model.names[1] == free_box.joint):
            raise ModelError(f"the free box {free_box.joint!r} must be the model's first joint (a free flyer)")
        self.nq = pin_model.nq
        self.nv = pin_model.nv
        self.n_base = 6 if self.floating_base else 0
        self.na = self.nv - self.n_base

        first_joint = 2 if self.floating_base else 1
        names, v_idx, q_idx = [], [], []
        for jid in range(first_joint, pin_model.njoints):
            joint = pin_model.joints[jid]
            if joint.nv != 1:
                raise ModelError(
                    f"joint {pin_model.names[jid]!r} has {joint.nv} velocity DoF; only 1-DoF joints are supported"
                )
            names.append(pin_model.names[jid])
            v_idx.append(joint.idx_v)
            q_idx.append(joint.idx_q)
        self.joint_names: tuple[str, ...] = tuple(names)
        self.joint_v_index = np.array(v_idx, dtype=int)
        self.joint_q_index = np.array(q_idx, dtype=int)
        self._joint_position = {n: i for i, n in enumerate(names)}

        self.tau_max = np.array(pin_model.effortLimit[self.n_base :], dtype=float)
        if effort_limits is not None:
            self.set_effort_limits(effort_limits)
        self.q_lower = np.array([pin_model.lowerPositionLimit[i] for i in q_idx], dtype=float)
        self.q_upper = np.array([pin_model.upperPositionLimit[i] for i in q_idx], dtype=float)
        self.v_max = np.array(pin_model.velocityLimit[self.n_base :], dtype=float)

        self.contacts: tuple[ContactConfig, ...] = tuple(contacts)
        for c in self.contacts:
            if not pin_model.existFrame(c.frame):
                raise UnknownNameError("contact frame", c.frame, [f.name for f in pin_model.frames])
        self.contact_frames: tuple[str, ...] = tuple(c.frame for c in self.contacts)
        self.contact_frame_ids = tuple(int(pin_model.getFrameId(c.frame)) for c in self.contacts)
        # joint id of the free body each contact touches (0: the fixed environment)
        self.contact_body_joint_ids = tuple(self._body_joint(c) for c in self.contacts)
        self._contact_position = {c.frame: i for i, c in enumerate(self.contacts)}

    def _body_joint(self, c: ContactConfig) -> int:
        if c.body is None:
            return 0
        pm = self.pin_model
        if not pm.existJointName(c.body):
            raise UnknownNameError("contact body joint", c.body, list(pm.names)[1:])
        jid = int(pm.getJointId(c.body))
        if pm.joints[jid].shortname() != "JointModelFreeFlyer" or pm.parents[jid] != 0:
            raise ModelError(f"contact body {c.body!r} of {c.frame!r} is not a free body attached to the world")
        n = None if c.normal_body is None else np.asarray(c.normal_body, dtype=float)
        if n is None or n.shape != (3,) or not np.isfinite(n).all() or abs(np.linalg.norm(n) - 1.0) > 1e-9:
            raise ConfigError("normal_body", c.normal_body, f"contact {c.frame!r} needs a unit 3-vector")
        return jid

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(
        cls,
        urdf: str | os.PathLike,
        *,
        floating_base: bool | None = None,
        contact_frames: Sequence[str] = (),
        package_dirs: Sequence[str | os.PathLike] = (),
        friction: float = 0.7,
        effort_limits: float | Mapping[str, float] | None = None,
        contact_normal: Sequence[float] = (0.0, 0.0, 1.0),
        contact_surfaces: Sequence[ContactSurface] = (),
    ) -> "RobotModel":
        """Build a model from a URDF path or XML string.

        Args:
            urdf: path to a ``.urdf`` file, or the XML text itself.
            floating_base: add a free-flyer root joint. ``None`` means "floating when
                contact frames are given" (legged robots), fixed otherwise (arms).
            contact_frames: names of the frames that can touch the environment.
            package_dirs: directories searched for ``package://NAME/...`` URIs; the
                URDF's own directory and its parents are searched too.
            friction: Coulomb friction coefficient μ of every contact (> 0).
            effort_limits: override of the URDF effort limits [N·m]: one value for all
                joints or a mapping joint name → limit.
            contact_normal: world-frame surface normal at every contact (flat ground).
            contact_surfaces: flat feet (soles) touching the ground at the corners of a
                polygon: each corner becomes a contact point (a frame added to the model,
                :meth:`ContactSurface.point_names`), after ``contact_frames``.
        """
        xml, path = _read_urdf(urdf)
        search = [Path(d) for d in package_dirs]
        if path is not None:
            search += list(path.resolve().parents)[:4]
        xml = resolve_package_uris(xml, search)
        if floating_base is None:
            floating_base = len(contact_frames) > 0 or len(contact_surfaces) > 0
        if not np.isfinite(friction) or friction <= 0.0:
            raise ConfigError("friction", friction, "must be a finite value > 0")
        normal = np.asarray(contact_normal, dtype=float)
        if normal.shape != (3,) or not np.isfinite(normal).all() or np.linalg.norm(normal) < 1e-9:
            raise ConfigError("contact_normal", contact_normal, "must be a non-zero 3-vector")
        normal = normal / np.linalg.norm(normal)
        try:
            if floating_base:
                pin_model = pin.buildModelFromXML(xml, pin.JointModelFreeFlyer())
            else:
                pin_model = pin.buildModelFromXML(xml)
        except (RuntimeError, ValueError) as exc:
            raise ModelError(f"cannot build a model from the URDF: {exc}") from exc
        frames = list(contact_frames)
        for surface in contact_surfaces:
            frames += surface.add_frames(pin_model)
        contacts = [ContactConfig(frame, normal.copy(), float(friction)) for frame in frames]
        return cls(pin_model, urdf_xml=xml, contacts=contacts, effort_limits=effort_limits,
                   package_dirs=[str(d) for d in search])

    @classmethod
    def from_urdf_with_box(
        cls,
        urdf: str | os.PathLike,
        box: FreeBox,
        *,
        contacts: Sequence[ContactConfig],
        package_dirs: Sequence[str | os.PathLike] = (),
        effort_limits: float | Mapping[str, float] | None = None,
    ) -> "RobotModel":
        """A fixed-base robot (URDF) and a free box in one model (seed 000 §7.2.2).

        Joint 1 is the box's free flyer, attached to the world; the robot's joints follow,
        also attached to the world. ``v[:6]`` is the box's twist (box frame), the rest
        the robot's joints; M is block diagonal: only contacts couple robot and box. A
        frame named ``box.joint`` sits at the box centre.
        """
        xml, path = _read_urdf(urdf)
        search = [Path(d) for d in package_dirs]
        if path is not None:
            search += list(path.resolve().parents)[:4]
        xml = resolve_package_uris(xml, search)
        try:
            robot = pin.buildModelFromXML(xml)
        except (RuntimeError, ValueError) as exc:
            raise ModelError(f"cannot build a model from the URDF: {exc}") from exc
        if min(box.half_extents) <= 0.0 or not box.density > 0.0:
            raise ConfigError("box", box, "half extents and density must be > 0")
        holder = pin.Model()
        holder.name = robot.name
        jid = holder.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), box.joint)
        holder.appendBodyToJoint(jid, box.inertia(), pin.SE3.Identity())
        holder.addJointFrame(jid)
        holder.addFrame(pin.Frame(f"{box.joint}_body", jid, holder.getFrameId(box.joint), pin.SE3.Identity(),
                                  pin.FrameType.BODY))
        pin_model = pin.appendModel(holder, robot, 0, pin.SE3.Identity())
        pin_model.name = robot.name
        pin_model.effortLimit[:6] = 0.0
        return cls(pin_model, urdf_xml=xml, contacts=contacts, effort_limits=effort_limits,
                   package_dirs=[str(d) for d in search], free_box=box)

    # ------------------------------------------------------------------ maps and limits
    def joint_index(self, name: str) -> int:
        """Position of an actuated joint in τ (Pinocchio velocity order minus the base)."""
        try:
            return self._joint_position[name]
        except KeyError:
            raise UnknownNameError("joint", name, self.joint_names) from None

    def joint_order(self, names: Sequence[str]) -> np.ndarray:
        """Indices that reorder our τ into the given joint order (e.g. a controller's)."""
        return np.array([self.joint_index(n) for n in names], dtype=int)

    def contact_index(self, frame: str) -> int:
        """Position of a contact frame in :attr:`contacts`."""
        try:
            return self._contact_position[frame]
        except KeyError:
            raise UnknownNameError("contact frame", frame, self.contact_frames) from None

    def set_effort_limits(self, limits: float | Mapping[str, float]) -> None:
        """Override effort limits [N·m]: a scalar for all joints, or name → limit."""
        if isinstance(limits, Mapping):
            for name, value in limits.items():
                self._check_limit(name, value)
                self.tau_max[self.joint_index(name)] = float(value)
        else:
            self._check_limit("effort_limits", limits)
            self.tau_max[:] = float(limits)

    def effort_limit_warnings(self) -> list[str]:
        """Effort limits that bound nothing real, one readable line per joint: none (0 or
        not finite: the controller commands a joint with 0 no torque), or more than
        ``PLACEHOLDER_EFFORT_RATIO`` times the torque that holds the whole robot's weight at
        the joint's reach (its farthest frame in the neutral configuration): a URDF's
        placeholder, under which commanded torques are unbounded in practice."""
        pm = self.pin_model
        data = pm.createData()
        pin.framesForwardKinematics(pm, data, pin.neutral(pm))
        weight = 9.81 * sum(inertia.mass for inertia in pm.inertias)
        lines = []
        for name, limit in zip(self.joint_names, self.tau_max):
            if not (np.isfinite(limit) and limit > 0.0):
                lines.append(f"joint {name}: effort limit {limit:g} N·m: set effort_limit (the controller "
                             f"commands {'it no torque' if limit == 0.0 else 'any torque'})")
                continue
            jid = pm.getJointId(name)
            subtree = set(pm.subtrees[jid])
            origin = data.oMi[jid].translation
            reach = max([np.linalg.norm(data.oMf[f].translation - origin) for f in range(pm.nframes)
                         if pm.frames[f].parentJoint in subtree], default=0.0)
            holding = weight * max(reach, 0.05)  # [N·m]; 5 cm for a joint with nothing beyond it
            if limit > PLACEHOLDER_EFFORT_RATIO * holding:
                lines.append(f"joint {name}: effort limit {limit:g} N·m is {limit / holding:.0f} times the "
                             f"torque that holds the robot's weight at its reach ({holding:.3g} N·m): a "
                             "placeholder? set effort_limit to the actuator's")
        return lines

    @staticmethod
    def _check_limit(name: str, value: float) -> None:
        if not np.isfinite(value) or value <= 0.0:
            raise ConfigError(name, value, "effort limit must be finite and > 0")

    # ------------------------------------------------------------------ states
    def neutral(self) -> np.ndarray:
        """Neutral configuration (identity base orientation, joints at zero)."""
        return pin.neutral(self.pin_model)

    def random_configuration(self, rng: np.random.Generator) -> np.ndarray:
        """A configuration with joints uniformly inside their (finite) limits."""
        q = self.neutral()
        lo = np.where(np.isfinite(self.q_lower), self.q_lower, -np.pi)
        hi = np.where(np.isfinite(self.q_upper), self.q_upper, np.pi)
        q[self.joint_q_index] = rng.uniform(lo, hi)
        if self.floating_base:
            q[:3] = rng.normal(0.0, 0.1, 3)
            quat = rng.normal(size=4)
            q[3:7] = quat / np.linalg.norm(quat)
        return q

    def __repr__(self) -> str:
        base = "floating" if self.floating_base else "fixed"
        return (f"RobotModel({self.pin_model.name!r}, {base} base, nq={self.nq}, nv={self.nv}, "
                f"contacts={list(self.contact_frames)})")
