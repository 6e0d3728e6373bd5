"""The controller node's loop: real-time set-up, the watchdog and the Python tick.

Loop designs (``loop_mode``; measured by ``bench/ros_loop.py``):

- ``native`` (default): ``triggered`` (below) with the routine tick compiled. A C++ thread
  of its own (:mod:`idyn_control.native.rt`, SCHED_FIFO ``loop_priority``) is woken by the
  middleware for each /joint_states sample on a subscription the executor does not serve,
  and runs the tick without Python or the GIL: CDR bytes → the compiled controller tick
  (:mod:`idyn_control.native.tick`: a running ~/joint_reference trajectory sampled (on the
  system clock: not under simulated time), the gait node's compiled gait, the contacts held — switches,
  make/break ramps included —, Pinocchio, kinematic layer, compiled formulation (wbc_qp,
  qp_coulomb, qp_noslip, pidc_qp and its baselines with the latest desired forces; rnea on
  a fixed base), clamps) → command published through rcl,
  then the monitoring topics (~/state, predicted contact wrenches, the gait's ~/reference)
  at ``monitor_rate_hz``, published from the same thread. Whatever is not routine is handed
  to the Python tick on that thread with the same bytes (the first tick after activation, a
  new reference, gain or option, a trajectory's first and last tick, stale inputs, a joint-name
  layout not seen before, a stamp out of order, a failed or non-finite solve, a formulation
  that only runs in Python), and after each Python tick the node tells the loop whether the
  next ticks are routine again. A bookkeeping thread reads the compiled ticks' records
  (statistics, counters) and publishes /diagnostics, so the loop never waits for Python in a
  routine tick. Odometry, contact estimates and /cmd_vel still arrive through the executor
  and are copied to the loop (data writes, no Python tick). Without the
  compiled loop (not built, no ROS 2 headers) the node runs ``triggered`` with a warning.
- ``triggered``: the Python twin of ``native``, and its fallback: one tick per
  /joint_states message, run in its executor callback as soon as it arrives (the hardware
  or simulator clock drives the loop, like ros2_control's read → update → write; the state
  publisher must run at ``update_rate``); a timer covers a silent input (watchdog). A miss
  is a tick whose command left more than one period after its input's callback started.

Designs that tick on the node's own clock (a deadline loop between executor callbacks, a
loop thread, rclpy timers on either executor) were measured beside these two by
``bench/ros_loop.py`` and lost on every measure (an input waits up to a period for its tick;
Solo12 standing, 20 s each, loaded 2-core VM: node misses 10-80 % against triggered's 1.9 %
and native's 0.6 %, input → command p50 0.55-2.1 ms against 0.54 and 0.21 ms); they were
removed.

The path /joint_states → command is kept short: /joint_states is subscribed raw and read
from its CDR bytes (:meth:`.JointStateReader.read_serialized`: no Python message object),
the command is kept serialized and published as bytes, and everything that is not needed
for the command (counters, statistics, monitoring) runs after it is published. Per tick
the node allocates nothing but the bytes handed to the middleware (messages and buffers are
preallocated and written through numpy views); the garbage collector is frozen after
configure, disabled while the loop runs and collected (young generations) only when a tick
left slack. Monitoring (~/state, contact wrenches, /diagnostics) is decimated and
published in the slack before the next deadline.

Input → command latency ("joint state in → command out") is measured in the node from the
rmw ``received_timestamp`` of each /joint_states sample to the command's publish, on the
system clock the rmw stamps use (:mod:`.loop_stats`), and reported in /diagnostics
(``input_to_command_*``, with its dispatch/wait split and a whole-run histogram).
"""

from __future__ import annotations

import ctypes
import gc
import os
import time
from pathlib import Path

import numpy as np
import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException


GC_EVERY_TICKS = 1000    # collect young generations this often, when the tick left slack
GC_SLACK_S = 300e-6
WATCHDOG_TIMER_S = 0.005      # how often staleness is checked without input
#: /joint_states this many periods overdue is an input gap: with prediction_horizon > 0 the
#: node then ticks on its own clock (at update_rate) on the state it predicts
LATE_PERIODS = 1.5
PR_SET_TIMERSLACK = 29
MCL_CURRENT, MCL_FUTURE = 1, 2  # mlockall flags (Linux)

# modes of the output
OFF, WAITING, ACTIVE, SAFE = "off", "waiting_for_state", "active", "safe"


class LoopMixin:
    """ControllerNode's loop (its attributes are made by ControllerNode.__init__/_configure)."""

    def loop_report(self) -> str:
        """Which loop runs the ticks and what computes them, with the reason when it is not the
        compiled one (logged at configure, ``loop`` in /diagnostics)."""
        from .. import native

        f = self.ctrl.formulation
        if f.backend == "native":
            tick = f"compiled tick ({self.ctrl.config.formulation}, {native.status()[1]})"
        else:
            why = f.native_unavailable
            if why is None:
                why = ("backend python" if f.options.get("backend") == "python"
                       else f"{self.ctrl.config.formulation} runs in Python only")
            tick = f"Python tick ({why})"
        if self.loop_mode == "native":
            return f"native loop: {tick}"
        chosen = (f"compiled loop unavailable: {self._loop_fallback}" if self._loop_fallback
                  else f"loop_mode {self.loop_mode}")
        return f"python {self.loop_mode} loop ({chosen}): {tick}"

    def _native_loop_available(self) -> bool:
        """loop_mode native needs the compiled loop (rt.cpp) built for this ROS 2; else triggered."""
        try:
            from ..native import rt

            rt.load_rt()
        except Exception as exc:  # noqa: BLE001 - any reason: say it, run the Python loop
            self._loop_fallback = str(exc)
            self.get_logger().warning(f"loop_mode native unavailable ({exc}); running loop_mode triggered")
            return False
        self._loop_fallback = None
        return True

    def make_executor(self):
        """The executor the node runs on: the EventsExecutor (the lowest dispatch cost of
        rclpy's executors, measured by bench/ros_loop.py)."""
        from rclpy.experimental import EventsExecutor

        return EventsExecutor()

    def _start_loop(self) -> None:
        if self._loop_running:
            return
        self._loop_running = True
        self._last_scheduled = time.monotonic()
        gc.disable()  # collected by the loop when a tick leaves slack
        self._pin_cpus()
        loop_cpu = self._native_loop_cpu()
        self._prioritize_middleware(loop_cpu)
        self._lock_memory()
        if self.loop_mode == "native":  # the compiled loop's own thread ticks; the executor serves the rest
            self._start_native_loop(loop_cpu)
        else:
            self._set_priority()  # triggered: the executor thread runs the tick
        # ticks come from /joint_states; a timer covers a silent input, and during an input gap
        # (prediction_horizon) a second one ticks at the loop's rate on the predicted state. That
        # one runs on the monotonic clock: on the node's (under use_sim_time the simulator's) a
        # tick that found the clock not yet moved on waited for the next period's /clock, which
        # a lock-step simulator waiting for this very command never sent
        self._watchdog_timer = self.create_timer(WATCHDOG_TIMER_S, self._on_watchdog_timer)
        self._predict_timer = self.create_timer(self.period_s, self._on_predict_timer,
                                                clock=Clock(clock_type=ClockType.STEADY_TIME))
        self._predict_timer.cancel()

    def _native_loop_cpu(self) -> int | None:
        """native mode: the CPU of the loop thread and the middleware's threads (``loop_cpu``), or None."""
        if self.loop_mode != "native" or self.loop_cpu == -2:
            return None
        allowed = sorted(os.sched_getaffinity(0))  # after cpu_affinity
        if self.loop_cpu == -1:
            return allowed[-1]
        if self.loop_cpu not in allowed:
            self.get_logger().warning(f"loop_cpu {self.loop_cpu} not available (have {allowed}); not pinned")
            return None
        return self.loop_cpu

    def _stop_loop(self) -> None:
        self._loop_running = False
        if self._rt is not None:
            rt_loop = self._rt
            rt_loop.stop()  # waits for its tick
            self._book_thread.join(timeout=2.0)
            with self._book_lock:
                self._rt_drain(rt_loop)
            self._rt = None
            rt_loop.close()
        for name in ("_watchdog_timer", "_predict_timer"):
            timer = getattr(self, name)
            if timer is not None:
                self.destroy_timer(timer)
                setattr(self, name, None)
        gc.enable()

    def _pin_cpus(self) -> None:
        """Restrict every thread of the process to ``cpu_affinity`` (threads made later inherit it)."""
        if not self.cpu_affinity:
            return
        cpus = set(self.cpu_affinity)
        try:
            available = os.sched_getaffinity(0)
            if not cpus <= available:
                raise OSError(f"CPUs {sorted(cpus - available)} not available (have {sorted(available)})")
            for tid in os.listdir("/proc/self/task"):  # sched_setaffinity acts on one thread
                try:
                    os.sched_setaffinity(int(tid), cpus)
                except ProcessLookupError:  # the thread ended meanwhile
                    pass
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"cpu_affinity {sorted(cpus)} not applied ({exc}); running on any CPU")

    def _lock_memory(self) -> None:
        """``lock_memory``: mlockall, as ros2_control's controller_manager does, so the tick never
        waits for a page fault. Future allocations are locked too only when that cannot fail
        them (no memlock limit, or root); otherwise what is mapped now is locked."""
        if not self.lock_memory or self._memory_locked:
            return
        import resource

        limit = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
        flags = MCL_CURRENT | (MCL_FUTURE if limit == resource.RLIM_INFINITY or os.geteuid() == 0 else 0)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(flags) != 0:
            err = ctypes.get_errno()
            self.get_logger().warning(f"lock_memory: mlockall refused ({os.strerror(err)}); pages may fault in "
                                      "the tick (raise the memlock limit or grant CAP_IPC_LOCK)")
            return
        self._memory_locked = True

    def _prioritize_middleware(self, cpu: int | None = None) -> None:
        """SCHED_FIFO ``middleware_priority`` for the middleware's threads: those it named
        (Fast DDS: dds.*; Cyclone: recv*, tev, ...), made when the context was created, and
        pinned to ``cpu`` when given (the loop's: the thread that receives an input wakes the
        loop on its own CPU, a preemption instead of an inter-processor interrupt). Threads
        still named after the process (Python's, BLAS workers, which may spin) keep their
        scheduling; the loop threads started after this set their own priority."""
        if self.middleware_priority <= 0 and cpu is None:
            return
        param = os.sched_param(self.middleware_priority)
        try:
            process = Path("/proc/self/comm").read_text().strip()
            for tid in os.listdir("/proc/self/task"):
                try:
                    if Path(f"/proc/self/task/{tid}/comm").read_text().strip() == process:
                        continue
                    if self.middleware_priority > 0:
                        os.sched_setscheduler(int(tid), os.SCHED_FIFO, param)
                    if cpu is not None:
                        os.sched_setaffinity(int(tid), {cpu})
                except (ProcessLookupError, FileNotFoundError):  # the thread ended meanwhile
                    pass
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"middleware_priority {self.middleware_priority}: SCHED_FIFO refused "
                                      f"({exc}); middleware threads keep normal scheduling")

    def _set_priority(self) -> None:
        """Timer slack 1 ns, and SCHED_FIFO when ``loop_priority`` > 0, for the calling thread."""
        set_timer_slack()
        if self.loop_priority <= 0:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.loop_priority))
        except (OSError, AttributeError) as exc:
            self.get_logger().warning(f"loop_priority {self.loop_priority}: SCHED_FIFO refused ({exc}); "
                                      "running with normal scheduling")

    def _spin_once(self, executor, timeout: float) -> None:
        """One executor step; an exception a callback raises is logged, counted in
        /diagnostics (``callback_exceptions``) and survived: a malformed request (e.g. a
        SetParameters whose value type does not exist, which rclpy's parameter service
        raises on) must not take the controller down. Shutdown still ends the loop."""
        try:
            executor.spin_once(timeout_sec=timeout)
        except (ExternalShutdownException, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - survive any callback's failure, report it
            self.callback_exceptions += 1
            self._log_throttled("callback_exception", f"a callback raised and was skipped: "
                                f"{type(exc).__name__}: {exc}")

    def spin(self, executor) -> None:
        """Run the executor until shutdown, surviving any callback's failure (_spin_once)."""
        while rclpy.ok(context=self.context):
            self._spin_once(executor, 0.1)

    def _input_age(self, now: float) -> float:
        """Time since the last /joint_states a tick used [s] (the compiled loop's included):
        on the monotonic clock, and under simulated time no more than the node's clock has
        advanced past its stamp (a lock-step simulator waiting for a command, or one slower
        than real time, is no input gap)."""
        last = self._t_in["joint_states"]
        if self._rt is not None:
            last = max(last, self._rt.last_tick())
        age = now - last if last > 0.0 else 0.0
        stamp = self._stamp_in["joint_states"]
        clock = self.get_clock()
        if stamp > 0 and clock.ros_time_is_active:
            age = min(age, max((clock.now().nanoseconds - stamp) * 1e-9, 0.0))
        return age

    def _predicting(self, now: float) -> bool:
        """An input gap the prediction bridges: prediction on, active, input late but not
        older than prediction_horizon."""
        horizon = self._node_params["prediction_horizon"]
        return (horizon > 0.0 and self._mode == ACTIVE and not self._need_reset
                and LATE_PERIODS * self.period_s < self._input_age(now) <= horizon + self.period_s)

    def _on_watchdog_timer(self) -> None:
        if self._retired_formulation is not None:
            self._release_retired()
        now = time.monotonic()
        if not self._predict_timer.is_canceled():
            return  # an input gap: the prediction timer ticks
        if self._predicting(now) and self._rt is not None:
            with self._book_lock:  # native: the loop's ticks booked first (their stamps), without
                self._rt_drain(self._rt)  # stopping it; a late booking is no gap
            now = time.monotonic()
        if self._predicting(now):  # a gap begins: tick on the predicted state at the loop's rate
            self._predict_timer.reset()
            self._timer_tick(now, lambda: self._predicting(time.monotonic()))
            return
        last = self._last_scheduled if self._rt is None else max(self._last_scheduled, self._rt.last_tick())
        if now - last > self._node_params["watchdog_timeout"]:
            timeout = self._node_params["watchdog_timeout"]
            self._timer_tick(now, lambda: time.monotonic() - self._last_scheduled > timeout)

    def _on_predict_timer(self) -> None:
        """During an input gap: one tick per period on the predicted state; the gap's end
        (fresh input) or its passing the horizon (the watchdog's safe output, one tick)
        stops it."""
        now = time.monotonic()
        if not self._predicting(now):
            self._predict_timer.cancel()
            if self._input_age(now) > LATE_PERIODS * self.period_s and self._mode == ACTIVE:
                self._timer_tick(now, lambda: True)  # past the horizon: the safe output now
            else:  # input again (native mode: the compiled loop ticks it, no Python tick ends the gap)
                self._predictor.stop()
                self._prediction_age_s = 0.0
            return
        if self._predictor.active and self._input_age(now) - self._predictor.age_s < 0.5 * self.period_s:
            return  # the input's clock (simulated: maybe slower than the wall) has not moved a period on
        self._timer_tick(now, lambda: self._predicting(time.monotonic()))

    def _timer_tick(self, now: float, still_due) -> None:
        """A tick without a new input (watchdog, prediction); in native mode with the
        compiled loop locked and booked first, and only if ``still_due()`` after that (an
        input may have been ticked meanwhile)."""
        rt_loop = self._rt
        if rt_loop is None:
            self._last_scheduled = now
            self._tick(now)
            self._maybe_collect(now + self.period_s)
            return
        from ..native import rt

        rt_loop.lock()  # the compiled loop's thread ticks too: one tick at a time
        try:
            with self._book_lock:
                self._rt_drain(rt_loop)
                if still_due():
                    self._last_scheduled = now
                    self._rt_book_inputs(rt_loop)
                    rt.hand_over(self)
                    self._tick(now)
                    self._rt_after_python_tick()
        finally:
            rt_loop.unlock()

    def _maybe_collect(self, next_deadline: float) -> None:
        self._ticks_since_gc += 1
        if self._ticks_since_gc >= GC_EVERY_TICKS and next_deadline - time.monotonic() > GC_SLACK_S:
            gc.collect(1)
            self._ticks_since_gc = 0

    # ================================================================== the tick
    def _tick(self, scheduled: float) -> None:
        """One control period: inputs → Controller → command; never raises."""
        started = time.monotonic()
        started_ns = time.time_ns()
        self._published_ns = 0
        try:
            self._tick_body(started)
        except Exception as exc:  # noqa: BLE001 - the loop must survive anything
            self._status_counts["exception"] += 1
            self._log_throttled("tick", f"tick failed, commanding zero: {type(exc).__name__}: {exc}")
            self._cmd_view[:] = 0.0
            self._publish_command()
        published = time.monotonic()
        stats = self._stats
        stats.record(scheduled, started, published)
        if self._published_ns:  # joint state in → command out, once per input (loop_stats)
            if self._used_rx_ns:
                stats.record_input(self._used_rx_ns, self._used_cb_ns, started_ns, self._published_ns)
                self._used_rx_ns = 0
            else:
                stats.reused_input_ticks += 1
        self._monitor(published, scheduled + self.period_s)

    def _tick_body(self, now: float) -> None:
        mode = self._mode
        if mode == OFF:
            return
        ctrl, m, t_in = self.ctrl, self.model, self._t_in
        if self._pending_fields or self._pending_formulation is not None or self._ground_pending:
            self._apply_pending()
        timeout = self._node_params["watchdog_timeout"]
        horizon = self._node_params["prediction_horizon"]
        age = self._input_age(now) if horizon > 0.0 else 0.0
        with self._lock:
            have = t_in["joint_states"] > 0.0 and (not m.floating_base or t_in["odom"] > 0.0)
            fresh = (have and now - t_in["joint_states"] < timeout
                     and (not m.floating_base or now - t_in["odom"] < timeout)
                     and (t_in["contact_states"] == 0.0 or now - t_in["contact_states"] < timeout))
            # an input gap the prediction bridges: the joint states late, not older than the
            # horizon, and the other state inputs fresh when they stopped
            predicted = (have and horizon > 0.0 and mode == ACTIVE and not self._need_reset
                         and LATE_PERIODS * self.period_s < age <= horizon
                         and (not m.floating_base or t_in["joint_states"] - t_in["odom"] < timeout)
                         and (t_in["contact_states"] == 0.0 or t_in["joint_states"] - t_in["contact_states"] < timeout))
            fresh = fresh or predicted
            # a bridged gap ends one topic at a time (no order across topics): the joint
            # states back, odometry or contact estimates still behind within the horizon.
            # Not a trip: the last command once more. (Odometry that stops alone, with no
            # gap bridged just before, still trips.)
            resuming = (have and not fresh and horizon > 0.0 and mode == ACTIVE and not self._need_reset
                        and now - t_in["joint_states"] < timeout
                        and 0.0 < now - self._prediction_from <= horizon + timeout
                        and (not m.floating_base or now - t_in["odom"] <= horizon)
                        and (t_in["contact_states"] == 0.0 or now - t_in["contact_states"] <= horizon))
            # measured forces: once one arrived, every contact's (a missing one would read zero)
            stale_forces = self._measured_any and now - self._meas_t.min() >= timeout
            if have and stale_forces:
                fresh = False
                self._meas_stale_ticks += 1
            if have:
                if self._in_rx_ns:  # a joint state no tick has used yet
                    self._used_rx_ns, self._used_cb_ns = self._in_rx_ns, self._in_cb_ns
                    self._in_rx_ns = 0
                self._q[m.joint_q_index] = self._in_jq
                self._v[m.n_base:] = self._in_jv
                if m.floating_base:
                    self._q[:7] = self._in_base_q
                    self._v[:6] = self._in_base_v
                np.greater_equal(self._in_contacts, self._node_params["contacts.threshold"], out=self._mask)
        if not have:
            return  # nothing measured yet: stay silent (the effort controller still holds zero)
        if resuming and not stale_forces:
            self._resumed_ticks += 1
            self._publish_command()
            return
        if fresh and predicted:
            self._predict_state(age)
        elif self._predictor.active:  # fresh input again, or the safe output
            self._predictor.stop()
            self._prediction_age_s = 0.0
            if not fresh:
                self._prediction_expired += 1
        if not fresh:
            if not self._watchdog_tripped:
                self._watchdog_tripped = True
                self._watchdog_trips += 1
                self._log_throttled("watchdog", f"inputs stale (> {timeout * 1e3:g} ms"
                                    f"{', measured wrenches' if stale_forces else ''}): safe output "
                                    f"({ctrl.config.safe_output}) at zero velocity")
            self._need_reset = True
            self._safe_command(self._zero_v)
            return
        if self._watchdog_tripped:
            self._watchdog_tripped = False
            self.get_logger().info("inputs fresh again: holding the measured posture")
        if mode == SAFE:
            self._safe_command(self._v)
            return
        if self._need_reset:
            ctrl.reset(self._q, self._v)
            self._q_ref_full[:] = ctrl.q_ref
            self._need_reset = False
            self._base_ref = None
            with self._lock:  # a deactivate from the executor thread (native mode) wins
                if self._mode == WAITING:
                    self._mode = ACTIVE
        self._apply_references()
        cmd = ctrl.update(self._q, self._v, self._mask)
        np.take(cmd.tau, self._cmd_index, out=self._cmd_view)
        self._publish_command()
        # bookkeeping after the command is out
        result = cmd.result
        self._status_counts[result.status if result is not None else "exception"] += 1
        self._source_counts[cmd.source] = self._source_counts.get(cmd.source, 0) + 1
        self._saturated_joints += cmd.saturated
        self._last_source = cmd.source
        self._last_result = result if cmd.source == "formulation" else None
        self._last_fast = False
        if cmd.source != "formulation":  # a solver failure is never silent (DESIGN.md §7)
            status = result.status if result is not None else "exception"
            self._log_throttled("solve_failed", f"{self.model.pin_model.name}: {ctrl.config.formulation} did not "
                                f"solve (status {status}, {self._status_counts[status]} so far): "
                                f"{cmd.source} output instead")
        self._tau[:] = cmd.tau

    def _predict_state(self, age: float) -> None:
        """An input gap: the tick's state is the one the controller predicts (the last
        accepted state integrated with the q̈ of each solve since, :class:`StatePredictor`),
        advanced to the input's age; contacts as :meth:`_predicted_contacts` says."""
        pred = self._predictor
        if not pred.active or self._t_in["joint_states"] != self._prediction_from:  # a new gap
            pred.start(self._q, self._v)
            self._prediction_from = self._t_in["joint_states"]
            self._input_gaps += 1
            self._log_throttled("prediction", f"no /joint_states for {age * 1e3:.1f} ms: controlling on the "
                                f"predicted state (prediction_horizon "
                                f"{self._node_params['prediction_horizon'] * 1e3:g} ms)")
        qdd = self.ctrl.formulation.qdd
        stance = self._predicted_contacts()  # their points held still (StatePredictor.step)
        # the prediction keeps the input's clock: a period per period of age (several after a
        # late timer, none when the clock, simulated, has not moved on)
        for _ in range(int(round((age - pred.age_s) / self.period_s))):
            if pred.step(qdd, self.period_s, stance=stance) is None:
                break
        self._q[:] = pred.q
        self._v[:] = pred.v
        self._mask[:] = stance
        self._prediction_age_s = pred.age_s
        self._predicted_ticks += 1

    def _predicted_contacts(self) -> np.ndarray:
        """The contacts of a predicted tick: the last estimates (the gait node: its schedule)."""
        return self._mask

    def _safe_command(self, v: np.ndarray) -> None:
        ctrl = self.ctrl
        tau = ctrl.safe_torque(self._q, v, self._mask)
        np.clip(tau, -ctrl.tau_limit, ctrl.tau_limit, out=self._tau)
        self._source_counts[ctrl.config.safe_output] += 1
        self._last_source = ctrl.config.safe_output
        self._last_result = None
        np.take(self._tau, self._cmd_index, out=self._cmd_view)
        self._publish_command()

    def _publish_command(self) -> None:
        if not np.isfinite(self._cmd_view).all():  # last line of defence; Controller already guards
            self._cmd_view[:] = 0.0
            self._status_counts["exception"] += 1
        self._cmd_pub.publish(bytes(self._cmd_cdr))
        self._published_ns = time.time_ns()

    def _publish_final(self) -> None:
        """Cleanup/shutdown: one safe command at zero velocity (the effort controller keeps it)."""
        try:
            if self._t_in["joint_states"] > 0.0:
                self._safe_command(self._zero_v)
            else:
                self._cmd_view[:] = 0.0
                self._publish_command()
        except Exception as exc:  # noqa: BLE001 - shutting down: report, never raise
            self.get_logger().error(f"final safe command failed: {exc}")

    def _apply_references(self) -> None:
        ctrl = self.ctrl
        traj = self._trajectory
        if traj is not None:
            q, v, a = self._q_ref_full, self._v_ref_full, self._a_ref_full
            running = traj.sample(self.get_clock().now().nanoseconds)
            q[traj.index], v[traj.index], a[traj.index] = traj.q, traj.v, traj.a
            if not running:
                v[:] = 0.0
                a[:] = 0.0
                self._trajectory = None
            ctrl.set_joint_reference(q, v, a)
        if self._base_ref is not None:
            position, rotation, velocity, angular = self._base_ref
            ctrl.set_base_reference(position, rotation, velocity, angular)
            self._base_ref = None
        if self._takes_force_refs:
            self._apply_desired_forces()
        if self._measured_any:
            self._apply_measured_forces()

    def _apply_measured_forces(self) -> None:
        """The latest measured forces, in the world frame, to the formulation (in place)."""
        world, rotation = self._meas_world, self.ctrl.formulation.contacts.rotation
        with self._lock:
            world[:] = self._meas_in
            if self._meas_local.any():  # contact frame → world, with the last tick's kinematics
                for i in np.flatnonzero(self._meas_local):
                    world[i] = rotation[i] @ self._meas_in[i]
        self.ctrl.set_measured_forces(world)

    def _apply_desired_forces(self) -> None:
        """The latest desired forces, in the world frame, to the formulation (every tick: a
        reference in the contact frame follows the foot; a stale one goes back to zero).
        Loops over the force contacts (usually one): nothing is allocated."""
        world, rotation = self._force_ref_world, self.ctrl.formulation.contacts.rotation
        timeout = self._node_params["contacts.desired_wrench_timeout"]
        now = time.monotonic()
        went_stale = None
        with self._lock:
            for i in self._force_indices:
                t = self._force_ref_t[i]
                stale = timeout > 0.0 and t > 0.0 and now - t > timeout
                if stale:
                    world[i] = 0.0
                    if not self._force_ref_stale[i]:
                        went_stale = i
                elif self._force_ref_local[i]:  # contact frame → world, last tick's kinematics
                    np.matmul(rotation[i], self._force_ref_in[i], out=world[i])
                else:
                    world[i] = self._force_ref_in[i]
                self._force_ref_stale[i] = stale
                self._force_ref_stale_ticks += stale
        if went_stale is not None:
            self._log_throttled(
                "desired_wrench.stale", f"desired wrench of {self.model.contact_frames[went_stale]} older than "
                f"contacts.desired_wrench_timeout ({timeout:g} s): desired force back to zero until the next one")
        self.ctrl.set_desired_forces(world)

    def _apply_pending(self) -> None:
        with self._lock:
            fields, self._pending_fields = self._pending_fields, {}
            pending, self._pending_formulation = self._pending_formulation, None
        if fields:
            self.ctrl.set_gains(**fields)
        if pending is not None:  # built and validated in the parameter callback
            formulation, options = pending
            with self._lock:  # freed off the tick (_release_retired): not a tick's work
                self._retired_formulation = self.ctrl.formulation
            self.ctrl.formulation = formulation
            self.ctrl.config.formulation_options = options
            with self._lock:  # the new formulation starts on contacts.normal/friction
                self._ground_pending = bool((self._ground_in[:, 3] > 0.0).any())  # μ 0: no row yet
        if self._ground_pending:
            self._apply_ground()

    def _apply_ground(self) -> None:
        """The ground rows received since the last tick: each contact whose row changed gets
        its pyramid rebuilt (Controller.set_contact_surface compares)."""
        with self._lock:
            self._ground_now[:] = self._ground_in
            self._ground_pending = False
        for i, (nx, ny, nz, mu) in enumerate(self._ground_now):
            self._ground_updates += self.ctrl.set_contact_surface(i, (nx, ny, nz), float(mu))

    def _release_retired(self) -> None:
        """The executor's side of a formulation change: free the replaced one and give the
        memory back (controller.trim_heap), so a long run's resident memory does not keep
        the moment both coexisted (bench/soak.py)."""
        with self._lock:
            retired, self._retired_formulation = self._retired_formulation, None
        if retired is not None:
            from ..controller import trim_heap

            del retired
            trim_heap()


def set_timer_slack(ns: int = 1) -> bool:
    """Linux timer slack of the calling thread (threads it creates inherit it).

    The default 50 µs slack delays every timed wait — sleep, executor timeouts — by up to
    that much; at 1 kHz it is a fifth of the slack left after a tick (measured here:
    EventsExecutor.spin_once(0) 117 → 35 µs, sleep overshoot 91 → 38 µs, p50).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False

