"""One controller tick compiled (``tick.cpp``): ``Controller.update``, gait and contact switches included.

:class:`Tick` binds the C++ tick to a :class:`~idyn_control.controller.Controller` whose
formulation runs compiled (``wbc_qp``, ``qp_coulomb``, ``qp_noslip``, ``pidc_qp`` and its
baselines, which read the desired forces in place; ``rnea`` on a fixed base) and,
optionally, a :class:`~idyn_control.native.gait.CompiledGait`: one call runs the gait,
decides which contacts are held (swinging feet are not, make and break are ramped as
:class:`~idyn_control.contacts.ContactTransitions` does), refreshes the rigid-body
terms, the kinematic layer, the formulation and the clamps, on the very arrays the
Python tick uses. The node's compiled loop (``rt.cpp``) calls it for every routine tick.

The contact set's ``version`` moves on in C++ while compiled ticks switch contacts; it is
kept in :attr:`Tick.version` and handed back by :meth:`Tick.hand_over` before a Python tick.
"""

from __future__ import annotations

import numpy as np

from . import NativeUnavailable, Pidc, QpContact, Rnea, Wbc, _addr, load

#: tick.cpp Slot, in order
SLOTS = ("engine", *(f"layer_arg{i}" for i in range(7)), "solver", "solver_a0", "solver_a1", "solver_a2",
         "solver_a3", "solver_tasks", "solver_out0", "solver_out1", "solver_out2", "solver_out3", "terms_q", "terms_v",
         "joint_q_index", "ctrl_qdd_des", "f_qdd_des", "forces", "f_tau", "tau_limit", "tau_prev", "swing", "active",
         "max_normal_force", "released", "basis", "bound", "rate", "requested", "held", "version", "gait",
         "traj_index", "traj_times", "traj_pos", "traj_vel", "traj_start", "traj_q", "traj_v", "traj_a", "ref_q",
         "ref_v", "ref_a", "ctrl_q_ref", "ctrl_v_ref", "ctrl_a_ref")
TRAJECTORY_SLOTS = SLOTS[SLOTS.index("traj_index"):]
#: tick.cpp Value, in order
VALUES = ("nq", "nv", "nb", "na", "k", "solver_kind", "n_tasks", "rate_step", "ramp_time", "dt", "force_scale",
          "traj_k", "traj_n")

def function_address() -> int:
    """Address of ``idyn_tick_run`` (the node's compiled loop calls it)."""
    return load().symbols["idyn_tick_run"]


class Tick:
    """The compiled tick of ``controller`` (and ``gait``, a CompiledGait, or None).

    Raises :class:`NativeUnavailable` when the controller's tick cannot run compiled.
    """

    def __init__(self, controller, gait=None):
        self.controller, self.gait = controller, gait
        self.formulation = f = controller.formulation
        layer, solver = controller._native_layer, getattr(f, "_native", None)
        if controller.config.stabilization != "none":
            raise NativeUnavailable(f"stabilization {controller.config.stabilization} runs in Python")
        if f._engine is None or solver is None or layer is None or not layer.valid():
            raise NativeUnavailable(f"{controller.config.formulation} does not run compiled here")
        if isinstance(solver, QpContact):
            if f.options.get("stage1_solver", "qp") != "qp":
                raise NativeUnavailable("Stage I by Lemke runs in Python")
            self.kind = 0
        elif isinstance(solver, Wbc):
            self.kind = 1
        elif isinstance(solver, Rnea):
            self.kind = 2
        elif isinstance(solver, Pidc):  # reads the formulation's lambda_des in place
            self.kind = 3
        else:
            raise NativeUnavailable(f"no compiled tick for {type(solver).__name__}")
        if gait is not None and (gait.controller is not controller or not gait.valid()):
            raise NativeUnavailable("the compiled gait writes another controller's references")
        self.solver, self.layer = solver, layer
        self.version = np.zeros(1, dtype=np.int64)  # the contact set's version, moved on in C++
        self.version[0] = f.contacts.version
        self._slots = np.zeros(len(SLOTS), dtype=np.uint64)
        self._values = np.zeros(len(VALUES))
        self.saturated = 0  # joints clamped to their effort limit by the last run
        # a running joint trajectory (ros.conversions.JointTrajectoryReference) and the node's
        # full references it writes, kept alive here while the compiled ticks sample it
        self.trajectory = None
        self._references: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._mask = np.zeros(f.contacts.size, dtype=np.uint8)
        self._write_slots()
        self._write_values()
        self._ext = load().Tick(self._slots, self._values)
        self.handle = self._ext.handle

    def serves(self, controller, gait) -> bool:
        """Whether this tick is still the one of ``controller`` (same formulation, same
        arrays) and ``gait``."""
        c = controller
        return (c is self.controller and c.formulation is self.formulation and gait is self.gait
                and c._native_layer is self.layer and self.layer.valid() and c.qdd_des is self.layer.qdd
                and (gait is None or gait.valid()))

    def set_trajectory(self, trajectory, q_ref: np.ndarray, v_ref: np.ndarray, a_ref: np.ndarray) -> None:
        """The joint trajectory the next compiled ticks sample (None: none), on the node's
        clock, and the node's full references (na) it writes before they go to the
        controller, as the node's Python tick does; takes effect at :meth:`plan`."""
        self.trajectory = trajectory
        self._references = (q_ref, v_ref, a_ref) if trajectory is not None else None

    def sample_trajectory(self, now_ns: int) -> bool:
        """What a compiled tick writes for the planned trajectory at ``now_ns`` (tests)."""
        return bool(self._ext.sample_trajectory(int(now_ns)))

    def _write_slots(self) -> None:
        ctrl, f, solver, layer = self.controller, self.formulation, self.solver, self.layer
        cs, tr = f.contacts, ctrl.transitions
        if self.kind == 2:  # τ = M q̈ + h: M, h in, q̈ and τ out
            a, tau_max, out = (_addr(f.terms.M), _addr(f.terms.h), 0), 0, (_addr(f.qdd), _addr(f.tau), 0, 0)
        else:
            a, tau_max, out = solver._addrs, solver._tau_max.address(), solver._out
        addresses = {
            "engine": f._engine.handle, **{f"layer_arg{i}": int(x) for i, x in enumerate(layer._args)},
            "solver": solver.handle or 0, "solver_a0": a[0], "solver_a1": a[1], "solver_a2": a[2],
            "solver_a3": tau_max, "solver_tasks": (solver._tasks_addr or 0) if self.kind == 1 else 0,
            "solver_out0": out[0], "solver_out1": out[1], "solver_out2": out[2], "solver_out3": out[3],
            "terms_q": _addr(f.terms.q), "terms_v": _addr(f.terms.v), "joint_q_index": _addr(layer.joint_q_index),
            "ctrl_qdd_des": _addr(ctrl.qdd_des), "f_qdd_des": _addr(f.qdd_des), "forces": _addr(f.forces),
            "f_tau": _addr(f.tau), "tau_limit": _addr(ctrl.tau_limit), "tau_prev": _addr(ctrl._tau_prev),
            "swing": _addr(ctrl.swing), "active": _addr(cs.active), "max_normal_force": _addr(cs.max_normal_force),
            "released": _addr(cs.released), "basis": _addr(cs.basis), "bound": _addr(tr.bound),
            "rate": _addr(tr.rate), "requested": _addr(tr.requested), "held": _addr(tr.held),
            "version": _addr(self.version), "gait": self.gait.handle if self.gait is not None else 0,
            **self._trajectory_slots(),
        }
        for i, name in enumerate(SLOTS):
            self._slots[i] = addresses[name]

    def _trajectory_slots(self) -> dict[str, int]:
        traj, ctrl = self.trajectory, self.controller
        if traj is None:
            return dict.fromkeys(TRAJECTORY_SLOTS, 0)
        q_ref, v_ref, a_ref = self._references
        return {"traj_index": _addr(traj.index), "traj_times": _addr(traj.times), "traj_pos": _addr(traj.pos),
                "traj_vel": _addr(traj.vel) if traj.vel is not None else 0, "traj_start": _addr(traj.start_ns),
                "traj_q": _addr(traj.q), "traj_v": _addr(traj.v), "traj_a": _addr(traj.a),
                "ref_q": _addr(q_ref), "ref_v": _addr(v_ref), "ref_a": _addr(a_ref),
                "ctrl_q_ref": _addr(ctrl.q_ref), "ctrl_v_ref": _addr(ctrl.v_ref), "ctrl_a_ref": _addr(ctrl.a_ref)}

    def _write_values(self) -> None:
        ctrl, m, c = self.controller, self.controller.model, self.controller.config
        values = {"nq": m.nq, "nv": m.nv, "nb": m.n_base, "na": m.na, "k": self.formulation.contacts.size,
                  "solver_kind": self.kind,
                  "n_tasks": len(self.formulation._task_list) if self.kind == 1 else 0,
                  "rate_step": c.torque_rate_limit * c.dt if c.torque_rate_limit > 0.0 else 0.0,
                  "ramp_time": c.contact_ramp_time, "dt": c.dt, "force_scale": ctrl.transitions.force_scale,
                  "traj_k": self.trajectory.index.size if self.trajectory is not None else 0,
                  "traj_n": self.trajectory.times.size if self.trajectory is not None else 0}
        for i, name in enumerate(VALUES):
            self._values[i] = values[name]

    def plan(self) -> None:
        """After a Python tick: take the settings it used (gains, options, tasks, version)
        for the compiled ticks that follow."""
        self.layer.write_gains()
        if self.kind in (0, 3):
            self.solver.write_settings()
        elif self.kind == 1:
            self.solver.write_settings(self.formulation._task_list)
        self.version[0] = self.formulation.contacts.version
        self._write_slots()  # addresses may have moved (effort limits, task buffer)
        self._write_values()
        self._ext.plan(self._slots, self._values)

    def hand_over(self) -> None:
        """Before a Python tick: the contact set as compiled ticks left it (a new version,
        and the formulation re-reads the active set)."""
        f = self.formulation
        f.contacts.version = max(f.contacts.version, int(self.version[0]))
        f._last_active = None

    def run(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask, now: float, tau_out: np.ndarray) -> int:
        """One tick (see tick.cpp ``run``): 0 and τ [N·m] in ``tau_out``, else the Python tick must run it."""
        self._mask[:] = contact_mask
        status, self.saturated = self._ext.run(float(t), q, v, self._mask, float(now), tau_out)
        return status
