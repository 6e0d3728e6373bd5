"""URDF → MuJoCo: the simulator that stands in for Gazebo + ros2_control (DESIGN.md §5).

:func:`build_mujoco` compiles a :class:`~idyn_control.model.RobotModel` (its URDF, with
``package://`` URIs already resolved by the model) into a MuJoCo model with: a free joint
for floating-base robots, a ground plane of friction μ (rigid, or compliant with a set
penetration at rest), spheres at the contact frames, one torque motor per actuated joint
(in Pinocchio order, so ``ctrl`` *is* τ), and the timestep and friction cone asked for.

Conventions (verified in ``test/test_urdf_and_sim.py`` against finite differences):

============  ======================================  ======================================
              MuJoCo free joint                       Pinocchio free flyer
============  ======================================  ======================================
position      ``qpos[0:3]`` base origin, world         ``q[0:3]`` same
orientation   ``qpos[3:7]`` quaternion (w, x, y, z)    ``q[3:7]`` quaternion (x, y, z, w)
linear vel.   ``qvel[0:3]`` origin velocity, WORLD     ``v[0:3]`` origin velocity, BASE frame
angular vel.  ``qvel[3:6]`` BASE frame                 ``v[3:6]`` BASE frame
============  ======================================  ======================================

so ``v_mj = T(q) v_pin`` with ``T = blockdiag(R_world_base, I₃, P)`` (``P`` permutes the
actuated joints), and the mass matrices satisfy ``M_pin = Tᵀ M_mj T``.

A model with a free box (:class:`~idyn_control.model.FreeBox`, seed 000 §7.2.2) has the
box's free joint where MuJoCo puts it (after the robot's joints): the same conversion,
at the free joint's addresses.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np
import pinocchio as pin

from ..errors import ConfigError, ModelError, ShapeError, UnknownNameError
from ..model import RobotModel
from .terrain import HeightMap

#: μ used for "infinite" friction (``friction=math.inf``): the feet do not slip under a
#: 0.3·m·g push; 1e6 still works with elliptic cones but makes pyramidal ones unstable.
INFINITE_FRICTION = 1e3

#: how far the flat ground around a height map reaches beyond its edges [m]
_OUTSIDE_M = 50.0
_ROBOT_BIT = 2  # contype/conaffinity bits: robot geoms touch the ground, not each other
_GROUND_BIT = 1
_MESH_FORMATS = (".stl", ".obj", ".msh")  # what MuJoCo's mesh loader reads
_DEFAULT_FOOT_RADIUS = 0.02  # [m] when nothing in the URDF says better
_RIGID_SOLIMP = (0.95, 0.99, 0.001, 0.5, 2.0)
_COMPLIANT_IMPEDANCE = 0.9  # constant d(r) of the compliant ground (solimp dmin = dmax)
#: MuJoCo's noslip solver on rigid ground (``opt.noslip_iterations``): without it a foot that
#: pushes sideways well inside the friction cone still creeps (soft friction); Go2 standing
#: 20 s on μ 0.7 with qp_coulomb splayed its feet 69 mm, with it 0.002 mm
RIGID_NOSLIP_ITERATIONS = 10
BOX_DISTANCE_MAX_M = 0.05  # [m] range of MujocoSim.box_distance_array
_CONTACT_FORCE_EPS = 1e-9  # [N] normal force above which a contact counts as active


@dataclass(frozen=True)
class ContactGeom:
    """The MuJoCo geometry standing for one contact frame of the robot model.

    ``geom_id`` is a sphere of ``radius`` [m] centred at the frame origin; ``site_id`` is a
    site at the frame (its pose and velocity are the frame's); ``body_id`` carries both.
    """

    frame: str
    body_id: int
    geom_id: int
    site_id: int
    radius: float


class MujocoSim:
    """A compiled MuJoCo model + data whose interface uses Pinocchio's q, v and τ.

    Build it with :func:`build_mujoco`. ``model`` and ``data`` are the raw MuJoCo
    objects (free to inspect); :meth:`set_state`, :meth:`state` and :meth:`step` convert.

    Attributes:
        robot: the :class:`RobotModel` this was built from.
        model, data: ``mujoco.MjModel`` / ``mujoco.MjData``.
        contacts: one :class:`ContactGeom` per contact frame, in ``robot.contact_frames`` order.
        friction: ground friction μ used by MuJoCo (``INFINITE_FRICTION`` for "infinite").
        compliant: True when the ground was made compliant.
        dropped_collisions: URDF collision geometries MuJoCo could not load (link names).
        terrain: the height map the ground was built from (None: plane).
        joint_body_ids: MuJoCo body id of each Pinocchio joint (index = joint id; 0 = world).
    """

    def __init__(self, robot: RobotModel, model: mujoco.MjModel, contacts: tuple[ContactGeom, ...],
                 *, friction: float, compliant: bool, dropped_collisions: tuple[str, ...] = ()):
        self.robot = robot
        self.model = model
        self.data = mujoco.MjData(model)
        self.contacts = contacts
        self.friction = friction
        self.compliant = compliant
        self.dropped_collisions = dropped_collisions
        self.terrain: HeightMap | None = None
        self.floating_base = robot.floating_base

        first_joint = 2 if robot.floating_base else 1
        if any(robot.pin_model.joints[j].nq != 1 for j in range(first_joint, robot.pin_model.njoints)):
            raise ModelError("only joints with one configuration variable are supported "
                             "(no continuous joints)")
        joint_ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, n) for n in robot.joint_names]
        missing = [n for n, j in zip(robot.joint_names, joint_ids) if j < 0]
        if missing:
            raise ModelError(f"joints missing from the MuJoCo model: {missing}")
        # MuJoCo address of each actuated joint, in Pinocchio (τ) order
        self._qpos_adr = np.array([model.jnt_qposadr[j] for j in joint_ids], dtype=int)
        self._qvel_adr = np.array([model.jnt_dofadr[j] for j in joint_ids], dtype=int)
        free_name = "root_joint" if robot.free_box is None else robot.free_box.joint
        free = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, free_name) if self.floating_base else -1
        if self.floating_base and (free < 0 or model.jnt_type[free] != mujoco.mjtJoint.mjJNT_FREE):
            raise ModelError(f"floating-base robot without a MuJoCo free joint {free_name!r}")
        # qpos/qvel addresses of the free joint (0 for a floating base: MuJoCo's first joint)
        self._fq = int(model.jnt_qposadr[free]) if free >= 0 else 0
        self._fv = int(model.jnt_dofadr[free]) if free >= 0 else 0
        self._root_body = int(model.jnt_bodyid[free]) if free >= 0 else None

        # MuJoCo body moving with each Pinocchio joint (index: Pinocchio joint id; 0: world)
        self.joint_body_ids = np.zeros(robot.pin_model.njoints, dtype=int)
        if self.floating_base:
            self.joint_body_ids[1] = model.jnt_bodyid[free]
        for name, j in zip(robot.joint_names, joint_ids):
            self.joint_body_ids[robot.pin_model.getJointId(name)] = model.jnt_bodyid[j]

        self._geom_to_contact = {c.geom_id: i for i, c in enumerate(contacts)}
        #: the free box's geom (-1: no free box)
        self.box_geom_id = -1 if robot.free_box is None else mujoco.mj_name2id(
            model, mujoco.mjtObj.mjOBJ_GEOM, f"{robot.free_box.joint}_geom")
        self._rot = np.zeros(9)
        self._wrench = np.zeros(6)
        self._forces = np.zeros((len(contacts), 3))
        self._normal = np.zeros(len(contacts))

    # ------------------------------------------------------------------ conversions
    def to_mujoco(self, q: np.ndarray, v: np.ndarray, qpos: np.ndarray | None = None,
                  qvel: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Pinocchio (q, v) → MuJoCo (qpos, qvel), written into ``qpos``/``qvel`` if given."""
        q, v = self._check(q, self.robot.nq, "q"), self._check(v, self.robot.nv, "v")
        qpos = np.empty(self.model.nq) if qpos is None else qpos
        qvel = np.empty(self.model.nv) if qvel is None else qvel
        if self.floating_base:
            a, b = self._fq, self._fv
            qpos[a:a + 3] = q[0:3]
            qpos[a + 3] = q[6]  # (x, y, z, w) → (w, x, y, z)
            qpos[a + 4:a + 7] = q[3:6]
            mujoco.mju_quat2Mat(self._rot, qpos[a + 3:a + 7] / np.linalg.norm(qpos[a + 3:a + 7]))
            qvel[b:b + 3] = self._rot.reshape(3, 3) @ v[0:3]  # base frame → world frame
            qvel[b + 3:b + 6] = v[3:6]
        qpos[self._qpos_adr] = q[self.robot.joint_q_index]
        qvel[self._qvel_adr] = v[self.robot.joint_v_index]
        return qpos, qvel

    def to_pinocchio(self, qpos: np.ndarray, qvel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """MuJoCo (qpos, qvel) → Pinocchio (q, v) (new arrays)."""
        qpos, qvel = self._check(qpos, self.model.nq, "qpos"), self._check(qvel, self.model.nv, "qvel")
        q = np.empty(self.robot.nq)
        v = np.empty(self.robot.nv)
        if self.floating_base:
            a, b = self._fq, self._fv
            quat = qpos[a + 3:a + 7] / np.linalg.norm(qpos[a + 3:a + 7])
            q[0:3] = qpos[a:a + 3]
            q[3:6] = quat[1:4]
            q[6] = quat[0]
            mujoco.mju_quat2Mat(self._rot, quat)
            v[0:3] = self._rot.reshape(3, 3).T @ qvel[b:b + 3]  # world frame → base frame
            v[3:6] = qvel[b + 3:b + 6]
        q[self.robot.joint_q_index] = qpos[self._qpos_adr]
        v[self.robot.joint_v_index] = qvel[self._qvel_adr]
        return q, v

    def velocity_map(self, q: np.ndarray) -> np.ndarray:
        """T (nv × nv) with ``qvel = T v`` at configuration ``q`` (Pinocchio's)."""
        T = np.zeros((self.model.nv, self.robot.nv))
        if self.floating_base:
            b = self._fv
            T[b:b + 3, 0:3] = pin.Quaternion(np.asarray(q[3:7], dtype=float)).normalized().toRotationMatrix()
            T[b + 3:b + 6, 3:6] = np.eye(3)
        T[self._qvel_adr, self.robot.joint_v_index] = 1.0
        return T

    # ------------------------------------------------------------------ state and stepping
    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return float(self.data.time)

    def set_state(self, q: np.ndarray, v: np.ndarray) -> None:
        """Set the Pinocchio state and recompute positions, velocities and contacts."""
        self.to_mujoco(q, v, self.data.qpos, self.data.qvel)
        self.data.qacc_warmstart[:] = 0.0
        mujoco.mj_forward(self.model, self.data)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """The current state as Pinocchio (q, v)."""
        return self.to_pinocchio(self.data.qpos, self.data.qvel)

    def push(self, force_world: np.ndarray | None) -> None:
        """A force on the floating base's centre of mass [N, world frame] until the next
        call (None or zeros: no push)."""
        if self._root_body is None:
            return
        self.data.xfrc_applied[self._root_body, :3] = 0.0 if force_world is None else force_world

    def step(self, tau: np.ndarray, n: int = 1) -> None:
        """Apply joint torques τ [N·m] (Pinocchio actuated order) for ``n`` timesteps.

        MuJoCo clamps τ to the effort limits (the actuators' ``ctrlrange``).
        """
        self.data.ctrl[:] = self._check(tau, self.robot.na, "tau")
        for _ in range(n):
            mujoco.mj_step(self.model, self.data)

    # ------------------------------------------------------------------ contacts
    def contact_forces_array(self, out: np.ndarray | None = None) -> np.ndarray:
        """Ground-on-robot forces [N], world frame, shape (n_contacts, 3), contact order.

        Sum over MuJoCo's contacts on each foot sphere (``mj_contactForce`` rotated out of
        the contact frame, whose first axis is the normal pointing from geom1 to geom2).
        """
        out = self._forces if out is None else out
        out[:] = 0.0
        self._normal[:] = 0.0
        for i in range(self.data.ncon):
            contact = self.data.contact[i]
            k, sign = self._foot_of(contact)
            if k is None:
                continue
            mujoco.mj_contactForce(self.model, self.data, i, self._wrench)
            out[k] += sign * (contact.frame.reshape(3, 3).T @ self._wrench[:3])
            self._normal[k] += self._wrench[0]
        return out

    def step_period(self, tau: np.ndarray, substeps: int, forces: np.ndarray, normal: np.ndarray) -> None:
        """Hold τ [N·m] for one control period of ``substeps`` timesteps; ``forces`` (n_contacts,
        3) and ``normal`` (n_contacts,) receive the contact forces [N] (:meth:`contact_forces_array`)
        and the forces along the contact normals (:attr:`normal_forces`) averaged over them."""
        forces[:] = 0.0
        normal[:] = 0.0
        for _ in range(substeps):
            self.step(tau)
            if len(self.contacts):
                forces += self.contact_forces_array()
                normal += self._normal
        forces /= substeps
        normal /= substeps

    @property
    def normal_forces(self) -> np.ndarray:
        """Per contact [N], (n_contacts,): the force along MuJoCo's contact normals, summed
        over the foot sphere's contacts, as of the last :meth:`contact_forces_array` (a
        view, overwritten by the next call). What presses the foot onto whatever it touches:
        on a step's face it is large while the force's vertical part is ≤ 0 (the face's
        friction holds a foot that slides up it)."""
        return self._normal

    def touching_array(self, out: np.ndarray | None = None) -> np.ndarray:
        """Which contact spheres MuJoCo's collision detection finds touching at the current
        state, (n_contacts,) bool: the contacts its next step pushes on (signed distance
        below the geoms' margin). Runs MuJoCo's kinematics and collision stages; after
        :meth:`step` the data's contacts (and :meth:`contact_forces_array`) are the step's
        until this is called."""
        out = np.zeros(len(self.contacts), dtype=bool) if out is None else out
        out[:] = False
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_collision(self.model, self.data)
        for i in range(self.data.ncon):
            contact = self.data.contact[i]
            k = self._foot_of(contact)[0]
            if k is not None and contact.dist < contact.includemargin:
                out[k] = True
        return out

    def contact_forces(self) -> dict[str, np.ndarray]:
        """Contact frame → force [N] of the ground on the robot, world frame."""
        forces = self.contact_forces_array()
        return {c.frame: forces[i].copy() for i, c in enumerate(self.contacts)}

    def contact_states(self) -> dict[str, bool]:
        """Contact frame → True when its foot sphere presses on something."""
        self.contact_forces_array()
        return {c.frame: bool(self._normal[i] > _CONTACT_FORCE_EPS) for i, c in enumerate(self.contacts)}

    def frame_position(self, frame: str) -> np.ndarray:
        """World position [m] of a contact frame (its site)."""
        return self.data.site_xpos[self._contact(frame).site_id].copy()

    def ground_under(self, index: int) -> tuple[np.ndarray, float]:
        """(unit normal, μ) of the height map under contact ``index``'s sphere centre: what a
        controller is told about that contact (:meth:`HeightMap.surface_at`)."""
        x, y = self.data.site_xpos[self.contacts[index].site_id, :2]
        return self.terrain.surface_at(x, y)

    def frame_velocity(self, frame: str) -> np.ndarray:
        """Linear velocity [m/s] of a contact frame's origin, world frame."""
        res = np.zeros(6)  # MuJoCo order: [angular, linear]
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE,
                                 self._contact(frame).site_id, res, 0)
        return res[3:6]

    def box_distance_array(self, out: np.ndarray | None = None) -> np.ndarray:
        """Signed distance [m] of each contact sphere to the free box (closest features,
        seed 000 §4: "points of contact ... computed using closest features"); +inf
        beyond BOX_DISTANCE_MAX_M. Only for a model with a free box."""
        if self.box_geom_id < 0:
            raise ModelError("box_distance_array needs a model with a free box")
        out = np.empty(len(self.contacts)) if out is None else out
        for k, c in enumerate(self.contacts):
            d = mujoco.mj_geomDistance(self.model, self.data, c.geom_id, self.box_geom_id,
                                       BOX_DISTANCE_MAX_M, None)
            out[k] = d if d < BOX_DISTANCE_MAX_M else np.inf
        return out

    def penetration(self) -> np.ndarray:
        """Penetration depth [m] of each foot sphere into what it touches (≥ 0)."""
        depth = np.zeros(len(self.contacts))
        for i in range(self.data.ncon):
            contact = self.data.contact[i]
            for g in contact.geom:
                k = self._geom_to_contact.get(int(g))
                if k is not None:
                    depth[k] = max(depth[k], -float(contact.dist))
        return depth

    # ------------------------------------------------------------------ helpers
    def _foot_of(self, contact) -> tuple[int | None, float]:
        """The contact sphere (index) one of MuJoCo's contacts is on, and the sign that turns
        ``mj_contactForce`` (the force geom1 exerts on geom2) into the force on that sphere:
        geom2 first (+1), then geom1 (−1); (None, 0) when neither geom is a contact sphere."""
        k = self._geom_to_contact.get(int(contact.geom[1]))
        if k is not None:
            return k, 1.0
        k = self._geom_to_contact.get(int(contact.geom[0]))
        return (k, -1.0) if k is not None else (None, 0.0)

    def _contact(self, frame: str) -> ContactGeom:
        for c in self.contacts:
            if c.frame == frame:
                return c
        raise UnknownNameError("contact frame", frame, [c.frame for c in self.contacts])

    @staticmethod
    def _check(x, n: int, name: str) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.shape != (n,):
            raise ShapeError(name, x.shape, (n,))
        return x


# ====================================================================== construction
def build_mujoco(
    robot: RobotModel,
    *,
    friction: float = 0.7,
    compliant: bool = False,
    penetration: float = 1e-3,
    timestep: float = 1e-3,
    cone: str | None = None,
    foot_radius: float | None = None,
    collision: str | None = None,
    inertia: str = "pinocchio",
    ground: bool | None = None,
    integrator: str = "implicitfast",
    terrain: HeightMap | None = None,
) -> MujocoSim:
    """Compile a robot model into MuJoCo (DESIGN.md §5).

    Args:
        robot: the model; its URDF (``robot.urdf_xml``) is what MuJoCo imports.
        friction: ground Coulomb coefficient μ > 0; ``math.inf`` means "infinite"
            (seed 000 §7) and becomes :data:`INFINITE_FRICTION`.
        compliant: soft ground whose penetration at rest under the robot's weight is
            ``penetration``; otherwise a stiff ground (10–20 µm at rest for the small quadrupeds).
        penetration: target depth at rest on compliant ground [m].
        timestep: integration step [s].
        cone: ``"pyramidal"`` or ``"elliptic"`` friction cone; ``None``: elliptic on
            compliant ground and on a height map whose patches differ in μ, pyramidal
            otherwise. A compliant ground set by its depth at rest yields the same way for
            every μ only with elliptic cones (see :func:`_set_ground_stiffness`): with a
            pyramidal cone at μ = 0.1 it is mud (13 mm deep under a 0.2 m/s landing of the
            quadruped, still 11 mm after 0.3 s, against 1.7 mm at μ = ∞). So was a rigid
            height map's low-μ patches: with the pyramidal cone a μ 0.1 patch of seed 000's
            map (μ up to 1.5) had a 54 ms time constant against 2 ms at μ 1.5, the
            quadruped's stance feet sank up to 7 mm into it, and MuJoCo's height-field
            collision then pushed them along normals 66° from the surface's (up to 19 N
            on the 28 N robot); with the elliptic cone they stay within 0.4 mm.
        foot_radius: radius of the contact spheres [m]; ``None`` takes it from the URDF
            (a sphere on the contact link, else the depth of its collision mesh below the
            frame), else 2 cm.
        collision: ``"contacts"`` (only the contact spheres collide; default for robots
            with contact frames: URDF meshes of legged robots are often unusable in
            MuJoCo) or ``"urdf"`` (the URDF collision geometry MuJoCo can load, plus the
            contact spheres; default otherwise). Robot geoms never collide with each other.
        inertia: ``"pinocchio"`` (each MuJoCo body gets the inertia Pinocchio lumps on its
            joint: the same robot by construction, and URDF inertias MuJoCo rejects are
            fine once lumped) or ``"urdf"`` (MuJoCo's own import, ``balanceinertia`` on).
        ground: add the ground plane; default: floating-base robots only.
        integrator: MuJoCo integrator name (``"euler"``, ``"implicitfast"``, ``"rk4"``...).
        terrain: a rigid :class:`~idyn_control.sim.terrain.HeightMap` instead of the plane
            (seed 000 §7.5): one height-field geom per friction patch, each with its μ
            (``friction`` is then unused by the ground).
    """
    mu = _ground_friction(friction)
    if not (np.isfinite(timestep) and timestep > 0.0):
        raise ConfigError("timestep", timestep, "must be a finite value > 0 [s]")
    if not (np.isfinite(penetration) and penetration > 0.0):
        raise ConfigError("penetration", penetration, "must be a finite value > 0 [m]")
    cones = {"pyramidal": mujoco.mjtCone.mjCONE_PYRAMIDAL, "elliptic": mujoco.mjtCone.mjCONE_ELLIPTIC}
    if cone is None:
        patches_differ = terrain is not None and float(np.ptp(terrain.mu)) > 0.0
        cone = "elliptic" if compliant or patches_differ else "pyramidal"
    if cone not in cones:
        raise UnknownNameError("friction cone", cone, cones)
    integrators = {name[len("mjINT_"):].lower(): value
                   for name, value in mujoco.mjtIntegrator.__members__.items()}
    if integrator not in integrators:
        raise UnknownNameError("integrator", integrator, integrators)
    if collision is None:
        collision = "contacts" if robot.contact_frames else "urdf"
    if collision not in ("contacts", "urdf"):
        raise UnknownNameError("collision mode", collision, ("contacts", "urdf"))
    if inertia not in ("pinocchio", "urdf"):
        raise UnknownNameError("inertia source", inertia, ("pinocchio", "urdf"))
    if foot_radius is not None and not (np.isfinite(foot_radius) and foot_radius > 0.0):
        raise ConfigError("foot_radius", foot_radius, "must be a finite value > 0 [m]")
    if ground is None:
        ground = robot.floating_base and robot.free_box is None
    if terrain is not None and compliant:
        raise ConfigError("compliant", compliant, "the height map is rigid (seed 000 §7.5)")

    urdf_root = _parse_urdf(robot.urdf_xml)
    radii = [foot_radius if foot_radius is not None else _foot_radius(robot, urdf_root, f)
             for f in robot.contact_frames]
    dropped = _prepare_urdf(urdf_root, keep_collisions=(collision == "urdf"),
                            balance_inertia=(inertia == "urdf"))
    try:
        spec = mujoco.MjSpec.from_string(ET.tostring(urdf_root, encoding="unicode"))
    except Exception as exc:  # noqa: BLE001 - MuJoCo raises ValueError or its own errors
        raise ModelError(f"MuJoCo cannot import the URDF of {robot.pin_model.name!r}: {exc}") from exc

    spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    spec.option.timestep = timestep
    spec.option.cone = cones[cone]
    spec.option.integrator = integrators[integrator]

    root = spec.worldbody.first_body()
    if robot.free_box is not None:
        root = _add_free_box(spec, robot.free_box, mu)
    elif robot.floating_base:
        root.add_freejoint(name="root_joint")
    joint_bodies = _joint_bodies(robot, spec, root)
    if inertia == "pinocchio":
        _copy_pinocchio_inertias(robot, spec, joint_bodies)

    for geom in spec.geoms:  # the URDF's collision geometry that survived
        if robot.free_box is not None and geom.name == f"{robot.free_box.joint}_geom":
            continue  # the box is what the robot touches
        geom.contype, geom.conaffinity = _ROBOT_BIT, _GROUND_BIT
        geom.condim = 3

    contact_specs = []
    for frame, radius in zip(robot.contact_frames, radii):
        f = robot.pin_model.frames[robot.pin_model.getFrameId(frame)]
        body = joint_bodies[f.parentJoint] if f.parentJoint > 0 else spec.worldbody
        placement = f.placement
        pos = placement.translation.copy()
        quat = pin.Quaternion(placement.rotation).coeffs()  # (x, y, z, w)
        geom = body.add_geom(name=f"{frame}_sphere", type=mujoco.mjtGeom.mjGEOM_SPHERE,
                             size=[radius, 0.0, 0.0], pos=pos, contype=_ROBOT_BIT,
                             conaffinity=_GROUND_BIT, condim=3, rgba=[0.1, 0.1, 0.1, 1.0])
        site = body.add_site(name=frame, pos=pos, quat=[quat[3], quat[0], quat[1], quat[2]])
        contact_specs.append((frame, geom, site, radius))

    tiles = []  # (spec geom, μ) of the height map's patches
    if ground and terrain is not None:
        tiles = _add_terrain(spec, terrain)
    elif ground:
        spec.worldbody.add_geom(name="ground", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0.0, 0.0, 1.0],
                                friction=[mu, 0.005, 0.0001], condim=3, priority=1,
                                contype=_GROUND_BIT, conaffinity=_ROBOT_BIT, rgba=[0.6, 0.6, 0.6, 1.0])

    joints = {j.name: j for j in spec.joints}
    for name, tau_max in zip(robot.joint_names, robot.tau_max):
        # the importer turns URDF efforts into joint force limits; the actuator's ctrlrange
        # (RobotModel.tau_max, which may override the URDF) is the one limit that applies
        joints[name].actfrclimited = mujoco.mjtLimited.mjLIMITED_FALSE
        act = spec.add_actuator(name=name, trntype=mujoco.mjtTrn.mjTRN_JOINT, target=name)
        act.gear[0] = 1.0
        if np.isfinite(tau_max) and tau_max > 0.0:
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.ctrlrange = [-tau_max, tau_max]
        else:
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE

    try:
        model = spec.compile()
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"MuJoCo cannot compile {robot.pin_model.name!r}: {exc}") from exc

    contacts = tuple(
        ContactGeom(frame, int(model.geom_bodyid[geom.id]), geom.id, site.id, float(radius))
        for frame, geom, site, radius in contact_specs
    )
    for c in contacts:  # friction of the ground wins (priority); these matter for other objects
        model.geom_friction[c.geom_id, 0] = mu
    mu_tiles = [(geom.id, tile_mu) for geom, tile_mu in tiles]
    _set_ground_stiffness(robot, model, contacts, mu=max([mu] + [m for _, m in mu_tiles]),
                          compliant=compliant, penetration=penetration, patches=mu_tiles)
    # hard friction (the noslip solver) on rigid ground under point feet only; soft for a
    # grasped box and for flat feet (several contact points on one body): with the noslip
    # solver ID(t_i-1) dropped the box of seed 000 §8.4.1 at 1.56 s on μ 1.0 (it holds it 3 s
    # without, as in the paper), and the pyramid edges it re-solves moved G1's sole loads
    # until a corner carried nothing on 125 ticks of its weight shift (never without)
    point_feet = len({c.body_id for c in contacts}) == len(contacts)
    hard = not compliant and point_feet and robot.free_box is None
    model.opt.noslip_iterations = RIGID_NOSLIP_ITERATIONS if hard else 0
    sim = MujocoSim(robot, model, contacts, friction=mu, compliant=compliant, dropped_collisions=dropped)
    sim.terrain = terrain
    return sim


def _add_free_box(spec: mujoco.MjSpec, box, mu: float):
    """The model's free box (seed 000 §7.2.2): a body with a free joint and a box geom of
    friction μ that touches the robot's contact spheres (its friction wins: priority)."""
    body = spec.worldbody.add_body(name=box.joint)
    body.add_freejoint(name=box.joint)
    body.add_geom(name=f"{box.joint}_geom", type=mujoco.mjtGeom.mjGEOM_BOX, size=list(box.half_extents),
                  friction=[mu, 0.005, 0.0001], condim=3, priority=1, contype=_GROUND_BIT,
                  conaffinity=_ROBOT_BIT, rgba=[0.8, 0.5, 0.2, 1.0])
    return body


def _add_terrain(spec: mujoco.MjSpec, terrain: HeightMap) -> list:
    """One height field + geom per friction patch of ``terrain`` (seed 000 §7.5).

    MuJoCo normalizes height-field data to [0, 1] and scales it by ``size[2]``, rows
    along +y: each tile stores (h − min)/(max − min) with size[2] = max − min at z = min.
    Four boxes with their tops at z = 0 are the flat ground around the map (μ =
    ``outside_mu``). Returns (geom, μ) of every ground geom.
    """
    half = 0.5 * terrain.config.patch_m
    tiles = []
    for row, col, (cx, cy), block, tile_mu in terrain.tiles():
        low, span = float(block.min()), float(block.max() - block.min())
        data = (block - low) / span if span > 1e-9 else np.zeros_like(block)
        name = f"terrain_{row}_{col}"
        spec.add_hfield(name=name, size=[half, half, max(span, 1e-6), 0.05],
                        nrow=block.shape[0], ncol=block.shape[1], userdata=data.ravel().tolist())
        geom = spec.worldbody.add_geom(name=name, type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=name,
                                       pos=[cx, cy, low], friction=[tile_mu, 0.005, 0.0001], condim=3,
                                       priority=1, contype=_GROUND_BIT, conaffinity=_ROBOT_BIT,
                                       rgba=[0.45 + 0.3 * tile_mu / 1.5, 0.5, 0.55, 1.0])
        tiles.append((geom, tile_mu))
    # the flat ground around the map: four boxes, top at z = 0, touching its edges
    c = terrain.config
    edge, far, depth = 0.5 * c.size_m, _OUTSIDE_M, 0.05  # the map's half side, the boxes' reach and half height
    for k, (pos, size) in enumerate((((edge + far, 0.0), (far, edge + 2 * far)),
                                     ((-edge - far, 0.0), (far, edge + 2 * far)),
                                     ((0.0, edge + far), (edge, far)),
                                     ((0.0, -edge - far), (edge, far)))):
        geom = spec.worldbody.add_geom(name=f"terrain_outside_{k}", type=mujoco.mjtGeom.mjGEOM_BOX,
                                       pos=[pos[0], pos[1], -depth], size=[size[0], size[1], depth],
                                       friction=[c.outside_mu, 0.005, 0.0001], condim=3, priority=1,
                                       contype=_GROUND_BIT, conaffinity=_ROBOT_BIT, rgba=[0.6, 0.6, 0.6, 1.0])
        tiles.append((geom, c.outside_mu))
    return tiles


def _ground_friction(friction: float) -> float:
    if friction == math.inf:
        return INFINITE_FRICTION
    if not (np.isfinite(friction) and friction > 0.0):
        raise ConfigError("friction", friction, "must be > 0 (math.inf for 'infinite')")
    return float(friction)


def _parse_urdf(xml: str) -> ET.Element:
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ModelError(f"the URDF is not valid XML: {exc}") from exc
    if root.tag != "robot":
        raise ModelError(f"the URDF root element is <{root.tag}>, expected <robot>")
    return root


def _prepare_urdf(root: ET.Element, *, keep_collisions: bool, balance_inertia: bool) -> tuple[str, ...]:
    """Strip what MuJoCo's URDF importer should not see; return the links that lost geometry."""
    for tag in ("ros2_control", "gazebo", "transmission"):
        for element in root.findall(tag):
            root.remove(element)
    dropped = []
    for link in root.findall("link"):
        for visual in link.findall("visual"):
            link.remove(visual)
        for coll in link.findall("collision"):
            if not keep_collisions:
                link.remove(coll)
            elif not _mujoco_can_load(coll):
                link.remove(coll)
                dropped.append(link.get("name", "?"))
    mj = ET.Element("mujoco")
    ET.SubElement(mj, "compiler", {
        "discardvisual": "true", "fusestatic": "true", "strippath": "false", "angle": "radian",
        "balanceinertia": "true" if balance_inertia else "false",
    })
    root.insert(0, mj)
    return tuple(dropped)


def _mujoco_can_load(collision: ET.Element) -> bool:
    mesh = collision.find("geometry/mesh")
    if mesh is None:
        return collision.find("geometry") is not None
    filename = mesh.get("filename", "")
    return (Path(filename).suffix.lower() in _MESH_FORMATS
            and os.path.isabs(filename) and os.path.isfile(filename))


def _joint_bodies(robot: RobotModel, spec: mujoco.MjSpec, root) -> dict[int, object]:
    """Pinocchio joint id → the MuJoCo spec body that moves with it."""
    bodies = {}
    first = 1
    if robot.floating_base:
        bodies[1] = root
        first = 2
    by_name = {j.name: j for j in spec.joints}
    for jid in range(first, robot.pin_model.njoints):
        name = robot.pin_model.names[jid]
        if name not in by_name:
            raise ModelError(f"MuJoCo's URDF import has no joint {name!r}")
        bodies[jid] = by_name[name].parent
    return bodies


def _copy_pinocchio_inertias(robot: RobotModel, spec: mujoco.MjSpec, joint_bodies: dict[int, object]) -> None:
    """Give every MuJoCo body the inertia Pinocchio lumps on its joint (static bodies: none)."""
    moving = {body.name for body in joint_bodies.values()}
    for body in spec.bodies:
        if body.name == "world":
            continue
        body.explicitinertial = True
        if body.name not in moving:
            body.mass = 0.0
            body.ipos = [0.0, 0.0, 0.0]
            body.inertia = [0.0, 0.0, 0.0]
            body.fullinertia = [math.nan, 0.0, 0.0, 0.0, 0.0, 0.0]
    for jid, body in joint_bodies.items():
        inertia = robot.pin_model.inertias[jid]
        I = inertia.inertia  # about the centre of mass, joint frame
        body.mass = float(inertia.mass)
        body.ipos = inertia.lever.copy()
        body.fullinertia = [I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]]


def _foot_radius(robot: RobotModel, urdf_root: ET.Element, frame: str) -> float:
    """Radius of a contact sphere: the URDF's sphere on that link, else its mesh depth.

    A point added on a link (a sole's corner, ContactSurface) takes the radius of the link's
    collision sphere centred there, if any."""
    pm = robot.pin_model
    pin_frame = pm.frames[pm.getFrameId(frame)]
    link = urdf_root.find(f"link[@name='{pin_frame.name}']")
    if link is None and pin_frame.type == pin.FrameType.OP_FRAME:
        parent = pm.frames[pin_frame.parentFrame]
        link = urdf_root.find(f"link[@name='{parent.name}']")
        if link is None:
            return _DEFAULT_FOOT_RADIUS
        at = (parent.placement.inverse() * pin_frame.placement).translation  # the point in the link frame
        for coll in link.findall("collision"):
            sphere, origin = coll.find("geometry/sphere"), coll.find("origin")
            xyz = np.array([float(x) for x in (origin.get("xyz", "0 0 0") if origin is not None else "0 0 0").split()])
            if sphere is not None and sphere.get("radius") and np.linalg.norm(xyz - at) < 1e-6:
                return float(sphere.get("radius"))
        return _DEFAULT_FOOT_RADIUS
    if link is None:
        return _DEFAULT_FOOT_RADIUS
    for coll in link.findall("collision"):
        sphere = coll.find("geometry/sphere")
        if sphere is not None and sphere.get("radius"):
            return float(sphere.get("radius"))
    for coll in link.findall("collision"):
        mesh = coll.find("geometry/mesh")
        if mesh is None or not mesh.get("filename", "").lower().endswith(".stl"):
            continue
        try:
            vertices = _stl_vertices(mesh.get("filename"))
        except (OSError, ValueError):
            continue
        scale = np.array([float(s) for s in mesh.get("scale", "1 1 1").split()])
        origin = coll.find("origin")
        offset_z = float(origin.get("xyz", "0 0 0").split()[2]) if origin is not None else 0.0
        depth = -(vertices[:, 2] * scale[2] + offset_z).min()  # lowest point below the frame
        if depth > 1e-3:
            return float(depth)
    return _DEFAULT_FOOT_RADIUS


def _stl_vertices(path: str) -> np.ndarray:
    """Vertices (n, 3) of a binary or ASCII STL file."""
    data = Path(path).read_bytes()
    if len(data) >= 84:
        n = int.from_bytes(data[80:84], "little")
        if len(data) == 84 + 50 * n:
            rec = np.dtype([("normal", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
            return np.frombuffer(data, dtype=rec, count=n, offset=84)["v"].reshape(-1, 3).astype(float)
    words = data.decode("ascii", errors="ignore").split()
    coords = [float(words[i + j]) for i, w in enumerate(words) if w == "vertex" for j in (1, 2, 3)]
    if not coords:
        raise ValueError(f"no vertices in {path}")
    return np.array(coords).reshape(-1, 3)


def _set_ground_stiffness(robot: RobotModel, model: mujoco.MjModel, contacts: tuple[ContactGeom, ...],
                          *, mu: float, compliant: bool, penetration: float,
                          patches: list[tuple[int, float]] = ()) -> None:
    """Write solref/solimp of every geom (ground and robot alike: no mixing) and impratio.

    With a constant impedance d, MuJoCo's soft contact at rest sinks by
    ``depth = (1 − d) · Â · f · τ² · c`` (critically damped, τ the time constant, Â the
    contact's approximate inverse inertia ``body_invweight0``, f the normal load), with
    c = 1 for elliptic cones and c = μ²(1 + μ²) / (2 · impratio) for pyramidal ones (the
    pyramid edges' regularizer grows with μ²(1 + μ²); measured, not documented). So that
    "rigid" and "compliant" mean the same thing for every μ at rest: pyramidal cones get
    ``impratio = max(1, μ²(1 + μ²)/2)`` (c ≤ 1; needed for μ ≫ 1) and τ is scaled by 1/√c;
    elliptic cones get ``impratio = 10`` (10× less tangential creep; normal unaffected).
    Only elliptic cones also keep the ground's *motion* the same for every μ: at μ = 0.1 a
    pyramidal cone has c = 0.005, τ is 14× longer (compliant 0.19 s instead of 14 ms, rigid
    28 ms instead of 2 ms), and the ground gives way under a landing foot and comes back
    slowly (``test_urdf_and_sim.py`` measures it). Lowering impratio to make c = 1 keeps τ
    but lets the feet creep sideways at 0.05 m/s while standing.

    Rigid: τ = 2·dt/√c (2·dt is the stiffest MuJoCo integrates stably), impedance
    0.95–0.99: 10–20 µm at rest for the quadruped and Solo12, and MuJoCo's noslip solver
    (:data:`RIGID_NOSLIP_ITERATIONS`, set by :func:`build_mujoco`) makes its friction hard: soft friction lets a loaded
    foot creep sideways at a speed proportional to its tangential force, even far inside
    the cone (standing 20 s on μ 0.7 with ``qp_coulomb``, the feet of Go2, ANYmal C, Solo12
    and the project quadruped splayed 32–69 mm and the bodies sank 7–21 mm; with it the feet
    stay within 0.02 mm). It holds feet that push sideways at up to ~0.45 μ (measured: Go2
    standing, μ 0.3–0.7); at ~0.7 μ (``qp_coulomb``'s friction margin on μ ≤ 0.3) they still
    creep, 7 mm/s on μ 0.1, with or without it. Compliant: d = 0.9 and τ solved from the formula for
    f = m·g / n_contacts; no noslip solver (a penalty ground yields sideways too). A model
    with a free box (the grasp) or flat feet has no noslip solver either (see
    :func:`build_mujoco`).

    ``patches`` (geom id, μ) of a rigid height map: ``mu`` is their largest μ (it sets
    impratio) and each patch gets the τ of its own μ, so every patch is equally rigid.
    """
    if model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL:
        edges = mu * mu * (1.0 + mu * mu) / 2.0
        model.opt.impratio = max(1.0, edges)
        scale = edges / model.opt.impratio
    else:
        model.opt.impratio = 10.0
        scale = 1.0
    dt = float(model.opt.timestep)
    if compliant and contacts:
        weight = pin.computeTotalMass(robot.pin_model) * float(np.linalg.norm(model.opt.gravity))
        inv_inertia = float(np.mean([model.body_invweight0[c.body_id, 0] for c in contacts]))
        load = weight / len(contacts)
        d = _COMPLIANT_IMPEDANCE
        timeconst = math.sqrt(penetration / ((1.0 - d) * inv_inertia * load * scale))
        if timeconst < 2.0 * dt:
            raise ConfigError("penetration", penetration,
                              f"too stiff for timestep {dt} s (time constant {timeconst:.2e} s < 2·dt)")
        solref = (timeconst, 1.0)
        solimp = (d, d, 0.001, 0.5, 2.0)
    else:
        solref = (2.0 * dt / math.sqrt(scale), 1.0)
        solimp = _RIGID_SOLIMP
    model.geom_solref[:] = solref
    model.geom_solimp[:] = solimp
    if not compliant and model.opt.cone == mujoco.mjtCone.mjCONE_PYRAMIDAL:
        for geom_id, patch_mu in patches:
            c = patch_mu * patch_mu * (1.0 + patch_mu * patch_mu) / (2.0 * model.opt.impratio)
            model.geom_solref[geom_id] = (2.0 * dt / math.sqrt(c), 1.0)
