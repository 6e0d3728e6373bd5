"""The compiled tick: ``wbc_qp``, ``qp_coulomb`` and ``qp_noslip`` in one C++ call per tick.

The Python formulations are the reference implementation; this is the same algorithm,
line for line, in header-only C++ on Pinocchio and ProxQP (``engine.cpp`` for the
rigid-body terms, ``solvers.cpp`` for the QPs), called through ``ctypes`` with
preallocated numpy buffers: no Python work and no allocation between the state and the
torques. Formulations pick it with the option ``backend``: ``"auto"`` (default: native
when the library is built and the options are supported, else Python), ``"native"``
(required: an error says why it is unavailable) or ``"python"``.

Build it once with ``idyn-control build-native`` (``scripts/setup.sh`` does). The Pinocchio
model is rebuilt in C++ from the Python model's joints, inertias and frames, then checked
against Python Pinocchio at a random state before it is used.
"""

from __future__ import annotations

import ctypes
import weakref
from ctypes import c_double, c_int, c_long, c_void_p
from pathlib import Path

import numpy as np

#: values of qp_coulomb/qp_noslip's ``dissipation`` option, in solvers.cpp's enum order
DISSIPATION = ("contacts", "desired", "base_momentum")

#: joint short names → kind codes of engine.cpp's JointKind
JOINT_KINDS = {
    "JointModelFreeFlyer": 0, "JointModelRX": 1, "JointModelRY": 2, "JointModelRZ": 3,
    "JointModelRevoluteUnaligned": 4, "JointModelPX": 5, "JointModelPY": 6, "JointModelPZ": 7,
    "JointModelPrismaticUnaligned": 8, "JointModelRUBX": 9, "JointModelRUBY": 10, "JointModelRUBZ": 11,
    "JointModelRevoluteUnboundedUnaligned": 12, "JointModelSpherical": 13, "JointModelPlanar": 14,
    "JointModelTranslation": 15,
}
#: numbers per wbc task in the task buffer (solvers.cpp TASK_STRIDE)
TASK_STRIDE = 19
#: relative agreement with Python Pinocchio required before the engine is used
SELF_CHECK_RTOL = 1e-9


class NativeUnavailable(RuntimeError):
    """The native tick cannot serve this model or these options; the message says why."""


_lib: ctypes.CDLL | None = None
_lib_error: str | None = None


def library_path() -> Path | None:
    """The built library for the current sources, if any."""
    from . import build as _build

    name = _build.library_name()
    for d in _build.candidate_dirs():
        if (d / name).exists():
            return d / name
    return None


def load() -> ctypes.CDLL:
    """The loaded library; raises :class:`NativeUnavailable` when it is not built."""
    global _lib, _lib_error
    if _lib is not None:
        return _lib
    if _lib_error is not None:
        raise NativeUnavailable(_lib_error)
    path = library_path()
    if path is None:
        _lib_error = "native library not built (run: idyn-control build-native)"
        raise NativeUnavailable(_lib_error)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as err:
        _lib_error = f"cannot load {path}: {err}"
        raise NativeUnavailable(_lib_error) from None
    P, I, L, D = c_void_p, c_int, c_long, c_double
    lib.idyn_engine_new.restype = P
    lib.idyn_engine_new.argtypes = [I, P, P, P, P, P, P, P, I, P, P, I, I, P, P, P, P, P, P, P, P, P, P, I]
    lib.idyn_engine_free.argtypes = [P]
    lib.idyn_engine_update.argtypes = [P]
    lib.idyn_engine_point_task.argtypes = [P, I, P, P, P, P]
    lib.idyn_kinematic_layer.argtypes = [P, P, P, P, P, P, P]
    lib.idyn_wbc_new.restype = P
    lib.idyn_wbc_new.argtypes = [P, P, I, D]
    lib.idyn_wbc_free.argtypes = [P]
    lib.idyn_wbc_reset.argtypes = [P]
    lib.idyn_wbc_torque_limits_dropped.restype = L
    lib.idyn_wbc_torque_limits_dropped.argtypes = [P]
    lib.idyn_wbc_contacts_elastic.restype = L
    lib.idyn_wbc_contacts_elastic.argtypes = [P]
    lib.idyn_wbc_solve.restype = I
    lib.idyn_wbc_solve.argtypes = [P, P, P, L, P, P, I, P, P, P, P, P]
    lib.idyn_qpc_new.restype = P
    lib.idyn_qpc_new.argtypes = [P, D, I, I, D, P, P, P]
    lib.idyn_qpc_free.argtypes = [P]
    lib.idyn_qpc_reset.argtypes = [P]
    lib.idyn_qpc_solve.restype = I
    lib.idyn_qpc_solve.argtypes = [P, P, P, L, P, P, P, P, P, P]
    _lib = lib
    return lib


def available() -> bool:
    try:
        load()
    except NativeUnavailable:
        return False
    return True


def _addr(a: np.ndarray) -> int:
    if not (a.flags.c_contiguous and a.flags.writeable):
        raise NativeUnavailable("buffer is not a writable C-contiguous array")
    return a.ctypes.data


def _placement12(M) -> np.ndarray:
    return np.concatenate((np.asarray(M.rotation).reshape(-1), np.asarray(M.translation)))


class _Owner:
    """Owns one C++ object (``handle``), freed by the library function ``_free`` when collected."""

    _free: str

    def __del__(self):
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            getattr(self.lib, self._free)(handle)


class Engine(_Owner):
    """The Pinocchio pass in C++, writing into a formulation's ``terms`` and ``contacts``.

    After :meth:`update` (state in ``terms.q``, ``terms.v``): ``terms.M``, ``terms.h``,
    ``contacts.J``, ``drift``, ``position`` and ``rotation`` hold what the Python pass
    computes; ``terms.data`` is not refreshed.
    """

    _free = "idyn_engine_free"

    def __init__(self, model, terms, contacts):
        self.lib = load()
        if any(model.contact_body_joint_ids):
            raise NativeUnavailable("contacts against a free body (relative Jacobians) run in Python only")
        pm = model.pin_model
        nj = pm.njoints
        parents = np.zeros(nj, dtype=np.int32)
        kinds = np.zeros(nj, dtype=np.int32)
        axes = np.zeros((nj, 3))
        placements = np.zeros((nj, 12))
        inertias = np.zeros((nj, 10))
        for j in range(1, nj):
            joint = pm.joints[j]
            kind = JOINT_KINDS.get(joint.shortname())
            if kind is None:
                raise NativeUnavailable(f"joint {pm.names[j]!r} of type {joint.shortname()} is not supported natively")
            kinds[j] = kind
            parents[j] = pm.parents[j]
            if kind in (4, 8, 12):  # unaligned revolute / prismatic / unbounded
                axes[j] = np.asarray(joint.extract().axis).reshape(3)
            placements[j] = _placement12(pm.jointPlacements[j])
            inertia = pm.inertias[j]
            I = np.asarray(inertia.inertia)
            inertias[j] = (inertia.mass, *np.asarray(inertia.lever), I[0, 0], I[0, 1], I[0, 2], I[1, 1], I[1, 2], I[2, 2])
        nf = pm.nframes
        frame_parents = np.array([pm.frames[f].parentJoint for f in range(nf)], dtype=np.int32)
        frame_placements = np.array([_placement12(pm.frames[f].placement) for f in range(nf)])
        contact_ids = np.asarray(model.contact_frame_ids, dtype=np.int32)
        armature = np.ascontiguousarray(pm.armature, dtype=float)
        gravity = np.asarray(pm.gravity.linear, dtype=float).copy()
        err = ctypes.create_string_buffer(512)
        self.terms, self.contacts = terms, contacts
        cs = contacts
        self.handle = self.lib.idyn_engine_new(
            nj, _addr(parents), _addr(kinds), _addr(axes), _addr(placements), _addr(inertias), _addr(armature),
            _addr(gravity), nf, _addr(frame_parents), _addr(frame_placements), model.n_base, cs.size,
            _addr(contact_ids), _addr(terms.M), _addr(terms.h), _addr(cs.J), _addr(cs.drift), _addr(cs.position),
            _addr(cs.rotation), _addr(terms.q), _addr(terms.v), err, len(err))
        if not self.handle:
            raise NativeUnavailable(f"native model: {err.value.decode(errors='replace')}")
        self._update = self.lib.idyn_engine_update
        self._self_check(model)

    def update(self) -> None:
        self._update(self.handle)

    def _self_check(self, model) -> None:
        """Compare with Python Pinocchio at a random state: a mistranslated model never runs."""
        from ..contacts import ContactSet
        from ..dynamics import DynamicsTerms

        rng = np.random.default_rng(7)
        ref_terms, ref_contacts = DynamicsTerms(model), ContactSet(model)
        q = model.random_configuration(rng)
        v = rng.standard_normal(model.nv)
        ref_terms.update(q, v)
        ref_contacts.update(ref_terms)
        self.terms.q[:] = q
        self.terms.v[:] = v
        self.update()
        pairs = [("M", ref_terms.M, self.terms.M), ("h", ref_terms.h, self.terms.h)]
        if ref_contacts.size:
            pairs += [("J", ref_contacts.J, self.contacts.J), ("drift", ref_contacts.drift, self.contacts.drift),
                      ("position", ref_contacts.position, self.contacts.position),
                      ("rotation", ref_contacts.rotation, self.contacts.rotation)]
        for name, ref, got in pairs:
            scale = max(1.0, float(np.abs(ref).max()))
            if not np.allclose(got, ref, rtol=0.0, atol=SELF_CHECK_RTOL * scale):
                raise NativeUnavailable(f"native model disagrees with Pinocchio on {name} "
                                        f"(max error {float(np.abs(got - ref).max()):.3g})")


class _TauMax:
    """Address of the model's effort limits, refreshed if the array is replaced."""

    def __init__(self, model):
        self.model = model
        self.array = model.tau_max
        self.addr = _addr(self.array)

    def address(self) -> int:
        if self.model.tau_max is not self.array:
            self.array = np.ascontiguousarray(self.model.tau_max, dtype=float)
            self.model.tau_max = self.array
            self.addr = _addr(self.array)
        return self.addr


class Wbc(_Owner):
    """``wbc_qp`` in C++ (solvers.cpp ``wbc_solve``)."""

    _free = "idyn_wbc_free"

    def __init__(self, engine: Engine, formulation):
        # a weak reference: the formulation owns this, so a strong one made a cycle that
        # only a full garbage collection freed (the node rebuilding its formulation on
        # option changes kept ~1.6 MB per rebuild, bench/soak.py)
        self.lib, self.engine, self.f = engine.lib, engine, weakref.proxy(formulation)
        cs, o = formulation.contacts, formulation.options
        self.handle = self.lib.idyn_wbc_new(engine.handle, _addr(cs.friction_rows), int(bool(o["warm_start"])),
                                            float(o["eps_abs"]))
        if not self.handle:
            raise NativeUnavailable("native wbc_qp could not be created")
        self.weights = np.zeros(5)
        # iterations, solve time [s], torque limits dropped (0/1), contacts elastic (0/1),
        # torque-limit excess [N·m], acceleration left at the contacts [m/s²]
        self.info = np.zeros(6)
        self.tasks = np.zeros((0, TASK_STRIDE))
        self._solve = self.lib.idyn_wbc_solve
        f = formulation
        self._addrs = (_addr(f.qdd_des), _addr(cs.active), _addr(self.weights))
        self._out = (_addr(f.qdd), _addr(f.tau), _addr(f.forces), _addr(self.info))
        self._tau_max = _TauMax(f.model)
        self._tasks_addr = None

    def add_task_row(self) -> np.ndarray:
        """Grow the task buffer by one row; returns the new buffer (tasks re-point their views)."""
        self.tasks = np.vstack((self.tasks, np.zeros((1, TASK_STRIDE))))
        self._tasks_addr = _addr(self.tasks)
        return self.tasks

    def solve(self, tasks) -> tuple[int, int, float]:
        f, o, w = self.f, self.f.options, self.weights
        w[0], w[1], w[2], w[3], w[4] = o["w_base"], o["w_posture"], o["w_force"], o["contact_gain"], f._mass
        buf = self.tasks
        for i, task in enumerate(tasks):
            row = buf[i]
            row[0], row[1], row[11], row[12] = task.frame_id, task.weight, task.kp, task.kd
        a = self._addrs
        status = self._solve(self.handle, a[0], a[1], f.contacts.version, a[2], self._tau_max.address(),
                             len(tasks), self._tasks_addr, *self._out)
        return status, int(self.info[0]), float(self.info[1])

    def reset(self) -> None:
        self.lib.idyn_wbc_reset(self.handle)

    @property
    def torque_limits_dropped(self) -> int:
        """Ticks solved without the torque limits (compiled ticks of the node's loop included)."""
        return int(self.lib.idyn_wbc_torque_limits_dropped(self.handle))

    @property
    def contacts_elastic(self) -> int:
        """Ticks solved with elastic contact rows (compiled ticks of the node's loop included)."""
        return int(self.lib.idyn_wbc_contacts_elastic(self.handle))


class QpContact(_Owner):
    """``qp_coulomb`` / ``qp_noslip`` in C++ (solvers.cpp ``qpc_solve``)."""

    _free = "idyn_qpc_free"

    def __init__(self, engine: Engine, formulation):
        self.lib, self.engine, self.f = engine.lib, engine, weakref.proxy(formulation)  # as Wbc
        cs, o = formulation.contacts, formulation.options
        self.handle = self.lib.idyn_qpc_new(engine.handle, formulation.dt, int(formulation.infinite_friction),
                                            int(bool(o["warm_start"])), float(o["eps_abs"]), _addr(formulation.pyramid),
                                            _addr(cs.basis), _addr(cs.phi))
        if not self.handle:
            raise NativeUnavailable("native qp_contact could not be created")
        self.options = np.zeros(5)
        # iterations, solve time [s], fast-path ticks, Stage II failures, Stage II limited,
        # non-penetration dropped, Stage I rescued (counts); non-penetration relaxed this
        # tick (0/1) and by how much [m/s]
        self.info = np.zeros(9)
        self._solve = self.lib.idyn_qpc_solve
        f = formulation
        self._addrs = (_addr(f.qdd_des), _addr(cs.active), _addr(self.options))
        self._out = (_addr(f.qdd), _addr(f.tau), _addr(f.forces), _addr(self.info))
        self._tau_max = _TauMax(f.model)

    def solve(self) -> tuple[int, int, float]:
        f, o, opt = self.f, self.f.options, self.options
        opt[0], opt[1], opt[2] = bool(o["stage2"]), bool(o["torque_limits"]), bool(o["fast_path"])
        opt[3], opt[4] = DISSIPATION.index(o["dissipation"]), o["friction_margin"]
        a = self._addrs
        status = self._solve(self.handle, a[0], a[1], f.contacts.version, a[2], self._tau_max.address(), *self._out)
        return status, int(self.info[0]), float(self.info[1])

    def reset(self) -> None:
        self.lib.idyn_qpc_reset(self.handle)


class Rnea:
    """``rnea`` on the compiled engine: τ = M q̈ + h (fixed base; the formulation computes it
    from the engine's M and h, the node's compiled loop in C++)."""

    handle = 0

    def __init__(self, engine: Engine, formulation):
        if formulation.model.n_base:
            raise NativeUnavailable("rnea runs natively for a fixed base only")


#: Controller reference arrays the kinematic layer reads, in engine.cpp's order
KL_REFS = ("q_ref", "v_ref", "a_ref", "joint_kp", "joint_kd", "base_position_ref", "base_rotation_ref",
           "base_velocity_ref", "base_angular_ref", "foot_position_ref", "foot_velocity_ref",
           "foot_acceleration_ref")
#: ControllerConfig gains and weights passed every tick, in engine.cpp's order
KL_GAINS = ("base_kp", "base_kd", "base_weight", "foot_kp", "foot_kd", "swing_weight", "stance_weight",
            "posture_weight", "damping")


class KinematicLayer:
    """Controller.desired_acceleration in C++ (engine.cpp ``idyn_kinematic_layer``).

    Reads the controller's reference arrays in place (they are never replaced, only
    written) and the engine's last state.
    """

    def __init__(self, engine: Engine, controller):
        self.lib, self.engine, self.controller = engine.lib, engine, controller
        arrays = [getattr(controller, name) for name in KL_REFS]
        self._arrays = arrays  # keep them alive and check they are not replaced
        self.refs = np.array([_addr(a) for a in arrays], dtype=np.uint64)
        self.joint_q_index = np.asarray(controller.model.joint_q_index, dtype=np.int32).copy()
        self.mask = np.zeros(len(controller.model.contacts), dtype=bool)
        self.gains = np.zeros(len(KL_GAINS))
        self.qdd = controller.qdd_des
        self._args = (engine.handle, _addr(self.refs), _addr(self.joint_q_index), _addr(controller.swing),
                      _addr(self.mask), _addr(self.gains), _addr(self.qdd))
        self._call = self.lib.idyn_kinematic_layer

    def compute(self, contact_mask) -> np.ndarray:
        c, g = self.controller.config, self.gains
        (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]) = (
            c.base_kp, c.base_kd, c.base_weight, c.foot_kp, c.foot_kd, c.swing_weight, c.stance_weight,
            c.posture_weight, c.damping)
        self.mask[:] = contact_mask
        self._call(*self._args)
        return self.qdd

    def valid(self) -> bool:
        """False if the controller replaced one of its arrays (then Python computes)."""
        c = self.controller
        return all(getattr(c, name) is a for name, a in zip(KL_REFS, self._arrays)) and c.qdd_des is self.qdd


#: status codes of solvers.cpp → idyn_control.qp status names
STATUS = ("solved", "max_iter", "infeasible", "failed")
