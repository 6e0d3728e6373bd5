"""The gait generator compiled (``gait.cpp``): :class:`idyn_control.gait.Gait` in C++.

:class:`CompiledGait` wraps a configured Python :class:`~idyn_control.gait.Gait` (which
stays the reference and derives the configuration) and runs its tick in C++ on the
controller's compiled engine: phase clock, contact schedule, swing trajectories with
re-targeting, Raibert footholds, base references and the foot-to-joint inverse kinematics,
writing the controller's reference arrays in place. The node's compiled loop calls the same
function every tick (:meth:`CompiledGait.drive` with the /cmd_vel command set by
:meth:`CompiledGait.command`, a data write), so a trotting robot's ticks stay compiled.

The state is one numpy array (:data:`STATE` names its slots) that C++ reads and writes:
Python reads the gait's attributes from it without copies. Flat ground only: a gait with
a known terrain (``Gait.set_terrain``) runs in Python.
"""

from __future__ import annotations

import math

import numpy as np

from .. import gait as G
from . import NativeUnavailable, load

#: gait.cpp ConfigSlot scalars, in order (the Gait's derived values: effective limits and gains)
CONFIG = ("period", "duty_factor", "step_height", "max_acceleration", "max_yaw_acceleration", "feedback_gain",
          "max_step_correction", "max_position_error", "touchdown_depth", "ground_tolerance", "early_touchdown",
          "late_descent_speed", "late_touchdown_time", "regain_contact_time", "stand_up_time", "stand_shift_speed",
          "ik_iterations", "swing_duration", "stance_duration", "cmd_vel_timeout", "vertical_fraction",
          "touchdown_speed", "velocity_product", "touchdown_reach", "follow_ground", "ground_tilt",
          # gait.py's module constants of the trip reflex and the obstacle swing
          "trip_height", "trip_phase", "trip_rise", "max_trips", "trip_ticks", "obstacle_rise_fraction",
          "obstacle_vertical_fraction", "obstacle_swing_stretch")
#: the state, in gait.cpp's order: Gait attribute, shape ("k": per foot, "k3": per foot xyz,
#: "na": per joint, "nq": a configuration); None is NaN, mode 0 "stand" / 1 "trot"
STATE = (("mode", 1), ("_stop_requested", 1), ("_t_stopped", 1), ("_t_cycle0", 1), ("_t_prev", 1),
         ("base_yaw_ref", 1), ("_stand_from", 1), ("_t_reset", 1), ("ground_height", 1), ("standing_height", 1),
         ("ground_offset", 1), ("trips", 1), ("velocity_command", 3), ("velocity_filtered", 3),
         ("base_position_ref", 3), ("base_velocity_ref", 3), ("base_angular_ref", 3), ("body_offset", 3),
         ("body_offset_velocity", 3), ("ground_plane", 3), ("base_tilt", 2), ("planned_stance", "k"),
         ("swinging", "k"), ("_swung", "k"), ("_off_ground", "k"), ("_swing_start", "k"), ("_swing_time", "k"),
         ("_obstacle_apex", "k"), ("_trips", "k"), ("_touching", "k"), ("_liftoff", "k3"),
         ("_touchdown", "k3"), ("_stance_position", "k3"), ("foot_position_ref", "k3"), ("foot_velocity_ref", "k3"),
         ("foot_acceleration_ref", "k3"), ("q_joint_ref", "na"), ("v_joint_ref", "na"), ("a_joint_ref", "na"),
         ("_q_ik", "nq"))
#: Controller arrays the gait writes (gait.cpp Ref), in order
CONTROLLER_REFS = ("q_ref", "v_ref", "a_ref", "base_position_ref", "base_rotation_ref", "base_velocity_ref",
                   "base_angular_ref", "foot_position_ref", "foot_velocity_ref", "foot_acceleration_ref")
MODES = ("stand", "trot")
#: boolean and optional slots (as Python holds them)
_FLAGS = frozenset(("planned_stance", "swinging", "_swung", "_stop_requested"))
_OPTIONAL = frozenset(("_t_stopped", "_t_prev"))

def _sizes(k: int, na: int, nq: int) -> dict:
    return {1: 1, 2: 2, 3: 3, "k": k, "k3": 3 * k, "na": na, "nq": nq}


class CompiledGait:
    """A :class:`~idyn_control.gait.Gait` whose tick runs in C++ (same interface).

    ``gait``: the configured Python gait (its controller must run the compiled engine); its
    configuration and current state are taken over, and it is left as it was.
    ``cmd_vel_timeout``: the gait node's /cmd_vel timeout [s] for :meth:`drive`; None: no
    /cmd_vel, :meth:`drive` only updates (the caller commands with start/stop/set_velocity).
    Raises :class:`NativeUnavailable` when the compiled gait cannot serve it.
    """

    def __init__(self, gait, cmd_vel_timeout: float | None = None):
        ctrl, model = gait.controller, gait.model
        engine = getattr(ctrl.formulation, "_engine", None)
        if engine is None:
            raise NativeUnavailable("the compiled gait needs the controller's compiled engine "
                                    f"({ctrl.config.formulation} runs in Python)")
        if gait.terrain_height is not None:
            raise NativeUnavailable("a gait on a known terrain runs in Python")
        if model.n_base != 6 or model.nq != 7 + model.na:
            raise NativeUnavailable("the compiled gait needs a free-flyer base and one-coordinate joints")
        self.reference, self.controller, self.model, self.engine = gait, ctrl, model, engine
        self.config, self.n_feet = gait.config, gait.n_feet
        k, na, nq = gait.n_feet, model.na, model.nq
        sizes = _sizes(k, na, nq)
        self._slices: dict[str, slice] = {}
        at = 0
        for name, shape in STATE:
            n = sizes[shape]
            self._slices[name] = slice(at, at + n)
            at += n
        self.state = np.zeros(at)
        self._views = {name: self.state[s].reshape(-1, 3) if shape == "k3" else self.state[s]
                       for (name, shape), s in zip(STATE, self._slices.values())}
        self.load(gait)
        values = dict(vars(gait.config), max_acceleration=gait.max_acceleration, feedback_gain=gait.feedback_gain,
                      swing_duration=gait.swing_duration, stance_duration=gait.stance_duration,
                      cmd_vel_timeout=math.nan if cmd_vel_timeout is None else cmd_vel_timeout,
                      trip_height=G.TRIP_HEIGHT, trip_phase=G.TRIP_PHASE, trip_rise=G.TRIP_RISE,
                      max_trips=G.MAX_TRIPS, trip_ticks=G.TRIP_TICKS,
                      obstacle_rise_fraction=G.OBSTACLE_RISE_FRACTION,
                      obstacle_vertical_fraction=G.OBSTACLE_VERTICAL_FRACTION,
                      obstacle_swing_stretch=G.OBSTACLE_SWING_STRETCH)
        self._config = np.concatenate(([float(values[name]) for name in CONFIG], gait.touchdown_phases,
                                       gait.foot_offsets.reshape(-1), gait.com_offset, model.q_lower, model.q_upper))
        self._joint_q_index = np.asarray(model.joint_q_index, dtype=np.int32).copy()
        self._feet = np.asarray(model.contact_frame_ids, dtype=np.int32).copy()
        self._refs_arrays = [getattr(ctrl, name) for name in CONTROLLER_REFS]
        try:
            self._ext = load().Gait(engine._ext, k, self.state, self._config, self._joint_q_index, self._feet,
                                    self._refs_arrays, ctrl.swing)
        except (RuntimeError, ValueError) as err:
            raise NativeUnavailable(f"the compiled gait: {err}") from None
        self.handle = self._ext.handle
        self._mask = np.zeros(k, dtype=np.uint8)

    # ------------------------------------------------------------------ state
    def load(self, gait) -> None:
        """Take a Python gait's state (its attributes named in :data:`STATE`)."""
        for name, _ in STATE:
            value = getattr(gait, name)
            if name == "mode":
                value = MODES.index(value)
            elif name in _OPTIONAL and value is None:
                value = math.nan
            self._views[name][...] = value

    def store(self, gait) -> None:
        """Write the state into a Python gait (the reference, e.g. to continue in Python)."""
        for name, _ in STATE:
            view = self._views[name]
            if name == "mode":
                gait.mode = MODES[int(view[0])]
            elif name in _OPTIONAL:
                setattr(gait, name, None if math.isnan(view[0]) else float(view[0]))
            elif name in _FLAGS and view.size == 1:
                setattr(gait, name, bool(view[0]))
            elif view.size == 1:
                setattr(gait, name, float(view[0]))
            else:
                getattr(gait, name)[...] = view

    def __getattr__(self, name: str):
        # the state's slots read like the Python gait's attributes (views, flags as bools);
        # everything else (configuration, derived constants) is the reference gait's
        views = self.__dict__.get("_views")
        if views is not None and name in views:
            view = views[name]
            if name == "mode":
                return MODES[int(view[0])]
            if name in _OPTIONAL:
                return None if math.isnan(view[0]) else float(view[0])
            if name in _FLAGS:
                return view != 0.0 if view.size > 1 else bool(view[0])
            return float(view[0]) if view.size == 1 else view
        return getattr(self.__dict__["reference"], name)

    # ------------------------------------------------------------------ commands
    def set_velocity(self, vx: float = 0.0, vy: float = 0.0, yaw_rate: float = 0.0) -> None:
        """As :meth:`Gait.set_velocity` (which checks it): [m/s, m/s, rad/s], heading frame."""
        self.reference.set_velocity(vx, vy, yaw_rate)
        self._views["velocity_command"][:] = self.reference.velocity_command

    def set_body_offset(self, offset, velocity=(0.0, 0.0, 0.0)) -> None:
        """As :meth:`Gait.set_body_offset` (which checks it): where the standing robot holds
        its base [m] and that shift's rate [m/s], heading frame."""
        self.reference.set_body_offset(offset, velocity)
        self._views["body_offset"][:] = self.reference.body_offset
        self._views["body_offset_velocity"][:] = self.reference.body_offset_velocity

    def start(self, t: float | None = None) -> None:
        self._ext.start(math.nan if t is None else float(t))

    def stop(self) -> None:
        self._ext.stop()

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            from ..errors import ConfigError

            raise ConfigError("gait", mode, f"must be one of {MODES}")
        self.start() if mode == "trot" else self.stop()

    def set_terrain(self, height_at) -> None:
        if height_at is not None:
            raise NativeUnavailable("a gait on a known terrain runs in Python")

    # the Python gait's own methods, on this state (a compiled gait has no known terrain)
    def ground_at(self, x: float, y: float) -> float:
        from ..gait import Gait

        return Gait.ground_at(self, x, y)

    def base_rotation(self) -> np.ndarray:
        from ..gait import Gait

        return Gait.base_rotation(self)

    def phase(self, t: float) -> float:
        return ((t - self._t_cycle0) / self.config.period) % 1.0

    def command(self, vx: float, vy: float, yaw_rate: float, now: float) -> None:
        """The latest /cmd_vel and its receive time (``time.monotonic()``), for :meth:`drive`;
        any thread, a data write. What the legs cannot realize
        (:attr:`Gait.velocity_axes`) is held at 0, as :meth:`Gait.set_velocity` does."""
        axes = self.reference.velocity_axes
        self._ext.command(float(vx) * axes[0], float(vy) * axes[1], float(yaw_rate) * axes[2], float(now))

    # ------------------------------------------------------------------ tick
    def reset(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask=None) -> None:
        """As :meth:`Gait.reset` (stand where the robot is)."""
        q, v = self._state_arrays(q, v)
        self._ext.reset(float(t), q, v, None if contact_mask is None else self._mask_of(contact_mask))

    def update(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask) -> None:
        """As :meth:`Gait.update`: advance to ``t`` [s] and write the controller's references."""
        q, v = self._state_arrays(q, v)
        self._ext.update(float(t), q, v, self._mask_of(contact_mask))

    def drive(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask, now: float) -> None:
        """The gait node's tick: trot at the /cmd_vel set by :meth:`command` while it is fresh
        (``now``: ``time.monotonic()``) and non-zero, else stop; then :meth:`update` (only
        that without a ``cmd_vel_timeout``)."""
        q, v = self._state_arrays(q, v)
        self._ext.drive(float(t), q, v, self._mask_of(contact_mask), float(now))

    def valid(self) -> bool:
        """False if the controller replaced one of the arrays the gait writes."""
        c = self.controller
        return all(getattr(c, name) is a for name, a in zip(CONTROLLER_REFS, self._refs_arrays))

    def _mask_of(self, contact_mask) -> np.ndarray:
        mask = np.asarray(contact_mask)
        if mask.shape != (self.n_feet,):
            from ..errors import ShapeError

            raise ShapeError("contact_mask", mask.shape, (self.n_feet,))
        self._mask[:] = mask
        return self._mask

    def _state_arrays(self, q, v) -> tuple[np.ndarray, np.ndarray]:
        q = np.ascontiguousarray(q, dtype=float)
        v = np.ascontiguousarray(v, dtype=float)
        if q.shape != (self.model.nq,) or v.shape != (self.model.nv,):
            from ..errors import ShapeError

            raise ShapeError("q, v", (q.shape, v.shape), ((self.model.nq,), (self.model.nv,)))
        return q, v
