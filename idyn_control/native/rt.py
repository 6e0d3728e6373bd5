"""The controller node's compiled input → command path (``rt.cpp``), for ``loop_mode: native``.

A C++ thread of its own is woken by the middleware for each /joint_states sample and runs
the routine tick without Python: read the CDR bytes, Pinocchio pass, kinematic layer,
compiled formulation, clamps, command published with ``rcl_publish_serialized_message``.
Anything that is not routine is handed to the node's Python tick with the same bytes, on
the same thread (one tick at a time): the first tick after activation, a contact switch,
new references, gains or options, a stale input, a joint-name layout or a stamp the fast
path has not seen accepted, a failed or non-finite solve. After each Python tick the node
declares whether the next ticks are routine (:meth:`RtLoop.sync`) and the plan they follow
(:meth:`RtLoop.plan`: the addresses of the very buffers and compiled calls its own tick
used). Bookkeeping (statistics, counters, monitoring) is left to a Python thread that reads
the fast ticks' records from a ring (:meth:`RtLoop.wait`, :meth:`RtLoop.take`): the loop
thread never waits for Python in a routine tick.

The module (``_rt``: ``rt.cpp`` and its pybind11 binding ``rt_bindings.cpp``) is built by
the package's build beside the compiled tick when a ROS 2 prefix with rcl's headers and
libraries is found (the ros-* wheels' venv or ``/opt/ros/<distro>``); see :mod:`.build`.
"""

from __future__ import annotations

import importlib
import os
import select
from types import ModuleType

import numpy as np

from . import NativeUnavailable, _addr, _not_built_reason, load

#: rt.cpp PlanSlot, in order
PLAN_SLOTS = ("engine_update", "engine", "layer_fn", *(f"layer_arg{i}" for i in range(7)), "solver_fn",
              "solver_handle", "solver_a0", "solver_a1", "solver_a2", "solver_a3", "solver_tasks",
              "solver_out0", "solver_out1", "solver_out2", "solver_out3", "terms_q", "terms_v", "joint_q_index",
              "ctrl_qdd_des", "f_qdd_des", "forces", "f_tau", "tau_limit", "tau_prev", "node_tau", "node_q",
              "node_v", "in_jq", "in_jv", "cmd_index", "cmd_view", "names_index", "state_bounds")
#: rt.cpp PlanValue, in order
PLAN_VALUES = ("nv", "nb", "na", "k", "solver_kind", "version", "n_tasks", "rate_step", "n_cmd", "names_at",
               "names_len", "n_names", "unknown", "timeout", "threshold")
#: rt.cpp Record, in order (one row per fast tick)
RECORD = ("received_ns", "wake_ns", "start_ns", "published_ns", "start_mono", "published_mono", "saturated",
          "stamp_ns", "overwritten")
RING = 1024
#: rt.cpp counters
COUNTERS = ("compiled_ticks", "python_ticks", "unknown_joint", "dropped_records")

_rt: ModuleType | None = None


def load_rt() -> ModuleType:
    """The compiled loop's module (rclpy is imported first: it loads the rcl the module
    links to); raises NativeUnavailable with the reason."""
    global _rt
    if _rt is not None:
        return _rt
    load()  # the compiled tick itself
    import rclpy  # noqa: F401 - loads librcl and the middleware the module links to

    try:
        module = importlib.import_module("._rt", __package__)
    except ImportError as err:
        reason = _not_built_reason("_rt")
        if "No module named" not in str(err):
            reason += f" ({err})"
        raise NativeUnavailable(f"the node's compiled loop: {reason}") from None
    layout = (module.PLAN_SLOTS, module.PLAN_VALUES, module.RECORD_WIDTH, module.RING, module.COUNTERS)
    if layout != (len(PLAN_SLOTS), len(PLAN_VALUES), len(RECORD), RING, len(COUNTERS)):
        raise NativeUnavailable(f"the node's compiled loop has another layout {layout} than rt.py's")
    _rt = module
    return module


def _fn(name: str) -> int:
    return load().symbols[name]


class RtLoop:
    """The C++ loop thread of one node: started by :meth:`start`, stopped and freed by :meth:`close`.

    ``slow(data: bytes, received_ns, wake_ns)`` runs the node's Python tick on an input the
    fast path handed over; it is called on the loop thread and must not raise. The fast
    ticks' records are read with :meth:`wait` and :meth:`take` (one reader thread).
    """

    def __init__(self, subscription_pointer: int, publisher_pointer: int, command_cdr: bytearray,
                 slow, *, priority: int, cpus: list[int], drain_every: int, k: int, na: int, nv: int):
        self.handle, self._notify = None, -1
        module = load_rt()
        self._notify = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        try:
            self.handle = module.Loop(subscription_pointer, publisher_pointer, command_cdr, slow, self._notify,
                                      int(priority), list(cpus or []), int(drain_every), k, na, nv)
        except RuntimeError as err:
            raise NativeUnavailable(str(err)) from None
        self.records = self.handle.records  # views of the loop's memory (valid until close)
        self.counters = self.handle.counters
        self._slots = np.zeros(len(PLAN_SLOTS), dtype=np.uint64)
        self._values = np.zeros(len(PLAN_VALUES))
        self._mask = np.zeros(max(1, k), dtype=np.uint8)

    def start(self) -> None:
        if self.handle.start() != 0:
            raise NativeUnavailable("could not register the /joint_states callback with the middleware")

    def stop(self) -> None:
        """Stop the loop thread (waits for its tick); records stay readable until :meth:`close`."""
        if self.handle:
            self.handle.stop()
        self.wake_reader()

    def close(self) -> None:
        """Stop the thread and free everything; idempotent."""
        handle, self.handle = self.handle, None
        if handle:
            handle.close()
        if self._notify >= 0:
            os.close(self._notify)
            self._notify = -1

    __del__ = close

    def wait(self, timeout: float) -> None:
        """Block (GIL released) until records may be waiting, :meth:`wake_reader` or ``timeout`` [s]."""
        try:
            select.select([self._notify], [], [], timeout)
            os.eventfd_read(self._notify)
        except (BlockingIOError, OSError, ValueError):
            pass

    def wake_reader(self) -> None:
        if self._notify >= 0:
            os.eventfd_write(self._notify, 1)

    def take(self) -> np.ndarray | None:
        """The records not read yet, oldest first (a copy), or None; marks them read."""
        if not self.handle:
            return None
        n, first = self.handle.pending()
        if n <= 0:
            return None
        rows = self.records[first:first + n] if first + n <= RING else \
            np.concatenate((self.records[first:], self.records[:first + n - RING]))
        rows = rows.copy()
        self.handle.consume(n)
        return rows

    def plan(self, slots: dict[str, int], values: dict[str, float], names: bytes) -> None:
        """The fast tick's buffers and calls; call from the loop thread (a Python tick) or stopped."""
        for i, name in enumerate(PLAN_SLOTS):
            self._slots[i] = slots.get(name, 0)
        for i, name in enumerate(PLAN_VALUES):
            self._values[i] = values[name]
        self.handle.plan(self._slots, self._values, bytes(names))

    def sync(self, fast: bool, mask: np.ndarray, stamp_ns: int) -> None:
        """After a Python tick: may the next ticks run compiled, with the mask and stamp it used."""
        self._mask[:mask.size] = mask
        self.handle.sync(bool(fast), self._mask, int(stamp_ns))

    def set_fast(self, fast: bool) -> None:
        """From any thread: False hands the next tick to Python (a new reference, gain, state...)."""
        if self.handle:
            self.handle.set_fast(bool(fast))

    def set_spin(self, seconds: float, period: float) -> None:
        """Poll for the next sample from ``seconds`` before its expected arrival (the last one's
        + ``period``) to ``seconds`` after, instead of sleeping through it (0: always sleep)."""
        self.handle.set_spin(float(seconds), float(period))

    def set_params(self, timeout: float, threshold: float) -> None:
        self.handle.set_params(float(timeout), float(threshold))

    def set_base(self, q: np.ndarray, v: np.ndarray) -> None:
        self.handle.set_base(q, v)

    def set_contacts(self, values: np.ndarray) -> None:
        self.handle.set_contacts(values)

    def last_tick(self) -> float:
        """CLOCK_MONOTONIC (``time.monotonic``) start of the last compiled tick [s]; 0 before one."""
        return self.handle.last_tick() if self.handle else 0.0

    def counter(self, name: str) -> float:
        """One of :data:`COUNTERS` (read while the loop may be counting)."""
        return float(self.counters[COUNTERS.index(name)])

    def lock(self) -> None:
        """Wait for the loop thread's tick to end and keep it from starting one (GIL released)."""
        self.handle.lock()

    def unlock(self) -> None:
        self.handle.unlock()


def plan_for(node) -> tuple[dict[str, int], dict[str, float], bytes] | None:
    """The fast tick's plan for ``node``'s current controller and inputs, or None when its
    tick cannot run compiled (formulation or kinematic layer in Python, name layout unknown)."""
    from .. import native

    ctrl = node.ctrl
    f = ctrl.formulation
    solver = getattr(f, "_native", None)
    layer = ctrl._native_layer
    reader = node._js
    if f._engine is None or solver is None or layer is None or not layer.valid():
        return None
    if reader._index is None or reader._names_at < 0 or ctrl.qdd_des is not layer.qdd:
        return None
    if isinstance(solver, native.QpContact):
        if f.options.get("stage1_solver", "qp") != "qp":
            return None
        kind, tasks, n_tasks = 0, 0, 0
    elif isinstance(solver, native.Wbc):
        kind, n_tasks = 1, len(f._task_list)
        tasks = solver._tasks_addr or 0
    elif isinstance(solver, native.Rnea):
        kind, tasks, n_tasks = 2, 0, 0
    else:
        return None
    m, cs = node.model, f.contacts
    if kind == 2:  # τ = M q̈ + h: M, h in, q̈ and τ out
        a = (_addr(f.terms.M), _addr(f.terms.h), 0)
        out = (_addr(f.qdd), _addr(f.tau), 0, 0)
    else:
        a, out = solver._addrs, solver._out
    slots = {
        "engine_update": _fn("idyn_engine_update"), "engine": f._engine.handle,
        "layer_fn": _fn("idyn_kinematic_layer"),
        **{f"layer_arg{i}": int(x) for i, x in enumerate(layer._args)},
        "solver_fn": _fn(("idyn_qpc_solve", "idyn_wbc_solve", "idyn_engine_update")[kind]),
        "solver_handle": solver.handle,
        "solver_a0": a[0], "solver_a1": a[1], "solver_a2": a[2], "solver_a3": solver._tau_max.address() if kind != 2 else 0,
        "solver_tasks": tasks, "solver_out0": out[0], "solver_out1": out[1], "solver_out2": out[2],
        "solver_out3": out[3],
        "terms_q": _addr(f.terms.q), "terms_v": _addr(f.terms.v), "joint_q_index": _addr(layer.joint_q_index),
        "ctrl_qdd_des": _addr(ctrl.qdd_des), "f_qdd_des": _addr(f.qdd_des), "forces": _addr(f.forces),
        "f_tau": _addr(f.tau), "tau_limit": _addr(ctrl.tau_limit), "tau_prev": _addr(ctrl._tau_prev),
        "node_tau": _addr(node._tau), "node_q": _addr(node._q), "node_v": _addr(node._v),
        "in_jq": _addr(node._in_jq), "in_jv": _addr(node._in_jv), "cmd_index": _addr(node._cmd_index),
        "cmd_view": _addr(node._cmd_view), "names_index": _addr(reader._index),
        "state_bounds": _addr(reader.bounds),
    }
    c = ctrl.config
    values = {
        "nv": m.nv, "nb": m.n_base, "na": m.na, "k": cs.size, "solver_kind": kind,
        "version": cs.version, "n_tasks": n_tasks,
        "rate_step": c.torque_rate_limit * c.dt if c.torque_rate_limit > 0.0 else 0.0,
        "n_cmd": node._cmd_view.size, "names_at": reader._names_at, "names_len": len(reader._names_cdr),
        "n_names": len(reader._names), "unknown": float(bool(reader.unknown)),
        "timeout": node._node_params["watchdog_timeout"], "threshold": node._node_params["contacts.threshold"],
    }
    return slots, values, reader._names_cdr
