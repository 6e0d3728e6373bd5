"""The controller node's side of ``loop_mode native``: the compiled loop (:mod:`idyn_control.native.rt`)
started, planned, handed its non-routine ticks and booked (see :mod:`.node_loop`).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import WrenchStamped
from sensor_msgs.msg import JointState

from .conversions import BASE_ANGULAR_MAX, BASE_LINEAR_MAX, BASE_POSITION_MAX, cdr_template
from .node_loop import ACTIVE, LoopMixin

RT_DRAIN_EVERY = 10           # native mode: bookkeeping of the compiled loop's ticks, in batches of this many
RT_DRAIN_WAIT_S = 0.02        # ... or at least this often
# native mode: a Python tick on the loop's thread gives the GIL up in every compiled call and
# waits for it back; with the interpreter's 5 ms switch interval another thread could keep
# it that long (the activation tick took 4-5 ms in the demo)
RT_GIL_SWITCH_INTERVAL_S = 2e-4


class NativeLoopMixin:
    """ControllerNode's compiled loop (loop_mode native)."""

    def _start_native_loop(self, cpu: int | None) -> None:
        from ..native import rt

        m = self.model
        self._rt = rt.RtLoop(self._rt_sub.pointer, self._cmd_pub.handle.pointer, self._cmd_cdr, self._rt_slow,
                             priority=self.loop_priority, cpus=[cpu] if cpu is not None else self.cpu_affinity,
                             drain_every=RT_DRAIN_EVERY, k=len(m.contacts), na=m.na, nv=m.nv)
        self._rt.set_params(self._node_params["watchdog_timeout"], self._node_params["contacts.threshold"])
        self._rt.inputs(self._rt_odom_sub.pointer if self._rt_odom_sub is not None else 0,
                        self._rt_contacts_sub.pointer if self._rt_contacts_sub is not None else 0,
                        self._odom.twist_in_parent, np.array([BASE_POSITION_MAX, BASE_LINEAR_MAX, BASE_ANGULAR_MAX]),
                        self._in_base_q, self._in_base_v, self._in_contacts)
        self._rt_input_drops[:] = 0.0
        # built now, not on the loop's thread after its first tick (the input that follows
        # would wait for them): the monitoring templates and the compiled tick
        self._rt_monitor_key = None
        self._rt_wrench_local = np.zeros((len(m.contacts), 3))
        self._rt_monitor_templates = self._rt_monitor_messages()
        compiled, gait = self._compiled_references()
        if compiled:
            rt.prepare(self, gait)
        with self._lock:
            if self._t_in["odom"] > 0.0:
                self._rt.set_base(self._in_base_q, self._in_base_v)
            if self._t_in["contact_states"] > 0.0:
                self._rt.set_contacts(self._in_contacts)
            for i in self._force_indices:  # desired forces received before the loop started
                if self._force_ref_t[i] > 0.0:
                    self._rt.set_desired_force(i, self._force_ref_in[i], self._force_ref_local[i],
                                               self._force_ref_t[i])
        self._rt.set_spin(self.loop_spin_us * 1e-6, self.period_s)
        sys.setswitchinterval(RT_GIL_SWITCH_INTERVAL_S)
        self._rt.start()
        self._book_thread = threading.Thread(target=self._run_bookkeeping, args=(self._rt,),
                                             name="idyn_bookkeeping", daemon=True)
        self._book_thread.start()

    def _rt_slow(self, data: bytes, received_ns: int, wake_ns: int) -> None:
        """The compiled loop handed this input to Python: the node's own tick, then tell the
        loop whether the next ticks are routine (runs on the loop's thread)."""
        from ..native import rt

        try:
            with self._book_lock:
                if self._rt is not None:
                    self._rt_drain(self._rt)  # the fast ticks before this one first
                    self._rt_book_inputs(self._rt)  # the odometry and contacts the loop took
                    rt.hand_over(self)  # the contact set as they left it
                self._on_joint_states(data, {"received_timestamp": received_ns}, wake_ns)
                self._rt_after_python_tick()
        except Exception as exc:  # noqa: BLE001 - never into C++ (garbage is collected by the bookkeeping thread)
            self._log_throttled("native", f"native loop: Python tick failed: {type(exc).__name__}: {exc}")

    def _rt_after_python_tick(self) -> None:
        rt_loop = self._rt
        if rt_loop is None:
            return
        interrupts = self._rt_interrupts
        compiled, gait = self._compiled_references()
        fast = (compiled and self._mode == ACTIVE and not self._watchdog_tripped and not self._need_reset
                and (self._trajectory is None or self._trajectory_compiles())
                and self._base_ref is None and not self._force_refs_need_python()
                and not self._measured_any and not self._pending_fields and self._pending_formulation is None
                and not self._ground_pending
                and self._last_source == "formulation")
        if fast:
            from ..native import rt

            plan = rt.plan_for(self, gait)
            if plan is None:
                fast = False
            else:
                rt_loop.plan(*plan)
                self._rt_plan_monitoring(rt_loop)
                self._rt_plan_force_refs(rt_loop)
        rt_loop.sync(fast, self._stamp_in["joint_states"])
        if self._rt_interrupts != interrupts:  # a callback changed something meanwhile
            rt_loop.set_fast(False)

    def _force_refs_need_python(self) -> bool:
        """Desired forces that only the Python tick applies: a formulation that takes them
        and runs in Python (a compiled one reads the references the loop writes)."""
        return self._takes_force_refs and getattr(self.ctrl.formulation, "_engine", None) is None

    def _rt_plan_force_refs(self, rt_loop) -> None:
        """The compiled loop writes the desired forces into the compiled solver's buffer."""
        f = self.ctrl.formulation
        rt_loop.force_refs(f.lambda_des if self._takes_force_refs else None, f.contacts.rotation,
                           self._is_force_contact, self._node_params["contacts.desired_wrench_timeout"])

    def _trajectory_compiles(self) -> bool:
        """A running joint trajectory is sampled by the compiled tick on the system clock
        (CLOCK_REALTIME): only when it is the node's clock too (no simulated time)."""
        return not self.get_clock().ros_time_is_active

    def _rt_plan_monitoring(self, rt_loop) -> None:
        """The compiled loop publishes the monitoring of its ticks (at monitor_rate_hz)."""
        rate = self._node_params["monitor_rate_hz"]
        every = max(1, int(round(self.rate_hz / rate))) if rate > 0.0 else 0
        key = (self._rt_tick, every)
        if key == self._rt_monitor_key:
            return
        f = self.ctrl.formulation
        rt_loop.monitor(every, self._rt_monitor_templates, f.contacts.rotation, f.forces, self._rt_wrench_local)
        self._rt_monitor_key = key

    def _rt_monitor_messages(self) -> list:
        """What the compiled loop publishes as monitoring (see RtLoop.monitor): ~/state and the
        predicted contact wrenches, as :meth:`_publish_state` does."""
        m, na = self.model, self.model.na
        msg = JointState()
        msg.name = list(self.joints)
        msg.position, msg.velocity, msg.effort = [0.0] * na, [0.0] * na, [0.0] * na
        buf, stamp_at, at = cdr_template(msg, [f"{f}[{j}]" for f in ("position", "velocity", "effort")
                                               for j in range(na)])
        q, v, tau = self._q.ctypes.data, self._v.ctypes.data, self._tau.ctypes.data
        fields = []
        for j, joint in enumerate(self._joints_index):  # ~/state is in `joints` order
            joint = int(joint)
            fields += [(at[f"position[{j}]"], q + 8 * int(m.joint_q_index[joint])),
                       (at[f"velocity[{j}]"], v + 8 * (m.n_base + joint)), (at[f"effort[{j}]"], tau + 8 * joint)]
        messages = [(self._state_pub.handle.pointer, buf, stamp_at, fields)]
        local = self._rt_wrench_local.ctypes.data
        for i, (frame, pub) in enumerate(zip(m.contact_frames, self._wrench_pubs)):
            msg_w = WrenchStamped()
            msg_w.header.frame_id = frame
            axes = [f"wrench.force.{c}" for c in "xyz"]
            buf, stamp_at, at = cdr_template(msg_w, axes)
            messages.append((pub.handle.pointer, buf, stamp_at,
                             [(at[a], local + 8 * (3 * i + c)) for c, a in enumerate(axes)]))
        return messages

    def _compiled_references(self) -> tuple[bool, Any]:
        """Whether the compiled tick evaluates this node's references itself, and the
        compiled gait it runs for them (None: none). A subclass that sets references in
        Python every tick (its own _apply_references) needs the Python tick every time."""
        return type(self)._apply_references is LoopMixin._apply_references, None

    def _rt_interrupt(self) -> None:
        """A reference, gain or mode changed: the next tick runs in Python (it applies it)."""
        self._rt_interrupts += 1
        if self._rt is not None:
            self._rt.set_fast(False)

    def _run_bookkeeping(self, rt_loop) -> None:
        """Native mode: statistics, counters and monitoring of the compiled ticks, in batches."""
        while self._loop_running:
            rt_loop.wait(RT_DRAIN_WAIT_S)
            with self._book_lock:
                self._rt_drain(rt_loop)
                self._rt_book_inputs(rt_loop)
            self._maybe_collect(time.monotonic() + self.period_s)

    def _rt_book_inputs(self, rt_loop) -> None:
        """The odometry and contact estimates the loop took: their receive times and stamp (for
        Python ticks and /diagnostics) and the drops it counted (dropped.odom.*, ...)."""
        from ..native.rt import INPUT_DROPS

        state = rt_loop.input_state()
        with self._lock:
            if state[0] > 0.0:
                self._t_in["odom"] = float(state[0])
                self._stamp_in["odom"] = int(state[2])
            if state[1] > 0.0:
                self._t_in["contact_states"] = float(state[1])
        drops, booked = state[3:], self._rt_input_drops
        for (inp, reason), now, before in zip(INPUT_DROPS, drops, booked):
            if now > before:
                self._drops[(inp, reason)] += int(now - before)
                self._log_throttled(f"{inp}.{reason}", f"dropped {inp} message ({reason}) "
                                    f"[{self._drops[(inp, reason)]} so far]")
        booked[:] = drops

    def _rt_drain(self, rt_loop) -> None:
        """Book the compiled loop's ticks read from its ring (hold ``_book_lock``)."""
        records = rt_loop.take()
        if records is None:
            return
        try:
            stats, counts = self._stats, self._status_counts
            for r in records:
                started, published = r[4], r[5]
                stats.record(started, started, published)
                stats.record_input(int(r[0]), int(r[1]), int(r[2]), int(r[3]))
                stats.overwritten_inputs += int(r[8])
                counts["solved"] += 1
                self._source_counts["formulation"] += 1
                self._saturated_joints += int(r[6])
            last = records[-1]
            if last[4] > self._last_scheduled:  # a Python tick may have run since
                self._last_scheduled = self._t_in["joint_states"] = float(last[4])
                self._stamp_in["joint_states"] = max(self._stamp_in["joint_states"], int(last[7]))
            self._last_source = "formulation"
            self._last_result = None
            self._last_fast = True
            # off the loop's thread: monitoring takes no slack from the loop (the values it
            # publishes are the latest tick's, read while the loop may be writing the next)
            now = time.monotonic()
            self._monitor(now, now + 1.0, ticks=len(records), state=self._rt_monitor_key is None)
            unknown = int(rt_loop.counter("unknown_joint"))
            self._drops[("joint_states", "unknown_joint")] += unknown - self._rt_unknown
            self._rt_unknown = unknown
        except Exception as exc:  # noqa: BLE001 - the bookkeeping thread must survive
            self._log_throttled("native", f"native loop: bookkeeping failed: {type(exc).__name__}: {exc}")
