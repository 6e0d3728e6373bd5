"""Smooth contact make and break (ContactTransitions): the QP formulations, in both
backends, move a switching contact's force, and the torque, no faster than the ramp allows.

A standing robot holds still (q̈_des = 0) while one foot breaks contact, or makes it.
Switched (contact_ramp_time 0) the torque steps at the switch; ramped over T the foot's
normal force follows its bound (at most its carried force · Δt/T per tick on a break, the
robot's weight · Δt/T on a make), so the torque step is spread over the ticks the foot's
force takes to get there, and once the ramp is over the torque is the switched one.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from idyn_control import formulations, native
from idyn_control.contacts import ContactTransitions

from conftest import standing_state

DT = 1e-3
RAMP = 0.02  # [s]
NAMES = ("qp_coulomb", "qp_noslip", "wbc_qp")


def backends():
    yield "python"
    if native.available():
        yield "native"


class Ticker:
    """One formulation fed through ContactTransitions, as Controller.update feeds it."""

    def __init__(self, model, name, backend, ramp_time):
        self.model, self.ramp_time = model, ramp_time
        self.f = formulations.make(name, model, dt=DT, backend=backend)
        self.weight = 9.81 * pin.computeTotalMass(model.pin_model)
        self.transitions = ContactTransitions(len(model.contacts), self.weight)

    def tick(self, q, v, requested):
        held = self.transitions.update(np.asarray(requested), self.f.contacts, self.f.forces, self.ramp_time, DT)
        active = [frame for frame, on in zip(self.model.contact_frames, held) if on]
        result = self.f.solve(q, v, np.zeros(self.model.nv), active)
        assert result.ok, result.status
        assert self.f.dynamics_residual(result) <= 1e-6  # the held (and released) forces are all reported
        return result.tau.copy(), self.normal_forces()

    def normal_forces(self):
        cs = self.f.contacts
        return np.einsum("ij,ij->i", cs.basis[:, 2], self.f.forces)


def run(robot, model, name, backend, ramp_time, schedule):
    ticker = Ticker(model, name, backend, ramp_time)
    q, v, _ = standing_state(robot, model)
    taus, normals = [], []
    for requested in schedule:
        tau, fn = ticker.tick(q, v, requested)
        taus.append(tau)
        normals.append(fn)
    return np.array(taus), np.array(normals), ticker


@pytest.mark.parametrize("robot", ["solo12", "quadruped"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("backend", list(backends()))
@pytest.mark.parametrize("switch", ["break", "make"])
def test_a_contact_switch_moves_the_torque_no_faster_than_the_ramp(robot, name, backend, switch, load_robot):
    model = load_robot(robot)
    k = len(model.contacts)
    all_feet, three_feet = [True] * k, [False] + [True] * (k - 1)
    before, after = (all_feet, three_feet) if switch == "break" else (three_feet, all_feet)
    settle, ramp_ticks = 40, int(round(RAMP / DT))
    schedule = [before] * settle + [after] * (ramp_ticks + 20)
    switched, fn_switched, _ = run(robot, model, name, backend, 0.0, schedule)
    ramped, fn_ramped, ticker = run(robot, model, name, backend, RAMP, schedule)
    step = np.abs(switched[settle] - switched[settle - 1]).max()
    assert step > 1e-3  # switched, the torque steps at the switch

    # the switching foot's normal force follows its bound
    fn = fn_ramped[settle - 1:settle + ramp_ticks + 1, 0]
    rate = fn_ramped[settle - 1, 0] if switch == "break" else ticker.weight
    # (to the QP accuracy: eps_abs per unit mass)
    assert np.all(np.abs(np.diff(fn)) <= rate * DT / RAMP + 1e-5), np.abs(np.diff(fn)).max()
    if switch == "break":
        assert fn_ramped[settle + ramp_ticks, 0] == pytest.approx(0.0, abs=1e-6)
    # the torque: no step; spread over as many ticks as the ramp takes to move the foot's
    # force from its switched value before to after (piecewise linear in the bound: a
    # margin of 3 for an active set that changes during the ramp); the switched torque
    # once it is over
    ticks_spread = abs(fn_switched[settle, 0] - fn_switched[settle - 1, 0]) / (rate * DT / RAMP)
    per_tick = np.abs(np.diff(ramped[settle - 1:], axis=0)).max()
    assert ticks_spread >= 2.0 and per_tick <= 3.0 * step / ticks_spread + 1e-6, (per_tick, step, ticks_spread)
    # (wbc_qp's force distribution is a nearly flat optimum, regularized by 1e-5/m² only:
    # where ProxQP stops on it depends on its warm start, to 1e-3 of the torque)
    np.testing.assert_allclose(ramped[-1], switched[-1], atol=2e-3 * max(1.0, np.abs(switched[-1]).max()))
