"""Locomotion tasks of seed 000 §7.6: velocity-command policies called every tick (ROS-free).

"We simulate the quadruped trotting between a set of waypoints on a planar surface for 30
virtual seconds. The process of trotting to a waypoint and turning toward a new goal
stresses some basic abilities needed to locomote successfully: (1) acceleration to and
from rest; (2) turning in place, and (3) turning while moving forward." The waypoints are
those of Fig. 17, {(0, 0), (0.25, 0), (0, 0.25), (0, −0.25), (−0.25, 0)}, visited in
cycle; the desired forward velocity is 20 cm/s.

:class:`WaypointPolicy` turns the measured base pose into a command (vx, vy, yaw rate) for
:meth:`Gait.set_velocity`; the gait's rate limits (``max_acceleration``,
``max_yaw_acceleration``) shape the accelerations::

    policy = WaypointPolicy()
    gait.set_velocity(*policy.command(t, q))   # every tick, before gait.update(...)

Policy: head for the current waypoint; if the heading error exceeds
``turn_in_place_rad``, stop and turn in place (hysteresis: resume once it is below half
that), otherwise walk at ``speed_m_s`` and correct the heading while moving; slow down
within ``slow_radius_m`` so the robot arrives nearly at rest; a waypoint is reached
within ``reach_radius_m``, then the next one is the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from ..errors import ConfigError, UnknownNameError

TASKS = ("trot", "waypoints", "balance", "steps")

#: seed 000 Fig. 17, visited in this order and then again from the first [m]
SEED000_WAYPOINTS: tuple[tuple[float, float], ...] = ((0.0, 0.0), (0.25, 0.0), (0.0, 0.25), (0.0, -0.25),
                                                      (-0.25, 0.0))

#: modes logged per tick (``WaypointPolicy.mode_log``)
IDLE, TURN, MOVE = 0, 1, 2


@dataclass(frozen=True)
class WaypointConfig:
    """Parameters of the waypoint task (defaults: seed 000 §7.6).

    Attributes:
        waypoints: (x, y) [m], world frame, visited cyclically; the robot starts on the first.
        speed_m_s: forward speed command while walking [m/s] (seed 000: 20 cm/s).
        reach_radius_m: a waypoint counts as reached within this distance [m].
        slow_radius_m: the speed command shrinks linearly to ``min_speed_m_s`` within this
            distance of the waypoint [m] (deceleration to rest, seed 000 §7.6 (1)).
        min_speed_m_s: speed command at the waypoint [m/s].
        turn_in_place_rad: heading error above which the robot stops and turns in place [rad].
        yaw_gain: yaw-rate command per radian of heading error [1/s].
        max_yaw_rate_rad_s: bound of the yaw-rate command [rad/s].
    """

    waypoints: tuple[tuple[float, float], ...] = SEED000_WAYPOINTS
    speed_m_s: float = 0.2
    reach_radius_m: float = 0.04
    slow_radius_m: float = 0.08
    min_speed_m_s: float = 0.05
    turn_in_place_rad: float = 0.5
    yaw_gain: float = 2.0
    max_yaw_rate_rad_s: float = 1.0

    def validate(self) -> None:
        if len(self.waypoints) < 2:
            raise ConfigError("waypoints", self.waypoints, "needs at least two (x, y) points")
        for key in ("speed_m_s", "reach_radius_m", "slow_radius_m", "turn_in_place_rad", "yaw_gain",
                    "max_yaw_rate_rad_s"):
            value = getattr(self, key)
            if not (np.isfinite(value) and value > 0.0):
                raise ConfigError(key, value, "must be finite and > 0")
        if not 0.0 <= self.min_speed_m_s <= self.speed_m_s:
            raise ConfigError("min_speed_m_s", self.min_speed_m_s, "must be in [0, speed_m_s]")


def base_yaw(q: np.ndarray) -> float:
    """Yaw [rad] of a Pinocchio free-flyer configuration (quaternion x, y, z, w at q[3:7])."""
    x, y, z, w = q[3], q[4], q[5], q[6]
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap_angle(a: float) -> float:
    """``a`` wrapped to (−π, π] [rad]."""
    return math.atan2(math.sin(a), math.cos(a))


class WaypointPolicy:
    """Velocity commands that take the robot around the waypoints (seed 000 §7.6).

    Attributes:
        config: the :class:`WaypointConfig`.
        target: index of the waypoint headed for.
        reached: (time [s], waypoint index) of every waypoint reached, in order.
        mode: IDLE (before :meth:`command` is first called), TURN or MOVE.
        mode_log, speed_cmd_log: per call, when ``ticks`` was given (else empty).
    """

    def __init__(self, config: WaypointConfig | None = None, ticks: int = 0):
        self.config = config or WaypointConfig()
        self.config.validate()
        self._points = np.asarray(self.config.waypoints, dtype=float)
        self.target = 1
        self.reached: list[tuple[float, int]] = []
        self.mode = IDLE
        self.mode_log = np.zeros(ticks, dtype=np.int8)
        self.speed_cmd_log = np.zeros(ticks)
        self._n = 0

    def command(self, t: float, q: np.ndarray, active: bool = True) -> tuple[float, float, float]:
        """(vx [m/s], vy [m/s], yaw rate [rad/s]) in the heading frame, from the measured
        base pose ``q`` (Pinocchio free flyer) at time ``t`` [s]. ``active`` False (the
        robot is not trotting yet): zero command, logged as IDLE."""
        c = self.config
        if not active:
            self._log(IDLE, 0.0)
            return 0.0, 0.0, 0.0
        goal = self._points[self.target]
        dx, dy = goal[0] - q[0], goal[1] - q[1]
        dist = math.hypot(dx, dy)
        if dist < c.reach_radius_m:
            self.reached.append((float(t), int(self.target)))
            self.target = (self.target + 1) % len(self._points)
            goal = self._points[self.target]
            dx, dy = goal[0] - q[0], goal[1] - q[1]
            dist = math.hypot(dx, dy)
        error = wrap_angle(math.atan2(dy, dx) - base_yaw(q))
        yaw_rate = float(np.clip(c.yaw_gain * error, -c.max_yaw_rate_rad_s, c.max_yaw_rate_rad_s))
        if abs(error) > c.turn_in_place_rad or (self.mode == TURN and abs(error) > 0.5 * c.turn_in_place_rad):
            self.mode = TURN
            vx = 0.0
        else:
            self.mode = MOVE
            vx = c.min_speed_m_s + (c.speed_m_s - c.min_speed_m_s) * min(dist / c.slow_radius_m, 1.0)
        self._log(self.mode, vx)
        return vx, 0.0, yaw_rate

    def drive(self, t: float, q: np.ndarray, gait, active: bool = True) -> None:
        """Command ``gait`` for this tick (:meth:`command` → ``Gait.set_velocity``)."""
        gait.set_velocity(*self.command(t, q, active))

    def _log(self, mode: int, vx: float) -> None:
        if self._n < self.mode_log.size:
            self.mode_log[self._n] = mode
            self.speed_cmd_log[self._n] = vx
        self._n += 1

    def metrics(self, t: np.ndarray, q: np.ndarray, period_s: float) -> dict:
        """Task metrics of a run: waypoints reached, mean speed while walking.

        ``t`` (N,) [s] and ``q`` (N, nq) are the run's ticks (the calls of :meth:`command`,
        one per tick). Speed while walking: base displacement over windows of
        ``period_s`` (one gait cycle: the trot's sway cancels) lying entirely in MOVE
        ticks at the cruise command, divided by the window length [m/s]; compared with
        the mean command over the same ticks.
        """
        c = self.config
        n = min(len(t), self._n, self.mode_log.size)
        out = {"waypoints_reached": len(self.reached),
               "waypoint_times_s": [round(tr, 3) for tr, _ in self.reached],
               "speed_command_m_s": c.speed_m_s}
        if n < 2:
            return out
        dt = float(t[1] - t[0])
        w = max(1, int(round(period_s / dt)))
        cruise = (self.mode_log[:n] == MOVE) & (self.speed_cmd_log[:n] >= c.speed_m_s - 1e-9)
        moving = self.mode_log[:n] == MOVE
        speeds = []
        for i0 in range(0, n - w, w):
            if cruise[i0:i0 + w + 1].all():
                speeds.append(math.hypot(*(q[i0 + w, :2] - q[i0, :2])) / (w * dt))
        out["moving_fraction"] = float(moving.mean())
        out["turning_fraction"] = float((self.mode_log[:n] == TURN).mean())
        if speeds:
            out["speed_moving_m_s"] = float(np.mean(speeds))
            out["speed_moving_ratio"] = out["speed_moving_m_s"] / c.speed_m_s
        return out


@dataclass(frozen=True)
class BalanceConfig:
    """Standing balance: stand, shift the weight from foot to foot, squat (a humanoid's
    first tasks; any legged robot standing).

    Attributes:
        stand_s: standing still first [s].
        shift_cycles: left-right weight shifts (sinusoids of ``shift_period_s`` [s]) of the
            base by ``shift_fraction`` of the half distance between the left and right feet
            (1 would put the body over one foot).
        squat_cycles: squats (sinusoids of ``squat_period_s``) down by ``squat_depth_m`` [m].
    """

    stand_s: float = 1.0
    shift_cycles: int = 1
    shift_period_s: float = 4.0
    shift_fraction: float = 0.4
    squat_cycles: int = 1
    squat_period_s: float = 3.0
    squat_depth_m: float = 0.06

    def validate(self) -> None:
        for key in ("stand_s", "shift_period_s", "squat_period_s", "squat_depth_m"):
            if not (np.isfinite(getattr(self, key)) and getattr(self, key) >= 0.0):
                raise ConfigError(key, getattr(self, key), "must be finite and ≥ 0")
        if not 0.0 <= self.shift_fraction < 1.0:
            raise ConfigError("shift_fraction", self.shift_fraction, "must be in [0, 1)")
        if self.shift_cycles < 0 or self.squat_cycles < 0:
            raise ConfigError("cycles", (self.shift_cycles, self.squat_cycles), "must be ≥ 0")

    @property
    def duration_s(self) -> float:
        return self.stand_s + self.shift_cycles * self.shift_period_s + self.squat_cycles * self.squat_period_s


def _shift(t: float, period: float, amplitude: float) -> tuple[float, float]:
    """One weight shift at ``t`` [s] into it: (offset [m], rate [m/s]) from rest to
    +``amplitude`` (first quarter), over to −``amplitude`` (half), back to rest (last
    quarter), each leg a half cosine: a sine's extremes and peak rate, but the rate is zero
    where the shift starts and ends (a sine's is amplitude · 2π/period: a step in the base
    velocity reference that unloads a sole's edge)."""
    s, w = t / period, 2.0 * math.pi / period
    if s < 0.25:
        return 0.5 * amplitude * (1.0 - math.cos(2.0 * w * t)), amplitude * w * math.sin(2.0 * w * t)
    if s < 0.75:
        return amplitude * math.cos(w * t - 0.5 * math.pi), -amplitude * w * math.sin(w * t - 0.5 * math.pi)
    u = 2.0 * w * t - 3.0 * math.pi  # 0 → π over the last quarter
    return -0.5 * amplitude * (1.0 + math.cos(u)), amplitude * w * math.sin(u)


class BalanceTask:
    """Body offsets of a standing robot over time (:meth:`Gait.set_body_offset`): stand,
    weight shifts, squats (:class:`BalanceConfig`). Smooth: each cycle is 1 − cos for the
    squat and half cosines for the shift (:func:`_shift`), so offsets and their rates start
    and end at zero.

    Attributes:
        phase_log: per call, 0 stand, 1 shift, 2 squat (when ``ticks`` was given).
    """

    def __init__(self, config: BalanceConfig | None = None, ticks: int = 0):
        self.config = config or BalanceConfig()
        self.config.validate()
        self.phase_log = np.zeros(ticks, dtype=np.int8)
        self._n = 0
        self._half_width: float | None = None

    def offset(self, t: float, half_width: float) -> tuple[np.ndarray, np.ndarray, int]:
        """(offset [m], its rate [m/s], phase) at time ``t`` [s], heading frame."""
        c = self.config
        off, vel = np.zeros(3), np.zeros(3)
        t_shift = t - c.stand_s
        t_squat = t_shift - c.shift_cycles * c.shift_period_s
        if t_shift < 0.0:
            return off, vel, 0
        if t_squat < 0.0:
            off[1], vel[1] = _shift(t_shift % c.shift_period_s, c.shift_period_s, c.shift_fraction * half_width)
            return off, vel, 1
        if t_squat < c.squat_cycles * c.squat_period_s:
            w = 2.0 * math.pi / c.squat_period_s
            d = 0.5 * c.squat_depth_m
            off[2], vel[2] = -d * (1.0 - math.cos(w * t_squat)), -d * w * math.sin(w * t_squat)
            return off, vel, 2
        return off, vel, 0

    def drive(self, t: float, q: np.ndarray, gait, active: bool = True) -> None:
        """Command ``gait`` for this tick (``Gait.set_body_offset``)."""
        if self._half_width is None:  # left and right feet: y of the nominal footholds
            y = gait.foot_offsets[:, 1]
            self._half_width = 0.5 * float(y[y > 0].mean() - y[y < 0].mean()) if (y > 0).any() and (y < 0).any() else 0.0
        off, vel, phase = self.offset(t, self._half_width)
        gait.set_body_offset(off, vel)
        if self._n < self.phase_log.size:
            self.phase_log[self._n] = phase
        self._n += 1

    def metrics(self, t: np.ndarray, q: np.ndarray, period_s: float) -> dict:
        n = min(len(t), self._n, self.phase_log.size)
        return {"balance_phase_s": {name: float((self.phase_log[:n] == k).sum() * (t[1] - t[0])) if n > 1 else 0.0
                                    for k, name in enumerate(("stand", "shift", "squat"))}}


@dataclass
class StepConfig:
    """Stepping in place on two feet (a humanoid's soles), quasi-static: stand, then per
    step bring the centre of mass over the stance foot (a half-cosine shift of the body
    offset) and lift the other foot in place; the feet alternate, the right one first; at
    the end the body returns between the feet.

    Attributes:
        stand_s: standing still first [s].
        steps: feet lifted, alternating.
        shift_s: one shift from between the feet over one foot [s] (from one foot over the
            other: twice this); its peak rate must stay within the gait's
            ``stand_shift_speed`` (G1: 0.1 m/s for 3 s).
        shift_fraction: how far the centre of mass goes, as a fraction of the half distance
            between the feet (1: over the stance foot's centre; the base goes further, by
            :func:`_com_per_base_shift`).
        swing_s: one lift [s]; hold_s: over the stance foot after the lift [s] (the foot
            lands and loads).
        step_height_m: the lifted foot's apex [m].
    """

    stand_s: float = 1.0
    steps: int = 2
    shift_s: float = 3.0
    shift_fraction: float = 1.0
    swing_s: float = 0.6
    hold_s: float = 0.4
    step_height_m: float = 0.03

    def validate(self) -> None:
        for key in ("stand_s", "shift_s", "swing_s", "hold_s", "step_height_m"):
            if not (np.isfinite(getattr(self, key)) and getattr(self, key) >= 0.0):
                raise ConfigError(key, getattr(self, key), "must be finite and ≥ 0")
        if self.swing_s <= 0.0 or self.shift_s <= 0.0:
            raise ConfigError("swing_s", (self.swing_s, self.shift_s), "shift_s and swing_s must be > 0 [s]")
        if not 0.0 <= self.shift_fraction <= 1.0:
            raise ConfigError("shift_fraction", self.shift_fraction, "must be in [0, 1]")
        if self.steps < 0:
            raise ConfigError("steps", self.steps, "must be ≥ 0")

    @property
    def duration_s(self) -> float:
        if not self.steps:
            return self.stand_s
        # shifts: in (1), between the feet (2 each) after each but the last step, back (1)
        return self.stand_s + (2 * self.steps) * self.shift_s + self.steps * (self.swing_s + self.hold_s)


class StepTask:
    """Stepping in place (:class:`StepConfig`) on a robot with two feet of several contact
    points each (the corners of its soles, grouped by the link they are on): body offsets
    (:meth:`Gait.set_body_offset`) and lifts (:meth:`Gait.lift`, the Python gait).

    Attributes:
        phase_log: per call, 0 stand, 1 shift, 2 a foot lifted, 3 hold (when ``ticks`` was given).
        lifts: (time [s], contact indices) of each lift commanded.
    """

    def __init__(self, config: StepConfig | None = None, ticks: int = 0):
        self.config = config or StepConfig()
        self.config.validate()
        self.phase_log = np.zeros(ticks, dtype=np.int8)
        self.lifts: list[tuple[float, np.ndarray]] = []
        self._n = 0
        self._feet: tuple[np.ndarray, np.ndarray] | None = None  # (left, right) contact indices
        self._half_width = 0.0
        #: per shift: (start [s], from y [m], to y [m], duration [s], foot lifted after it: 0 left, 1 right, −1 none)
        self._plan: list[tuple[float, float, float, float, int]] = []
        self._lifted: set[int] = set()  # plan entries whose lift was commanded

    def _setup(self, gait) -> None:
        model = gait.model
        bodies = np.array([model.pin_model.frames[f].parentJoint for f in model.contact_frame_ids])
        groups = [np.flatnonzero(bodies == b) for b in np.unique(bodies)]
        if len(groups) != 2:
            raise ConfigError("task", "steps", f"steps on two feet; this robot's contacts are on {len(groups)} bodies")
        if not hasattr(gait, "lift"):
            raise ConfigError("task", "steps", "stepping runs on the Python gait (Scenario compiled=False)")
        y = [float(gait.foot_offsets[g, 1].mean()) for g in groups]
        left, right = (groups[0], groups[1]) if y[0] > y[1] else (groups[1], groups[0])
        self._feet = (left, right)
        self._half_width = 0.5 * abs(y[0] - y[1])
        c = self.config
        # the body offset moves the base; the centre of mass moves less (the feet stay)
        amplitude = c.shift_fraction * self._half_width / _com_per_base_shift(gait, self._half_width)
        if c.steps and math.pi * amplitude / (2.0 * c.shift_s) > gait.config.stand_shift_speed:
            raise ConfigError("shift_s", c.shift_s, f"a {amplitude:.3f} m shift that fast outruns the gait's "
                              f"stand_shift_speed {gait.config.stand_shift_speed} m/s: raise either")
        t, y_now = c.stand_s, 0.0
        for k in range(c.steps):
            stance_left = k % 2 == 0  # the right foot steps first
            y_to = amplitude if stance_left else -amplitude
            duration = c.shift_s * abs(y_to - y_now) / amplitude if amplitude else c.shift_s
            self._plan.append((t, y_now, y_to, duration, 1 if stance_left else 0))
            t += duration + c.swing_s + c.hold_s
            y_now = y_to
        if c.steps:
            self._plan.append((t, y_now, 0.0, c.shift_s, -1))

    def offset(self, t: float) -> tuple[float, float, int, int]:
        """(y offset [m], its rate [m/s], phase, plan entry) at time ``t`` [s]."""
        c = self.config
        if not self._plan or t < self._plan[0][0]:
            return 0.0, 0.0, 0, -1
        entry = max(i for i, p in enumerate(self._plan) if t >= p[0])
        start, y0, y1, duration, foot = self._plan[entry]
        u = t - start
        if u < duration:  # half cosine from y0 to y1
            s = u / duration
            return (y0 + (y1 - y0) * 0.5 * (1.0 - math.cos(math.pi * s)),
                    (y1 - y0) * 0.5 * math.pi / duration * math.sin(math.pi * s), 1, entry)
        if foot < 0:
            return y1, 0.0, 0, entry
        return y1, 0.0, 2 if u < duration + c.swing_s else 3, entry

    def drive(self, t: float, q: np.ndarray, gait, active: bool = True) -> None:
        """Command ``gait`` for this tick: the body offset, and the entry's lift once the
        shift is done."""
        if self._feet is None:
            self._setup(gait)
        y, rate, phase, entry = self.offset(t)
        gait.set_body_offset((0.0, y, 0.0), (0.0, rate, 0.0))
        if phase == 2 and entry not in self._lifted:
            feet = self._feet[self._plan[entry][4]]
            gait.lift(feet, t, self.config.swing_s, self.config.step_height_m)
            self._lifted.add(entry)
            self.lifts.append((t, feet.copy()))
        if self._n < self.phase_log.size:
            self.phase_log[self._n] = phase
        self._n += 1

    def metrics(self, t: np.ndarray, q: np.ndarray, period_s: float) -> dict:
        return {"steps_lifted": len(self.lifts)}


def _com_per_base_shift(gait, shift_m: float) -> float:
    """How far the centre of mass moves sideways per metre the standing base moves
    sideways with the feet kept where they are (the gait's inverse kinematics), at the
    robot's standing pose: < 1, the legs stay behind."""
    from ..gait import moved_base_configuration

    model, q = gait.model, gait.q_standing
    shifted = moved_base_configuration(model, q, (0.0, shift_m, 0.0), ik_iterations=20)
    data = model.pin_model.createData()
    moved = pin.centerOfMass(model.pin_model, data, shifted)[1] - pin.centerOfMass(model.pin_model, data, q)[1]
    return float(moved / shift_m)


def make_task(name: str, ticks: int = 0, balance: dict | None = None) -> WaypointPolicy | BalanceTask | StepTask | None:
    """``"trot"`` → None (the scenario's constant velocity); ``"waypoints"`` → a policy;
    ``"balance"`` → a :class:`BalanceTask` (the robot stands: Scenario ``gait=False``) of
    the :class:`BalanceConfig` fields in ``balance``; ``"steps"`` → a :class:`StepTask`
    (stands too) of the :class:`StepConfig` fields in ``balance``."""
    if name == "trot":
        return None
    if name == "waypoints":
        return WaypointPolicy(ticks=ticks)
    if name == "balance":
        return BalanceTask(BalanceConfig(**(balance or {})), ticks=ticks)
    if name == "steps":
        return StepTask(StepConfig(**(balance or {})), ticks=ticks)
    raise UnknownNameError("task", name, TASKS)
