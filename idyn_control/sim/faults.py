"""Faults a controller meets on a real robot, injected into the lock-step loop (issue 14).

What the controller is given each tick passes through a :class:`FaultInjector` (lost or
delayed joint states, wrong contact estimates, an input gap), the plant gets a push, and
the controller's model can carry a mass error::

    faults = Faults(drop_state=0.2)                    # 20 % of joint states lost
    run_scenario(robot="quadruped", faults=faults)     # metrics["faults"] counts what hit

A delayed state means the controller ticks on the last state it received. A lost state
or the gap: with ``prediction_horizon`` > 0 the controller ticks on the state it predicts
itself (:class:`~idyn_control.prediction.StatePredictor`: the last state it was given,
integrated with its own q̈), as the node does, for as long as the input is at most that
old; otherwise on the last state it received. When nothing fresh has arrived for longer
than ``watchdog_timeout`` (or ``prediction_horizon``, the longer) the command is the
controller's safe output, as the node's watchdog gives it, and the controller is reset
(the node's recovery after a watchdog trip) when fresh input returns. Everything is
drawn from ``seed``: runs are reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pinocchio as pin

from ..errors import ConfigError
from ..prediction import MAX_HORIZON_S

GRAVITY = 9.81  # [m/s²]


@dataclass
class Faults:
    """The faults of one run (all off by default).

    Attributes:
        drop_state: probability that a tick's state (joint states + base estimate) is lost.
        delay: input delay [s]: the controller sees the state this long ago (whole ticks).
        contact_flip: probability, per contact and tick, that its estimate is the wrong one.
        gap: (start [s], duration [s]): no input at all.
        mass_error: the controller's model has every link mass and inertia × (1 + this).
        push: (start [s], duration [s], force as a fraction of the body weight): a
            horizontal push on the base, along ``push_direction`` (world x, y).
        push_direction: world-frame (x, y) direction of the push (normalized).
        watchdog_timeout: input older than this [s] gives the safe output (the node's default),
            or older than ``prediction_horizon`` when that is longer.
        prediction_horizon: the longest input gap the controller bridges on its own predicted
            state [s] (the node's ``prediction_horizon``); None = the robot file's (the
            lock-step runner resolves it), 0 = no prediction.
        seed: of every random draw.
    """

    drop_state: float = 0.0
    delay: float = 0.0
    contact_flip: float = 0.0
    gap: tuple[float, float] | None = None
    mass_error: float = 0.0
    push: tuple[float, float, float] | None = None
    push_direction: tuple[float, float] = (0.0, 1.0)
    watchdog_timeout: float = 0.05
    prediction_horizon: float | None = None
    seed: int = 0

    def validate(self) -> None:
        for name in ("drop_state", "contact_flip"):
            p = getattr(self, name)
            if not (0.0 <= p < 1.0):
                raise ConfigError(f"faults.{name}", p, "must be a probability in [0, 1)")
        if not (math.isfinite(self.delay) and 0.0 <= self.delay <= 1.0):
            raise ConfigError("faults.delay", self.delay, "must be in [0, 1] s")
        if not (math.isfinite(self.mass_error) and -0.5 < self.mass_error < 1.0):
            raise ConfigError("faults.mass_error", self.mass_error, "must be in (-0.5, 1)")
        for name, size in (("gap", 2), ("push", 3)):
            value = getattr(self, name)
            if value is not None and (len(value) != size or not np.all(np.isfinite(value)) or value[1] < 0):
                raise ConfigError(f"faults.{name}", value, f"needs {size} finite values, duration ≥ 0")
        if not (self.watchdog_timeout > 0):
            raise ConfigError("faults.watchdog_timeout", self.watchdog_timeout, "must be > 0 s")
        if self.prediction_horizon is not None and not (0.0 <= self.prediction_horizon <= MAX_HORIZON_S):
            raise ConfigError("faults.prediction_horizon", self.prediction_horizon,
                              f"must be in [0, {MAX_HORIZON_S:g}] s")

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) != f.default for f in fields(self)
                   if f.name not in ("push_direction", "watchdog_timeout", "prediction_horizon", "seed"))

    @classmethod
    def from_dict(cls, values: dict[str, Any] | "Faults" | None) -> "Faults":
        if values is None:
            return cls()
        if isinstance(values, Faults):
            return values
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError("faults", sorted(unknown), f"unknown; valid: {[f.name for f in fields(cls)]}")
        return cls(**values)


def _within(t: float, start: float, duration: float) -> bool:
    """``start ≤ t < start + duration`` on a tick grid (half a microsecond of slack)."""
    return start - 5e-7 <= t < start + duration - 5e-7


def scale_masses(pin_model: pin.Model, factor: float) -> None:
    """Every body's mass and rotational inertia × ``factor`` (in place; centres unchanged)."""
    for j in range(1, pin_model.njoints):
        inertia = pin_model.inertias[j]
        pin_model.inertias[j] = pin.Inertia(inertia.mass * factor, inertia.lever, inertia.inertia * factor)


@dataclass
class FaultInjector:
    """Turns the measured (q, v, contact mask) into what the controller is given."""

    faults: Faults
    dt: float
    nq: int
    nv: int
    k: int
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        f = self.faults
        self.rng = np.random.default_rng(f.seed)
        self.delay_ticks = int(round(f.delay / self.dt))
        depth = self.delay_ticks + 1
        self._q_hist = np.zeros((depth, self.nq))   # ring buffers of the last depth measurements
        self._v_hist = np.zeros((depth, self.nv))
        self._mask_hist = np.zeros((depth, self.k), dtype=bool)
        self._head = -1                              # slot of the newest measurement
        self._filled = 0
        self.q, self.v = np.zeros(self.nq), np.zeros(self.nv)
        self.mask = np.zeros(self.k, dtype=bool)
        self._flips = np.zeros(self.k, dtype=bool)
        self._last_fresh = -math.inf
        self.tripped = False
        self.recovered = False
        self.fresh = True
        self.predicted = False
        self.horizon = f.prediction_horizon or 0.0
        self.counts = {"dropped_states": 0, "delayed_ticks": 0, "flipped_contacts": 0, "gap_ticks": 0,
                       "predicted_ticks": 0, "watchdog_ticks": 0, "watchdog_trips": 0, "push_ticks": 0,
                       "model_mass_error_percent": round(100.0 * f.mass_error, 6)}

    def decide(self, t: float) -> int | None:
        """This tick's fate, drawn as :meth:`observe` draws it: the age in ticks of the
        measurement the controller gets (0: this tick's), or None when it gets nothing (a
        lost state, the gap). Also draws this tick's contact flips (:attr:`flips`), keeps
        the watchdog's bookkeeping (:attr:`fresh`, :attr:`recovered`, :attr:`predicted`: a
        tick without input within the prediction horizon) and the counts. The
        caller keeps the measurements (arrays here, messages in the ROS fault relay)."""
        f = self.faults
        depth = self.delay_ticks + 1
        self._filled = min(self._filled + 1, depth)
        lag = min(self.delay_ticks, self._filled - 1)
        self.counts["delayed_ticks"] += lag > 0
        first = self._last_fresh == -math.inf
        in_gap = f.gap is not None and _within(t, f.gap[0], f.gap[1])
        dropped = f.drop_state > 0.0 and self.rng.random() < f.drop_state
        given: int | None = lag
        if in_gap and not first:
            self.counts["gap_ticks"] += 1
            given = None
        elif dropped and not first:
            self.counts["dropped_states"] += 1
            given = None
        else:
            self._last_fresh = t
        self._flips[:] = False
        if f.contact_flip > 0.0 and self.k:
            np.less(self.rng.random(self.k), f.contact_flip, out=self._flips)
            self.counts["flipped_contacts"] += int(self._flips.sum())
        age = t - self._last_fresh
        self.predicted = given is None and age <= self.horizon + 1e-12
        self.counts["predicted_ticks"] += self.predicted
        fresh = age <= max(f.watchdog_timeout, self.horizon) + 1e-12
        if not fresh:
            self.counts["watchdog_ticks"] += 1
            self.counts["watchdog_trips"] += not self.tripped
        self.recovered = fresh and self.tripped
        self.tripped = not fresh
        self.fresh = fresh
        return given

    @property
    def flips(self) -> np.ndarray:
        """This tick's contact flips (True: that contact's estimate is the wrong one)."""
        return self._flips

    def observe(self, t: float, q: np.ndarray, v: np.ndarray, mask: np.ndarray) -> bool:
        """Take this tick's measurement; update :attr:`q`, :attr:`v`, :attr:`mask` (what the
        controller gets). Returns False while the watchdog holds (input too old); after
        that :attr:`recovered` is True for the first fresh tick."""
        depth = len(self._q_hist)
        self._head = (self._head + 1) % depth
        self._q_hist[self._head], self._v_hist[self._head], self._mask_hist[self._head] = q, v, mask
        lag = self.decide(t)
        if lag is not None:
            slot = (self._head - lag) % depth
            self.q[:] = self._q_hist[slot]
            self.v[:] = self._v_hist[slot]
            self.mask[:] = self._mask_hist[slot]
        self.mask ^= self._flips
        return self.fresh

    def restore_mask(self) -> None:
        """Undo this tick's single-tick contact flips (they must not stick to a held mask)."""
        self.mask ^= self._flips

    def push_force(self, t: float, weight: float) -> np.ndarray | None:
        """The world-frame force on the base at ``t`` [N] (None when no push)."""
        force = push_force(self.faults, t, weight)
        self.counts["push_ticks"] += force is not None
        return force


def push_force(faults: Faults, t: float, weight: float) -> np.ndarray | None:
    """The push of ``faults`` at ``t`` [s]: a world-frame force on the base [N] (None when
    none), ``push[2]`` × ``weight`` [N] along ``push_direction``, from ``push[0]`` for
    ``push[1]`` seconds (the lock-step runner and the ROS bridge apply it the same way)."""
    push = faults.push
    if push is None or not _within(t, push[0], push[1]):
        return None
    d = np.asarray(faults.push_direction, dtype=float)
    d = d / np.linalg.norm(d)
    return np.array([d[0], d[1], 0.0]) * push[2] * weight


def scaled_urdf(xml: str, factor: float) -> str:
    """A URDF's text with every link's mass and rotational inertia × ``factor`` (centres
    unchanged): :func:`scale_masses` for a model that is loaded from a file, such as the
    controller node's ``urdf_path`` (the mass error over ROS)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    for inertial in root.iter("inertial"):
        mass = inertial.find("mass")
        if mass is not None:
            mass.set("value", repr(float(mass.get("value")) * factor))
        inertia = inertial.find("inertia")
        if inertia is not None:
            for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
                if inertia.get(key) is not None:
                    inertia.set(key, repr(float(inertia.get(key)) * factor))
    return ET.tostring(root, encoding="unicode")
