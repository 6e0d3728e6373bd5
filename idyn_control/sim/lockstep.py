"""Lock-step closed loop without ROS: sim step → controller tick → sim step (DESIGN.md §5).

One process, deterministic: every control period the simulator state goes through
exactly :meth:`Controller.update` (the code path of the ROS node), the torque is held
for one control period of ``substeps`` physics steps, and the next tick reads the new
state. The contact forces the simulator applied over the period (averaged over its
substeps, world frame, ``trace.f_meas``) go to :meth:`Controller.set_measured_forces`,
so the ``sensed`` formulation's solve at tick n uses those of tick n − 1 (ID(t_{i−1})) or
n − 2 (ID(t_{i−2})), seed 000 §7.3; the first tick has none (a fallback tick). Per-tick arrays are recorded in a :class:`~idyn_control.sim.metrics.Trace` and
summarized with the metrics of seed 000 §8::

    run = run_scenario(Scenario(robot="solo12", formulation="qp_coulomb", duration=5.0))
    run.metrics["speed_along_command_m_s"], run.metrics["force_error_sum_rel"]

Legged robots stand up, trot at the commanded velocity (seed 000 §7.6 gait) and
optionally stop; fixed-base arms follow the sinusoidal joint trajectory of seed 000
§7.2.2 with joint PD on top of the formulation (``rnea`` + PD). An arm with a hand
(``panda_grasp``) holds a free box between its fingertips meanwhile (seed 000 §7.2.2,
§8.4.1): the box is placed touching the fingertips, the fingers are commanded to hold
(zero velocity and acceleration) while the hand's grip, a finger torque towards a little
further closed, is added to the controller's output, and the controller is told which
fingertips touch the box, as legged robots are told their feet.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pinocchio as pin

from .. import robots
from ..controller import Command, Controller, ControllerConfig
from ..errors import ConfigError
from ..gait import Gait, GaitConfig, crouched_configuration
from . import CONTACT_ESTIMATES
from .metrics import Trace, compute_metrics
from .mujoco_model import MujocoSim, build_mujoco
from .faults import FaultInjector, Faults, scale_masses
from ..prediction import StatePredictor
from .tasks import TASKS, make_task
from .terrain import RAMP_SLOPE_DEG, TERRAINS, block_height, make_terrain

#: a fall: base below this fraction of its standing height above the feet, or tilted more
FALL_HEIGHT_FRACTION = 0.5
FALL_TILT_RAD = 1.0

#: contact estimate: a foot touches when the ground pushed it with more than this force
#: along the surface's normal over the last control period [N] (the bridge node publishes
#: the same estimate). Until 2026-11-29 the force's vertical part: a foot pressed against a
#: step's face and sliding up it (its friction pulling down) counted as in the air
CONTACT_THRESHOLD_N = 0.1


def formulation_options(robot, formulation: str) -> dict[str, Any]:
    """A robot's own defaults of a formulation's options (its file's
    ``formulation_defaults.<formulation>``): the closed-loop scenarios' (lock-step and ROS)."""
    return robots.spec(robot).formulation_options(formulation)


def controller_overrides(spec: robots.RobotSpec, model) -> dict[str, Any]:
    """:class:`ControllerConfig` fields from a robot file's ``controller.*`` gains."""
    from .. import config

    joints = spec.joints or model.joint_names
    return config.controller_fields({k: v for k, v in spec.controller.items() if k in config.CONTROLLER_FIELDS},
                                    model, joints)


#: the grasp (seed 000 §7.2.2): fingers start touching the box and are commanded to hold
#: (zero velocity and acceleration); the hand's grip, a joint PD *torque* on each finger towards
#: this much further closed [rad], is added to every controller's output, as Pacer's grasp
#: component adds its finger feedback to the load goal. The inverse dynamics does not model it
#: (the grip's squeeze is an internal force: no box motion asks for it), so without it nothing
#: presses the fingertips on the box but the forces the formulation predicts, which with high
#: friction hold the box with almost no normal force: the fingertips bounced off it (μ ≥ 10)
GRASP_SQUEEZE_RAD = 0.05
#: the grip's gains [N·m/rad, N·m·s/rad]: 0.15 N·m per finger against the box, 1.9 N at the
#: fingertip (8 cm): at μ = 1 the four fingers' friction just carries the box's weight at rest
#: (7.4 N); the damping is about critical for a finger's inertia (≈ 1.5·10⁻⁴ kg m²)
GRASP_GRIP_KP = 3.0
GRASP_GRIP_KD = 0.04
#: the grasp's contact estimate: a fingertip touches the box when its sphere is within this
#: distance of the box [m] (closest features, seed 000 §4; the box starts exactly touching,
#: where a force threshold would see nothing until it has slipped)
GRASP_CONTACT_DISTANCE_M = 5e-4
#: the box counts as dropped when its centre is this far from the fingertips' centroid [m]
BOX_DROP_DISTANCE_M = 0.02


@dataclass
class Scenario:
    """A closed-loop experiment.

    Attributes:
        robot: a shipped robot's name ("quadruped", "solo12", "panda", ...: config/<name>.yaml)
            or a robot file's path (:mod:`idyn_control.robots`): its URDF, contacts, standing
            pose, controller gains (``controller.*``), formulation defaults and gait.
        formulation: a name of :mod:`idyn_control.formulations`.
        formulation_options: options of the formulation (merged over the robot's defaults).
        controller: overrides of :class:`ControllerConfig` fields.
        duration: simulated time [s].
        dt: control period [s] (1 kHz).
        substeps: physics steps per control period.
        velocity: commanded (vx [m/s], vy [m/s], yaw rate [rad/s]), heading frame.
        gait: trot (legged robots); False = stand still.
        trot_start: time the trot starts [s]; before it the robot stands (and rises).
        trot_stop: time the stop is commanded [s]; None = trot to the end.
        friction: ground μ (``math.inf`` = "infinite"); compliant: soft ground.
        crouch: initial base height below the standing height [m] (the robot stands up).
        gait_config: overrides of :class:`GaitConfig` fields.
        arm_amplitude: sinusoid amplitude of every arm joint [rad]; arm_frequency [Hz]
            (seed 000 §7.2.2: the arm oscillates about three times per second).
        stop_on_fall: end the run at the first fall.
        task: "trot" (constant ``velocity``), "waypoints" (seed 000 §7.6, Fig. 17: a
            :class:`~idyn_control.sim.tasks.WaypointPolicy` commands the gait every tick) or
            "balance" (standing, ``gait=False``: weight shifts and squats,
            :class:`~idyn_control.sim.tasks.BalanceTask`).
        balance: overrides of :class:`~idyn_control.sim.tasks.BalanceConfig` fields (task
            "balance") or of :class:`~idyn_control.sim.tasks.StepConfig` fields (task "steps":
            stepping in place on two soles, ``gait=False``).
        terrain: "plane" (``friction``, ``compliant``), "heightmap" (seed 000 §7.5: rigid
            bumps ≤ 3 cm, per-patch μ ~ U(0.1, 1.5), drawn from ``terrain_seed``), "ramp"
            (:class:`~idyn_control.sim.terrain.Ramp`: ``ramp_slope_deg`` up ahead, a flat top,
            as steeply down, μ 0.8), "block" or "stairs" (``block_height_m``); the controller
            is told the local normal and μ under each foot in contact.
        ramp_slope_deg: the ramp's slope [°] (terrain "ramp").
        block_height_m: the block's height [m] (terrain "block":
            :class:`~idyn_control.sim.terrain.Block`, a vertical step up ahead, a flat top,
            a step down), or each stair's rise (terrain "stairs":
            :class:`~idyn_control.sim.terrain.Stairs`, ``STAIR_STEPS`` steps up, a landing,
            as many down); None: ``BLOCK_HEIGHT_FRACTION`` (``STAIR_RISE_FRACTION``) of the
            robot's standing base height.
        terrain_known: the controller and the gait are told the height map (the paper's
            setting, §7.4); False: they walk blind, as a node that gets no
            ``~/contact_ground``: flat ground at z = 0 and ``friction`` assumed (the fall
            is still judged against the true ground).
        faults: a :class:`~idyn_control.sim.faults.Faults` (or its fields as a dict): lost,
            delayed or wrong inputs, an input gap, a model mass error, a push.
        compiled: run each tick compiled when it can (:class:`idyn_control.native.tick.Tick`
            with the compiled gait, as the node's compiled loop does; a failed solve is run
            again by the Python tick); False (default): the Python tick, the reference
            the experiments use. Legged robots on a plane without faults only.
        contact_estimate: which feet the controller and the gait are told touch.
            ``"force"`` (default): those the ground pushed with more than
            ``CONTACT_THRESHOLD_N`` along its surface normal over the last period (a step's
            face too), as the bridge node publishes;
            ``"touching"``: those MuJoCo's collision detection finds touching at the current
            state (:meth:`MujocoSim.touching_array`: the contacts its coming step pushes on,
            one period fresher; seed 000's simulator handed its controllers its contact
            points). Legged robots (the grasp has its own distance test).
    """

    robot: str = "quadruped"
    formulation: str = "qp_coulomb"
    formulation_options: dict[str, Any] = field(default_factory=dict)
    controller: dict[str, Any] = field(default_factory=dict)
    duration: float = 5.0
    dt: float = 1e-3
    substeps: int = 1
    velocity: tuple[float, float, float] = (0.2, 0.0, 0.0)
    gait: bool = True
    trot_start: float = 0.5
    trot_stop: float | None = None
    friction: float = 0.7
    compliant: bool = False
    crouch: float = 0.0
    gait_config: dict[str, Any] = field(default_factory=dict)
    arm_amplitude: float = 0.1
    arm_frequency: float = 3.0
    stop_on_fall: bool = True
    task: str = "trot"
    balance: dict[str, Any] = field(default_factory=dict)
    terrain: str = "plane"
    terrain_seed: int = 0
    ramp_slope_deg: float = RAMP_SLOPE_DEG
    block_height_m: float | None = None
    terrain_known: bool = True
    faults: Any = None
    compiled: bool = False
    contact_estimate: str = "force"

    def validate(self) -> None:
        robots.spec(self.robot)  # unknown names list the valid ones
        if not (np.isfinite(self.duration) and self.duration > 0):
            raise ConfigError("duration", self.duration, "must be > 0 [s]")
        if not (np.isfinite(self.dt) and 0 < self.dt <= 0.01):
            raise ConfigError("dt", self.dt, "must be in (0, 0.01] s")
        if int(self.substeps) != self.substeps or self.substeps < 1:
            raise ConfigError("substeps", self.substeps, "must be an integer ≥ 1")
        if len(self.velocity) != 3 or not np.all(np.isfinite(self.velocity)):
            raise ConfigError("velocity", self.velocity, "must be 3 finite values (vx, vy, yaw rate)")
        if self.task not in TASKS:
            raise ConfigError("task", self.task, f"must be one of {TASKS}")
        if self.task in ("balance", "steps") and self.gait:
            raise ConfigError("task", self.task, f"{self.task} is standing: set gait=False")
        if self.terrain not in TERRAINS:
            raise ConfigError("terrain", self.terrain, f"must be one of {TERRAINS}")
        if self.contact_estimate not in CONTACT_ESTIMATES:
            raise ConfigError("contact_estimate", self.contact_estimate, f"must be one of {CONTACT_ESTIMATES}")
        self.faults = Faults.from_dict(self.faults)
        self.faults.validate()


@dataclass
class Run:
    """What :func:`run_scenario` returns: the scenario, the trace and its metrics."""

    scenario: Scenario
    trace: Trace
    metrics: dict[str, Any]
    wall_time_s: float


class LockstepRunner:
    """Builds robot, simulator, controller and gait for a :class:`Scenario` and runs it."""

    def __init__(self, scenario: Scenario):
        scenario.validate()
        self.scenario = s = scenario
        self.task = None  # the last run's task (sim.tasks), for its log
        friction = 1e3 if s.friction == math.inf else s.friction
        self.spec = spec = robots.spec(s.robot)
        self.robot = robots.load(spec, friction=friction if (spec.contact_frames or spec.hand) else None)
        self.grasp = self.robot.free_box is not None
        self.legged = self.robot.floating_base and not self.grasp
        # a height map's flat start holds the feet where the robot stands up
        self.terrain = make_terrain(s.terrain, s.terrain_seed, robots.standing_footprint(self.robot, spec),
                                    s.ramp_slope_deg, block_height(self.robot, spec, s.block_height_m, s.terrain))
        self.sim: MujocoSim = build_mujoco(self.robot, friction=s.friction, compliant=s.compliant,
                                           timestep=s.dt / s.substeps, terrain=self.terrain)
        self.surface_updates = 0  # contact normal/μ changes passed to the controller
        if self.grasp:
            arm = [spec.standing_joints[j] for j in self.robot.joint_names if "finger" not in j]
            self.q_start = grasp_configuration(self.robot, np.array(arm), self.sim.contacts[0].radius,
                                               spec.hand.mount_link)
        options = spec.formulation_options(s.formulation)
        if self.grasp and s.formulation == "pid":
            options["gain"] = grasp_pid_gain(self.robot, self.q_start)
        options.update(s.formulation_options)
        config = ControllerConfig(formulation=s.formulation, formulation_options=options, dt=s.dt,
                                  **{**controller_overrides(spec, self.robot), **s.controller})
        model = self.robot
        if s.faults.mass_error:  # the controller's model is wrong, the simulated robot is not
            model = robots.load(spec, friction=friction if (spec.contact_frames or spec.hand) else None)
            scale_masses(model.pin_model, 1.0 + s.faults.mass_error)
        self.controller = Controller(model, config)
        self.weight = 9.81 * pin.computeTotalMass(self.robot.pin_model)
        if self.legged:
            radius = self.sim.contacts[0].radius if self.sim.contacts else 0.0
            self.q_standing = robots.standing_configuration(self.robot, spec, foot_height=radius)
            self.gait = Gait(self.controller, self.q_standing, GaitConfig(**{**spec.gait, **s.gait_config}))
            self.q_start = crouched_configuration(self.robot, self.q_standing, s.crouch)
            if self.terrain is not None and s.terrain_known:
                self.gait.set_terrain(self.terrain.height)
        else:
            self.gait = None
            if not self.grasp:
                self.q_start = robots.standing_configuration(self.robot, spec)
            self._gripper = np.array(["finger" in j for j in self.robot.joint_names])
            self.q_standing = self.q_start.copy()
            self.q_joints0 = self.q_start[self.robot.joint_q_index]
            self.q_joints_ref0 = self.q_joints0.copy()
            if self.grasp:
                self.grip_target = self.q_joints0[self._gripper] + GRASP_SQUEEZE_RAD

    # ------------------------------------------------------------------ references
    def _arm_reference(self, t: float):
        s, q0 = self.scenario, self.q_joints_ref0
        na = self.robot.na
        w = 2.0 * math.pi * s.arm_frequency
        amp = np.full(na, s.arm_amplitude)
        amp[self._gripper] = 0.0  # fingers hold (seed 000 §7.2.2: zero velocity and acceleration)
        phase = np.linspace(0.0, math.pi / 2, na)  # not all joints in phase
        q = q0 + amp * np.sin(w * t + phase) - amp * np.sin(phase)  # starts at q0
        v = amp * w * np.cos(w * t + phase)
        a = -amp * w * w * np.sin(w * t + phase)
        ramp = min(t / 0.5, 1.0)  # velocity starts at zero: ramp the amplitude in
        if ramp < 1.0:
            r, dr = ramp, 1.0 / 0.5
            dq = amp * (np.sin(w * t + phase) - np.sin(phase))
            q = q0 + r * dq
            v = r * amp * w * np.cos(w * t + phase) + dr * dq
            a = r * a + 2.0 * dr * amp * w * np.cos(w * t + phase)
        return q, v, a

    def _grip(self, q: np.ndarray, v: np.ndarray, tau: np.ndarray) -> np.ndarray:
        """``tau`` plus the hand's grip on the fingers (GRASP_GRIP_KP, GRASP_GRIP_KD), within
        the effort limits."""
        out = tau.copy()
        fingers = self._gripper
        qf = q[self.robot.joint_q_index][fingers]
        vf = v[self.robot.n_base:][fingers]
        out[fingers] += GRASP_GRIP_KP * (self.grip_target - qf) - GRASP_GRIP_KD * vf
        lim = self.robot.tau_max
        return np.clip(out, -lim, lim)

    # ------------------------------------------------------------------ run
    def run(self, progress: Callable[[dict[str, Any]], None] | None = None) -> Run:
        s, robot, sim, ctrl, gait = self.scenario, self.robot, self.sim, self.controller, self.gait
        ticks = int(round(s.duration / s.dt))
        k, na = len(robot.contacts), robot.na
        trace = Trace.allocate(ticks, robot.nq, robot.nv, na, k, robot=s.robot, formulation=s.formulation)
        sim.set_state(self.q_start, np.zeros(robot.nv))
        q, v = sim.state()
        ctrl.reset(q, v)
        if gait is not None:
            gait.reset(0.0, q, v)
            gait.set_velocity(*s.velocity)
        normal = np.zeros(k)  # the period's force along the contact normals [N]
        contact_index = {f: i for i, f in enumerate(robot.contact_frames)}
        distance = np.zeros(k)
        sim.contact_forces_array()
        mask = self._estimate_contacts(sim.normal_forces, np.zeros(k, dtype=bool), distance)
        fell, fall_time = False, None
        misses = 0
        wall0 = time.perf_counter()
        next_report = 1.0
        x_report = float(q[0])
        trotting = False
        task = self.task = make_task(s.task, ticks, balance=s.balance) if gait is not None else None
        faults = FaultInjector(self._resolved_faults(), s.dt, robot.nq, robot.nv, k) if s.faults.active else None
        predictor = StatePredictor(self.controller.model, faults.horizon) if faults is not None else None
        pred_err = [0.0, 0.0]  # the prediction's largest error: base position [m], joint [rad]
        tick, gait = self._compiled_tick() if s.compiled and faults is None else (None, gait)
        tau = np.zeros(robot.na)
        compiled_ticks = 0
        q_meas, v_meas, mask_meas = q, v, mask  # what the simulator measured
        for n in range(ticks):
            t = n * s.dt
            fresh = True
            if faults is not None:  # what the controller is given
                fresh = faults.observe(t, q_meas, v_meas, mask_meas)
                q, v, mask = faults.q, faults.v, faults.mask
                if faults.predicted:  # no input: the state it predicts (the node's prediction_horizon)
                    if not predictor.active:
                        predictor.start(q, v)
                    # contacts as planned: the gait's schedule, else the last estimate
                    mask = gait.planned_stance.copy() if gait is not None else mask
                    q, v = predictor.step(ctrl.formulation.qdd, s.dt, stance=mask)
                    # how far the prediction is from the robot (q_meas: this tick's truth)
                    joints = robot.joint_q_index
                    pred_err[0] = max(pred_err[0], float(np.abs(q[:3] - q_meas[:3]).max()) if self.legged else 0.0)
                    pred_err[1] = max(pred_err[1], float(np.abs(q[joints] - q_meas[joints]).max()))
                else:
                    predictor.stop()
                if faults.recovered:  # after a watchdog trip: hold the measured posture, as the node
                    ctrl.reset(q, v)
                    if gait is not None:
                        gait.reset(t, q, v, mask)
                        if trotting:  # as the gait node: the /cmd_vel that kept coming
                            gait.start(t)
                            gait.set_velocity(*s.velocity)
            if gait is None:
                ctrl.set_joint_reference(*self._arm_reference(t))
            elif fresh:  # on stale input the node's watchdog skips the references too
                trotting = self._gait_tick(t, q, v, mask, trotting, task, gait, update=tick is None)
            t0 = time.perf_counter()
            if tick is not None and n > 0 and tick.run(t, q, v, mask, 0.0, tau) == 0:  # the gait's tick included
                cmd = Command(tau=tau, result=None, source="formulation", saturated=tick.saturated)
                compiled_ticks += 1
            elif tick is not None:  # the first tick, or a failed solve: the Python tick runs it
                tick.hand_over()
                gait.update(t, q, v, mask)
                cmd = ctrl.update(q, v, mask)
                tick.plan()
            else:
                cmd = ctrl.update(q, v, mask) if fresh else ctrl.safe_command(q, np.zeros(robot.nv), mask)
            tick_s = time.perf_counter() - t0
            misses += tick_s > s.dt
            if self.grasp:  # the hand's grip goes to the motors with the controller's torque
                cmd = replace(cmd, tau=self._grip(q, v, cmd.tau))
            # record (state and references of this tick; forces of the coming period)
            trace.t[n] = t
            trace.q[n], trace.v[n] = q_meas, v_meas  # the robot's state (faults change only the controller's view)
            trace.q_ref[n], trace.v_ref[n] = ctrl.q_ref, ctrl.v_ref
            trace.tau[n] = cmd.tau
            trace.tick_s[n] = tick_s
            trace.fallback[n] = cmd.source != "formulation"
            trace.contact[n] = mask_meas
            if gait is not None:
                trace.planned_stance[n] = gait.planned_stance
                trace.base_ref[n] = gait.base_position_ref
            if cmd.result is not None and cmd.source == "formulation":
                for frame, f in zip(cmd.result.contact_frames, cmd.result.forces):
                    trace.f_pred[n, contact_index[frame]] = f
            elif cmd.source == "formulation":  # compiled: per configured contact
                trace.f_pred[n] = ctrl.formulation.forces
            # physics: hold τ for one control period, average the contact forces over it
            if faults is not None:
                faults.restore_mask()
                sim.push(faults.push_force(t, self.weight))
            sim.step_period(cmd.tau, s.substeps, trace.f_meas[n], normal)
            if k:  # the period's measured forces: the next tick's ID(t_{i-1}) (seed 000 §7.3)
                ctrl.set_measured_forces(trace.f_meas[n])
            trace.n = n + 1
            q, v = q_meas, v_meas = sim.state()
            mask = self._estimate_contacts(normal, mask_meas, distance)
            if self.legged and self._fallen(q):
                fell, fall_time = True, t + s.dt
                if s.stop_on_fall:
                    break
            if progress is not None and t + s.dt >= next_report - 1e-9:
                progress({"t": t + s.dt, "x": float(q[0]), "speed": (float(q[0]) - x_report) / 1.0,
                          "ticks": n + 1, "misses": misses, "z": float(q[2])})
                x_report = float(q[0])
                next_report += 1.0
        wall = time.perf_counter() - wall0
        metrics = compute_metrics(trace, dt=s.dt, weight=self.weight, floating_base=self.robot.floating_base,
                                  speed_window=self.speed_window(),
                                  command_velocity=s.velocity if task is None else (0.0, 0.0, 0.0),
                                  fell=fell, fall_time=fall_time)
        if task is not None:  # a cyclic path: its end-to-end displacement is no speed
            metrics.pop("speed_m_s", None)
            metrics.update(task.metrics(trace.t[:trace.n], trace.q[:trace.n], gait.config.period))
        if tick is not None:  # as the node's compiled loop reports it
            metrics["compiled_tick_fraction"] = compiled_ticks / max(trace.n, 1)
        if self.terrain is not None:
            metrics["surface_updates"] = self.surface_updates
            if self.gait is not None:  # the known terrain's steps (Gait.obstacle_swings)
                metrics["obstacle_swings"] = self.gait.obstacle_swings
                metrics["footholds_moved"] = self.gait.footholds_moved
        if self.gait is not None:  # swings begun again over something a foot struck
            metrics["trips"] = int(gait.trips)
        if faults is not None:
            metrics["faults"] = dict(faults.counts)
            if faults.counts["predicted_ticks"]:
                metrics["prediction_error_max"] = {"base_position_m": pred_err[0], "joint_rad": pred_err[1]}
        if self.grasp:  # the box is no base: its speed and height say nothing; Σ normal along z neither
            for key in [k for k in metrics if k.startswith(("speed", "base_height", "force_error", "measured_normal"))]:
                del metrics[key]
            metrics.update(grasp_metrics(self.robot, trace.trimmed()))
        metrics["wall_time_s"] = wall
        metrics["real_time_factor"] = trace.n * s.dt / wall if wall > 0 else float("nan")
        return Run(scenario=s, trace=trace.trimmed(), metrics=metrics, wall_time_s=wall)

    def _resolved_faults(self) -> Faults:
        """The scenario's faults with the robot file's ``prediction_horizon`` (the node's
        parameter) when they leave it unset."""
        f = self.scenario.faults
        if f.prediction_horizon is not None:
            return f
        from .. import config

        return replace(f, prediction_horizon=float(config.robot_parameter(self.spec, "prediction_horizon")))

    def _compiled_tick(self):
        """(Tick, compiled gait) for Scenario.compiled, or (None, the Python gait) when the
        tick cannot run compiled here."""
        from ..native import NativeUnavailable

        if self.gait is None or self._told_terrain:
            return None, self.gait
        try:
            from ..native.gait import CompiledGait
            from ..native.tick import Tick

            gait = CompiledGait(self.gait)
            return Tick(self.controller, gait), gait
        except NativeUnavailable:
            return None, self.gait

    def _gait_tick(self, t: float, q: np.ndarray, v: np.ndarray, mask: np.ndarray, trotting: bool, task, gait,
                   update: bool = True) -> bool:
        """Start/stop the trot, command the gait, update its references (``update``: the
        compiled tick does it otherwise); returns whether it trots."""
        s = self.scenario
        if s.gait and not trotting and t >= s.trot_start and (s.trot_stop is None or t < s.trot_stop):
            gait.start(t)
            trotting = True
        if trotting and s.trot_stop is not None and t >= s.trot_stop:
            gait.stop()
            trotting = False
        if task is not None:
            task.drive(t, q, gait, active=trotting)
        if update:
            gait.update(t, q, v, mask)
        if self._told_terrain:
            self._feed_surfaces(mask)
        return trotting

    def speed_window(self) -> tuple[float | None, float | None]:
        """Where the achieved speed is measured: from one second after the trot starts
        (the command has ramped up, the gait is periodic) to the stop command."""
        s = self.scenario
        if not (self.legged and s.gait):
            return (None, None)
        end = s.duration if s.trot_stop is None else s.trot_stop
        start = min(s.trot_start + 1.0, 0.5 * (s.trot_start + end))
        return (start, end)

    def _estimate_contacts(self, normal: np.ndarray, mask: np.ndarray, distance: np.ndarray) -> np.ndarray:
        """The simulator's contact estimate, written into ``mask`` (k,) and returned:
        ``normal`` (k,) [N] is the last period's force along the contact normals
        (:attr:`MujocoSim.normal_forces`); ``distance`` (k,) is scratch. The grasp's
        fingertips touch within GRASP_CONTACT_DISTANCE_M of the box; a foot, as
        ``Scenario.contact_estimate`` says."""
        if self.grasp:
            np.less_equal(self.sim.box_distance_array(distance), GRASP_CONTACT_DISTANCE_M, out=mask)
        elif self.scenario.contact_estimate == "touching":
            self.sim.touching_array(mask)
        else:
            np.greater(normal, CONTACT_THRESHOLD_N, out=mask)
        return mask

    def _feed_surfaces(self, mask: np.ndarray) -> None:
        """Tell the controller the terrain's normal and μ under each foot in contact (ground
        truth at the foot sphere's centre, seed 000 §7.4); it rebuilds only what changed."""
        for i in range(len(self.sim.contacts)):
            if mask[i]:
                self.surface_updates += self.controller.set_contact_surface(i, *self.sim.ground_under(i))

    @property
    def _told_terrain(self) -> bool:
        return self.terrain is not None and self.scenario.terrain_known

    def _fallen(self, q: np.ndarray) -> bool:
        # heights relative to the ground under the base: a bump is not a fall
        # (the true ground: the gait's may be a plane through the footholds, or flat)
        clearance = self.q_standing[2] - self.gait.ground_height
        ground = self.gait.ground_height
        if self.terrain is not None:
            ground += float(self.terrain.height(q[0], q[1]))
        if q[2] - ground < FALL_HEIGHT_FRACTION * clearance:
            return True
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        return bool(R[2, 2] < math.cos(FALL_TILT_RAD))


def grasp_configuration(robot, joints: np.ndarray, tip_radius: float, mount_frame: str) -> np.ndarray:
    """q of the grasp's start (seed 000 §7.2.2): the arm at ``joints`` (arm joints only),
    each finger closed until its fingertip sphere (``tip_radius`` [m]) touches the box
    face under it, the box between the fingertips with the orientation of ``mount_frame``
    (the hand's mount)."""
    box = robot.free_box
    pm = robot.pin_model
    data = pm.createData()
    q = robot.neutral()
    arm = [i for i, n in enumerate(robot.joint_names) if "finger" not in n]
    fingers = [i for i, n in enumerate(robot.joint_names) if "finger" in n]
    q[robot.joint_q_index[arm]] = joints
    target = box.half_extents[0] + tip_radius  # fingertip centre to box centre, along the face normal [m]

    def tips(theta: float) -> np.ndarray:
        q[robot.joint_q_index[fingers]] = theta
        pin.framesForwardKinematics(pm, data, q)
        return np.array([data.oMf[f].translation for f in robot.contact_frame_ids])

    lo, hi = 0.0, 0.8  # bisection on the closing angle: tip distance to the hand axis shrinks
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        p = tips(mid)
        lo, hi = (mid, hi) if np.linalg.norm(p[0] - p.mean(axis=0)) > target else (lo, mid)
    p = tips(0.5 * (lo + hi))
    mount = data.oMf[pm.getFrameId(mount_frame)]
    q[:3] = p.mean(axis=0)
    q[3:7] = pin.Quaternion(mount.rotation).coeffs()
    return q


def grasp_pid_gain(robot, q: np.ndarray) -> np.ndarray:
    """The ``pid`` baseline's per-joint gain k [N·m/(rad/s²)] for the grasp: the diagonal
    of the joint-space inertia at the start ``q`` with the box's mass shared among the
    fingertips (M + Σ_i (m/k) J_iᵀ J_i). Its default, diag(M) of the bare arm, ignores the
    load the fingers carry (as for the legs of the legged robots, their files' formulation_defaults.pid): a finger
    weighs 60 g, the box 750 g."""
    pm = robot.pin_model
    data = pm.createData()
    M = pin.crba(pm, data, q)
    pin.computeJointJacobians(pm, data, q)
    pin.updateFramePlacements(pm, data)
    share = robot.free_box.mass / len(robot.contact_frame_ids)
    for fid in robot.contact_frame_ids:
        J = pin.getFrameJacobian(pm, data, fid, pin.ReferenceFrame.LOCAL_WORLD_ALIGNED)[:3]
        M += share * J.T @ J
    return np.diag(M)[robot.n_base:].copy()


def grasp_metrics(robot, trace: Trace) -> dict[str, Any]:
    """Box drop time, arm tracking error and the fingertip normal-force prediction error.

    The box is dropped at the first tick its centre is more than BOX_DROP_DISTANCE_M from
    the fingertips' centroid. Normal forces are along each contact's box-face normal;
    their error is over the ticks the box is held and the contact is measured touching.
    """
    pm, data = robot.pin_model, robot.pin_model.createData()
    n = trace.t.size
    offset = np.zeros(n)
    normals = np.zeros((n, len(robot.contacts), 3))
    normal_body = np.array([c.normal_body for c in robot.contacts])
    for i in range(n):
        pin.framesForwardKinematics(pm, data, trace.q[i])
        tips = np.array([data.oMf[f].translation for f in robot.contact_frame_ids])
        offset[i] = np.linalg.norm(trace.q[i, :3] - tips.mean(axis=0))
        R = pin.Quaternion(trace.q[i, 3:7]).toRotationMatrix()
        normals[i] = normal_body @ R.T
    dropped = np.flatnonzero(offset > BOX_DROP_DISTANCE_M)
    held = np.ones(n, dtype=bool) if dropped.size == 0 else np.arange(n) < dropped[0]
    arm = np.array(["finger" not in j for j in robot.joint_names])
    err_t = np.abs(trace.q[:, 7:][:, arm] - trace.q_ref[:, arm]).sum(axis=1)
    out: dict[str, Any] = {
        "box_dropped": bool(dropped.size),
        "box_drop_time_s": float(trace.t[dropped[0]]) if dropped.size else None,
        "box_offset_max_held_m": float(offset[held].max()) if held.any() else float("nan"),
        "arm_error_sum_rad_mean": float(err_t.mean()),
        "arm_error_sum_rad_mean_held": float(err_t[held].mean()) if held.any() else float("nan"),
        "arm_error_sum_rad_last_0_5s": float(err_t[trace.t >= trace.t[-1] - 0.5].mean()),
    }
    pred = np.einsum("tkj,tkj->tk", trace.f_pred, normals)
    meas = np.einsum("tkj,tkj->tk", trace.f_meas, normals)
    sel = held[:, None] & trace.contact & ~trace.fallback[:, None]
    if sel.any():
        err = np.abs(pred - meas)[sel]
        mean_meas = float(np.abs(meas[sel]).mean())
        out["tip_normal_error_N"] = float(err.mean())
        out["tip_normal_error_rel"] = float(err.mean() / mean_meas) if mean_meas > 0 else float("nan")
        out["tip_normal_measured_N"] = mean_meas
    return out


def run_scenario(scenario: Scenario | None = None, progress=None, **overrides: Any) -> Run:
    """Build and run a scenario (fields of :class:`Scenario` as keyword overrides)."""
    scenario = replace(scenario or Scenario(), **overrides)
    return LockstepRunner(scenario).run(progress)
