"""VIIP stabilization (seed 000 §7.3): virtual compressive forces along the contact normals.

Physics of :class:`idyn_control.stabilization.ViipStabilizer` on real robots standing on
their feet (forces are compressive, zero at the balanced state, they produce the restoring
wrench when pushing can, nothing when only pulling could), the controller's wiring (into
q̈_des or the torques, Python only), and in lock-step MuJoCo a pushed robot's base is
brought back faster with it than without.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from conftest import native_or_skip
from idyn_control import robots
from idyn_control.controller import Controller, ControllerConfig
from idyn_control.errors import ConfigError
from idyn_control.sim.lockstep import run_scenario

ROBOTS = ("quadruped", "solo12", "go2")
ROLL_PITCH_DAMPING = (0.0, 0.0, 0.0, 20.0, 20.0, 0.0)


def _standing(name, formulation="qp_coulomb", **config):
    model = robots.load(name)
    q = robots.standing_configuration(model, name)
    v = np.zeros(model.nv)
    ctrl = Controller(model, ControllerConfig(formulation=formulation, stabilization="viip", **config))
    ctrl.reset(q, v)
    return model, ctrl, q, v


def _tick(ctrl, q, v):
    mask = np.ones(len(ctrl.model.contacts), dtype=bool)
    cmd = ctrl.update(q, v, mask)
    return cmd, ctrl.last_viip


@pytest.mark.parametrize("name", ROBOTS)
def test_zero_at_the_balanced_state(name):
    """Base at its reference and at rest: no virtual force, no torque, no acceleration."""
    model, ctrl, q, v = _standing(name, viip_kp=[50.0] * 6, viip_kd=[20.0] * 6)
    _, viip = _tick(ctrl, q, v)
    assert np.all(viip.forces_n == 0.0)
    assert np.all(viip.tau == 0.0) and np.all(viip.qdd_base == 0.0)


@pytest.mark.parametrize("name", ROBOTS)
@pytest.mark.parametrize("axis", [3, 4])  # roll, pitch
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_tilting_base_gets_compressive_forces_that_oppose_the_tilt(name, axis, sign):
    """A base rolling or pitching (world angular velocity about x or y) gets non-negative
    normal forces, only on the feet of the side that sinks, whose wrench opposes the
    rotation; their joint torques are the legs pressing them into the ground."""
    model, ctrl, q, v = _standing(name, viip_kd=ROLL_PITCH_DAMPING)
    R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
    omega_world = np.zeros(3)
    omega_world[axis - 3] = 0.5 * sign  # [rad/s]
    v[3:6] = R.T @ omega_world
    _, viip = _tick(ctrl, q, v)
    f = viip.forces_n
    assert np.all(f >= 0.0) and f.sum() > 0.0
    cs = ctrl.formulation.contacts
    # the feet pushed are the ones the rotation lowers: n·(ω × r) < 0 at the foot
    r = cs.position - q[:3]
    lowering = np.einsum("ij,ij->i", cs.basis[:, 2], np.cross(omega_world, r)) < 0.0
    assert np.all(f[~lowering] == 0.0)
    # the moment they apply about the CoM opposes the angular velocity, and they accelerate
    # the locked robot against it
    assert (R @ viip.wrench_applied[3:]) @ omega_world < 0.0
    assert (R @ viip.qdd_base[3:]) @ omega_world < 0.0
    # τ = −Σ J_qᵀ n f: with the feet pushing f n, the legs' joints stay balanced
    nb = model.n_base
    foot_force = sum(cs.J[i, :, nb:].T @ (cs.basis[i, 2] * f[i]) for i in range(len(f)))
    np.testing.assert_allclose(viip.tau + foot_force, 0.0, atol=1e-9)


@pytest.mark.parametrize("name", ROBOTS)
def test_pushing_reproduces_a_wrench_it_can_and_never_pulls(name):
    """Base too low: the restoring wrench (up) is a positive combination of the normals,
    reproduced (to the ridge's 1e-4) by all four feet; base too high: it would need pulling, so every force is zero."""
    model, ctrl, q, v = _standing(name, viip_kp=[0.0, 0.0, 100.0, 0.0, 0.0, 0.0], viip_kd=0.0)
    ctrl.base_position_ref[2] = q[2] + 0.01  # the base sits 1 cm below its reference
    _, viip = _tick(ctrl, q, v)
    assert np.all(viip.forces_n > 0.0)  # shared by the four feet
    np.testing.assert_allclose(viip.wrench_applied, viip.wrench_desired, atol=1e-3 * np.abs(viip.wrench_desired).max())
    # the weight fraction it adds: M_bb a_z = m·(kp·0.01 m)
    mass = pin.computeTotalMass(model.pin_model)
    assert viip.forces_n.sum() == pytest.approx(mass * 100.0 * 0.01, rel=0.05)
    ctrl.base_position_ref[2] = q[2] - 0.01  # 1 cm above: only pulling could lower it
    _, viip = _tick(ctrl, q, v)
    assert np.all(viip.forces_n == 0.0) and np.all(viip.tau == 0.0)


@pytest.mark.parametrize("output", ["acceleration", "torque"])
def test_controller_applies_it_where_configured(output):
    """acceleration: q̈_des changes and the formulation's τ is the command; torque: q̈_des
    is the unstabilized one and the command is the formulation's τ plus the VIIP torques."""
    model, ctrl, q, v = _standing("quadruped", viip_kd=ROLL_PITCH_DAMPING, viip_output=output)
    plain = Controller(model, ControllerConfig(formulation="qp_coulomb"))
    plain.reset(q, v)
    v[3] = 0.5  # rolling
    cmd, viip = _tick(ctrl, q, v)
    ref = plain.update(q, v, np.ones(len(model.contacts), dtype=bool))
    moved = not np.allclose(ctrl.qdd_des, plain.qdd_des, atol=1e-9)
    if output == "acceleration":
        assert moved
        np.testing.assert_allclose(cmd.tau, np.clip(cmd.result.tau, -ctrl.tau_limit, ctrl.tau_limit))
    else:
        assert not moved
        np.testing.assert_allclose(cmd.tau, np.clip(ref.result.tau + viip.tau, -ctrl.tau_limit, ctrl.tau_limit),
                                   atol=1e-6)


def test_bad_configuration_is_refused_and_the_tick_stays_in_python():
    """Unknown names, wrong gain sizes and a fixed base are refused with the value; with
    viip the compiled kinematic layer and tick are not used (refused, not skipped), and
    switching it off at run time binds them again."""
    native_or_skip()
    from idyn_control.native import NativeUnavailable
    from idyn_control.native.tick import Tick

    with pytest.raises(ConfigError, match="stabilization"):
        ControllerConfig(stabilization="zmp").validate()
    with pytest.raises(ConfigError, match="viip_kd"):
        ControllerConfig(stabilization="viip", viip_kd=[1.0, 2.0]).validate()
    with pytest.raises(ConfigError, match="floating-base"):
        Controller(robots.load("panda"), ControllerConfig(formulation="rnea", stabilization="viip"))
    model, ctrl, q, v = _standing("quadruped", viip_kd=ROLL_PITCH_DAMPING)
    assert ctrl._native_layer is None
    with pytest.raises(NativeUnavailable, match="stabilization viip"):
        Tick(ctrl)
    ctrl.set_gains(stabilization="none")
    assert ctrl._native_layer is not None
    ctrl.set_gains(stabilization="viip")
    assert ctrl._native_layer is None


def _roll_recovery(stabilization):
    run = run_scenario(robot="quadruped", formulation="qp_coulomb", gait=False, duration=1.5,
                       controller={"stabilization": stabilization, "viip_kd": list(ROLL_PITCH_DAMPING)},
                       faults={"push": (0.5, 0.1, 0.3), "push_direction": (0.0, 1.0)})
    tr = run.trace
    after = tr.t >= 0.5
    roll = np.array([pin.rpy.matrixToRpy(pin.Quaternion(x[6], x[3], x[4], x[5]).toRotationMatrix())[0]
                     for x in tr.q[after]])
    return run.metrics, roll


def test_lockstep_pushed_base_rolls_back_sooner_with_viip():
    """Standing quadruped (ID(t_i)QP,μ, μ = 0.7), a sideways push of 30 % of its weight for
    0.1 s: with VIIP (roll/pitch damping 20/s) the base rolls at least 10 % less than with
    the kinematic layer's base PD alone."""
    m0, roll0 = _roll_recovery("none")
    m1, roll1 = _roll_recovery("viip")
    assert not m0["fell"] and not m1["fell"]
    assert np.abs(roll1).max() < 0.9 * np.abs(roll0).max()  # measured: 0.0124 vs 0.0152 rad
