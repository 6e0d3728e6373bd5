"""The controller node's compiled input → command path (``rt.cpp``), for ``loop_mode: native``.

A C++ thread of its own is woken by the middleware for each /joint_states sample and runs
the routine tick without Python: read the CDR bytes (and the odometry and contact estimates
that came before them, :meth:`RtLoop.inputs`), the compiled controller tick
(:mod:`idyn_control.native.tick`: the gait node's gait, contact switches with their ramps,
Pinocchio pass, kinematic layer, compiled formulation, clamps), command published with
``rcl_publish_serialized_message``, then the monitoring messages (:meth:`RtLoop.monitor`).
Anything that is not routine is handed to the node's Python tick with the same bytes, on
the same thread (one tick at a time): the first tick after activation, new references,
gains or options, a stale input, a joint-name layout or a stamp the fast path has not seen
accepted, a failed or non-finite solve (the compiled tick then takes back what it changed).
After each Python tick the node
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
PLAN_SLOTS = ("tick_fn", "tick", "joint_q_index", "node_tau", "node_q", "node_v", "node_mask", "in_jq", "in_jv",
              "cmd_index", "cmd_view", "names_index", "state_bounds")
#: rt.cpp PlanValue, in order
PLAN_VALUES = ("nv", "nb", "na", "k", "n_cmd", "names_at", "names_len", "n_names", "unknown", "timeout", "threshold")
#: rt.cpp Record, in order (one row per fast tick)
RECORD = ("received_ns", "wake_ns", "start_ns", "published_ns", "start_mono", "published_mono", "saturated",
          "stamp_ns", "overwritten")
RING = 1024
#: rt.cpp counters
COUNTERS = ("compiled_ticks", "python_ticks", "unknown_joint", "dropped_records")
#: rt.cpp input_drops: the odometry and contact estimates the loop takes and drops
INPUT_DROPS = (("odom", "nonfinite"), ("odom", "implausible"), ("odom", "bad_quaternion"), ("odom", "out_of_order"),
               ("contact_states", "wrong_size"), ("contact_states", "nonfinite"))

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
        self._input_state = np.zeros(3 + len(INPUT_DROPS))

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

    def monitor(self, every: int, messages, rotation: np.ndarray, forces: np.ndarray, local: np.ndarray) -> None:
        """Publish monitoring from the fast ticks, every ``every`` of them (0: none).

        ``messages``: (publisher pointer, CDR bytearray, stamp offset or -1, [(byte offset,
        address of a double), ...]) each; the tick writes its input's stamp and copies the
        doubles into the bytes, then publishes them. ``local`` (k, 3) receives the forces
        ``forces`` (k, 3, world) in the contact frames ``rotation`` (k, 3, 3) first, for
        fields that read it. Call from the loop thread (a Python tick) or stopped.
        """
        fields = [f for _, _, _, fs in messages for f in fs]
        counts = [len(m[3]) for m in messages]
        self.handle.monitor(int(every), [m[0] for m in messages], [m[1] for m in messages],
                            np.array([m[2] for m in messages], dtype=np.int64),
                            np.cumsum([0] + counts[:-1]).astype(np.int32), np.array(counts, dtype=np.int32),
                            np.array([f[0] for f in fields], dtype=np.int64),
                            np.array([f[1] for f in fields], dtype=np.uint64), rotation, forces, local)

    def inputs(self, odom_pointer: int, contacts_pointer: int, twist_in_parent: bool, limits: np.ndarray,
               base_q: np.ndarray, base_v: np.ndarray, contacts: np.ndarray) -> None:
        """The loop takes odometry and contact estimates itself from these rcl subscriptions
        (0: none), checked as conversions.OdometryReader and the node do (``limits``: |position|,
        |linear|, |angular| plausible), into ``base_q``, ``base_v``, ``contacts`` (the node's
        buffers): a tick uses the samples that arrived before its joint states. Call before
        :meth:`start`."""
        if self.handle.inputs(odom_pointer, contacts_pointer, bool(twist_in_parent), limits, base_q, base_v,
                              contacts) != 0:
            raise NativeUnavailable("the compiled loop could not allocate its input buffers")

    def input_state(self) -> np.ndarray:
        """(time of the last odometry, of the last contact estimates [s, monotonic; 0: none],
        the last odometry stamp [ns], then the drop counts of :data:`INPUT_DROPS`)."""
        self.handle.input_state(self._input_state)
        return self._input_state

    def sync(self, fast: bool, stamp_ns: int) -> None:
        """After a Python tick: may the next ticks run compiled, with the stamp it used."""
        self.handle.sync(bool(fast), int(stamp_ns))

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

    def force_refs(self, lambda_des: np.ndarray | None, rotation: np.ndarray, is_force: np.ndarray,
                   timeout: float) -> None:
        """Desired forces in the fast ticks: each writes the latest reference of the contacts
        flagged in ``is_force`` (k) into ``lambda_des`` (k, 3: the formulation's, world), turning
        one given in the contact frame with ``rotation`` (the contact set's, the last tick's),
        and hands the tick to Python when one is older than ``timeout`` [s] (> 0). None: no
        desired forces. Call from the loop thread (a Python tick) or stopped."""
        self.handle.force_refs(lambda_des, rotation, is_force, float(timeout))

    def set_desired_force(self, index: int, force: np.ndarray, local: bool, t: float) -> None:
        """From any thread: an accepted desired force [N] of contact ``index``, in its contact
        frame (``local``) or the world's, received at ``t`` (``time.monotonic``)."""
        if self.handle:
            self.handle.set_desired_force(int(index), force, bool(local), float(t))

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


def plan_for(node, gait=None) -> tuple[dict[str, int], dict[str, float], bytes] | None:
    """The fast tick's plan for ``node``'s current controller (with ``gait``, its compiled
    gait, if any) and inputs, or None when its tick cannot run compiled (formulation or
    kinematic layer in Python, name layout unknown)."""
    from .tick import function_address

    reader = node._js
    if reader._index is None or reader._names_at < 0:
        return None
    tick = prepare(node, gait)
    if tick is None:
        return None
    # a running joint trajectory: sampled by the compiled tick, into the node's references
    tick.set_trajectory(node._trajectory, node._q_ref_full, node._v_ref_full, node._a_ref_full)
    tick.plan()
    m = node.model
    slots = {
        "tick_fn": function_address(), "tick": tick.handle, "joint_q_index": _addr(tick.layer.joint_q_index),
        "node_tau": _addr(node._tau), "node_q": _addr(node._q), "node_v": _addr(node._v),
        "node_mask": _addr(node._mask), "in_jq": _addr(node._in_jq), "in_jv": _addr(node._in_jv),
        "cmd_index": _addr(node._cmd_index), "cmd_view": _addr(node._cmd_view), "names_index": _addr(reader._index),
        "state_bounds": _addr(reader.bounds),
    }
    values = {
        "nv": m.nv, "nb": m.n_base, "na": m.na, "k": len(m.contacts),
        "n_cmd": node._cmd_view.size, "names_at": reader._names_at, "names_len": len(reader._names_cdr),
        "n_names": len(reader._names), "unknown": float(bool(reader.unknown)),
        "timeout": node._node_params["watchdog_timeout"], "threshold": node._node_params["contacts.threshold"],
    }
    return slots, values, reader._names_cdr


def prepare(node, gait=None):
    """The compiled tick of ``node``'s controller (and ``gait``), kept as ``node._rt_tick``;
    None when it cannot run compiled."""
    from .tick import Tick

    tick = getattr(node, "_rt_tick", None)
    if tick is None or not tick.serves(node.ctrl, gait):
        try:
            tick = Tick(node.ctrl, gait)
        except NativeUnavailable:
            tick = None
        node._rt_tick = tick
    return tick


def hand_over(node) -> None:
    """Before a Python tick of ``node``: take over the contact set as its compiled ticks left it."""
    tick = getattr(node, "_rt_tick", None)
    if tick is not None:
        tick.hand_over()
