"""The project's quadruped URDF and the URDF → MuJoCo conversion (DESIGN.md §5).

The conversion is checked physically: same kinematics, velocities and mass matrix as
Pinocchio (up to MuJoCo's free-joint velocity basis), and robots that stand on the ground
with the contact forces carrying their weight.
"""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pinocchio as pin
import pytest

from conftest import foot_slide
from idyn_control import robots
from idyn_control.errors import ConfigError, ModelError, UnknownNameError
from idyn_control.sim import INFINITE_FRICTION, build_mujoco

SIM_ROBOTS = ("quadruped", "solo12", "go2", "anymal_c", "panda")
LEGS = ("LF", "RF", "LH", "RH")
STANDING_HEIGHT = 0.14  # [m] base height of the seed 000 §7.1 platform standing
FOOT_RADIUS = 0.01  # [m] the quadruped's foot spheres
KP, KD = 15.0, 0.2  # joint PD of the small quadrupeds [N·m/rad], [N·m·s/rad]


@pytest.fixture(scope="module")
def quadruped():
    return robots.load("quadruped")


@pytest.fixture(scope="module")
def quadruped_urdf():
    return ET.parse(robots.spec("quadruped").urdf_path()).getroot()


def _gravity(robot) -> float:
    return 9.81 * pin.computeTotalMass(robot.pin_model)


# ====================================================================== the URDF
def test_quadruped_has_12_actuated_joints_and_4_feet(quadruped):
    expected = tuple(f"{leg}_{j}" for leg in LEGS for j in ("HAA", "HFE", "KFE"))
    assert quadruped.floating_base
    assert quadruped.na == 12 and set(quadruped.joint_names) == set(expected)
    assert quadruped.contact_frames == tuple(f"{leg}_FOOT" for leg in LEGS)
    kinds = {"HAA": "JointModelRX", "HFE": "JointModelRY", "KFE": "JointModelRY"}  # HAA about x, the others y
    for name in expected:
        assert quadruped.pin_model.joints[quadruped.pin_model.getJointId(name)].shortname() == kinds[name[3:]]
    assert np.all(quadruped.q_lower < quadruped.q_upper)
    assert np.all(quadruped.v_max > 0.0) and np.all(np.isfinite(quadruped.v_max))
    assert 2.0 < pin.computeTotalMass(quadruped.pin_model) < 5.0


def test_quadruped_links_have_physical_inertias_and_primitive_geometry(quadruped_urdf):
    assert quadruped_urdf.find(".//mesh") is None
    links = quadruped_urdf.findall("link")
    assert len(links) == 1 + 4 * 4
    for link in links:
        inertial = link.find("inertial")
        assert inertial is not None, link.get("name")
        mass = float(inertial.find("mass").get("value"))
        i = {k: float(v) for k, v in inertial.find("inertia").attrib.items()}
        I = np.array([[i["ixx"], i["ixy"], i["ixz"]],
                      [i["ixy"], i["iyy"], i["iyz"]],
                      [i["ixz"], i["iyz"], i["izz"]]])
        eig = np.linalg.eigvalsh(I)
        assert mass > 0.0 and eig.min() > 0.0, link.get("name")
        assert eig[0] + eig[1] >= eig[2] * (1 - 1e-9), f"{link.get('name')}: triangle inequality"
        for geometry in link.findall("collision/geometry"):
            assert [child.tag for child in geometry][0] in ("box", "cylinder", "sphere")


def test_quadruped_effort_limits_hold_the_standing_robot_with_margin(quadruped):
    """Static standing torques τ = g_a − J_aᵀ f with f the least-norm forces carrying the base."""
    model, data = quadruped.pin_model, quadruped.pin_model.createData()
    q = robots.standing_configuration(quadruped, "quadruped", foot_height=FOOT_RADIUS)
    g = pin.computeGeneralizedGravity(model, data, q)
    pin.computeJointJacobians(model, data, q)
    pin.updateFramePlacements(model, data)
    J = np.vstack([pin.getFrameJacobian(model, data, f, pin.LOCAL_WORLD_ALIGNED)[:3]
                   for f in quadruped.contact_frame_ids])
    f = np.linalg.lstsq(J[:, :6].T, g[:6], rcond=None)[0]
    tau = g[6:] - J[:, 6:].T @ f
    assert np.allclose(J[:, :6].T @ f, g[:6], atol=1e-9)
    assert np.all(f[2::3] > 0.0)
    assert np.all(np.abs(tau) < 0.25 * quadruped.tau_max), tau


def test_quadruped_ros2_control_block_lists_every_joint(quadruped, quadruped_urdf):
    blocks = quadruped_urdf.findall("ros2_control")
    assert len(blocks) == 1 and blocks[0].get("type") == "system" and blocks[0].get("name")
    assert blocks[0].findtext("hardware/plugin").strip() == "gz_ros2_control/GazeboSimSystem"
    joints = {j.get("name"): j for j in blocks[0].findall("joint")}
    assert set(joints) == set(quadruped.joint_names)
    for name, joint in joints.items():
        assert [c.get("name") for c in joint.findall("command_interface")] == ["effort"], name
        states = sorted(s.get("name") for s in joint.findall("state_interface"))
        assert states == ["effort", "position", "velocity"], name
    plugin = quadruped_urdf.find("gazebo/plugin")
    assert plugin.get("filename") == "gz_ros2_control-system"
    assert plugin.get("name") == "gz_ros2_control::GazeboSimROS2ControlPlugin"
    assert plugin.findtext("parameters").strip().endswith("idyn_control/config/ros2_controllers.yaml")


def _lowest_points(sim) -> dict[int, float]:
    """Lowest world z [m] of every sphere, box and cylinder geom of the robot."""
    m, d = sim.model, sim.data
    low = {}
    for g in range(m.ngeom):
        if m.geom_bodyid[g] == 0:
            continue
        z, R, size = d.geom_xpos[g][2], d.geom_xmat[g].reshape(3, 3), m.geom_size[g]
        kind = m.geom_type[g]
        if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
            low[g] = z - size[0]
        elif kind == mujoco.mjtGeom.mjGEOM_BOX:
            low[g] = z - np.abs(R[2]) @ size
        elif kind == mujoco.mjtGeom.mjGEOM_CYLINDER:
            low[g] = z - abs(R[2, 2]) * size[1] - size[0] * math.sqrt(max(0.0, 1.0 - R[2, 2] ** 2))
        else:
            raise AssertionError(f"unexpected geom type {kind}")
    return low


def test_quadruped_standing_pose_stands_on_its_feet(quadruped):
    """Base at 0.14 m (seed 000 §7.1), foot spheres touching z = 0, everything else above."""
    q = robots.standing_configuration(quadruped, "quadruped", foot_height=FOOT_RADIUS)
    assert q[2] == pytest.approx(STANDING_HEIGHT, abs=0.5e-3)
    model, data = quadruped.pin_model, quadruped.pin_model.createData()
    pin.framesForwardKinematics(model, data, q)
    feet = np.array([data.oMf[f].translation for f in quadruped.contact_frame_ids])
    hips = np.array([data.oMi[model.getJointId(f"{leg}_HFE")].translation for leg in LEGS])
    np.testing.assert_allclose(feet[:, :2], hips[:, :2], atol=1e-9)  # feet under the hips
    others = [data.oMf[i].translation[2] for i in range(1, len(model.frames))  # all but universe and feet
              if i not in quadruped.contact_frame_ids and not model.frames[i].name.endswith("_FOOT_FIXED")]
    assert min(others) > feet[:, 2].max() + 0.02

    sim = build_mujoco(quadruped, collision="urdf")  # the URDF's own collision geometry too
    sim.set_state(q, np.zeros(quadruped.nv))
    low = _lowest_points(sim)
    feet_geoms = {g for g in low if sim.model.geom_type[g] == mujoco.mjtGeom.mjGEOM_SPHERE}
    assert len(feet_geoms) == 8  # URDF foot spheres + the converter's contact spheres, coincident
    for g in feet_geoms:
        assert abs(low[g]) < 0.5e-3
    assert min(z for g, z in low.items() if g not in feet_geoms) > 0.01


# ====================================================================== URDF → MuJoCo
@pytest.fixture(scope="module", params=SIM_ROBOTS)
def robot_and_sim(request):
    robot = robots.load(request.param)
    return request.param, robot, build_mujoco(robot)


def test_mujoco_model_has_one_motor_per_joint_and_the_same_mass(robot_and_sim):
    name, robot, sim = robot_and_sim
    m = sim.model
    assert m.nu == robot.na
    assert m.nv == robot.nv and m.nq == robot.nq
    np.testing.assert_allclose(m.actuator_ctrlrange[:, 1], robot.tau_max)
    np.testing.assert_allclose(m.actuator_gear[:, 0], 1.0)
    assert np.all(m.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT)
    assert sum(m.body_mass) == pytest.approx(pin.computeTotalMass(robot.pin_model), rel=1e-2)
    assert len(sim.contacts) == len(robot.contact_frames)
    assert all(0.005 <= c.radius <= 0.05 for c in sim.contacts)


def _random_state(robot, rng):
    q = robot.random_configuration(rng)
    if robot.floating_base:
        q[2] += 1.0
    return q, rng.normal(0.0, 1.0, robot.nv)


def test_mujoco_kinematics_and_velocities_equal_pinocchio(robot_and_sim):
    """Every joint body, every contact frame: pose and spatial velocity (free-flyer convention)."""
    name, robot, sim = robot_and_sim
    model, data = robot.pin_model, robot.pin_model.createData()
    rng = np.random.default_rng(7)
    for _ in range(3):
        q, v = _random_state(robot, rng)
        sim.set_state(q, v)
        pin.forwardKinematics(model, data, q, v)
        pin.updateFramePlacements(model, data)
        twist = np.zeros(6)  # MuJoCo: [angular, linear], world orientation, at the body's COM
        for jid in range(1, model.njoints):
            body = sim.joint_body_ids[jid]
            np.testing.assert_allclose(sim.data.xpos[body], data.oMi[jid].translation, atol=1e-6)
            np.testing.assert_allclose(sim.data.xmat[body].reshape(3, 3), data.oMi[jid].rotation, atol=1e-6)
            mujoco.mj_objectVelocity(sim.model, sim.data, mujoco.mjtObj.mjOBJ_BODY, body, twist, 0)
            expected = pin.getVelocity(model, data, jid, pin.LOCAL_WORLD_ALIGNED)  # at the joint origin
            com_offset = sim.data.xipos[body] - data.oMi[jid].translation
            np.testing.assert_allclose(twist[3:], expected.linear + np.cross(expected.angular, com_offset),
                                       atol=1e-6)
            np.testing.assert_allclose(twist[:3], expected.angular, atol=1e-6)
        for frame, fid in zip(robot.contact_frames, robot.contact_frame_ids):
            np.testing.assert_allclose(sim.frame_position(frame), data.oMf[fid].translation, atol=1e-6)
            np.testing.assert_allclose(sim.frame_velocity(frame),
                                       pin.getFrameVelocity(model, data, fid, pin.LOCAL_WORLD_ALIGNED).linear,
                                       atol=1e-6)


def test_state_conversion_round_trips_and_matches_finite_differences(robot_and_sim):
    """qpos ⊕ qvel·h (MuJoCo) = q ⊕ v·h (Pinocchio): the velocity bases are what we claim."""
    name, robot, sim = robot_and_sim
    rng = np.random.default_rng(3)
    q, v = _random_state(robot, rng)
    sim.set_state(q, v)
    q2, v2 = sim.state()
    np.testing.assert_allclose(q2, q, atol=1e-12)
    np.testing.assert_allclose(v2, v, atol=1e-12)
    h = 1e-6
    qpos = sim.data.qpos.copy()
    mujoco.mj_integratePos(sim.model, qpos, sim.data.qvel, h)
    q_next, _ = sim.to_pinocchio(qpos, sim.data.qvel)
    np.testing.assert_allclose(pin.difference(robot.pin_model, q, q_next) / h, v, atol=1e-6)
    # and contact-frame velocities equal finite differences of MuJoCo's own positions
    if robot.contact_frames:
        before = np.array([sim.frame_position(f) for f in robot.contact_frames])
        velocity = np.array([sim.frame_velocity(f) for f in robot.contact_frames])
        sim.set_state(pin.integrate(robot.pin_model, q, v * h), v)
        after = np.array([sim.frame_position(f) for f in robot.contact_frames])
        np.testing.assert_allclose((after - before) / h, velocity, atol=1e-4)


def test_mujoco_mass_matrix_equals_crba(robot_and_sim):
    """M_pin = Tᵀ M_mj T with qvel = T v (T = I for the fixed-base arm)."""
    name, robot, sim = robot_and_sim
    model, data = robot.pin_model, robot.pin_model.createData()
    rng = np.random.default_rng(11)
    for _ in range(3):
        q, v = _random_state(robot, rng)
        sim.set_state(q, v)
        M_mj = np.zeros((sim.model.nv, sim.model.nv))
        mujoco.mj_fullM(sim.model, sim.data, M_mj)
        M = pin.crba(model, data, q)
        M = np.triu(M) + np.triu(M, 1).T
        T = sim.velocity_map(q)
        if not robot.floating_base:
            np.testing.assert_array_equal(T, np.eye(robot.nv))  # same joint order: exact comparison
        assert np.linalg.norm(T.T @ M_mj @ T - M) <= 1e-6 * np.linalg.norm(M)


@pytest.mark.parametrize("name", ("quadruped", "solo12", "go2", "panda"))
def test_mujoco_own_urdf_inertias_agree_with_pinocchio(name):
    """Independent check: MuJoCo's URDF importer's inertias give Pinocchio's mass matrix.

    (ANYmal C is left out: MuJoCo rejects its 'hatch' inertia, which only the default
    inertia="pinocchio" handles.)
    """
    robot = robots.load(name)
    sim = build_mujoco(robot, inertia="urdf")
    q, v = _random_state(robot, np.random.default_rng(5))
    sim.set_state(q, v)
    M_mj = np.zeros((sim.model.nv, sim.model.nv))
    mujoco.mj_fullM(sim.model, sim.data, M_mj)
    M = pin.crba(robot.pin_model, robot.pin_model.createData(), q)
    M = np.triu(M) + np.triu(M, 1).T
    T = sim.velocity_map(q)
    assert np.linalg.norm(T.T @ M_mj @ T - M) <= 1e-6 * np.linalg.norm(M)


def test_anymal_inertia_that_mujoco_rejects_is_reported():
    with pytest.raises(ModelError, match="inertia"):
        build_mujoco(robots.load("anymal_c"), inertia="urdf")


# ====================================================================== physics on the ground
def _touchdown_configuration(name, robot, sim):
    """Standing joints, base at the height where the lowest foot sphere touches z = 0."""
    return robots.standing_configuration(robot, name, foot_height=min(c.radius for c in sim.contacts))


def _stand(name, sim, *, drop=0.02, duration_s=1.0, push_world=None, push_after_s=0.0):
    """Drop from ``drop`` above touchdown; joint PD + Pinocchio gravity torques for ``duration_s``."""
    robot = sim.robot
    data = robot.pin_model.createData()
    q0 = _touchdown_configuration(name, robot, sim)
    q_ref = q0[robot.joint_q_index]
    q = q0.copy()
    q[2] += drop
    sim.set_state(q, np.zeros(robot.nv))
    feet_at_push = None
    for k in range(int(round(duration_s / sim.model.opt.timestep))):
        if push_world is not None and k * sim.model.opt.timestep >= push_after_s and feet_at_push is None:
            sim.data.xfrc_applied[sim.joint_body_ids[1], :3] = push_world
            feet_at_push = np.array([sim.frame_position(f) for f in robot.contact_frames])
        q, v = sim.state()
        g = pin.computeGeneralizedGravity(robot.pin_model, data, q)[robot.n_base:]
        sim.step(g + KP * (q_ref - q[robot.joint_q_index]) - KD * v[robot.joint_v_index])
    return q0, feet_at_push


@pytest.mark.parametrize("cone", ("pyramidal", "elliptic"))
@pytest.mark.parametrize("name", ("quadruped", "solo12"))
def test_dropped_robot_settles_and_contact_forces_carry_its_weight(name, cone):
    robot = robots.load(name)
    sim = build_mujoco(robot, friction=0.7, cone=cone)
    q_touch, _ = _stand(name, sim)
    q, v = sim.state()
    assert all(sim.contact_states().values())
    forces = np.array(list(sim.contact_forces().values()))
    weight = _gravity(robot)
    assert np.all(forces[:, 2] > 0.0)  # the ground pushes up on every foot
    assert forces[:, 2].sum() == pytest.approx(weight, rel=0.05)
    assert np.linalg.norm(forces[:, :2].sum(axis=0)) < 0.05 * weight
    assert np.all(np.linalg.norm(forces[:, :2], axis=1) <= 0.7 * forces[:, 2] * (1 + 1e-6))  # inside the cone
    assert abs(q[2] - q_touch[2]) < 0.01  # standing, not collapsed
    assert np.linalg.norm(v) < 0.05
    assert np.all(sim.penetration() < 1e-4)  # rigid ground


@pytest.mark.parametrize("cone", ("pyramidal", "elliptic"))
@pytest.mark.parametrize("name", ("quadruped", "solo12"))
def test_compliant_ground_sinks_about_a_millimetre(name, cone):
    robot = robots.load(name)
    sim = build_mujoco(robot, compliant=True, cone=cone)
    _stand(name, sim, drop=0.0)
    depth = sim.penetration()
    assert np.all((0.3e-3 < depth) & (depth < 3e-3)), depth
    forces = np.array(list(sim.contact_forces().values()))
    assert forces[:, 2].sum() == pytest.approx(_gravity(robot), rel=0.05)


@pytest.mark.parametrize("compliant", (False, True), ids=("rigid", "compliant"))
@pytest.mark.parametrize("name", ("quadruped", "solo12"))
def test_touching_feet_are_those_the_next_step_pushes(name, compliant):
    """touching_array (the simulator's contact set at the current state, Scenario
    contact_estimate="touching") names exactly the feet the coming step's contact forces
    push, through a landing and a bounce: a foot pushed but not named would be a touchdown
    the controller cannot know of."""
    robot = robots.load(name)
    sim = build_mujoco(robot, friction=0.7, compliant=compliant)
    data = robot.pin_model.createData()
    q = _touchdown_configuration(name, robot, sim)
    q_ref = q[robot.joint_q_index]
    q[2] += 0.01  # 1 cm up, falling: an airborne phase, a landing, settling
    sim.set_state(q, np.zeros(robot.nv))
    touching = np.zeros(len(robot.contacts), dtype=bool)
    named = pushed = both = 0
    for _ in range(400):
        sim.touching_array(touching)
        q, v = sim.state()
        g = pin.computeGeneralizedGravity(robot.pin_model, data, q)[robot.n_base:]
        sim.step(g + KP * (q_ref - q[robot.joint_q_index]) - KD * v[robot.joint_v_index])
        push = sim.contact_forces_array()[:, 2] > 1e-9
        assert not (push & ~touching).any()  # every pushed foot was named before the step
        named, pushed, both = named + touching.sum(), pushed + push.sum(), both + (push & touching).sum()
    assert pushed > 0.9 * named  # named feet are pushed (a soft contact may leave one unloaded)
    assert touching.all()  # standing at the end


def _landing_depth(robot, sim, speed=0.2, duration_s=0.3):
    """The robot touching the ground at ``speed`` [m/s] downward, joints held by PD +
    gravity torques: (deepest foot penetration, penetration at the end) [m]."""
    data = robot.pin_model.createData()
    q = _touchdown_configuration("quadruped", robot, sim)
    q_ref = q[robot.joint_q_index]
    v = np.zeros(robot.nv)
    v[2] = -speed  # base frame = world frame: the base starts level
    sim.set_state(q, v)
    deepest = 0.0
    for _ in range(int(round(duration_s / sim.model.opt.timestep))):
        q, v = sim.state()
        g = pin.computeGeneralizedGravity(robot.pin_model, data, q)[robot.n_base:]
        sim.step(g + KP * (q_ref - q[robot.joint_q_index]) - KD * v[robot.joint_v_index])
        deepest = max(deepest, sim.penetration().max())
    return deepest, sim.penetration().max()


def test_compliant_ground_yields_the_same_for_every_friction(quadruped):
    """Compliant ground is set by its depth at rest (1 mm); a landing must not sink deeper
    on a slippery ground. With MuJoCo's pyramidal cone at μ = 0.1 the constant-impedance
    calibration needs a 14× longer time constant (0.19 s): the feet sank 13 mm and stayed
    11 mm deep, and every controller fell on compliant μ = 0.1 (issue 10). The default cone
    of compliant ground (elliptic) yields alike for every μ."""
    depth = {mu: _landing_depth(quadruped, build_mujoco(quadruped, friction=mu, compliant=True))
             for mu in (math.inf, 0.1)}
    deepest_inf, end_inf = depth[math.inf]
    deepest, end = depth[0.1]
    assert 0.5e-3 < deepest_inf < 3e-3
    assert deepest == pytest.approx(deepest_inf, rel=0.25)
    assert end == pytest.approx(end_inf, rel=0.25)
    # what the elliptic default avoids: the pyramidal μ = 0.1 ground gives way
    deepest_pyr, _ = _landing_depth(quadruped, build_mujoco(quadruped, friction=0.1, compliant=True,
                                                            cone="pyramidal"))
    assert deepest_pyr > 3.0 * deepest_inf


def test_every_patch_of_the_rigid_height_map_is_as_rigid(quadruped):
    """Seed 000's height map is rigid with μ from 0.1 to 1.5 per patch: a 0.2 m/s landing
    sinks less than half a millimetre, into a μ 0.1 patch as into a μ 1.5 one (0.28 and
    0.09 mm). With MuJoCo's pyramidal cone the μ 0.1 patches had a 27× longer time constant
    (54 ms): this landing sank 3.5 mm, the quadruped's trotting feet up to 7 mm, and MuJoCo's
    height-field collision then pushed them along normals 66° from the surface's. The
    default cone of a map whose patches differ in μ is elliptic."""
    from idyn_control.sim.terrain import make_terrain

    footprint = robots.standing_footprint(quadruped, robots.spec("quadruped"))

    def terrain(mu_under_feet: float):
        t = make_terrain("heightmap", 0, footprint)
        t.mu[:] = mu_under_feet
        t.mu[0, 0] = 1.5 if mu_under_feet < 1.0 else 0.1  # a far corner: the patches differ
        return t

    slippery, grippy = terrain(0.1), terrain(1.5)
    deepest_slippery, end_slippery = _landing_depth(quadruped, build_mujoco(quadruped, terrain=slippery))
    deepest_grippy, end_grippy = _landing_depth(quadruped, build_mujoco(quadruped, terrain=grippy))
    assert deepest_grippy < 0.5e-3 and deepest_slippery < 0.5e-3
    assert end_grippy < 0.05e-3 and end_slippery < 0.05e-3
    # what the elliptic default avoids: the pyramidal cone's μ 0.1 patches give way
    deepest_pyr, _ = _landing_depth(quadruped, build_mujoco(quadruped, terrain=slippery, cone="pyramidal"))
    assert deepest_pyr > 5.0 * deepest_slippery


@pytest.mark.parametrize("cone", ("pyramidal", "elliptic"))
def test_infinite_friction_holds_and_low_friction_slips(quadruped, cone):
    """A sideways push of 0.3·m·g on the base: μ = ∞ keeps the feet in place, μ = 0.1 does not."""
    push = np.array([0.3 * _gravity(quadruped), 0.0, 0.0])
    slip = {}
    for mu in (math.inf, 0.1):
        sim = build_mujoco(quadruped, friction=mu, cone=cone)
        _, feet_before = _stand("quadruped", sim, duration_s=1.0, push_world=push, push_after_s=0.5)
        feet_after = np.array([sim.frame_position(f) for f in quadruped.contact_frames])
        slip[mu] = np.abs(feet_after[:, 0] - feet_before[:, 0]).max()
    assert slip[math.inf] < 1e-3
    assert slip[0.1] > 0.02
    assert build_mujoco(quadruped, friction=math.inf, cone=cone).friction == INFINITE_FRICTION


def test_torques_are_clamped_to_the_effort_limits(quadruped):
    sim = build_mujoco(quadruped)
    sim.set_state(robots.standing_configuration(quadruped, "quadruped", foot_height=FOOT_RADIUS),
                  np.zeros(quadruped.nv))
    sim.step(np.full(quadruped.na, 100.0))
    np.testing.assert_allclose(sim.data.actuator_force, quadruped.tau_max)


def test_bad_options_are_rejected_with_the_valid_values(quadruped):
    with pytest.raises(UnknownNameError, match="elliptic"):
        build_mujoco(quadruped, cone="round")
    with pytest.raises(ConfigError):
        build_mujoco(quadruped, friction=0.0)
    with pytest.raises(ConfigError):
        build_mujoco(quadruped, timestep=-1e-3)
    with pytest.raises(UnknownNameError, match="contacts"):
        build_mujoco(quadruped, collision="meshes")


@pytest.mark.parametrize("how", ["env", "ament_prefix"])
def test_example_robot_data_found_where_a_ros_install_puts_it(how, tmp_path, monkeypatch):
    """A ROS machine gets example-robot-data from its distro (share/ under an ament prefix),
    not from pip; a user can also point at it explicitly."""
    from idyn_control import robots as robots_module

    real = robots_module.example_robot_data_dir()
    prefix = tmp_path / "opt_ros"
    (prefix / "share").mkdir(parents=True)
    (prefix / "share" / "example-robot-data").symlink_to(real, target_is_directory=True)
    if how == "env":
        monkeypatch.setenv("IDYN_EXAMPLE_ROBOT_DATA", str(prefix / "share" / "example-robot-data"))
    else:
        monkeypatch.setenv("AMENT_PREFIX_PATH", f"/nonexistent{os.pathsep}{prefix}")
    robots_module.example_robot_data_dir.cache_clear()
    try:
        found = robots_module.example_robot_data_dir()
    finally:
        robots_module.example_robot_data_dir.cache_clear()
    assert found == prefix / "share" / "example-robot-data"
    assert (found / "robots" / "solo_description" / "robots" / "solo12.urdf").is_file()


def _standing_feet_drift(name: str, noslip: bool = True, duration_s: float = 10.0) -> tuple[float, float, float]:
    """The robot standing with ``qp_coulomb`` (its defaults) on rigid μ = 0.7: the largest
    horizontal foot displacement and the base's drop from 0.5 s to the end [m], and the
    median tangential/normal ratio of the measured foot forces."""
    from idyn_control.sim.lockstep import LockstepRunner, Scenario

    runner = LockstepRunner(Scenario(robot=name, formulation="qp_coulomb", friction=0.7, duration=duration_s,
                                     gait=False))
    if not noslip:
        runner.sim.model.opt.noslip_iterations = 0
    tr = runner.run().trace
    drift = foot_slide(runner.robot, tr, 500)
    f = tr.f_meas[500:tr.n]
    ratio = np.hypot(f[..., 0], f[..., 1]) / np.maximum(f[..., 2], 1e-9)
    return drift, float(tr.q[500, 2] - tr.q[tr.n - 1, 2]), float(np.median(ratio))


@pytest.mark.parametrize("name", ("quadruped", "go2", "solo12", "anymal_c"))
def test_rigid_ground_holds_feet_that_push_sideways_inside_the_cone(name):
    """Rigid ground has hard friction (MuJoCo's noslip solver): standing 10 s with the
    default formulation, whose feet push sideways at a fraction of μ = 0.7, no foot moves.
    With MuJoCo's soft friction alone they crept apart at a speed proportional to that
    force (20 s: 32–69 mm, the bodies 7–21 mm lower)."""
    drift, drop, ratio = _standing_feet_drift(name)
    assert 0.02 < ratio < 0.7, ratio   # the feet do push sideways, inside the cone
    assert drift < 0.5e-3, drift       # [m]
    assert abs(drop) < 1e-3, drop      # [m]


def test_soft_friction_alone_lets_standing_feet_creep():
    """The same stand without the noslip solver: the feet splay (what the test above guards)."""
    drift, drop, _ = _standing_feet_drift("quadruped", noslip=False, duration_s=5.0)
    assert drift > 5e-3, drift
    assert drop > 1e-3, drop
    assert build_mujoco(robots.load("quadruped"), friction=0.7).model.opt.noslip_iterations > 0
    assert build_mujoco(robots.load("quadruped"), friction=0.7, compliant=True).model.opt.noslip_iterations == 0
