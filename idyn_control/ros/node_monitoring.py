"""The controller node's monitoring: ~/state, predicted contact wrenches, /diagnostics and
throttled logs, published in the slack the tick leaves."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from .node_loop import OFF, SAFE

LOG_THROTTLE_S = 2.0
STATE_BUDGET_S = 150e-6        # typical cost of ~/state + contact wrenches (measured, loaded VM)
DIAGNOSTICS_BUDGET_S = 400e-6  # typical cost of /diagnostics
MONITOR_MAX_DEFER_S = 0.5      # publish anyway after waiting this long for slack


class MonitoringMixin:
    """ControllerNode's monitoring outputs."""

    def _monitor(self, now: float, next_tick: float, ticks: int = 1, state: bool = True) -> None:
        """Decimated ~/state, contact wrenches and /diagnostics, in the slack before the next
        tick: a due message waits (up to MONITOR_MAX_DEFER_S) while less than its budget is
        left, so monitoring does not push the next tick past its deadline. ``state`` False:
        /diagnostics only (the compiled loop publishes its ticks' ~/state itself)."""
        if self._mode == OFF:
            return
        slack = next_tick - now
        rate = self._node_params["monitor_rate_hz"]
        if rate > 0.0 and state:
            self._monitor_countdown -= ticks
            # at the full rate (rate ≥ update_rate) ~/state is part of every tick, never deferred
            if self._monitor_countdown <= 0 and (slack > STATE_BUDGET_S or rate >= self.rate_hz
                                                 or -self._monitor_countdown * self.period_s > MONITOR_MAX_DEFER_S):
                self._monitor_countdown = max(1, int(round(self.rate_hz / rate)))
                self._publish_state()
                now = time.monotonic()
                slack = next_tick - now
        rate = self._node_params["diagnostics_rate_hz"]
        if rate > 0.0:
            self._diag_countdown -= ticks
            if self._diag_countdown <= 0 and (slack > DIAGNOSTICS_BUDGET_S
                                              or -self._diag_countdown * self.period_s > MONITOR_MAX_DEFER_S):
                self._diag_countdown = max(1, int(round(self.rate_hz / rate)))
                self._publish_diagnostics(now)

    def _publish_state(self) -> None:
        m = self.model
        pos, vel, eff = self._state_views
        stamp = self._stamp_in["joint_states"]
        msg = self._state_msg
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        np.take(self._q[m.joint_q_index], self._joints_index, out=pos)
        np.take(self._v[m.n_base:], self._joints_index, out=vel)
        np.take(self._tau, self._joints_index, out=eff)
        self._state_pub.publish(msg)
        result = self._last_result
        forces = self._forces_world
        forces[:] = 0.0
        if self._last_fast and self._last_source == "formulation":  # compiled loop: per configured contact
            forces[:] = self.ctrl.formulation.forces
        elif result is not None:
            for frame, f in zip(result.contact_frames, result.forces):
                forces[m.contact_index(frame)] = f
        rotation = self.ctrl.formulation.contacts.rotation
        for i, (msg_w, pub) in enumerate(zip(self._wrench_msgs, self._wrench_pubs)):
            f_local = rotation[i].T @ forces[i]
            msg_w.header.stamp = msg.header.stamp
            msg_w.wrench.force.x, msg_w.wrench.force.y, msg_w.wrench.force.z = (
                float(f_local[0]), float(f_local[1]), float(f_local[2]))
            pub.publish(msg_w)

    def diagnostics_values(self, now: float | None = None) -> dict[str, Any]:
        """Everything /diagnostics reports, as a dict (also handy in tests)."""
        now = time.monotonic() if now is None else now
        ctrl = self.ctrl
        values: dict[str, Any] = {
            "mode": self._mode,
            "loop_mode": self.loop_mode,
            "loop": self.loop_report(),
            "backend": ctrl.formulation.backend,
            "update_rate_hz": self.rate_hz,
            "formulation": ctrl.config.formulation,
            "last_source": self._last_source,
            "watchdog": "tripped" if self._watchdog_tripped else "ok",
            "watchdog_trips": self._watchdog_trips,
            "input_gaps": self._input_gaps,
            "predicted_ticks": self._predicted_ticks,
            "prediction_expired": self._prediction_expired,
            "resumed_ticks": self._resumed_ticks,
            "saturated_joint_ticks": self._saturated_joints,
            "ground_updates": self._ground_updates,
            "rejected_parameters": self.rejected_parameters,
            "callback_exceptions": self.callback_exceptions,
        }
        for key, v in self._stats.summary().items():
            values[key] = v
        if self._rt is not None:  # ticks run compiled / handed to Python by the native loop
            for name in ("compiled_ticks", "python_ticks", "dropped_records"):  # dropped: bookkeeping fell behind
                values[f"native_loop.{name}"] = self._rt.counter(name)
        values["input_to_command_hist"] = self._stats.latency_hist.encode()
        for status, n in self._status_counts.items():
            values[f"status.{status}"] = n
        for source, n in self._source_counts.items():
            values[f"source.{source}"] = n
        for name, n in ctrl.formulation.relaxations().items():
            values[f"relaxed.{name}"] = n
        for name in ("joint_states", "odom", "contact_states"):
            t = self._t_in[name]
            values[f"age_ms.{name}"] = (now - t) * 1e3 if t > 0.0 else -1.0
        t = float(self._meas_t.min())  # the oldest contact's measured force (-1: one never came)
        values["age_ms.measured_wrench"] = (now - t) * 1e3 if t > 0.0 else -1.0
        values["stale_ticks.measured_wrench"] = self._meas_stale_ticks
        if self._takes_force_refs:  # the oldest force contact's reference (-1: one never came)
            t = float(self._force_ref_t[self._is_force_contact].min(initial=math.inf))
            values["age_ms.desired_wrench"] = (now - t) * 1e3 if 0.0 < t < math.inf else -1.0
            values["stale_ticks.desired_wrench"] = self._force_ref_stale_ticks
        for (inp, reason), n in self._drops.items():
            values[f"dropped.{inp}.{reason}"] = n
        for key in ("joint_kp", "joint_kd"):
            values[f"gain.{key}_mean"] = float(np.mean(getattr(ctrl, key)))
        values["effort_limit_scale"] = ctrl.config.effort_limit_scale
        return values

    def _publish_diagnostics(self, now: float) -> None:
        values = self.diagnostics_values(now)
        msg = self._diag_msg
        if msg is None or len(self._diag_values) != len(values):  # first time: build the message once
            status = DiagnosticStatus(name=f"{self.get_name()}: controller loop",
                                      hardware_id=self.model.pin_model.name)
            self._diag_values = [KeyValue(key=k) for k in values]
            status.values = self._diag_values
            msg = self._diag_msg = DiagnosticArray(status=[status])
        for kv, v in zip(self._diag_values, values.values()):
            kv.value = f"{v:.6g}" if isinstance(v, float) else str(v)
        status = msg.status[0]
        problems = []
        if self._watchdog_tripped:
            problems.append("watchdog tripped (stale inputs)")
        elif self._predictor.active:
            problems.append("input gap: controlling on the predicted state")
        if self._mode == SAFE:
            problems.append("inactive: safe output")
        if self._last_source not in ("formulation", "none"):
            problems.append(f"fallback output ({self._last_source})")
        status.level = DiagnosticStatus.WARN if problems else DiagnosticStatus.OK
        status.message = "; ".join(problems) if problems else f"{self._mode}, {values['ticks']:.0f} ticks"
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)

    def _log_throttled(self, key: str, text: str) -> None:
        now = time.monotonic()
        if now - self._log_times.get(key, 0.0) >= LOG_THROTTLE_S:
            self._log_times[key] = now
            self.get_logger().warning(text)
