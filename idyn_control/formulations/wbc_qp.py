"""``wbc_qp``: task-space whole-body QP over (q̈, f), what TSID/PlaCo users expect.

One QP per tick, variables x = (q̈ [nv], f [3k], world frame)::

    min  Σ_t w_t ‖J_t q̈ + J̇_t v − a_t‖²          (tasks: CoM, frames)
       + w_base ‖q̈_b − q̈_des,b‖² + w_posture ‖q̈_j − q̈_des,j‖²
       + w_force ‖f / m‖²                           (unique force distribution; m = robot mass)
    s.t. M_b q̈ + h_b = J_bᵀ f                       (unactuated base rows)
         J_i q̈ + J̇_i v = −k_c J_i v                 (active contacts hold; k_c damps drift)
         f_i in the friction pyramid, f_i = 0 when inactive
         −τ_max ≤ M_j q̈ + h_j − J_jᵀ f ≤ τ_max        (torque limits)

With ``backend`` "auto" (default) the whole tick runs compiled (idyn_control.native) when
the library is built and ``solver`` is ProxQP; tasks' J and drift are then not refreshed
in Python (their position and velocity are).

**Scale.** The QP is solved per unit mass: the rows in newtons (base dynamics, torque
limits) are divided by the robot mass m and the forces are the variables f̂ = f/m [m/s²],
like the contact and task rows. One absolute tolerance (``eps_abs``) then means the same
relative accuracy for a 1 kg and a 100 kg robot. Solved in newtons, ANYmal C (50 kg) and
HyQ (87 kg) hit ProxQP's iteration cap or "infeasible" on ordinary standing states at
``eps_abs`` 1e-8, and the controller fell back to damping (test_scale.py).

**Friction** (option ``friction_cone``): ``"inscribed"`` (default) keeps each force in the
pyramid inscribed in the Coulomb cone, |t1·f| + |t2·f| ≤ μ n·f (:func:`~idyn_control.contacts.
inscribed_pyramid_rows`, also MuJoCo's pyramidal cone): every force it plans, the ground can
apply. ``"pyramid"``, the square |t1·f|, |t2·f| ≤ μ n·f, admits up to √2 μ n·f along its
diagonals, which no ground gives; a turn pushes the feet sideways along those diagonals.
With it, in 20 s of seed 000's waypoint task on rigid μ 0.1 (turns in place and while
moving), the project quadruped, ANYmal C, B1, HyQ, Laikago and ANYmal B fell (3.1–19.7 s).

**Always an answer.** When no torque within the limits holds the contacts, the QP is
solved again without the limits (the controller clamps; ``torque_limits_dropped``). When
no q̈ holds them at all — two held points on one rigid link whose accelerations the
velocity makes inconsistent, a singular leg; or only a huge one, when a held row nearly
depends on the others (``CONTACT_RANK_TOLERANCE``: a leg without abduction moves no foot
sideways) — the contact rows become elastic, a penalty
``ELASTIC_WEIGHT`` times the largest cost weight, with the torque limits back in place
(f = 0 and any τ within them is then feasible, so this QP always has a solution):
``contacts_elastic`` counts such ticks and ``Result.relaxed`` says how much acceleration
is left at the held points. Ticks that solve exactly never reach these steps.

τ = M_j q̈ + h_j − J_jᵀ f is recovered from the joint rows, so the dynamics hold exactly
with the returned q̈ and f. The QP has a fixed size for all configured contacts, so the
persistent ProxQP keeps its warm start across contact switches. Before ProxQP, each tick
tries the rows the last solution held at a bound (``QpSolver`` ``guess``: an
equality-constrained solve whose KKT conditions are checked); ProxQP solves when that
does not certify the optimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin
from scipy import linalg

from ..contacts import PYRAMID_ROWS, tangent_basis
from ..errors import ConfigError, UnknownNameError
from .. import native
from ..qp import ELASTIC_WEIGHT, INF, STRICT_INFEASIBILITY_TOLERANCE, QpOutcome, QpSolver
from ..linalg import solve_pd
from .base import Formulation

#: base rows (the unactuated dynamics) left off by more than this fraction of
#: max(1, ‖M q̈ + h‖) are closed by the base acceleration (10× inside the invariant's 1e-6)
BASE_ROWS_TOL = 1e-7
#: option ``friction_cone``'s values (module docstring)
FRICTION_CONES = ("inscribed", "pyramid")
#: contact rows whose least-squares residual exceeds this many ``eps_abs`` cannot be met
#: by any q̈: the QP is infeasible and only its elastic form is solved
INCONSISTENT_ROWS = 100.0
#: a held contact row whose QR pivot is below this fraction of the largest adds no
#: independent row: the layout is redundant, and its rows are met in the least-squares
#: sense (elastic) whenever they leave a residual. Round-off's threshold alone (ε · rows)
#: let a nearly singular layout through: Solo 8's planar legs cannot move a foot sideways,
#: so with three feet down only the base's roll, through millimetres of difference in the
#: feet's heights, met the third foot's sideways row (pivot 4·10⁻⁶ of the largest). The QP
#: then asked for 120 rad/s² of roll and 230 N at a stance foot on a 1.7 kg robot, the
#: simulator followed, and the next ticks doubled it until the fall
CONTACT_RANK_TOLERANCE = 1e-3


@dataclass
class Task:
    """A 3-D point task: ``J q̈ + drift → a_des`` with weight ``weight``.

    a_des = target + kp (position_ref − p) + kd (velocity_ref − ṗ), world frame; with
    kp = kd = 0 (default) it is the feed-forward acceleration ``target`` alone.
    """

    name: str
    frame_id: int  # -1 for the centre of mass
    weight: float
    J: np.ndarray
    drift: np.ndarray
    target: np.ndarray  # feed-forward acceleration [m/s²]
    position: np.ndarray  # current position [m]
    velocity: np.ndarray  # current velocity [m/s]
    position_ref: np.ndarray
    velocity_ref: np.ndarray
    kp: float = 0.0  # [1/s²]
    kd: float = 0.0  # [1/s]

    def desired_acceleration(self) -> np.ndarray:
        a = self.target.copy()
        if self.kp or self.kd:
            a += self.kp * (self.position_ref - self.position) + self.kd * (self.velocity_ref - self.velocity)
        return a


#: where a Task's vectors live in a native task row (native.TASK_STRIDE numbers)
_TASK_ROW = {"target": (2, 5), "position_ref": (5, 8), "velocity_ref": (8, 11),
             "position": (13, 16), "velocity": (16, 19)}


class WbcQp(Formulation):
    name = "wbc_qp"
    respects_torque_limits = True
    respects_friction = True
    defaults = {
        "w_base": 1.0,        # weight of the base acceleration task (q̈_des[:6])
        "w_posture": 1e-2,    # weight of the joint acceleration task (q̈_des[6:])
        "w_force": 1e-5,      # regularization of f/m [per (m/s²)²]: selects one distribution
        "contact_gain": 0.0,  # k_c [1/s]: damps contact-point velocity drift
        "friction_cone": "inscribed",  # "inscribed" (|t1·f| + |t2·f| ≤ μ n·f) or "pyramid" (square)
        "solver": "proxqp",
        "warm_start": True,
        "eps_abs": 1e-8,
        "backend": "auto",    # "auto" | "native" | "python": the compiled tick (idyn_control.native)
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        for key in ("w_base", "w_posture", "w_force", "contact_gain"):
            value = self.options[key]
            if not np.isfinite(value) or value < 0.0:
                raise ConfigError(key, value, "must be finite and ≥ 0")
        cone = self.options["friction_cone"]
        if cone not in FRICTION_CONES:
            raise UnknownNameError("friction_cone", cone, FRICTION_CONES)
        #: the contact set's friction rows this formulation keeps its forces in (updated in place)
        self.friction_rows = self.contacts.inscribed_rows if cone == "inscribed" else self.contacts.friction_rows
        nv, nb, na, k = model.nv, model.n_base, model.na, self.contacts.size
        self.nx = nv + 3 * k
        o = self.options
        self.qp = QpSolver(self.nx, nb + 3 * k, PYRAMID_ROWS * k + na,
                           solver=o["solver"], warm_start=o["warm_start"], eps_abs=o["eps_abs"],
                           infeasibility_tolerance=STRICT_INFEASIBILITY_TOLERANCE, guess=True)
        # the last resort: contact rows as penalties (module doc), base rows kept
        self.qp_elastic = QpSolver(self.nx, nb, PYRAMID_ROWS * k + na,
                                   solver=o["solver"], warm_start=o["warm_start"], eps_abs=o["eps_abs"],
                                   infeasibility_tolerance=STRICT_INFEASIBILITY_TOLERANCE)
        self.tasks: dict[str, Task] = {}
        self._contact_version = -1  # contact-set version the contact rows were built for
        self._Hdiag = np.einsum("ii->i", self.qp.H)  # writable view of the diagonal
        self._J6 = np.zeros((6, nv))
        self._zero = np.zeros(nv)
        self._mass = pin.computeTotalMass(model.pin_model)
        self._task_list: tuple[Task, ...] = ()
        self._torque_limits_dropped = 0  # the Python backend's counts
        self._contacts_elastic = 0
        self._redundant_contacts = False  # rank of the held contacts' rows < their number
        self._bodies: list[tuple[int, int, int, int]] = []  # flat feet (ContactSet.held_rows)
        self._held_rows = 0  # rows the held contacts fill
        self._native = self._native_backend(native.Wbc)

    @property
    def torque_limits_dropped(self) -> int:
        """Ticks solved without the torque limits: no torque within them held the contacts
        (ProxQP "infeasible" or "max_iter" with them); the controller clamps the torque."""
        return self._native.torque_limits_dropped if self._native is not None else self._torque_limits_dropped

    @property
    def contacts_elastic(self) -> int:
        """Ticks whose contact rows were elastic: no q̈ held the contacts (module doc)."""
        return self._native.contacts_elastic if self._native is not None else self._contacts_elastic

    def relaxations(self) -> dict[str, int]:
        counts = {"torque_limits_dropped": self.torque_limits_dropped}
        elastic = self.contacts_elastic
        if elastic:  # listed once it happened, like the node's dropped.<input>.<reason>
            counts["contacts_elastic"] = elastic
        return counts

    # ------------------------------------------------------------------ tasks
    def add_com_task(self, weight: float, name: str = "com") -> Task:
        """Track a centre-of-mass acceleration [m/s²], world frame."""
        return self._add_task(name, -1, weight)

    def add_frame_task(self, frame: str, weight: float, name: str | None = None) -> Task:
        """Track the linear acceleration of a frame's origin [m/s²], world frame."""
        pm = self.model.pin_model
        if not pm.existFrame(frame):
            raise UnknownNameError("frame", frame, [f.name for f in pm.frames])
        return self._add_task(name or frame, pm.getFrameId(frame), weight)

    def _add_task(self, name: str, frame_id: int, weight: float) -> Task:
        if not np.isfinite(weight) or weight < 0.0:
            raise ConfigError(f"tasks.{name}.weight", weight, "must be finite and ≥ 0")
        z = np.zeros
        task = Task(name, frame_id, float(weight), z((3, self.model.nv)), z(3), z(3), z(3), z(3), z(3), z(3))
        self.tasks[name] = task
        self._task_list = tuple(self.tasks.values())
        if self._native is not None:
            # the native tick reads and writes the tasks' vectors in one buffer, a row each
            buf = self._native.add_task_row()
            for row, t in zip(buf, self._task_list):
                for field, (a, b) in _TASK_ROW.items():
                    row[a:b] = getattr(t, field)
                    setattr(t, field, row[a:b])
        return task

    def _task(self, name: str) -> Task:
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownNameError("task", name, self.tasks) from None

    def set_task_target(self, name: str, acceleration) -> None:
        """Feed-forward acceleration of task ``name`` [m/s²], world frame."""
        self._task(name).target[:] = acceleration

    def set_task_reference(self, name: str, position, velocity=(0.0, 0.0, 0.0), *,
                           kp: float | None = None, kd: float | None = None) -> None:
        """Track ``position`` [m] / ``velocity`` [m/s] (world) with PD gains kp [1/s²], kd [1/s]."""
        task = self._task(name)
        task.position_ref[:] = position
        task.velocity_ref[:] = velocity
        for key, gain in (("kp", kp), ("kd", kd)):
            if gain is not None:
                if not np.isfinite(gain) or gain < 0.0:
                    raise ConfigError(f"tasks.{name}.{key}", gain, "must be finite and ≥ 0")
                setattr(task, key, float(gain))

    def set_task_weight(self, name: str, weight: float) -> None:
        if name not in self.tasks:
            raise UnknownNameError("task", name, self.tasks)
        if not np.isfinite(weight) or weight < 0.0:
            raise ConfigError(f"tasks.{name}.weight", weight, "must be finite and ≥ 0")
        self.tasks[name].weight = float(weight)

    def reset(self):
        self.qp.reset()
        self.qp_elastic.reset()
        self._contact_version = -1
        if self._native is not None:
            self._native.reset()

    # ------------------------------------------------------------------ tick
    def _update_tasks(self) -> None:
        pm, data = self.model.pin_model, self.terms.data
        lwa = pin.ReferenceFrame.LOCAL_WORLD_ALIGNED
        for task in self.tasks.values():
            if task.frame_id < 0:
                # data holds the zero-acceleration pass: acom is the CoM drift
                pin.centerOfMass(pm, data, self.terms.q, self.terms.v, self._zero)
                task.J[:] = pin.jacobianCenterOfMass(pm, data, self.terms.q, False)
                task.drift[:] = data.acom[0]
                task.position[:] = data.com[0]
                task.velocity[:] = data.vcom[0]
            else:
                self._J6[:] = pin.getFrameJacobian(pm, data, task.frame_id, lwa)
                task.J[:] = self._J6[:3]
                task.drift[:] = pin.getFrameClassicalAcceleration(pm, data, task.frame_id, lwa).linear
                task.position[:] = data.oMf[task.frame_id].translation
                task.velocity[:] = task.J @ self.terms.v

    def _compute(self):
        if self._native is not None:
            status, iterations, solve_time = self._native.solve(self._task_list)
            info = self._native.info
            if info[2]:
                self.relax("torque_limits", info[4])
            if info[3]:
                self.relax("contact_acceleration", info[5])
            return native.STATUS[status], iterations, solve_time
        m, cs, qp = self.model, self.contacts, self.qp
        M, h, v = self.terms.M, self.terms.h, self.terms.v
        nv, nb, k = m.nv, m.n_base, cs.size
        o = self.options
        self._update_tasks()

        # cost
        H, g, diag = qp.H, qp.g, self._Hdiag
        H[:] = 0.0
        diag[:nb] = o["w_base"]
        diag[nb:nv] = o["w_posture"]
        diag[nv:] = o["w_force"]  # on f̂ = f/m
        np.multiply(diag[:nv], self.qdd_des, out=g[:nv])
        np.negative(g[:nv], out=g[:nv])
        for task in self.tasks.values():
            if task.weight == 0.0:
                continue
            H[:nv, :nv] += task.weight * (task.J.T @ task.J)
            g[:nv] -= task.weight * (task.J.T @ (task.desired_acceleration() - task.drift))

        # equalities: base rows, then 3 rows per contact (zero rows for inactive ones)
        A, b = qp.A, qp.b
        J_all = cs.J.reshape(3 * k, nv)
        inv_m = 1.0 / self._mass  # rows in newtons → per unit mass (module docstring)
        if nb:
            np.multiply(M[:nb], inv_m, out=A[:nb, :nv])
            A[:nb, nv:] = -J_all[:, :nb].T
            np.multiply(h[:nb], -inv_m, out=b[:nb])
        rows = slice(nb, nb + 3 * k)
        A[rows, :nv] = J_all
        np.negative(cs.drift.reshape(-1), out=b[rows])
        if o["contact_gain"]:
            b[rows] -= o["contact_gain"] * (J_all @ v)
        n_fr = PYRAMID_ROWS * k
        switched = self._contact_version != cs.version
        if switched:
            cs.fill_friction_rows(qp.C[:n_fr, nv:], qp.l[:n_fr], qp.u[:n_fr], rows=self.friction_rows)
            # a released contact (breaking, ContactTransitions) keeps its bounded force but
            # no longer holds its point still
            held = cs.active & ~cs.released
            self._bodies = cs.held_rows(held)
            own = held.copy()  # held contacts that keep their three point rows
            for ref, _, _, _ in self._bodies:  # the other points of a body: no rows of their own
                own[cs.body == cs.body[ref]] = False
                own[ref] = True
            self._inactive_rows = np.flatnonzero(np.repeat(~own, 3)) + nb
            # rows the held contacts fill: three per point with its own, the angular ones per body
            self._held_rows = 3 * int(own.sum()) + sum(n for _, _, n, _ in self._bodies)
            self._contact_version = cs.version
        for i in np.flatnonzero(cs.active):  # a making or breaking contact's force bound, per unit mass
            bound, r = cs.max_normal_force[i], PYRAMID_ROWS * i + 4
            qp.set_row_bounds(r, -INF if bound >= INF else -bound * inv_m, qp.u[r])
        if self._inactive_rows.size:
            A[self._inactive_rows] = 0.0
            b[self._inactive_rows] = 0.0
        for ref, second, n_angular, far in self._bodies:  # flat feet: one rigid-body constraint each
            self._body_rows(ref, second, n_angular, far, v)

        # inequalities: friction (above), torque limits
        lim = slice(n_fr, n_fr + m.na)
        np.multiply(M[nb:], inv_m, out=qp.C[lim, :nv])
        qp.C[lim, nv:] = -J_all[:, nb:].T
        np.subtract(-m.tau_max, h[nb:], out=qp.l[lim])
        np.subtract(m.tau_max, h[nb:], out=qp.u[lim])
        qp.l[lim] *= inv_m
        qp.u[lim] *= inv_m

        # contact rows no q̈ meets make every QP with them infeasible: a redundant layout
        # (fewer independent rows than held ones at the contact switch, e.g. two points on
        # one foot) is checked every tick before trying them, any other after a failure
        iterations, solve_time = 0, 0.0
        inconsistent = None
        if switched:
            rank, residual = self._contact_rows_least_squares(rows)
            self._redundant_contacts = rank < self._held_rows
            inconsistent = residual > INCONSISTENT_ROWS * o["eps_abs"]
        elif self._redundant_contacts:
            inconsistent = self._contact_rows_least_squares(rows)[1] > INCONSISTENT_ROWS * o["eps_abs"]
        dropped = elastic = False
        out = None
        if not inconsistent:
            out = qp.solve()
            iterations, solve_time = out.iterations, out.solve_time_s
            if not out.ok and inconsistent is None:
                inconsistent = self._contact_rows_least_squares(rows)[1] > INCONSISTENT_ROWS * o["eps_abs"]
        if out is not None and not out.ok and m.na and not inconsistent:
            # no torque within the limits holds the contacts (or ProxQP says so): solve
            # without the limits; the controller's safety layer clamps what exceeds them
            qp.l[lim], qp.u[lim] = -INF, INF
            unlimited = qp.solve()
            iterations += unlimited.iterations
            solve_time += unlimited.solve_time_s
            if unlimited.ok or not cs.n_active:
                out, dropped = unlimited, True
        if (out is None or not out.ok) and cs.n_active:  # no q̈ holds the contacts: the last resort
            out = self._solve_elastic(lim)
            iterations += out.iterations
            solve_time += out.solve_time_s
            elastic = True
        self.qdd[:] = out.x[:nv]
        np.multiply(out.x[nv:].reshape(k, 3), self._mass, out=self.forces)
        if self._inactive_rows.size:
            self.forces[~cs.active] = 0.0  # bound to zero in the QP; make it exact
        gen = M @ self.qdd + h
        scale = max(1.0, float(np.linalg.norm(gen)))
        gen -= J_all.T @ self.forces.reshape(-1)
        if nb and float(np.linalg.norm(gen[:nb])) > BASE_ROWS_TOL * scale:
            # ProxQP's tolerance holds per unit mass and in its scaled space: HyQ (87 kg) in
            # free flight once left 1.3e-6 of ‖M q̈ + h‖ on the base rows; they are the
            # dynamics, so the base acceleration takes up what the QP left
            self.qdd[:nb] -= solve_pd(M[:nb, :nb], gen[:nb])
            gen = M @ self.qdd + h - J_all.T @ self.forces.reshape(-1)
        self.tau[:] = gen[nb:]
        if dropped:
            self._torque_limits_dropped += 1
            self.relax("torque_limits", max(0.0, float((np.abs(self.tau) - m.tau_max).max())))
        if elastic:
            self._contacts_elastic += 1
            # per held point, whatever its rows (a flat foot's body rows): J_i q̈ + J̇_i v (+ k_c J_i v)
            held = cs.active & ~cs.released
            left = (J_all @ self.qdd).reshape(k, 3)[held] + cs.drift[held]
            if o["contact_gain"]:
                left += o["contact_gain"] * (J_all @ v).reshape(k, 3)[held]
            self.relax("contact_acceleration", float(np.sqrt(np.einsum("ij,ij->i", left, left).max(initial=0.0))))
        return out.status, iterations, solve_time

    def _body_rows(self, ref: int, second: int, n_angular: int, far: int, v: np.ndarray) -> None:
        """The angular rows of a flat foot's rigid-body constraint (ContactSet.held_rows) in
        the second point's rows: J_ω q̈ = −J̇_ω v (− k_c J_ω v), all three, or the two
        across the line ref → far of collinear points (the rotation about it is free)."""
        cs, A, b = self.contacts, self.qp.A, self.qp.b
        nv, r = self.model.nv, self.model.n_base + 3 * second
        rows = cs.J_angular[ref]
        rhs = -cs.drift_angular[ref]
        if self.options["contact_gain"]:
            rhs = rhs - self.options["contact_gain"] * (rows @ v)
        if n_angular == 3:
            A[r:r + 3, :nv] = rows
            b[r:r + 3] = rhs
            return
        axes = tangent_basis(cs.position[far] - cs.position[ref])[:2]  # across the line
        A[r:r + 2, :nv] = axes @ rows
        b[r:r + 2] = axes @ rhs
        A[r + 2, :nv] = 0.0
        b[r + 2] = 0.0

    def _contact_rows_least_squares(self, rows: slice) -> tuple[int, float]:
        """Rank of the contact rows J q̈ = b of the QP (zero rows for inactive contacts; QR
        with column pivoting, pivots above :data:`CONTACT_RANK_TOLERANCE` of the largest, as
        the compiled tick) and the largest residual of their least-squares solution [m/s²]
        on those pivots: beyond the QP's tolerance, no q̈ meets them (or only one that a
        nearly dependent row makes huge)."""
        Ac, bc = self.qp.A[rows, :self.model.nv], self.qp.b[rows]
        Q, R, _ = linalg.qr(Ac, mode="economic", pivoting=True)
        d = np.abs(np.diag(R))
        top = d.max(initial=0.0)
        rank = int(np.count_nonzero(d > CONTACT_RANK_TOLERANCE * top)) if top > 0.0 else 0
        Qr = Q[:, :rank]
        return rank, float(np.abs(bc - Qr @ (Qr.T @ bc)).max(initial=0.0))

    def _solve_elastic(self, lim: slice) -> QpOutcome:
        """The QP with the active contacts' rows J q̈ = b as the penalty
        ``ELASTIC_WEIGHT · max(1, largest cost weight) · ½‖J q̈ − b‖²`` and the torque limits
        (per unit mass) in place: feasible with f = 0 and any τ within the limits, so it
        only fails if ProxQP does (module doc). Allocates, on such ticks only."""
        m, qp, e = self.model, self.qp, self.qp_elastic
        nv, nb = m.nv, m.n_base
        rows = slice(nb, nb + 3 * self.contacts.size)
        Ac, bc = qp.A[rows, :nv], qp.b[rows]
        weight = ELASTIC_WEIGHT * max(1.0, float(qp.H.diagonal().max()))
        np.copyto(e.H, qp.H)
        e.H[:nv, :nv] += weight * (Ac.T @ Ac)
        np.copyto(e.g, qp.g)
        e.g[:nv] -= weight * (Ac.T @ bc)
        if nb:
            np.copyto(e.A, qp.A[:nb])
            np.copyto(e.b, qp.b[:nb])
        np.copyto(e.C, qp.C)
        np.copyto(e.l, qp.l)
        np.copyto(e.u, qp.u)
        h, inv_m = self.terms.h, 1.0 / self._mass
        np.subtract(-m.tau_max, h[nb:], out=e.l[lim])
        np.subtract(m.tau_max, h[nb:], out=e.u[lim])
        e.l[lim] *= inv_m
        e.u[lim] *= inv_m
        return e.solve()
