"""The compiled tick: ``wbc_qp``, ``qp_coulomb``, ``qp_noslip``, ``pidc_qp`` (and its baselines
``pidc_qp_howsm``, ``pidcwcu``) in one C++ call per tick.

The Python formulations are the reference implementation; this is the same algorithm,
line for line, in header-only C++ on Pinocchio and ProxQP (``engine.cpp`` for the
rigid-body terms, ``solvers.cpp`` for the QPs), reached through one pybind11 binding
(``bindings.cpp``, module ``_native``) that binds the formulations' preallocated numpy
buffers once (checked: dtype, C order, size), so a tick is one call with scalar arguments:
no Python work and no allocation between the state and the torques. Formulations pick it
with the option ``backend``: ``"auto"`` (default: native when the module is built and the
options are supported, else Python), ``"native"`` (required: an error says why it is
unavailable) or ``"python"``.

The package's build compiles it (``pip install .``, ``pip install -e .``, ``colcon build``;
see :mod:`.build`); :func:`status` says whether it is loaded and, if not, why (the build's
record ``_build_info.json``). The Pinocchio model is rebuilt in C++ from the Python model's
joints, inertias and frames, then checked against Python Pinocchio at a random state before
it is used.
"""

from __future__ import annotations

import importlib
import weakref
from pathlib import Path
from types import ModuleType

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


_ext: ModuleType | None = None
_ext_error: str | None = None


def _not_built_reason(module: str) -> str:
    """Why ``module`` (``_native`` or ``_rt``) is not importable, from the build's record."""
    from . import build

    info = build.build_info()
    if info is None:
        return ("extension not built (no build record: install the package with pip or colcon, "
                "or run idyn-control build-native)")
    entry = info.get("modules", {}).get(module, {})
    if entry.get("built"):
        return "extension built but not importable here (another Python? rebuild: idyn-control build-native)"
    return f"extension not built: {entry.get('reason', 'not attempted')}"


def load() -> ModuleType:
    """The compiled module; raises :class:`NativeUnavailable` (with the reason) when it is not built."""
    global _ext, _ext_error
    if _ext is not None:
        return _ext
    if _ext_error is not None:
        raise NativeUnavailable(_ext_error)
    try:
        _ext = importlib.import_module("._native", __name__)
    except ImportError as err:
        reason = _not_built_reason("_native")
        if "No module named" not in str(err):
            reason += f" ({err})"
        _ext_error = reason
        raise NativeUnavailable(_ext_error) from None
    return _ext


def available() -> bool:
    try:
        load()
    except NativeUnavailable:
        return False
    return True


def status() -> tuple[bool, str]:
    """(loaded, what): the compiled module's file and flags, or why it is not there."""
    try:
        ext = load()
    except NativeUnavailable as err:
        return False, str(err)
    march = ext.build.get("march") or "portable"
    return True, f"{Path(ext.__file__).name} ({march}, {ext.build.get('compiler', '?')})"


def library_path() -> Path | None:
    """The compiled module's file, if it is importable."""
    try:
        return Path(load().__file__)
    except NativeUnavailable:
        return None


def _addr(a: np.ndarray) -> int:
    """Address of a numpy buffer, for the compiled loop's plan (rt.py)."""
    if not (a.flags.c_contiguous and a.flags.writeable):
        raise NativeUnavailable("buffer is not a writable C-contiguous array")
    return a.ctypes.data


def _placement12(M) -> np.ndarray:
    return np.concatenate((np.asarray(M.rotation).reshape(-1), np.asarray(M.translation)))


class Engine:
    """The Pinocchio pass in C++, writing into a formulation's ``terms`` and ``contacts``.

    After :meth:`update` (state in ``terms.q``, ``terms.v``): ``terms.M``, ``terms.h``,
    ``contacts.J``, ``drift``, ``position`` and ``rotation`` hold what the Python pass
    computes; ``terms.data`` is not refreshed. ``handle`` is the C object's address (for
    the compiled loop's plan); the binding frees it with this object.
    """

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
        self.terms, self.contacts = terms, contacts
        cs = contacts
        try:
            self._ext = self.lib.Engine(parents, kinds, axes, placements, inertias, armature, gravity, frame_parents,
                                        frame_placements, model.n_base, contact_ids, terms.M, terms.h, cs.J,
                                        cs.drift, cs.position, cs.rotation, terms.q, terms.v)
        except RuntimeError as err:
            raise NativeUnavailable(f"native model: {err}") from None
        self.handle = self._ext.handle
        self.update = self._ext.update  # one binding call per tick, no Python frame in between
        self._self_check(model)

    def update(self) -> None:  # the instance attribute (the binding's method) is what runs
        self._ext.update()

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
    """The model's effort limits as the compiled solver reads them, re-bound if the model
    replaces its array."""

    def __init__(self, model):
        self.model = model
        self.array = np.ascontiguousarray(model.tau_max, dtype=float)
        model.tau_max = self.array
        self.solver = None  # the binding's solver, told of a new array

    def check(self) -> None:
        if self.model.tau_max is not self.array:
            self.array = np.ascontiguousarray(self.model.tau_max, dtype=float)
            self.model.tau_max = self.array
            self.solver.set_tau_max(self.array)

    def address(self) -> int:
        self.check()
        return _addr(self.array)


def _bind_solver(make, *args):
    """The binding's solver object, or NativeUnavailable with the reason."""
    try:
        return make(*args)
    except RuntimeError as err:
        raise NativeUnavailable(str(err)) from None


def _adopt(solver) -> None:
    """A QP solver wrapper takes its binding (``solver._ext``): the effort limits' owner, the
    solve, the handle and the addresses of the compiled loop's plan: (qdd_des, active,
    options), (qdd, tau, forces, info)."""
    ext = solver._ext
    solver._tau_max.solver = ext
    solver._solve = ext.solve
    solver.handle = ext.handle
    a = ext.addresses
    solver._addrs, solver._out = a[:3], a[4:]


class Wbc:
    """``wbc_qp`` in C++ (solvers.cpp ``wbc_solve``)."""

    def __init__(self, engine: Engine, formulation):
        # a weak reference: the formulation owns this, so a strong one made a cycle that
        # only a full garbage collection freed (the node rebuilding its formulation on
        # option changes kept ~1.6 MB per rebuild, bench/soak.py)
        self.lib, self.engine, self.f = engine.lib, engine, weakref.proxy(formulation)
        cs, o, f = formulation.contacts, formulation.options, formulation
        self.weights = np.zeros(5)
        # iterations, solve time [s], torque limits dropped (0/1), contacts elastic (0/1),
        # torque-limit excess [N·m], acceleration left at the contacts [m/s²]
        self.info = np.zeros(6)
        self.tasks = np.zeros((0, TASK_STRIDE))
        self._tau_max = _TauMax(f.model)
        self._ext = _bind_solver(self.lib.Wbc, engine._ext, f.friction_rows, cs.max_normal_force, cs.released,
                                 bool(o["warm_start"]), float(o["eps_abs"]), f.qdd_des, cs.active, self.weights,
                                 self._tau_max.array, f.qdd, f.tau, f.forces, self.info)
        self._tau_max.solver = self._ext
        self._ext.set_tasks(self.tasks)
        self.handle = self._ext.handle
        # addresses for the compiled loop's plan: (qdd_des, active, weights), (qdd, tau, forces, info)
        a = self._ext.addresses
        self._addrs, self._out = a[:3], a[4:]
        self._tasks_addr = None

    def add_task_row(self) -> np.ndarray:
        """Grow the task buffer by one row; returns the new buffer (tasks re-point their views)."""
        self.tasks = np.vstack((self.tasks, np.zeros((1, TASK_STRIDE))))
        self._ext.set_tasks(self.tasks)
        self._tasks_addr = self._ext.tasks_address
        return self.tasks

    def write_settings(self, tasks) -> None:
        """The weights and task settings the solve reads (compiled ticks read the last ones)."""
        f, o, w = self.f, self.f.options, self.weights
        w[0], w[1], w[2], w[3], w[4] = o["w_base"], o["w_posture"], o["w_force"], o["contact_gain"], f._mass
        buf = self.tasks
        for i, task in enumerate(tasks):
            row = buf[i]
            row[0], row[1], row[11], row[12] = task.frame_id, task.weight, task.kp, task.kd

    def solve(self, tasks) -> tuple[int, int, float]:
        f = self.f
        self.write_settings(tasks)
        self._tau_max.check()
        status = self._ext.solve(f.contacts.version, len(tasks))
        return status, int(self.info[0]), float(self.info[1])

    def reset(self) -> None:
        self._ext.reset()

    @property
    def torque_limits_dropped(self) -> int:
        """Ticks solved without the torque limits (compiled ticks of the node's loop included)."""
        return int(self._ext.torque_limits_dropped)

    @property
    def contacts_elastic(self) -> int:
        """Ticks solved with elastic contact rows (compiled ticks of the node's loop included)."""
        return int(self._ext.contacts_elastic)


class QpContact:
    """``qp_coulomb`` / ``qp_noslip`` in C++ (solvers.cpp ``qpc_solve``)."""

    def __init__(self, engine: Engine, formulation):
        self.lib, self.engine, self.f = engine.lib, engine, weakref.proxy(formulation)  # as Wbc
        cs, o, f = formulation.contacts, formulation.options, formulation
        self.options = np.zeros(6)
        # iterations, solve time [s], fast-path ticks, Stage II failures, Stage II limited,
        # non-penetration dropped, Stage I rescued (counts); non-penetration relaxed this
        # tick (0/1) and by how much [m/s]
        self.info = np.zeros(9)
        self._tau_max = _TauMax(f.model)
        self._ext = _bind_solver(self.lib.Qpc, engine._ext, f.dt, bool(f.infinite_friction), bool(o["warm_start"]),
                                 float(o["eps_abs"]), f.pyramid, cs.basis, cs.phi, cs.max_normal_force, f.qdd_des,
                                 cs.active, self.options, self._tau_max.array, f.qdd, f.tau, f.forces, self.info)
        _adopt(self)

    def write_settings(self) -> None:
        """The options the solve reads (compiled ticks read the last ones)."""
        o, opt = self.f.options, self.options
        opt[0], opt[1], opt[2] = bool(o["stage2"]), bool(o["torque_limits"]), bool(o["fast_path"])
        opt[3], opt[4], opt[5] = DISSIPATION.index(o["dissipation"]), o["friction_margin"], o["cop_margin"]

    def solve(self) -> tuple[int, int, float]:
        f = self.f
        self.write_settings()
        self._tau_max.check()
        status = self._solve(f.contacts.version)
        return status, int(self.info[0]), float(self.info[1])

    def reset(self) -> None:
        self._ext.reset()


#: PidcQp/PidcQpHowsm/Pidcwcu.name → solvers.cpp PidcMethod
PIDC_METHODS = {"pidc_qp": 0, "pidc_qp_howsm": 1, "pidcwcu": 2}


class Pidc:
    """``pidc_qp``, ``pidc_qp_howsm`` and ``pidcwcu`` in C++ (solvers.cpp ``pidc_solve``).

    The desired forces are read from the formulation's ``lambda_des`` by every solve (the
    array is written in place, never replaced), so a new reference needs no call here.
    """

    def __init__(self, engine: Engine, formulation):
        self.lib, self.engine, self.f = engine.lib, engine, weakref.proxy(formulation)  # as Wbc
        f, cs = formulation, formulation.contacts
        self.options = np.zeros(4)  # regularization, fast_path, internal_force_weight, rcond
        # iterations, solve time [s], binding inequalities, stage1_loose, friction_elastic (counts),
        # friction relaxed this tick (0/1) and by how much [N], mass matrix not positive definite (0/1)
        self.info = np.zeros(8)
        self._chain = np.ascontiguousarray(f.chain, dtype=np.uint8)
        self._force = np.ascontiguousarray(f.is_force_contact, dtype=np.uint8)
        self._tau_max = _TauMax(f.model)
        o = f.options
        self._ext = _bind_solver(self.lib.Pidc, engine._ext, PIDC_METHODS[f.name], bool(o.get("warm_start", True)),
                                 float(o.get("eps_abs", 1e-9)), cs.friction_rows, cs.basis, self._chain, self._force,
                                 f.lambda_des, f.qdd_des, cs.active, self.options, self._tau_max.array, f.qdd, f.tau,
                                 f.forces, self.info)
        _adopt(self)

    def write_settings(self) -> None:
        """The options the solve reads (compiled ticks of the node's loop read the last ones)."""
        o, opt = self.f.options, self.options
        opt[0], opt[1] = o.get("regularization", 0.0), bool(o.get("fast_path", False))
        opt[2], opt[3] = o.get("internal_force_weight", 0.0), o["rcond"]

    def solve(self) -> tuple[int, int, float]:
        self.write_settings()
        self._tau_max.check()
        status = self._solve(self.f.contacts.version)
        if self.info[7]:
            raise np.linalg.LinAlgError("mass matrix is not positive definite")
        return status, int(self.info[0]), float(self.info[1])

    def reset(self) -> None:
        self._ext.reset()


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
        self._arrays = arrays  # check they are not replaced (the binding keeps them alive)
        self.joint_q_index = np.asarray(controller.model.joint_q_index, dtype=np.int32).copy()
        self.mask = np.zeros(len(controller.model.contacts), dtype=bool)
        self.gains = np.zeros(len(KL_GAINS))
        self.qdd = controller.qdd_des
        self._ext = self.lib.KinematicLayer(engine._ext, arrays, self.joint_q_index, controller.swing, self.mask,
                                            self.gains, self.qdd)
        self._args = self._ext.args  # the call's arguments as addresses, for the compiled loop's plan
        self._call = self._ext.compute

    def write_gains(self) -> None:
        """The controller's gains and weights (compiled ticks read the last ones)."""
        c, g = self.controller.config, self.gains
        (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8]) = (
            c.base_kp, c.base_kd, c.base_weight, c.foot_kp, c.foot_kd, c.swing_weight, c.stance_weight,
            c.posture_weight, c.damping)

    def compute(self, contact_mask) -> np.ndarray:
        self.write_gains()
        self.mask[:] = contact_mask
        self._call()
        return self.qdd

    def valid(self) -> bool:
        """False if the controller replaced one of its arrays (then Python computes)."""
        c = self.controller
        return all(getattr(c, name) is a for name, a in zip(KL_REFS, self._arrays)) and c.qdd_des is self.qdd


#: status codes of solvers.cpp → idyn_control.qp status names
STATUS = ("solved", "max_iter", "infeasible", "failed")
