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

from ..errors import ConfigError, UnknownNameError

TASKS = ("trot", "waypoints")

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


def make_task(name: str, ticks: int = 0) -> WaypointPolicy | None:
    """``"trot"`` → None (the scenario's constant velocity); ``"waypoints"`` → a policy."""
    if name == "trot":
        return None
    if name == "waypoints":
        return WaypointPolicy(ticks=ticks)
    raise UnknownNameError("task", name, TASKS)
