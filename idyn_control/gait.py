"""Gait generator: stand and trot, driven by a commanded base velocity (ROS-free).

The locomotion planner of seed 000 §7.2.1, reduced to what the experiments of §7.6
need: a cyclic contact schedule per foot (gait period, duty factor, touchdown phases),
swing trajectories planned at liftoff and re-targeted during the swing, Raibert-style
foot placement, and base references integrated from the commanded planar velocity
(ẋ, ẏ, θ̇) at the standing height. Each tick it writes the references of a
:class:`~idyn_control.controller.Controller` (base, feet, joints)::

    gait = Gait(ctrl, q_standing)
    gait.reset(t, q, v)                       # after ctrl.reset(q, v)
    gait.set_velocity(0.2, 0.0, 0.0)          # [m/s, m/s, rad/s], heading frame
    gait.start()                              # "trot"; gait.stop() returns to "stand"
    gait.update(t, q, v, contact_mask)        # every tick, before ctrl.update(...)

Which feet *swing* is the gait's decision; which feet *touch* is the robot's (the
``contact_mask`` the controller gets, from sensors or the simulator). The two meet at
touchdown: a swing foot that touches in the second half of its swing lands early, one
that has not touched when its swing ends keeps descending slowly until it does.

Joint references come from inverse kinematics of the planned feet at the planned base
pose (seed 000 §7.2.1: "joint trajectories are determined at each controller cycle
using inverse kinematics"); they feed the posture task and the tracking metrics of
seed 000 Table 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pinocchio as pin

from .errors import ConfigError, ShapeError
from .linalg import chol_solve, cholesky

GRAVITY = 9.81  # [m/s²]
#: fraction of μ g the commanded base acceleration may use: the rest of the friction
#: pyramid (inscribed, seed 000 eq. 72) is left to the swing legs' reactions and feedback
FRICTION_ACCELERATION = 0.25
MODES = ("stand", "trot")
#: steepest ground the footholds' plane may describe (``follow_ground``): 45°
MAX_GROUND_SLOPE = 1.0
#: the plane fit's ridge on the slope, relative to the footholds' spread: two feet side by
#: side (or in line) say nothing about the slope across them, which then stays 0
GROUND_RIDGE = 0.01
#: footholds all within this of the level the robot stood up on [m] are that level: flat
#: ground (``follow_ground``) is then followed exactly as without it. Compliant ground sinks
#: 1–3 mm more under a trot's two feet than standing, and a lagging foot lands a few mm
#: deep: aimed at those footholds, ANYmal C's ``pid`` swings landed deeper and it trotted
#: 8 % slower on compliant μ∞ ground
GROUND_DEADBAND = 0.005
#: a known terrain (``Gait.set_terrain``) that rises within this horizontal distance [m] of a
#: swing's path is under the foot (the foot's size and its lag behind the reference)
OBSTACLE_MARGIN = 0.03
#: a swing over known terrain that its usual profile would not clear by half its
#: ``step_height`` rises over this fraction of the swing to an apex ``step_height`` above the
#: highest ground on its path, holds it, and comes down over the same fraction at the end
OBSTACLE_RISE_FRACTION = 0.35
#: ... and travels horizontally only between this fraction of the swing and 1 minus it, so
#: it is nearly up before it moves toward the obstacle (at least ``vertical_fraction``)
OBSTACLE_VERTICAL_FRACTION = 0.15
#: samples along a swing's path checked for obstacles
OBSTACLE_SAMPLES = 24
#: a swing over an obstacle takes this many times as long (its partners stay down until it
#: lands): rising and travelling within the usual swing, the feet of the larger robots lagged
#: their references and struck the faces (ANYmal B fell at a 7 cm step, period 0.3 s; with
#: 1.6 it stepped 10 cm, with 2 every robot tried all but one stepped 30 % of its height)
OBSTACLE_SWING_STRETCH = 2.0
#: blind or not, a swing foot that touches something in the first half of its swing (after
#: ``TRIP_PHASE`` of it), higher than ``TRIP_HEIGHT`` · ``step_height`` above where it lifted
#: off, tripped on an obstacle: it swings again from where it is, over an obstacle
#: (``obstacle_profile``, ``OBSTACLE_SWING_STRETCH``) whose apex is ``TRIP_RISE`` of the leg's
#: height (standing base height above the feet) above where it touched, at most ``MAX_TRIPS``
#: times a swing (a second trip only after the first rise)
TRIP_HEIGHT = 0.25
TRIP_PHASE = 0.1
TRIP_RISE = 0.2
MAX_TRIPS = 2
#: ... touching for this many ticks in a row: a contact estimate that flips for a tick (the
#: fault test's 10 % of the ticks) made the trot trip over nothing
TRIP_TICKS = 3
#: on a known terrain a foothold is moved off an edge: no edge (``STEEP_SLOPE``) may lie
#: within this distance [m] of it (a foot's size and how far it lands off its target); it
#: moves along the foot's travel by the first of ``FOOTHOLD_SHIFTS`` [m] that finds such ground
FOOTHOLD_MARGIN = 0.04
FOOTHOLD_SHIFTS = tuple(0.01 * k for k in range(1, 9))
#: known ground steeper than this (rise over run, 45°) is a step's face: an edge, not a slope
#: to walk on. Seed 000's bumps and the ramps (≤ 30°) are less steep, and on them swings and
#: footholds are as before: raised swings over the bumps made the quadruped fall on all three
#: seed 000 height maps (``qp_coulomb``, 30 s waypoints)
STEEP_SLOPE = 1.0
#: spacing of the probes that look for such a face [m] (a height map's grid: 1 cm)
EDGE_PROBE = 0.01
_EDGE_OFFSETS = tuple(EDGE_PROBE * k for k in range(-round(FOOTHOLD_MARGIN / EDGE_PROBE),
                                                    round(FOOTHOLD_MARGIN / EDGE_PROBE) + 1))


@dataclass
class GaitConfig:
    """Gait parameters (defaults: the trot of seed 000 §7.6).

    Attributes:
        period: gait cycle duration [s].
        duty_factor: fraction of the cycle a foot is in stance.
        step_height: apex of the swing above the straight lift-off → touchdown line [m]. On
            a known terrain (``Gait.set_terrain``) a swing whose path crosses higher ground
            (a step, a bump) rises to ``step_height`` above it (``OBSTACLE_*``).
        touchdown_phases: phase of each foot's touchdown in [0, 1), contact-frame order.
            ``None``: the trot of seed 000 §7.6 — {0.25, 0.75, 0.75, 0.25} for {left
            front, right front, left hind, right hind}, assigned from the feet's nominal
            positions (x > 0 is front, y > 0 is left), so any frame order works.
        max_acceleration: rate limit of the commanded planar velocity [m/s²]; never more
            than ``FRICTION_ACCELERATION`` · μ g, μ the smallest friction coefficient of the
            robot's contacts (the ground must be able to push the body that hard).
        max_yaw_acceleration: rate limit of the commanded yaw rate [rad/s²].
        feedback_gain: Raibert correction of the touchdown point per unit velocity error
            [s]; ``None`` = √(h/g), the capture-point time constant at standing height h.
        max_step_correction: bound of that correction [m].
        max_position_error: horizontal distance the base reference may lead the measured
            base [m] (no wind-up when the robot lags).
        touchdown_depth: the swing ends this far below the ground [m] (0: on it), so a foot
            that lags its reference (``velocity_product`` false) still lands on time.
        touchdown_speed: the swing's reference ends going down this fast [m/s] (0: at rest),
            so a foot meets the ground at that speed on time instead of crossing it early and
            fast, which a deeper ``touchdown_depth`` does (:func:`touchdown_ramp`).
        velocity_product: the joint accelerations carry the feet's velocity-product term,
            J_j a_j = a_foot − J̇v, so a swing foot follows its reference (within ~1 mm at
            its end). False: J_j a_j = a_foot alone, as Pacer's inverse kinematics computes
            them (seed 000's pipeline); the swing feet then lag their references (quadruped,
            Solo12, Go2: 4–9 mm at the swing's end, median).
        follow_ground: the gait learns the ground's slope and height from where the feet
            land, a plane through the footholds (a known terrain still gives the
            footholds' heights, ``set_terrain``): the swings aim at it and the base keeps
            its standing height above it, so the robot walks up and down a ramp (before,
            the base kept the height it started at: on a 5° ramp the project quadruped
            crouched onto its legs 0.6 m up it and fell). A foot is then planted where it
            touched, up to ``step_height`` above the ground it expected. Within
            ``GROUND_DEADBAND`` of the level the robot started on, footholds and touches
            are that level, so flat ground is followed exactly as with False. False: the
            ground stays at the level the robot started on (seed 000's pipeline).
        ground_tilt: with ``follow_ground``, the base's pitch and roll references follow
            this fraction of the footholds' plane's slope (filtered over one gait period):
            1 keeps the body parallel to the ground, 0 level. Level, ANYmal C fell on a
            15° ramp told the terrain (7.3 s, the hind legs stretched, the front ones
            folded); parallel, it walks it. Flat ground: no tilt, unchanged.
        vertical_fraction: the first and the last this fraction of a swing move the foot
            only up and down; it travels to its foothold in between, so it leaves and meets
            the ground vertically, as Pacer's swing spline does (control points above the
            lift-off and the touchdown point). A foot that still moves sideways when it
            touches a sticky compliant ground is stopped dead: at μ = ∞, 1 mm at rest,
            Go1, Go2 and ANYmal C tripped over their own swing feet with 0 (issue 10).
        ground_tolerance: a foot this close above the known ground [m] counts as down
            when the gait decides whether the other feet may lift, even if it reads no
            contact (unloaded).
        early_touchdown: fraction of the swing after which a sensed contact ends it.
        touchdown_reach: before the swing's final descent (the last ``vertical_fraction``),
            a contact ends it only within this fraction of the swing's horizontal travel
            (of ``step_height`` for a swing in place) from its foothold; farther, the foot
            tripped and swings on to its foothold. Planted where it tripped, the next swing
            of that foot was longer still: ANYmal C's hind feet tripped ever earlier at
            0.4 m/s (9, 19, 56 … 316 mm short) until it fell. 10: any contact (feet that
            lag their references far, as ``pid``'s on the quadruped, land where they touch).
        late_descent_speed: how fast a swing foot that missed the ground keeps going down
            [m/s], for at most ``late_touchdown_time`` [s], before it is declared stance.
            Blind on a ramp a swing often ends above the ground, where the plane through
            the last footholds misses it: at 0.1 m/s (the default until 2026-11-29) a foot
            went only 1 cm further down and was planted in the air, and on a 20° ramp
            ``wbc_qp`` fell with Solo12, Go1, B1 and HyQ (A1 stalled); at 0.3 m/s they walk.
        regain_contact_time: a planted foot that has not touched the ground for this long
            [s] (it bounced) descends again onto its foothold, as a late touchdown.
        stand_up_time: time to reach the standing height from the height at reset [s].
        stand_shift_speed: speed at which a standing robot brings its CoM over the centre
            of its feet [m/s].
        ik_iterations: Newton iterations of the joint-reference IK per tick (warm-started).
    """

    period: float = 0.3
    duty_factor: float = 0.75
    step_height: float = 0.015
    touchdown_phases: Sequence[float] | None = None
    max_acceleration: float = 1.0
    max_yaw_acceleration: float = 2.0
    feedback_gain: float | None = None
    max_step_correction: float = 0.04
    max_position_error: float = 0.03
    touchdown_depth: float = 0.0
    touchdown_speed: float = 0.0
    velocity_product: bool = True
    follow_ground: bool = True
    ground_tilt: float = 1.0
    vertical_fraction: float = 0.125
    ground_tolerance: float = 0.001
    early_touchdown: float = 0.5
    touchdown_reach: float = 0.25
    late_descent_speed: float = 0.3
    late_touchdown_time: float = 0.1
    regain_contact_time: float = 0.01
    stand_up_time: float = 1.0
    stand_shift_speed: float = 0.05
    ik_iterations: int = 1

    def validate(self, n_feet: int) -> None:
        for key in ("period", "step_height", "max_acceleration", "max_yaw_acceleration",
                    "max_step_correction", "max_position_error", "touchdown_depth", "ground_tolerance",
                    "touchdown_speed", "touchdown_reach", "late_descent_speed", "late_touchdown_time",
                    "regain_contact_time", "stand_up_time", "stand_shift_speed"):
            value = getattr(self, key)
            if not (np.isfinite(value) and value >= 0.0):
                raise ConfigError(key, value, "must be finite and ≥ 0")
        for key in ("velocity_product", "follow_ground"):
            if not isinstance(getattr(self, key), (bool, np.bool_)):
                raise ConfigError(key, getattr(self, key), "must be true or false")
        if self.period <= 0.0:
            raise ConfigError("period", self.period, "must be > 0 [s]")
        if not 0.0 < self.duty_factor < 1.0:
            raise ConfigError("duty_factor", self.duty_factor, "must be in (0, 1)")
        if not 0.0 <= self.ground_tilt <= 1.0:
            raise ConfigError("ground_tilt", self.ground_tilt, "must be in [0, 1]")
        if not 0.0 <= self.vertical_fraction < 0.5:
            raise ConfigError("vertical_fraction", self.vertical_fraction, "must be in [0, 0.5)")
        if not 0.0 <= self.early_touchdown <= 1.0:
            raise ConfigError("early_touchdown", self.early_touchdown, "must be in [0, 1]")
        if self.feedback_gain is not None and not (np.isfinite(self.feedback_gain) and self.feedback_gain >= 0):
            raise ConfigError("feedback_gain", self.feedback_gain, "must be finite and ≥ 0")
        if self.ik_iterations < 0:
            raise ConfigError("ik_iterations", self.ik_iterations, "must be ≥ 0")
        if self.touchdown_phases is not None:
            phases = np.asarray(self.touchdown_phases, dtype=float)
            if phases.shape != (n_feet,):
                raise ShapeError("touchdown_phases", phases.shape, (n_feet,))
            if not np.all((phases >= 0.0) & (phases < 1.0)):
                raise ConfigError("touchdown_phases", self.touchdown_phases, "must be in [0, 1)")


def min_jerk(s: float) -> tuple[float, float, float]:
    """Quintic 0 → 1 on s ∈ [0, 1] with zero velocity and acceleration at both ends:
    value, d/ds, d²/ds²."""
    s = min(max(s, 0.0), 1.0)
    return (s**3 * (10.0 - 15.0 * s + 6.0 * s * s),
            30.0 * s * s * (1.0 - s) ** 2,
            60.0 * s * (1.0 - s) * (1.0 - 2.0 * s))


def swing_bump(s: float) -> tuple[float, float, float]:
    """64 s³(1 − s)³: 0 at both ends, 1 at s = ½, zero velocity and acceleration at the
    ends (smooth lift-off and touchdown): value, d/ds, d²/ds²."""
    s = min(max(s, 0.0), 1.0)
    u = 1.0 - s
    return (64.0 * s**3 * u**3,
            192.0 * s * s * u * u * (u - s),
            384.0 * s * u * (1.0 - 5.0 * s + 5.0 * s * s))


def obstacle_profile(s: float, z0: float, z1: float, apex: float) -> tuple[float, float, float]:
    """A swing's height over an obstacle: from ``z0`` up to ``apex`` over the first
    ``OBSTACLE_RISE_FRACTION`` of the swing (minimum jerk), held, and down to ``z1`` over the
    last: value [m], d/ds, d²/ds² (zero velocity and acceleration at both ends)."""
    a = OBSTACLE_RISE_FRACTION
    s = min(max(s, 0.0), 1.0)
    if s < a:
        m, dm, ddm = min_jerk(s / a)
        return z0 + (apex - z0) * m, (apex - z0) * dm / a, (apex - z0) * ddm / (a * a)
    if s > 1.0 - a:
        m, dm, ddm = min_jerk((1.0 - s) / a)
        return z1 + (apex - z1) * m, -(apex - z1) * dm / a, (apex - z1) * ddm / (a * a)
    return apex, 0.0, 0.0


def touchdown_ramp(s: float) -> tuple[float, float, float]:
    """−4s³ + 7s⁴ − 3s⁵: 0 at both ends with zero velocity and acceleration at s = 0, slope
    1 and zero curvature at s = 1 (≤ 0 between; minimum −0.198 at s ≈ 0.66): a swing's
    vertical reference minus ``v · T · touchdown_ramp(s)`` ends going down at v with the
    same endpoints: value, d/ds, d²/ds²."""
    s = min(max(s, 0.0), 1.0)
    return (s**3 * (-4.0 + 7.0 * s - 3.0 * s * s),
            s * s * (-12.0 + 28.0 * s - 15.0 * s * s),
            s * (-24.0 + 84.0 * s - 60.0 * s * s))


def _rot_z(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def tilted_rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """R_z(yaw) R_y(pitch) R_x(roll); exactly R_z(yaw) when the tilt is zero."""
    Rz = _rot_z(yaw)
    if pitch == 0.0 and roll == 0.0:
        return Rz
    cp, sp, cr, sr = math.cos(pitch), math.sin(pitch), math.cos(roll), math.sin(roll)
    return Rz @ np.array([[cp, sp * sr, sp * cr], [0.0, cr, -sr], [-sp, cp * sr, cp * cr]])


def _yaw_of(R: np.ndarray) -> float:
    return math.atan2(R[1, 0], R[0, 0])


def feet_move_sideways(model, q) -> bool:
    """Whether every foot's joints can move it along the base's lateral axis at
    configuration ``q`` (the lateral direction is in the range of its leg Jacobian): False
    for legs in sagittal planes (no abduction, Solo 8), which can neither step sideways nor
    turn."""
    pm, nb = model.pin_model, model.n_base
    data = pm.createData()
    pin.computeJointJacobians(pm, data, q)
    lateral = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()[:, 1]
    for fid in model.contact_frame_ids:
        J = pin.getFrameJacobian(pm, data, fid, pin.LOCAL_WORLD_ALIGNED)[:3, nb:]
        U, sv, _ = np.linalg.svd(J, full_matrices=False)
        basis = U[:, sv > 1e-6 * max(sv.max(initial=0.0), 1e-12)]
        if np.linalg.norm(lateral - basis @ (basis.T @ lateral)) > 0.5:
            return False
    return True


class Gait:
    """Stand/trot gait writing the references of a :class:`Controller`.

    Attributes (updated by :meth:`update`; contact-frame order, world frame):
        mode: "stand" or "trot".
        planned_stance: (k,) bool, the contact schedule now (True = planned stance).
        swinging: (k,) bool, feet following a swing trajectory now.
        foot_position_ref, foot_velocity_ref, foot_acceleration_ref: (k, 3) [m, m/s, m/s²].
        base_position_ref: (3,) [m]; base_yaw_ref [rad]; base_velocity_ref (3,) [m/s].
        velocity_command: (3,) the target (vx, vy, yaw rate), heading frame.
        velocity_filtered: (3,) the rate-limited command the references use.
        q_joint_ref, v_joint_ref: joint references from inverse kinematics.
        standing_height: base height the gait holds [m]; ground_height: foot-frame
            height of a foot on the flat ground [m] (:meth:`ground_at` adds a known terrain).
    """

    def __init__(self, controller, standing_q: np.ndarray, config: GaitConfig | None = None):
        model = controller.model
        if not model.floating_base or not model.contacts:
            raise ConfigError("robot", model.pin_model.name, "the gait needs a floating base with contact frames")
        self.controller = controller
        self.model = model
        self.config = config or GaitConfig()
        k = len(model.contacts)
        self.config.validate(k)
        self.n_feet = k
        pm = model.pin_model
        self._data = pm.createData()
        q0 = np.asarray(standing_q, dtype=float).copy()
        if q0.shape != (model.nq,):
            raise ShapeError("standing_q", q0.shape, (model.nq,))
        pin.framesForwardKinematics(pm, self._data, q0)
        R0 = pin.Quaternion(q0[6], q0[3], q0[4], q0[5]).toRotationMatrix()
        feet = np.array([self._data.oMf[f].translation for f in model.contact_frame_ids])
        com = pin.centerOfMass(pm, self._data, q0)
        #: nominal footholds relative to the base (heading frame), centred on the centre of
        #: mass rather than the base origin: a diagonal support line then passes through
        #: the CoM and gravity does not roll the body about it during the trot
        offsets = (R0.T @ (feet - q0[:3]).T).T
        self.com_offset = R0.T @ (com - q0[:3])  # [m], base frame
        offsets[:, :2] += self.com_offset[:2] - offsets[:, :2].mean(axis=0)
        self.foot_offsets = offsets
        self.ground_height = float(feet[:, 2].mean())
        self.standing_height = float(q0[2])
        #: the ground the gait expects (``follow_ground``): z = z0 + sx·x + sy·y [m, world],
        #: a plane through the footholds; flat at ground_height otherwise
        self.ground_plane = np.array([self.ground_height, 0.0, 0.0])
        self.ground_offset = 0.0  # [m] the base reference's rise with the ground (filtered)
        #: [rad] the base's pitch and roll references about its heading frame's y and x
        #: axes (``ground_tilt``, filtered); zero on flat ground
        self.base_tilt = np.zeros(2)
        self.q_standing = q0
        #: which of (vx, vy, yaw rate) the legs can realize (1.0) or the gait holds at 0 (0.0):
        #: feet that cannot move sideways relative to the base (legs in sagittal planes, no
        #: abduction: Solo 8) can neither trot sideways nor turn, since a stance phase's two
        #: diagonal feet, held by the ground, lock the body's yaw; commanded anyway, Solo 8 fell
        #: within 3 s at 0.3 rad/s on rigid μ∞
        self.velocity_axes = np.array([1.0, 1.0, 1.0]) if feet_move_sideways(model, q0) else np.array([1.0, 0.0, 0.0])
        self.touchdown_phases = self._touchdown_phases()
        mu = min(c.friction for c in model.contacts)
        self.max_acceleration = min(self.config.max_acceleration, FRICTION_ACCELERATION * mu * GRAVITY)
        self.swing_duration = (1.0 - self.config.duty_factor) * self.config.period
        self.stance_duration = self.config.duty_factor * self.config.period
        g = self.config.feedback_gain
        self.feedback_gain = math.sqrt(max(self.standing_height - self.ground_height, 1e-3) / GRAVITY) if g is None else g

        self.mode = "stand"
        self.terrain_height = None  # (x, y) → ground height above the flat level [m]; None: flat
        self._stop_requested = False
        self._t_stopped: float | None = None
        self._t_cycle0 = 0.0
        self._t_prev: float | None = None
        self.velocity_command = np.zeros(3)
        self.velocity_filtered = np.zeros(3)
        self.base_position_ref = q0[:3].copy()
        self.base_yaw_ref = 0.0
        self.base_velocity_ref = np.zeros(3)
        self.base_angular_ref = np.zeros(3)
        self.body_offset = np.zeros(3)           # [m] heading frame: stand-mode shift of the base target
        self.body_offset_velocity = np.zeros(3)  # [m/s] its rate (feed-forward)
        self._stand_from = self.standing_height
        self._t_reset = 0.0
        self.planned_stance = np.ones(k, dtype=bool)
        self.swinging = np.zeros(k, dtype=bool)
        self._swung = np.zeros(k, dtype=bool)       # a swing already started in this window
        self._off_ground = np.zeros(k, dtype=int)   # ticks a planted foot has not touched
        self._swing_start = np.zeros(k)             # time of lift-off [s]
        self._swing_time = np.full(k, self.swing_duration)  # this swing's duration [s]
        self._swing_height = np.full(k, self.config.step_height)  # this swing's apex [m]
        # a swing over an obstacle (known terrain, or a trip): its apex [m, foot frame, world
        # z]; NaN: the usual profile
        self._obstacle_apex = np.full(k, np.nan)
        self._edge_side = np.zeros(k)  # this swing's foothold moved before (−1) or beyond (+1) an edge
        #: swings that went over an obstacle of the known terrain, and footholds moved off an
        #: edge (counts since construction)
        self.obstacle_swings = 0
        self.footholds_moved = 0
        self.trips = 0  # swings begun again over an obstacle a foot tripped on
        self._trips = np.zeros(k)  # this swing's trips
        self._touching = np.zeros(k)  # ticks a swinging foot has touched in a row
        self._liftoff = np.zeros((k, 3))            # foot position at lift-off [m]
        self._touchdown = np.zeros((k, 3))          # planned touchdown point [m]
        self._stance_position = feet.copy()         # where each stance foot is planted [m]
        self.foot_position_ref = feet.copy()
        self.foot_velocity_ref = np.zeros((k, 3))
        self.foot_acceleration_ref = np.zeros((k, 3))
        self.q_joint_ref = q0[model.joint_q_index].copy()
        self.v_joint_ref = np.zeros(model.na)
        self.a_joint_ref = np.zeros(model.na)
        self._q_ik = q0.copy()
        self._q_measured = q0.copy()  # the last update's q (lift: where the feet are)
        self._J_feet = np.zeros((3 * k, model.nv))
        self._err = np.zeros(3 * k)
        self._rhs = np.zeros((3 * k, 2))
        self._v_ik = np.zeros(model.nv)  # the reference velocity at the IK's configuration
        self._a_zero = np.zeros(model.nv)
        self._ik_damping = 1e-8 * np.eye(3 * k)

    # ------------------------------------------------------------------ commands
    def set_velocity(self, vx: float = 0.0, vy: float = 0.0, yaw_rate: float = 0.0) -> None:
        """Commanded planar base velocity: [m/s] forward/left in the heading frame, [rad/s].
        What the legs cannot realize (:attr:`velocity_axes`) is held at 0."""
        cmd = np.array([vx, vy, yaw_rate], dtype=float)
        if not np.isfinite(cmd).all():
            raise ConfigError("velocity", cmd.tolist(), "must be finite")
        np.multiply(cmd, self.velocity_axes, out=self.velocity_command)

    def set_body_offset(self, offset, velocity=(0.0, 0.0, 0.0)) -> None:
        """Shift where the standing robot holds its base [m], heading frame (x forward, y
        left, z up), and that shift's rate [m/s]: a weight shift over one foot, a squat.
        Applies while standing (the horizontal part still at ``stand_shift_speed`` at most,
        from the CoM-over-the-feet target); 0 while trotting."""
        offset, velocity = np.asarray(offset, dtype=float), np.asarray(velocity, dtype=float)
        if offset.shape != (3,) or velocity.shape != (3,) or not (np.isfinite(offset).all() and np.isfinite(velocity).all()):
            raise ConfigError("body_offset", (offset.tolist(), velocity.tolist()), "must be two finite 3-vectors")
        self.body_offset[:] = offset
        self.body_offset_velocity[:] = velocity

    def lift(self, feet: Sequence[int], t: float, duration: float, height: float) -> None:
        """Standing: step in place with ``feet`` (contact indices, e.g. one sole's corners):
        from time ``t`` [s] they swing from where they are (the last :meth:`update`'s state)
        up by ``height`` [m] and back down onto their footholds over ``duration`` [s] (the
        trot's swing profile), landing as a trot's feet do (early on a sensed contact after
        ``early_touchdown`` of the swing, or late).
        Bring the centre of mass over the other feet first (:meth:`set_body_offset`): the
        gait does not move it."""
        if self.mode != "stand":
            raise ConfigError("gait", self.mode, "lift() steps in place while standing")
        if not (np.isfinite(duration) and duration > 0.0 and np.isfinite(height) and height >= 0.0):
            raise ConfigError("lift", (duration, height), "duration > 0 [s] and height ≥ 0 [m]")
        pin.framesForwardKinematics(self.model.pin_model, self._data, self._q_measured)  # the last update's q
        for i in feet:
            if self.swinging[i]:
                continue
            self.swinging[i] = True
            self._swing_start[i] = t
            self._swing_time[i], self._swing_height[i] = duration, height
            self._new_swing(i)
            # from where the foot is, not its foothold: a planted foot creeps (G1's left sole,
            # 10 s on qp_coulomb: 2-4.7 mm inward), and a swing started at the foothold had
            # the foot PD kick the leg sideways at lift-off: G1 rolled over its stance sole
            self._liftoff[i] = self._data.oMf[self.model.contact_frame_ids[i]].translation
            self._touchdown[i] = self._stance_position[i]
            self._touchdown[i, 2] = self.ground_at(*self._touchdown[i, :2]) - self.config.touchdown_depth

    def set_terrain(self, height_at) -> None:
        """Known ground shape: ``height_at(x, y)`` [m] above the flat level the robot
        started on (0 there), e.g. :meth:`HeightMap.height` (seed 000 §7.5); None = flat.
        Touchdown targets and planted feet then follow the terrain, not a constant height."""
        self.terrain_height = height_at

    def ground_at(self, x: float, y: float) -> float:
        """Foot-frame height of a foot standing on the ground at (x, y) [m]: the known
        terrain, else the footholds' plane (``follow_ground``), else the level at reset."""
        if self.terrain_height is not None:
            return self.ground_height + float(self.terrain_height(x, y))
        if self.config.follow_ground:
            z0, sx, sy = self.ground_plane
            return float(z0 + sx * x + sy * y)
        return self.ground_height

    def start(self, t: float | None = None) -> None:
        """Start trotting (at the next update, or at time ``t`` [s])."""
        if self.mode != "trot":
            self.mode = "trot"
            self._t_cycle0 = self._t_prev if t is None and self._t_prev is not None else (t or 0.0)
            self._swung[:] = False
        self._stop_requested = False
        self._t_stopped = None

    def stop(self) -> None:
        """Ramp the velocity to zero, finish the swings, then stand (all feet planted)."""
        self.velocity_command[:] = 0.0
        if self.mode == "trot":
            self._stop_requested = True

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ConfigError("gait", mode, f"must be one of {MODES}")
        self.start() if mode == "trot" else self.stop()

    # ------------------------------------------------------------------ tick
    def reset(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask: Sequence[bool] | None = None) -> None:
        """Take the measured state: stand where the robot is, rise to the standing height.

        ``contact_mask``: the feet touching the ground now (a reset mid-stride, after an
        input gap): the ground is where they are, and a foot in the air gets its foothold
        on the ground under it. None: every foot touches.
        """
        q = np.asarray(q, dtype=float)
        pm = self.model.pin_model
        pin.framesForwardKinematics(pm, self._data, q)
        self.mode = "stand"
        self._stop_requested = False
        self._t_stopped = None
        self.velocity_command[:] = 0.0
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        self.base_yaw_ref = _yaw_of(R)
        # a reset while moving (after an input gap) starts from the measured planar velocity
        # (heading frame): a trot that resumes ramps from it to the command instead of
        # braking to zero first; a standing robot's is ~0 (mode "stand" zeroes it anyway)
        v_heading = _rot_z(self.base_yaw_ref).T @ (R @ np.asarray(v[:3], dtype=float))
        self.velocity_filtered[:] = (v_heading[0], v_heading[1], float((R @ np.asarray(v[3:6], dtype=float))[2]))
        self.base_position_ref[:] = q[:3]
        self._stand_from = float(q[2])
        self._t_reset = t
        self._t_prev = t
        self.planned_stance[:] = True
        self.swinging[:] = False
        self._swung[:] = False
        self._off_ground[:] = 0
        for i, f in enumerate(self.model.contact_frame_ids):
            self._stance_position[i] = self._data.oMf[f].translation
        # the ground is where the feet are now (the foot radius of a simulator or a real
        # robot is not in the model): heights are kept relative to it
        clearance = self.standing_height - self.ground_height
        down = np.ones(self.n_feet, dtype=bool) if contact_mask is None else np.asarray(contact_mask, dtype=bool)
        if not down.any():
            down[:] = True
        self.ground_height = float(self._stance_position[down, 2].mean())
        self._stance_position[~down, 2] = self.ground_height
        self.standing_height = self.ground_height + clearance
        self.ground_plane[:] = (self.ground_height, 0.0, 0.0)
        self.ground_offset = 0.0
        self.base_tilt[:] = 0.0
        if self.config.follow_ground:
            self._fit_ground()
            z0, sx, sy = self.ground_plane
            self.ground_offset = float(z0 + sx * q[0] + sy * q[1] - self.ground_height)
            self._stand_from = float(q[2]) - self.ground_offset  # no jump: the base is where it is
            self.base_tilt[:] = self._tilt_target()
        self.foot_position_ref[:] = self._stance_position
        self.foot_velocity_ref[:] = 0.0
        self.foot_acceleration_ref[:] = 0.0
        self._q_ik[:] = q
        self._q_measured[:] = q
        self.q_joint_ref[:] = q[self.model.joint_q_index]
        self.v_joint_ref[:] = 0.0

    def phase(self, t: float) -> float:
        """Gait phase in [0, 1) at time ``t`` [s] (meaningful while trotting)."""
        return ((t - self._t_cycle0) / self.config.period) % 1.0

    def update(self, t: float, q: np.ndarray, v: np.ndarray, contact_mask: Sequence[bool]) -> None:
        """Advance to time ``t`` [s] with the measured (q, v) (Pinocchio conventions) and
        contact estimates, and write the controller's references."""
        dt = 0.0 if self._t_prev is None else max(t - self._t_prev, 0.0)
        self._t_prev = t
        mask = np.asarray(contact_mask, dtype=bool)
        if mask.shape != (self.n_feet,):
            raise ShapeError("contact_mask", mask.shape, (self.n_feet,))
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        v_world = R @ v[:3]
        pm = self.model.pin_model
        pin.framesForwardKinematics(pm, self._data, q)
        feet = [self._data.oMf[f].translation for f in self.model.contact_frame_ids]
        self._q_measured[:] = q

        self._update_base(t, dt, q, v_world)
        if self.mode == "trot":
            self._update_schedule(t, mask, feet)
        else:  # standing: every foot, but those lifted (:meth:`lift`)
            np.logical_not(self.swinging, out=self.planned_stance)
        self._update_feet(t, dt, q, v_world, mask, feet)
        self._solve_ik()
        self._write_references()

    # ------------------------------------------------------------------ internals
    def _update_base(self, t: float, dt: float, q: np.ndarray, v_world: np.ndarray) -> None:
        c = self.config
        # rate-limited command
        step = np.array([self.max_acceleration, self.max_acceleration, c.max_yaw_acceleration]) * dt
        self.velocity_filtered += np.clip(self.velocity_command - self.velocity_filtered, -step, step)
        if self.mode == "stand":
            self.velocity_filtered[:] = 0.0
        vx, vy, wz = self.velocity_filtered
        self.base_yaw_ref += wz * dt
        Rz = _rot_z(self.base_yaw_ref)
        self.base_velocity_ref[:] = Rz @ np.array([vx, vy, 0.0])
        self.base_angular_ref[:] = (0.0, 0.0, wz)
        self.base_position_ref[:2] += self.base_velocity_ref[:2] * dt
        if self.mode == "stand":
            # standing: bring the CoM over the centre of the feet (slowly, c.stand_shift_speed),
            # plus the commanded body offset (weight shift)
            target = self._stance_position[:, :2].mean(axis=0) - (Rz @ (self.com_offset - self.body_offset))[:2]
            shift = np.clip(target - self.base_position_ref[:2], -c.stand_shift_speed * dt, c.stand_shift_speed * dt)
            self.base_position_ref[:2] += shift
            self.base_velocity_ref[:2] += np.clip((Rz @ self.body_offset_velocity)[:2], -c.stand_shift_speed,
                                                  c.stand_shift_speed)
        lead = self.base_position_ref[:2] - q[:2]
        dist = float(np.hypot(*lead))
        if dist > c.max_position_error:  # no wind-up: stay within reach of the robot
            self.base_position_ref[:2] = q[:2] + lead * (c.max_position_error / dist)
        # height: smooth rise from the height at reset to the standing height
        T = c.stand_up_time
        s = 1.0 if T <= 0.0 else (t - self._t_reset) / T
        h, dh, _ = min_jerk(s)
        self.base_position_ref[2] = self._stand_from + (self.standing_height - self._stand_from) * h
        self.base_velocity_ref[2] = 0.0 if T <= 0.0 or s >= 1.0 else (
            (self.standing_height - self._stand_from) * dh / T)
        if self.mode == "stand":  # a squat
            self.base_position_ref[2] += self.body_offset[2]
            self.base_velocity_ref[2] += self.body_offset_velocity[2]
        if c.follow_ground:
            # the standing height above the footholds' plane under the base: the plane's rise
            # along the base's velocity, plus a first-order approach (one gait period) to
            # the plane's height, which steps when a foot lands
            z0, sx, sy = self.ground_plane
            bx, by = self.base_position_ref[0], self.base_position_ref[1]
            target = z0 + sx * bx + sy * by - self.ground_height
            rate = (sx * self.base_velocity_ref[0] + sy * self.base_velocity_ref[1]
                    + (target - self.ground_offset) / c.period)
            self.ground_offset += rate * dt
            self.base_position_ref[2] += self.ground_offset
            self.base_velocity_ref[2] += rate
            # pitch and roll towards the plane's, over one gait period
            pitch_rate, roll_rate = (self._tilt_target() - self.base_tilt) / c.period
            self.base_tilt[0] += pitch_rate * dt
            self.base_tilt[1] += roll_rate * dt
            if pitch_rate != 0.0 or roll_rate != 0.0:
                pitch = self.base_tilt[0]
                self.base_angular_ref[:] += Rz @ np.array([roll_rate * math.cos(pitch), pitch_rate,
                                                           -roll_rate * math.sin(pitch)])

    def _tilt_target(self) -> np.ndarray:
        """(pitch, roll) [rad] of ``ground_tilt`` times the plane's slope in the heading frame
        (nose up on a climb: a negative pitch about y)."""
        _, sx, sy = self.ground_plane
        if sx == 0.0 and sy == 0.0:
            return np.zeros(2)
        c, s = math.cos(self.base_yaw_ref), math.sin(self.base_yaw_ref)
        k = self.config.ground_tilt
        return np.array([-k * math.atan(c * sx + s * sy), k * math.atan(-s * sx + c * sy)])

    def base_rotation(self) -> np.ndarray:
        """The base's orientation reference: the heading, pitched and rolled by ``base_tilt``."""
        return tilted_rotation(self.base_yaw_ref, *self.base_tilt)

    def _update_schedule(self, t: float, mask: np.ndarray, feet) -> None:
        c = self.config
        phase = self.phase(t)
        swing_frac = 1.0 - c.duty_factor
        # stopping: keep stepping until the velocity has ramped to zero, then one more
        # cycle (feet land under the hips), then no new swings; stand once all landed
        if self._stop_requested and self._t_stopped is None and not np.any(self.velocity_filtered):
            self._t_stopped = t
        no_new_swings = self._t_stopped is not None and t - self._t_stopped >= c.period
        since = (phase - (self.touchdown_phases - swing_frac)) % 1.0  # cycles since lift-off phase
        in_window = since < swing_frac
        due = (in_window & ~self._swung & ~self.swinging & (since * c.period < 0.5 * self.swing_duration)
               & (not no_new_swings))
        if due.any():
            # lift only when the feet that stay down are on the ground: a foot that has not
            # landed yet (late touchdown) keeps its partners down until it does. On the
            # ground = sensed, or within ground_tolerance of it: with four feet down the
            # load can leave one of them (rigid contact is indeterminate), which then
            # reads "no contact" while standing on the ground; waiting for it to be
            # loaded kept the other pair from lifting (LCP,μ stood 150 ms on the
            # diagonal the schedule swings, then fell)
            staying = ~due & ~self.swinging
            down = mask | np.array([f[2] - self.ground_at(f[0], f[1]) <= c.ground_tolerance for f in feet])
            if staying.sum() >= 2 and down[staying].all():
                for i in np.flatnonzero(due):
                    self.swinging[i] = True
                    self._swung[i] = True
                    self._swing_start[i] = t
                    self._swing_time[i], self._swing_height[i] = self.swing_duration, c.step_height
                    self._new_swing(i)
                    self._liftoff[i] = feet[i]
        self._swung[~in_window] = False  # the next window starts a new swing
        self.planned_stance[:] = ~(in_window & (self.swinging | (not no_new_swings)))
        if no_new_swings and not self.swinging.any():
            self.mode = "stand"
            self._stop_requested = False
            self._t_stopped = None
            self.planned_stance[:] = True

    def _update_feet(self, t: float, dt: float, q: np.ndarray, v_world: np.ndarray,
                     mask: np.ndarray, feet) -> None:
        c = self.config
        vx, vy, wz = self.velocity_filtered
        for i in range(self.n_feet):
            Ts = self._swing_time[i] if self.swinging[i] else self.swing_duration
            if not self.swinging[i]:
                # a planted foot that lost the ground (bounced at touchdown, kicked) goes
                # back down onto its foothold, slowly, like a late touchdown
                self._off_ground[i] = 0 if mask[i] else self._off_ground[i] + 1
                if self._off_ground[i] * max(dt, 1e-9) >= c.regain_contact_time and self.mode == "trot":
                    self.swinging[i] = True
                    self._swing_time[i] = Ts
                    self._swing_start[i] = t - Ts  # past the end of the trajectory: descend
                    self._liftoff[i] = feet[i]
                    self._touchdown[i] = self._stance_position[i]
                    self._touchdown[i, 2] = self.ground_at(*self._touchdown[i, :2]) - c.touchdown_depth
                    self._off_ground[i] = 0
                    self._new_swing(i)
                    continue
                self.foot_position_ref[i] = self._stance_position[i]
                self.foot_velocity_ref[i] = 0.0
                self.foot_acceleration_ref[i] = 0.0
                continue
            s = (t - self._swing_start[i]) / Ts
            if mask[i] and s >= c.early_touchdown and self._landing(i, s, feet[i]):  # touchdown (early or on time)
                self._plant(i, feet[i])
                continue
            self._touching[i] = self._touching[i] + 1 if mask[i] else 0
            if self._touching[i] >= TRIP_TICKS and self.mode == "trot" and self._tripped(i, s, feet[i]):
                self._trip(i, t, feet[i])
                Ts, s = self._swing_time[i], 0.0
            # the foot travels to its foothold over the middle [f, 1 − f] of the swing
            over = not math.isnan(self._obstacle_apex[i])
            f = max(c.vertical_fraction, OBSTACLE_VERTICAL_FRACTION) if over else c.vertical_fraction
            travel = (1.0 - 2.0 * f) * Ts
            if s < f + 0.8 * (1.0 - 2.0 * f) and self.mode == "trot":  # re-target until the travel's last fifth
                self._touchdown[i] = self._raibert_target(i, t_td=self._swing_start[i] + Ts,
                                                          t=t, q=q, v_world=v_world)
                if self.terrain_height is not None:
                    was_over = over
                    over = self._check_obstacle(i, s)
                    if over and not was_over:  # decided now: a longer swing
                        self.obstacle_swings += 1
                        Ts = self._swing_time[i] = Ts * OBSTACLE_SWING_STRETCH
                        s = (t - self._swing_start[i]) / Ts
                    f = max(c.vertical_fraction, OBSTACLE_VERTICAL_FRACTION) if over else c.vertical_fraction
                    travel = (1.0 - 2.0 * f) * Ts
            p0, p1 = self._liftoff[i], self._touchdown[i]
            if s < 1.0:
                m, dm, ddm = min_jerk((s - f) / (1.0 - 2.0 * f))
                self.foot_position_ref[i] = p0 + (p1 - p0) * m
                self.foot_velocity_ref[i] = (p1 - p0) * dm / travel
                self.foot_acceleration_ref[i] = (p1 - p0) * ddm / travel**2
                if over:
                    z, dz, ddz = obstacle_profile(s, p0[2], p1[2], self._obstacle_apex[i])
                    self.foot_position_ref[i, 2] = z
                    self.foot_velocity_ref[i, 2] = dz / Ts
                    self.foot_acceleration_ref[i, 2] = ddz / Ts**2
                else:
                    b, db, ddb = swing_bump(s)
                    height = self._swing_height[i]
                    self.foot_position_ref[i, 2] += height * b
                    self.foot_velocity_ref[i, 2] += height * db / Ts
                    self.foot_acceleration_ref[i, 2] += height * ddb / Ts**2
                if c.touchdown_speed > 0.0:
                    r, dr, ddr = touchdown_ramp(s)
                    self.foot_position_ref[i, 2] -= c.touchdown_speed * Ts * r
                    self.foot_velocity_ref[i, 2] -= c.touchdown_speed * dr
                    self.foot_acceleration_ref[i, 2] -= c.touchdown_speed * ddr / Ts
            else:  # late: the ground is lower than planned; keep going down, then give up
                late = t - (self._swing_start[i] + Ts)
                p1 = self._touchdown[i]
                self.foot_position_ref[i] = p1
                self.foot_position_ref[i, 2] = p1[2] - c.late_descent_speed * late
                self.foot_velocity_ref[i] = (0.0, 0.0, -c.late_descent_speed)
                self.foot_acceleration_ref[i] = 0.0
                if late >= c.late_touchdown_time:
                    self._plant(i, feet[i], touched=False)

    def _new_swing(self, i: int) -> None:
        """Foot ``i`` begins a swing: the usual profile, no foothold moved, no trip yet."""
        self._obstacle_apex[i], self._edge_side[i], self._trips[i], self._touching[i] = np.nan, 0.0, 0, 0

    def _tripped(self, i: int, s: float, foot: np.ndarray) -> bool:
        """Whether swing ``i``'s contact at phase ``s`` is a trip: in the swing's first half
        (rising; a contact later is a landing or a foot on its way down), with the foot well
        above where it lifted off (``TRIP_HEIGHT``): it struck something. Not measured
        against the expected ground: blind, the plane through the footholds rises near a
        block once a foot stands on it, and a foot stopped by the face stood below it."""
        if self._trips[i] >= MAX_TRIPS or s >= self.config.early_touchdown \
                or s < (OBSTACLE_RISE_FRACTION if self._trips[i] else TRIP_PHASE):
            return False
        return foot[2] - self._liftoff[i, 2] > TRIP_HEIGHT * self.config.step_height

    def _trip(self, i: int, t: float, foot: np.ndarray) -> None:
        """Swing ``i`` again from ``foot`` (where it tripped at time ``t``), over an obstacle
        ``TRIP_RISE`` of the leg's height above that point. Blind, with the usual 1.5 cm
        swing, every robot tried fell on a block of 10 % of its standing height."""
        self._trips[i] += 1
        self.trips += 1
        self._touching[i] = 0
        self._liftoff[i] = foot
        self._swing_start[i] = t
        self._swing_time[i] = self.swing_duration * OBSTACLE_SWING_STRETCH
        apex = float(foot[2]) + TRIP_RISE * (self.standing_height - self.ground_height)
        previous = self._obstacle_apex[i]
        self._obstacle_apex[i] = apex if math.isnan(previous) else max(apex, previous)

    def _check_obstacle(self, i: int, s: float) -> bool:
        """Whether swing ``i`` (at phase ``s``, its target just updated) goes over an obstacle
        of the known terrain, and its apex (``_obstacle_apex``).

        The usual profile (``swing_bump`` above the straight line) is kept unless the known
        ground within ``OBSTACLE_MARGIN`` of its path rises above that line, comes closer than
        half ``step_height`` to the foot, and has an edge there (``_edge_near``): then the
        foot rises first, to ``step_height`` above the highest ground on its path, and
        travels at that height (:func:`obstacle_profile`), over a longer swing
        (``OBSTACLE_SWING_STRETCH``).
        Decided while the two profiles barely differ (the first tenth of the swing: a swing is
        re-targeted from its first tick); later re-targets only raise the apex. With a 1.5 cm
        swing Solo12 and ANYmal C tripped on a 2.2 cm and a 4.6 cm step they were told of, and
        fell."""
        c = self.config
        over = not math.isnan(self._obstacle_apex[i])
        if not over and s > 0.1:
            return False
        p0, p1 = self._liftoff[i], self._touchdown[i]
        d = p1[:2] - p0[:2]
        length = math.hypot(d[0], d[1])
        u = d / length if length > 1e-9 else np.zeros(2)
        f = c.vertical_fraction
        clear = 0.5 * c.step_height
        slack = c.touchdown_depth + 0.001  # a swing ends that far below the ground it aims at
        top = -math.inf  # the highest ground above the line under the path
        struck = False
        for k in range(1, OBSTACLE_SAMPLES):
            sk = k / OBSTACLE_SAMPLES
            m = min_jerk((sk - f) / (1.0 - 2.0 * f))[0]
            x, y = p0[0] + d[0] * m, p0[1] + d[1] * m
            line = p0[2] + (p1[2] - p0[2]) * m
            ground = max(self.ground_at(x + e * u[0], y + e * u[1])
                         for e in (-OBSTACLE_MARGIN, 0.0, OBSTACLE_MARGIN))
            if ground <= line + slack:
                continue
            top = max(top, ground)
            if line + self._swing_height[i] * swing_bump(sk)[0] < ground + clear:
                struck |= self._edge_near(x, y)
        if not (struck or over):
            return False
        apex = max(top, p0[2], p1[2]) + c.step_height
        self._obstacle_apex[i] = apex if not over else max(apex, self._obstacle_apex[i])
        return True

    def _landing(self, i: int, s: float, foot: np.ndarray) -> bool:
        """Whether a contact of swinging foot ``i`` at swing phase ``s`` is its landing: in
        the swing's final descent, or within ``touchdown_reach`` of the travel from its
        foothold. Farther, the foot tripped (it lags its reference): it swings on to its
        foothold instead of being planted short, which made the next swing longer still."""
        c = self.config
        if s >= 1.0 - c.vertical_fraction:
            return True
        target, start = self._touchdown[i], self._liftoff[i]
        travel = math.hypot(target[0] - start[0], target[1] - start[1])
        miss = math.hypot(target[0] - foot[0], target[1] - foot[1])
        return miss <= c.touchdown_reach * max(travel, self._swing_height[i])

    def _plant(self, i: int, position: np.ndarray, touched: bool = True) -> None:
        # where it touched, but not above the ground expected there; following the ground, a
        # foot that touched above it is planted there (at most step_height above it; on the
        # level the robot started on, only more than GROUND_DEADBAND above: ANYmal C's
        # wbc_qp, its feet held up to 5 mm below where they touched a ramp, fell on its
        # top). A foot planted without touching (late) is held at that ground: HyQ's,
        # planted in the air up to 3 cm above it, tilted the footholds' plane and the robot
        # fell on compliant ground.
        c = self.config
        self.swinging[i] = False
        self._stance_position[i] = position
        expected = self.ground_at(position[0], position[1])
        if position[2] > expected:
            # on the level it started on, a touch within GROUND_DEADBAND above it is that level
            z0, sx, sy = self.ground_plane
            level = z0 == self.ground_height and sx == 0.0 and sy == 0.0
            up = c.follow_ground and touched and (position[2] - expected > GROUND_DEADBAND or not level)
            limit = expected + c.step_height
            if not math.isnan(self._obstacle_apex[i]):  # over an obstacle: up to its apex
                limit = max(limit, self._obstacle_apex[i])
            self._stance_position[i, 2] = min(position[2], limit) if up else expected
        self.foot_position_ref[i] = self._stance_position[i]
        self.foot_velocity_ref[i] = 0.0
        self.foot_acceleration_ref[i] = 0.0
        if c.follow_ground:
            self._fit_ground()

    def _fit_ground(self) -> None:
        """The footholds' plane (least squares through every foot's last foothold, slope
        ridged by ``GROUND_RIDGE`` and bounded by ``MAX_GROUND_SLOPE``) into ground_plane.
        Footholds all within ``GROUND_DEADBAND`` of ground_height leave it flat there.
        Plain float arithmetic in a fixed order: gait.cpp fit_ground repeats it."""
        P, k = self._stance_position, self.n_feet
        if all(abs(float(P[i, 2]) - self.ground_height) <= GROUND_DEADBAND for i in range(k)):
            self.ground_plane[:] = (self.ground_height, 0.0, 0.0)
            return
        mx = my = mz = 0.0
        for i in range(k):
            mx += float(P[i, 0])
            my += float(P[i, 1])
            mz += float(P[i, 2])
        mx, my, mz = mx / k, my / k, mz / k
        axx = axy = ayy = bx = by = 0.0
        for i in range(k):
            dx, dy, dz = float(P[i, 0]) - mx, float(P[i, 1]) - my, float(P[i, 2]) - mz
            axx += dx * dx
            axy += dx * dy
            ayy += dy * dy
            bx += dx * dz
            by += dy * dz
        ridge = GROUND_RIDGE * 0.5 * (axx + ayy) + 1e-12
        axx += ridge
        ayy += ridge
        det = axx * ayy - axy * axy
        sx = (ayy * bx - axy * by) / det
        sy = (axx * by - axy * bx) / det
        norm = math.hypot(sx, sy)
        if norm > MAX_GROUND_SLOPE:
            sx *= MAX_GROUND_SLOPE / norm
            sy *= MAX_GROUND_SLOPE / norm
        self.ground_plane[0] = mz - sx * mx - sy * my
        self.ground_plane[1] = sx
        self.ground_plane[2] = sy

    def _raibert_target(self, i: int, *, t_td: float, t: float, q: np.ndarray, v_world: np.ndarray) -> np.ndarray:
        """Touchdown point: the hip's nominal foot position when the foot lands, plus half
        the stance's travel, plus a capture-point correction of the velocity error."""
        c = self.config
        remaining = max(t_td - t, 0.0)
        vx, vy, wz = self.velocity_filtered
        yaw_td = self.base_yaw_ref + wz * remaining
        Rz_td = _rot_z(yaw_td)
        base_td = q[:2] + self.base_velocity_ref[:2] * remaining
        offset = Rz_td @ self.foot_offsets[i]
        hip_velocity = self.base_velocity_ref[:2] + wz * np.array([-offset[1], offset[0]])
        correction = self.feedback_gain * (v_world[:2] - self.base_velocity_ref[:2])
        norm = float(np.hypot(*correction))
        if norm > c.max_step_correction:
            correction *= c.max_step_correction / norm
        target = np.empty(3)
        target[:2] = base_td + offset[:2] + 0.5 * self.stance_duration * hip_velocity + correction
        if self.terrain_height is not None:
            self._off_edges(i, target)
        target[2] = self.ground_at(target[0], target[1]) - c.touchdown_depth
        return target

    def _edge_near(self, x: float, y: float) -> bool:
        """Whether the known ground within ``FOOTHOLD_MARGIN`` of (x, y), along x or y, is
        steeper than ``STEEP_SLOPE`` somewhere (a step's face)."""
        step = STEEP_SLOPE * EDGE_PROBE
        for ux, uy in ((1.0, 0.0), (0.0, 1.0)):
            prev = None
            for e in _EDGE_OFFSETS:
                h = self.ground_at(x + e * ux, y + e * uy)
                if prev is not None and abs(h - prev) > step:
                    return True
                prev = h
        return False

    def _off_edges(self, i: int, target: np.ndarray) -> None:
        """Move swing ``i``'s foothold ``target`` (x, y in place) off an edge of the known
        terrain (``_edge_near``): to the nearest spot clear of it along the foot's travel, within
        ``FOOTHOLD_SHIFTS``. The side (before or beyond the edge) is kept for the rest of
        the swing, so the target does not jump across the edge as the body moves on. A foot
        planted 3 cm short of a 9 cm step touched its face on lift-off; one planted on the
        corner slid off (ANYmal C fell)."""
        if not self._edge_near(target[0], target[1]):
            return
        d = target[:2] - self._liftoff[i, :2]
        norm = math.hypot(d[0], d[1])
        u = d / norm if norm > 1e-6 else np.array([math.cos(self.base_yaw_ref), math.sin(self.base_yaw_ref)])
        side = self._edge_side[i]
        for shift in FOOTHOLD_SHIFTS:
            for sign in ((side,) if side else (1.0, -1.0)):
                x, y = target[0] + sign * shift * u[0], target[1] + sign * shift * u[1]
                if not self._edge_near(x, y):
                    self.footholds_moved += not side
                    self._edge_side[i] = sign
                    target[0], target[1] = x, y
                    return

    def _touchdown_phases(self) -> np.ndarray:
        if self.config.touchdown_phases is not None:
            return np.asarray(self.config.touchdown_phases, dtype=float)
        # seed 000 §7.6: {LF, RF, LH, RH} → {0.25, 0.75, 0.75, 0.25}: diagonal pairs
        phases = np.empty(self.n_feet)
        for i, (x, y, _) in enumerate(self.foot_offsets):
            front, left = x > 0.0, y > 0.0
            phases[i] = 0.25 if front == left else 0.75
        return phases

    def _solve_ik(self) -> None:
        """Joint references: the feet at their references with the base at its reference.

        Damped Newton steps on all feet at once (warm-started from the previous tick),
        then joint velocities from J_j v_j = v_foot − J_b v_b and accelerations from
        J_j a_j = a_foot − J̇ v (base acceleration zero in the base's yawed frame), or
        J_j a_j = a_foot alone without ``velocity_product``.
        """
        m, pm, data = self.model, self.model.pin_model, self._data
        nb = m.n_base
        q = self._q_ik
        q[:3] = self.base_position_ref
        R = self.base_rotation()
        quat = pin.Quaternion(R)
        q[3:7] = (quat.x, quat.y, quat.z, quat.w)
        lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        J, err = self._J_feet, self._err
        for it in range(self.config.ik_iterations + 1):
            pin.computeJointJacobians(pm, data, q)
            pin.updateFramePlacements(pm, data)
            for i, f in enumerate(m.contact_frame_ids):
                J[3 * i:3 * i + 3] = pin.getFrameJacobian(pm, data, f, lwa)[:3]
                err[3 * i:3 * i + 3] = self.foot_position_ref[i] - data.oMf[f].translation
            if it == self.config.ik_iterations:
                break  # J at the solution: for the velocities below
            q[m.joint_q_index] += self._damped_solve(J[:, nb:], err)
        q[m.joint_q_index] = np.clip(q[m.joint_q_index], m.q_lower, m.q_upper)
        self.q_joint_ref[:] = q[m.joint_q_index]
        v = self._v_ik
        v[:3] = R.T @ self.base_velocity_ref  # base frame
        v[3:6] = R.T @ self.base_angular_ref
        rhs = self._rhs
        rhs[:, 0] = self.foot_velocity_ref.reshape(-1) - J[:, :nb] @ v[:nb]
        if not self.config.velocity_product:  # seed 000's pipeline: J_j a_j = a_foot
            rhs[:, 1] = self.foot_acceleration_ref.reshape(-1)
            sol = self._damped_solve(J[:, nb:], rhs)
            self.v_joint_ref[:] = sol[:, 0]
            self.a_joint_ref[:] = sol[:, 1]
            return
        factor = self._damped_factor(J[:, nb:])  # J is the same for both solves
        v[nb:] = self._damped_solve(J[:, nb:], rhs[:, :1], factor)[:, 0]
        # J_j a_j = a_foot − J̇v (the drift at the reference velocity); without J̇v a swing
        # foot of the quadruped ended its swing 6 mm above its reference (median, trot)
        pin.forwardKinematics(pm, data, q, v, self._a_zero)
        for i, f in enumerate(m.contact_frame_ids):
            rhs[3 * i:3 * i + 3, 1] = (self.foot_acceleration_ref[i]
                                       - pin.getFrameClassicalAcceleration(pm, data, f, lwa).linear)
        self.v_joint_ref[:] = v[nb:]
        self.a_joint_ref[:] = self._damped_solve(J[:, nb:], rhs[:, 1:], factor)[:, 0]

    def _damped_factor(self, Jj: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Jj Jjᵀ + λI and its Cholesky factor (None if not PD: never with λ > 0)."""
        A = Jj @ Jj.T
        A += self._ik_damping
        return A, cholesky(A)

    def _damped_solve(self, Jj: np.ndarray, rhs: np.ndarray, factor=None) -> np.ndarray:
        """Jjᵀ (Jj Jjᵀ + λI)⁻¹ rhs: least-norm joint motion, bounded near a straight leg
        (``factor``: :meth:`_damped_factor` of the same Jj, when it solves more than once)."""
        A, c = self._damped_factor(Jj) if factor is None else factor
        return Jj.T @ (chol_solve(c, rhs) if c is not None else np.linalg.solve(A, rhs))

    def _write_references(self) -> None:
        ctrl = self.controller
        ctrl.set_base_reference(self.base_position_ref, self.base_rotation(),
                                self.base_velocity_ref, self.base_angular_ref)
        for i in range(self.n_feet):
            ctrl.set_foot_reference(i, self.foot_position_ref[i], self.foot_velocity_ref[i],
                                    self.foot_acceleration_ref[i], swing=bool(self.swinging[i]))
        ctrl.set_joint_reference(self.q_joint_ref, self.v_joint_ref, self.a_joint_ref)


def moved_base_configuration(model, q_stand: np.ndarray, offset, ik_iterations: int | None = None) -> np.ndarray:
    """``q_stand`` with the base moved by ``offset`` [m, world] and the feet where they
    were: the gait's inverse kinematics, ``ik_iterations`` Newton steps (None: the
    default's)."""
    from .controller import Controller, ControllerConfig

    q = np.asarray(q_stand, dtype=float).copy()
    gait = Gait(Controller(model, ControllerConfig(formulation="rnea")), q)
    gait.reset(0.0, q, np.zeros(model.nv))
    if ik_iterations is not None:
        gait.config.ik_iterations = ik_iterations
    gait.base_position_ref += offset
    gait._solve_ik()
    q[:3] += offset
    q[model.joint_q_index] = gait.q_joint_ref
    return q


def crouched_configuration(model, q_stand: np.ndarray, crouch: float) -> np.ndarray:
    """``q_stand`` with the base ``crouch`` [m] lower and the feet where they were (IK):
    where a robot starts when it has to stand up."""
    if crouch <= 0.0:
        return np.asarray(q_stand, dtype=float).copy()
    return moved_base_configuration(model, q_stand, (0.0, 0.0, -crouch))
