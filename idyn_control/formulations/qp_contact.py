"""``qp_coulomb`` and ``qp_noslip``: convex inverse dynamics without normal complementarity.

Seed 000 §6, ID(t_i)QP,μ and ID(t_i)QP,∞ — the paper's recommended controller.

Velocity level (seed 000 §3): v⁺ = v + Δt q̈. The joints follow q̈_des exactly; the base
is unactuated, so its rows of the dynamics give its acceleration as an affine function
of the contact forces f (world frame, stacked)::

    q̈_b = Z f + p,   Z = A⁻¹ J_bᵀ,   p = −A⁻¹ (h_b + B q̈_j)       (seed 000 eq. 88–94)

with M = [A B; Bᵀ C]. **Stage I** dissipates kinetic energy maximally (eq. 69–78)::

    min_f ½ v⁺ᵀ M v⁺   s.t.  n_iᵀ J_i v⁺ ≥ −φ_i/Δt (non-penetration, Baumgarte §3.2),
                              f_i in the friction pyramid (μ; only n·f ≥ 0 for ∞)

**What is dissipated** (option ``dissipation``, Stage I's target base velocity v_b*;
the cost is ½‖v_b⁺ − v_b*‖²_A). Eq. 69 read literally, with the joint velocities
prescribed, has v_b* = −A⁻¹B v_q⁺, the base velocity of zero base momentum
(``"base_momentum"``): inside the friction cone it predicts forces that stop the base
within one step. In closed loop (project quadruped, trot at 0.2 m/s, rigid ground) the
predicted horizontal forces reach 500–1100 N against 17–20 N measured by the simulator,
the torques built on them saturate and the robot falls within a second. The forward
model the paper inverts (eq. 29, τ given) keeps sticking contacts still, J v⁺ = 0:
``"contacts"`` takes v_b* as the least-squares base velocity that keeps the active
contacts still given v_q⁺. It predicts standing forces to 0.5 %, but a landing or
creeping foot is stopped within one step, which the joints' prescribed motion (damped over
several ticks by the kinematic layer) contradicts: impulsive predictions, falls.
``"desired"`` (default) takes v_b* = v_b + Δt q̈_des,b, the base velocity of the desired
motion, whose stance rows the kinematic layer made consistent with the contacts: Stage I
then finds the forces that realize the desired motion as closely as friction and
non-penetration allow, and a contact may keep approaching the ground as fast as the
desired motion has it (see ``_approach_bound``). Measured, 5 s (trot from 1 s) on rigid
μ∞ / rigid μ 0.1 / compliant μ∞ / compliant μ 0.1: ``"contacts"`` fell on all four,
``"desired"`` walked on the first three (summed normal-force error 1.5–1.8 %).

**Friction margin** (``friction_margin``): minimum torques put the forces on the faces of
the pyramid whenever the legs would rather push sideways (the project quadruped standing:
~0.2 of the normal force). A rigid simulator holds such forces; MuJoCo's soft friction and
real feet creep (6 mm/s measured at μ = 0.1). Stage II therefore keeps its forces that
fraction inside the pyramid; Stage I (and a failed Stage II) still use the full pyramid.
When no forces of Stage I's optimal set meet the margin (a trot's two stance feet pushing
hard sideways) Stage II's set is empty and Stage I's forces stand; with one or two feet down
that is decided without ProxQP (``_stage2_set_empty``: the set is then a point or a line).

ID(t_i)QP,∞ does the same with the ground's μ (the contacts' ``mu``): its Stage I predicts
no-slip forces, and Stage II picks among the equally optimal ones forces the ground can
hold, where there are any. The paper's Stage II (min torque only) leans the project
quadruped's standing forces to 0.18–0.2 of the normal force; standing on rigid μ = 0.1 the
feet slid and each shipped quadruped fell within 0.4 s. Now three of the four stand there
(ANYmal C, landing unevenly from its start pose, still falls). A contact of "infinite"
friction (μ = 1000) bounds nothing. It does not make QP,∞ trot where friction is finite:
at a trot's lift-off the swing legs' reaction needs more tangential force at the two stance
feet than the ground gives, Stage II's set is empty and Stage I's forces stand. Measured
2026-11-28, 10 s lock-step, trot from 1 s at 0.2 m/s, fall time min torque → inside the
pyramid, rigid μ 0.7: quadruped 1.8 → 1.8 s, Go2 3.1 → 4.6 s, Solo12 1.4 → 4.1 s, ANYmal C
0.9 → 6.5 s; rigid μ 0.3, compliant μ 0.5 and the height map: 0.3–3.0 s → 1.3–6.1 s (the
quadruped on compliant μ 0.5 earlier, 2.0 → 1.4 s).

Its Hessian J_b A⁻¹ J_bᵀ has rank ≤ 6, so with more than two feet the forces are
indeterminate (seed 000 §2.4) and a solver may cycle between equally optimal ones:
torque chatter (Fig. 6). **Stage II** (eq. 102–112) picks, inside the optimal set, the
forces with minimum-norm joint torques. Because the cost is strictly convex in v_b⁺,
the optimal set is exactly {f feasible : J_bᵀ f = J_bᵀ f₀}; Stage II is therefore the
QP min ½‖τ(f)‖² over that set — equivalent to the paper's nullspace construction
(eq. 104–108) without computing the nullspace. Torque limits are added in Stage II when
they can be met; otherwise Stage II is solved without them (reported in the status).

**Always an answer.** When prescribed joint motion drives a foot into the ground faster
than the base can yield, Stage I is solved without non-penetration (friction alone is
always feasible: f = 0), counted in ``non_penetration_dropped``, and ``Result.relaxed``
says how fast the answer lets a contact approach beyond its bound; when ProxQP stops at
its cap on that problem too, it is solved once more per unit mass (``stage1_rescued``).

Both stages first try the rows their last solution held at a bound (``QpSolver`` ``guess``,
KKT conditions checked) and run ProxQP only when that does not certify the optimum.

With ``backend`` "auto" (default) both stages run compiled (idyn_control.native, the same
algorithm line for line) when the library is built, ``solver`` is ProxQP and Stage I is
solved as a QP; the Python code below is the reference.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from ..contacts import PYRAMID_ROWS, inscribed_pyramid_rows
from ..errors import ConfigError
from ..linalg import solve_pd
from .. import native
from ..qp import (INF, MAX_ITER, PROXQP_INFEASIBILITY_TOLERANCE, SOLVED, STRICT_INFEASIBILITY_TOLERANCE, QpOutcome,
                  QpSolver)
from .base import Formulation

#: relative Tikhonov term of Stage II; only breaks ties between equal-torque forces
STAGE2_TIKHONOV = 1e-9
#: relative Tikhonov term of Stage I: bounds its otherwise unbounded optimal set
STAGE1_TIKHONOV = 1e-7
#: ... and Stage I's once more when ProxQP stopped at its cap: the grasp's Stage I (a 0.75 kg
#: box, μ ≈ ∞: nothing bounds the fingertips' internal forces but n·f ≥ 0) did so on over half
#: the ticks and the box dropped; with this term all but 0–3 of 3000 ticks solve. It biases the
#: optimal base wrench by ~1e-5 relative (G1 standing: 0.006 N of 327 N): a retry, not the default
STAGE1_TIKHONOV_RETRY = 1e-5
#: values of the ``dissipation`` option (Stage I's target base velocity)
DISSIPATION = native.DISSIPATION
#: iteration cap of Stage I's last resort (it took ≤ 15 where it was needed)
RESCUE_MAX_ITER = 1000
#: relative damping of the least-squares stance base velocity (two feet leave one
#: rotation free; its component is set to zero, where the forces cannot act anyway)
STANCE_DAMPING = 1e-9
#: Stage II's set counts as empty without ProxQP only when a row misses it by more than
#: this [N/kg, N·m/kg: Stage II's rows are per unit mass] (ProxQP's eps_abs is 1e-8)
EMPTY_SET_SLACK = 1e-6
#: relative size of a singular value taken as zero (two feet's base Jacobian: rank 5 of 6)
NULL_TOL = 1e-8
#: a Stage II row that moves less than this along the free direction bounds nothing there
FLAT_ROW = 1e-12


class _QpContact(Formulation):
    """Shared two-stage machinery; subclasses choose the friction model."""

    infinite_friction = False
    respects_friction = True
    defaults = {
        "stage2": True,          # run Stage II (minimum-norm torques in the optimal set)
        "torque_limits": True,   # add |τ| ≤ τ_max to Stage II when feasible
        "solver": "proxqp",      # QP backend; "proxqp" is persistent and warm-started
        "warm_start": True,      # warm-start ProxQP from the previous tick
        "eps_abs": 1e-8,         # QP accuracy (absolute, on forces [N] and constraint rows)
        # "qp": Stage I by the QP solver; "lemke": as the paper does, Stage I turned into
        # an LCP (QP optimality conditions, forces in a 4-edge pyramid) solved by Lemke
        "stage1_solver": "qp",
        "fast_path": True,       # one QP when Stage I's unconstrained optimum is feasible (exact)
        # Stage I's target base velocity (see module doc): "desired" the desired motion's,
        # "contacts" keeps the active contacts still, "base_momentum" is eq. 69 as written
        "dissipation": "desired",
        # Stage II keeps its forces this fraction inside the friction pyramid when it can
        # (minimum torques otherwise sit on the pyramid's faces, where feet creep)
        "friction_margin": 0.2,
        # Stage II keeps each contact point of a flat foot (points on one rigid body, e.g.
        # the corners of a sole) at ≥ this fraction of the body's mean point load when it
        # can: the centre of pressure stays inside the sole, off its edges (0 = off)
        "cop_margin": 0.0,
        "backend": "auto",       # "auto" | "native" | "python": the compiled tick (idyn_control.native)
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        k, nv, nb = self.contacts.size, model.nv, model.n_base
        n = 3 * k
        o = self.options
        if o["stage1_solver"] not in ("qp", "lemke"):
            raise ConfigError("stage1_solver", o["stage1_solver"], "must be 'qp' or 'lemke'")
        if o["dissipation"] not in DISSIPATION:
            raise ConfigError("dissipation", o["dissipation"], f"must be one of {DISSIPATION}")
        self._lemke = None
        # both stages try the working set of their last solution first (QpSolver guess)
        qp_args = dict(solver=o["solver"], warm_start=o["warm_start"], eps_abs=o["eps_abs"], guess=True)
        # Stage I: pyramid rows + one non-penetration row per contact
        self.stage1 = QpSolver(n, 0, (PYRAMID_ROWS + 1) * k, **qp_args)
        if not 0.0 <= o["cop_margin"] < 1.0:
            raise ConfigError("cop_margin", o["cop_margin"], "must be in [0, 1)")
        # Stage II: same base wrench (6 rows), pyramid rows, torque limits, CoP rows
        self.stage2 = QpSolver(n, nb, PYRAMID_ROWS * k + model.na + k, **qp_args)
        #: contacts on one rigid body (same parent joint): a flat foot's points
        self._body_of = np.array([model.pin_model.frames[f].parentJoint for f in model.contact_frame_ids])
        self.stage2_limited = True  # whether the last Stage II included torque limits
        self.stage2_failures = 0    # ticks where Stage II failed and Stage I forces were used
        self.non_penetration_dropped = 0  # ticks whose Stage I was solved without non-penetration
        self.stage1_rescued = 0     # of those, ticks only the per-unit-mass retry solved
        self.fast_path_ticks = 0    # ticks solved by Stage II alone (see _at_unconstrained_optimum)
        self.stage2_outcome = (0, 0.0)
        self._stage2_ok = False
        self._J = np.zeros((n, nv))
        self._f = np.zeros(n)
        self._f_unit = np.zeros(n)  # Stage II's variables: forces per unit mass
        # Stage I's last resort, per unit mass (see _rescue_stage1)
        self.stage1_unit = QpSolver(n, 0, (PYRAMID_ROWS + 1) * k, solver=o["solver"], warm_start=o["warm_start"],
                                    eps_abs=o["eps_abs"], max_iter=RESCUE_MAX_ITER,
                                    infeasibility_tolerance=STRICT_INFEASIBILITY_TOLERANCE)
        self._friction_version = -1  # contact-set version the friction blocks were built for
        #: the inscribed pyramid of eq. 72 per contact (the compiled tick reads it too)
        self.pyramid = np.zeros_like(self.contacts.friction_rows)
        self._pyramid_version = -1
        self._rhs = np.zeros((nb, n + 2))
        self._native = self._native_backend(native.QpContact)

    def reset(self):
        self.stage1.reset()
        self.stage1_unit.reset()
        self.stage2.reset()
        self._friction_version = -1
        if self._native is not None:
            self._native.reset()

    def _refresh_pyramid(self) -> None:
        """Eq. 72's pyramid per contact, rebuilt when the contact set's version changes
        (active set, or a contact's normal or μ)."""
        cs = self.contacts
        if self._pyramid_version == cs.version:
            return
        for i in range(cs.size):
            self.pyramid[i] = inscribed_pyramid_rows(cs.basis[i], cs.mu[i])
        self._pyramid_version = cs.version

    def _refresh_friction(self) -> None:
        """Rebuild the friction blocks of both stages only when the active set changed."""
        cs = self.contacts
        if self._friction_version == cs.version:
            return
        n_rows = PYRAMID_ROWS * cs.size
        # Stage II always uses the ground's pyramid: with infinite friction it only chooses,
        # among the no-slip forces of Stage I's optimal set, ones the ground can hold
        for qp, unilateral in ((self.stage1, self.infinite_friction), (self.stage2, False)):
            cs.fill_friction_rows(qp.C[:n_rows], qp.l[:n_rows], qp.u[:n_rows],
                                  unilateral_only=unilateral, rows=self.pyramid)
        margin = self.options["friction_margin"]
        if margin:
            for i in np.flatnonzero(cs.active):  # facets: (t-part) − μ n → (t-part) − (1 − m) μ n
                r = PYRAMID_ROWS * i
                self.stage2.C[r:r + 4, 3 * i:3 * i + 3] += margin * cs.mu[i] * cs.basis[i, 2]
        self._fill_cop_rows()
        self._friction_version = cs.version

    def _fill_cop_rows(self) -> None:
        """Stage II's centre-of-pressure rows (option ``cop_margin`` = c): each active point
        of a body with several active points keeps n_iᵀf_i ≥ c · mean_j n_jᵀf_j over that
        body's active points; other rows are free."""
        cs, s2 = self.contacts, self.stage2
        r0 = PYRAMID_ROWS * cs.size + self.model.na
        C, lo = s2.C[r0:r0 + cs.size], s2.l[r0:r0 + cs.size]
        C[:] = 0.0
        lo[:] = -INF
        s2.u[r0:r0 + cs.size] = INF
        c = self.options["cop_margin"]
        if not c:
            return
        for i in np.flatnonzero(cs.active):
            group = np.flatnonzero(cs.active & (self._body_of == self._body_of[i]))
            if group.size < 2:
                continue
            for j in group:
                C[i, 3 * j:3 * j + 3] -= (c / group.size) * cs.basis[j, 2]
            C[i, 3 * i:3 * i + 3] += cs.basis[i, 2]
            lo[i] = 0.0

    def _bound_normal_forces(self, mass: float) -> None:
        """Each active contact's ``max_normal_force`` (a making or breaking contact's ramp,
        :class:`~idyn_control.contacts.ContactTransitions`) as the upper side of its
        unilateral row: −n·f ≥ −bound (Stage I in newtons, Stage II per unit mass). With
        infinite friction nothing else bounds the tangential force, so a ramping contact's
        is bounded alike, |t·f| ≤ bound: its whole force then fades in and out."""
        cs = self.contacts
        for i in np.flatnonzero(cs.active):
            bound, r, c = cs.max_normal_force[i], PYRAMID_ROWS * i, 3 * i
            ramp = bound < INF
            for qp, scale in ((self.stage1, 1.0), (self.stage2, 1.0 / mass)):
                qp.set_row_bounds(r + 4, -bound * scale if ramp else -INF, qp.u[r + 4])
            if self.infinite_friction:  # Stage I's rows r, r + 1 are free for μ = ∞
                s1 = self.stage1
                s1.C[r:r + 2, c:c + 3] = cs.basis[i, :2] if ramp else 0.0
                for j in (r, r + 1):
                    s1.set_row_bounds(j, -bound if ramp else -INF, bound if ramp else INF)

    def _compute(self):
        self._refresh_pyramid()
        if self._native is not None and self.options["stage1_solver"] == "qp":
            status, iterations, solve_time = self._native.solve()
            info = self._native.info
            self.fast_path_ticks, self.stage2_failures = int(info[2]), int(info[3])
            self.non_penetration_dropped = int(info[5])
            self.stage1_rescued = int(info[6])
            self.stage2_limited = bool(info[4])
            if info[7]:
                self.relax("non_penetration", info[8])
            return native.STATUS[status], iterations, solve_time
        m, cs, dt = self.model, self.contacts, self.dt
        M, h = self.terms.M, self.terms.h
        nb, k = m.n_base, cs.size
        J = self._J
        J[:] = cs.J.reshape(3 * k, m.nv)
        qdd = self.qdd
        qdd[:] = self.qdd_des
        v = self.terms.v
        iterations, solve_time, status = 0, 0.0, SOLVED
        self._refresh_friction()
        self._bound_normal_forces(M[0, 0] if nb else 1.0)

        if nb and cs.n_active:
            B = M[:nb, nb:]
            Jb = J[:, :nb]
            vq_plus = v[nb:] + dt * qdd[nb:]
            # one Cholesky solve with A for Z = A⁻¹J_bᵀ, A⁻¹(h_b + B q̈_j), A⁻¹B v_q⁺
            rhs = self._rhs
            rhs[:, :3 * k] = Jb.T
            rhs[:, 3 * k] = h[:nb] + B @ qdd[nb:]
            rhs[:, 3 * k + 1] = B @ vq_plus
            chol, _ = lapack.dpotrf(M[:nb, :nb], lower=True)
            sol, _ = lapack.dpotrs(chol, rhs, lower=True)
            Z = sol[:, :3 * k]                                # q̈_b = Z f + p
            p = -sol[:, 3 * k]
            if self.options["dissipation"] == "contacts":
                vb_star = self._stance_base_velocity(Jb, J[:, nb:] @ vq_plus)
            elif self.options["dissipation"] == "desired":
                vb_star = v[:nb] + dt * self.qdd_des[:nb]
            else:
                vb_star = -sol[:, 3 * k + 1]                  # zero base momentum (eq. 69)
            N = np.einsum("ij,ijk->ik", cs.basis[:, 2], cs.J)  # (k, nv) normal rows
            approach = self._approach_bound(N)  # n_iᵀ J_i v⁺ ≥ approach_i [m/s]
            if self.options["stage2"] and self.options["fast_path"]:
                self.stage2_outcome = (0, 0.0)
                if self._at_unconstrained_optimum(Jb, N, vb_star, approach):
                    return self._finish(SOLVED, self.stage2_outcome)
                iterations, solve_time = self.stage2_outcome  # the attempt's work counts too
            # Stage I: ½ ‖v_b⁺ − v_b*‖²_A as a function of f, scaled by 1/Δt²
            s1 = self.stage1
            np.matmul(Jb, Z, out=s1.H)
            # rank ≤ 6: with μ∞ (or forces inside the pyramid) opposing tangential forces
            # are free and the optimal set unbounded; ProxQP then drifted along it to
            # 1000-8000 N on a 29 N robot and stopped at max_iter. The relative Tikhonov
            # term bounds it (the nearest-to-zero optimum; Stage II re-chooses in the set).
            # Lemke, the paper's pivoting, keeps the indeterminate problem (seed 000 Fig. 6)
            trace1 = np.trace(s1.H)
            if self.options["stage1_solver"] == "qp":
                np.einsum("ii->i", s1.H)[:] += STAGE1_TIKHONOV * trace1
            s1.g[:] = Jb @ (v[:nb] + dt * p - vb_star) / dt
            # non-penetration: n_iᵀ J_i v⁺ ≥ −φ_i/Δt with v⁺ = v + Δt q̈, q̈_b = Z f + p
            rows = slice(PYRAMID_ROWS * k, (PYRAMID_ROWS + 1) * k)
            np.matmul(N[:, :nb], Z, out=s1.C[rows])
            s1.l[rows] = approach / dt - N @ v / dt - N[:, :nb] @ p - N[:, nb:] @ qdd[nb:]
            s1.C[rows][~cs.active] = 0.0
            s1.l[rows][~cs.active] = -INF
            out = s1.solve() if self.options["stage1_solver"] == "qp" else self._stage1_lemke(rows)
            iterations += out.iterations
            solve_time += out.solve_time_s
            if out.status == MAX_ITER and self.options["stage1_solver"] == "qp":
                # flat along internal forces: once more, more regularized
                np.einsum("ii->i", s1.H)[:] += (STAGE1_TIKHONOV_RETRY - STAGE1_TIKHONOV) * trace1
                out = s1.solve()
                iterations += out.iterations
                solve_time += out.solve_time_s
            status = out.status
            if not out.ok:
                # prescribed joint motion drives a foot into the ground faster than the
                # base can yield: drop non-penetration, keep friction (always feasible:
                # f = 0, so ProxQP's early "infeasible" certificate is not trusted), and
                # answer with it, counted in relaxations()
                s1.C[rows] = 0.0
                s1.l[rows] = -INF
                s1.infeasibility_tolerance = STRICT_INFEASIBILITY_TOLERANCE
                relaxed = s1.solve()
                s1.infeasibility_tolerance = PROXQP_INFEASIBILITY_TOLERANCE
                iterations += relaxed.iterations
                solve_time += relaxed.solve_time_s
                if not relaxed.ok:
                    relaxed = self._rescue_stage1()
                    iterations += relaxed.iterations
                    solve_time += relaxed.solve_time_s
                    self.stage1_rescued += relaxed.ok
                if relaxed.ok:
                    out, status = relaxed, SOLVED
                    self.non_penetration_dropped += 1
                    self._report_penetration(Z, p, N, approach, relaxed.x)
            if out.ok:
                self._f[:] = out.x
            else:  # no usable forces: predict none (free fall), which is always safe
                self._f[:] = 0.0
            qdd[:nb] = Z @ self._f + p
            if self.options["stage2"] and out.ok:
                it, t = self._stage2(Jb, Jb.T @ self._f, limited=None)
                iterations += it
                solve_time += t
        elif nb:  # floating and no contact: free flight
            self.balance_base(qdd)
            self._f[:] = 0.0
        else:  # fixed base: contacts cannot change the motion; Stage II only
            self._f[:] = 0.0
            if cs.n_active and self.options["stage2"]:
                iterations, solve_time = self._stage2(J[:, :0], np.zeros(0), limited=None)
        return self._finish(status, (iterations, solve_time))

    def relaxations(self) -> dict[str, int]:
        return {"non_penetration_dropped": self.non_penetration_dropped}

    def _rescue_stage1(self) -> QpOutcome:
        """Stage I without non-penetration once more, per unit mass (f̂ = f/m, cost divided
        by m) and with a larger iteration cap: in newtons its Hessian scales as 1/m and
        ProxQP stopped at its cap on 2 of 300 random HyQ states (87 kg) that it solves in
        ~13 iterations per unit mass. The outcome's ``x`` is in newtons. Allocates, on such
        ticks only."""
        s1, r = self.stage1, self.stage1_unit
        mass = self.terms.M[0, 0]
        np.multiply(s1.H, mass, out=r.H)
        np.copyto(r.g, s1.g)
        np.copyto(r.C, s1.C)
        np.copyto(r.l, s1.l)
        np.copyto(r.u, s1.u)
        for bounds in (r.l, r.u):  # finite bounds (a ramping contact's force) per unit mass
            np.divide(bounds, mass, out=bounds, where=np.abs(bounds) < INF)
        out = r.solve()
        out.x = out.x * mass
        return out

    def _report_penetration(self, Z, p, N, approach, f) -> None:
        """Result.relaxed["non_penetration"]: how much faster than the bound [m/s] the
        answer's forces let an active contact approach the ground."""
        nb, dt, cs = self.model.n_base, self.dt, self.contacts
        v_plus = self.terms.v + dt * self.qdd
        v_plus[:nb] = self.terms.v[:nb] + dt * (Z @ f + p)
        gap = (N @ v_plus - approach)[cs.active]
        self.relax("non_penetration", max(0.0, -float(gap.min(initial=0.0))))

    def _stance_base_velocity(self, Jb: np.ndarray, c: np.ndarray) -> np.ndarray:
        """v_b*: the base velocity [m/s, rad/s] that keeps the active contacts still given
        the joints' contact velocities ``c`` = J_q v_q⁺, least squares over the active
        rows of J_b v_b* = −c (the forward model's sticking contacts, see module doc)."""
        w = np.repeat(self.contacts.active, 3).astype(float)
        Jw = Jb * w[:, None]
        G = Jw.T @ Jb
        np.einsum("ii->i", G)[:] += STANCE_DAMPING * max(1.0, np.trace(G))
        return -solve_pd(G, Jw.T @ c)

    def _stage1_lemke(self, rows: slice) -> QpOutcome:
        """Stage I as the LCP of its optimality conditions, solved by Lemke (seed 000 §6.2.1).

        Forces of active contacts are z = (f_N, f_s+, f_s−, f_t+, f_t−) ≥ 0 per contact,
        f = n f_N + t1 (f_s+ − f_s−) + t2 (f_t+ − f_t−), with μ f_N ≥ Σ f_F (inside the
        square pyramid) and the non-penetration rows. A pivoting method returns a vertex
        of the optimal set, so on indeterminate stances it may jump between vertices from
        one tick to the next: the torque chatter Stage II removes (seed 000 Fig. 6).
        """
        import time

        from ..lcp import Lemke

        cs, s1 = self.contacts, self.stage1
        act = np.flatnonzero(cs.active)
        na_c = act.size
        G = np.zeros((3 * cs.size, 5 * na_c))       # f (all contacts) = G z
        D = np.zeros((2 * na_c, 5 * na_c))          # D z ≥ d
        d = np.zeros(2 * na_c)
        for j, i in enumerate(act):
            t1, t2, n = cs.basis[i]
            G[3 * i:3 * i + 3, 5 * j:5 * j + 5] = np.column_stack((n, t1, -t1, t2, -t2))
            D[j, 5 * j] = cs.mu[i]
            D[j, 5 * j + 1:5 * j + 5] = -1.0
        D[na_c:] = s1.C[rows][act] @ G
        d[na_c:] = s1.l[rows][act]
        nz = 5 * na_c
        M = np.zeros((nz + 2 * na_c, nz + 2 * na_c))
        M[:nz, :nz] = G.T @ s1.H @ G
        M[:nz, nz:] = -D.T
        M[nz:, :nz] = D
        q = np.concatenate((G.T @ s1.g, -d))
        if self._lemke is None:
            self._lemke = Lemke(M.shape[0])
        t0 = time.perf_counter()
        sol = self._lemke.solve(M, q)
        status = SOLVED if sol.ok else sol.status
        return QpOutcome(G @ sol.z[:nz], np.zeros(0), np.zeros(0), status, sol.iterations,
                         time.perf_counter() - t0)

    def _finish(self, status: str, effort: tuple[int, float]):
        cs = self.contacts
        f_active = self._f.reshape(cs.size, 3)[cs.order].reshape(-1)
        self.set_forces(f_active)
        self.torque_from_dynamics(self.qdd, f_active)
        return status, effort[0], effort[1]

    def _approach_bound(self, N: np.ndarray) -> np.ndarray:
        """Lower bound of each contact's normal velocity after the step [m/s].

        −φ/Δt (seed 000 §3.2: rigid, the approach stops within one step). With
        ``dissipation="desired"`` a contact may also keep approaching as fast as the desired
        motion has it (the kinematic layer damps a landing or sinking foot over several
        ticks): a one-step stop would contradict the joints' prescribed motion and predict
        an impulse the compliant ground never applies.
        """
        bound = -self.contacts.phi / self.dt
        if self.options["dissipation"] == "desired":
            np.minimum(bound, N @ (self.terms.v + self.dt * self.qdd_des), out=bound)
        return bound

    def _at_unconstrained_optimum(self, Jb: np.ndarray, N: np.ndarray, vb_plus: np.ndarray,
                                  approach: np.ndarray) -> bool:
        """Fast path, exact: Stage I's cost ½‖v_b⁺ − v_b*‖²_A is smallest at v_b⁺ = v_b*.

        If that base velocity keeps every active contact from penetrating and some
        feasible forces produce it, the Stage I optimal set is exactly
        {f feasible : J_bᵀ f = w*} with w* the base wrench it needs, so Stage II alone
        on that set gives the two-stage answer (one QP instead of two). Otherwise the
        caller runs both stages. Stage II here is certified by its working-set guess only
        (QpSolver ``guess_only``): the set may be empty, and ProxQP would spend its
        iterations proving it. ``vb_plus`` = v_b*.
        """
        m, cs, dt = self.model, self.contacts, self.dt
        nb = m.n_base
        v, qdd = self.terms.v, self.qdd
        qdd_b = qdd[:nb].copy()
        qdd[:nb] = (vb_plus - v[:nb]) / dt
        v_plus = v + dt * qdd
        gap = N @ v_plus - approach
        if (gap[cs.active] < 0.0).any():
            qdd[:nb] = qdd_b
            return False
        w_star = self.terms.M[:nb] @ qdd + self.terms.h[:nb]
        if not self._base_wrench_reachable(Jb, w_star):
            qdd[:nb] = qdd_b
            return False
        iterations, solve_time = self._stage2(Jb, w_star, limited=self.options["torque_limits"])
        self.stage2_outcome = (iterations, solve_time)
        if self._stage2_ok:
            self.fast_path_ticks += 1
            return True
        self.stage2_failures -= 1  # not a failure: the set was empty, both stages follow
        qdd[:nb] = qdd_b
        return False

    def _base_wrench_reachable(self, Jb: np.ndarray, base_wrench: np.ndarray) -> bool:
        """Whether some forces of the active contacts (friction aside) give ``base_wrench``:
        its least-squares residual per unit mass is within 100 ``eps_abs``. With two feet
        (6 forces, rank 5) it generically is not, and Stage II on the fast path would only
        spend its iterations finding that out (a trot's two-foot phases)."""
        JbT = Jb.T * np.repeat(self.contacts.active, 3)
        f_ls = np.linalg.lstsq(JbT, base_wrench, rcond=None)[0]
        return float(np.linalg.norm(JbT @ f_ls - base_wrench)) / self.terms.M[0, 0] <= 100.0 * self.options["eps_abs"]

    def _stage2(self, Jb: np.ndarray, base_wrench: np.ndarray, *, limited: bool | None) -> tuple[int, float]:
        """min ½‖τ(f)‖² over feasible f with J_bᵀ f = ``base_wrench`` (Stage I's optimal set).

        ``limited``: add |τ| ≤ τ_max; None = only when the current forces ``self._f``
        (Stage I's) meet them, so the set is known to be non-empty. When it fails the
        current forces stand (valid, only not torque-minimal); ``stage2_failures``
        counts such ticks.
        """
        m, s2 = self.model, self.stage2
        nb, k = m.n_base, self.contacts.size
        M, h, J = self.terms.M, self.terms.h, self._J
        tau0 = M[nb:] @ self.qdd + h[nb:]      # τ(f) = τ0 − J_jᵀ f, base motion fixed
        Jj = J[:, nb:]
        np.matmul(Jj, Jj.T, out=s2.H)
        # tie-break among equal-torque forces (e.g. along a straight leg): minimum norm
        np.einsum("ii->i", s2.H)[:] += STAGE2_TIKHONOV * max(1.0, np.trace(s2.H))
        # solved per unit mass (τ/m, f/m): one tolerance for 1 and 100 kg (ANYmal C, in
        # newtons: Stage II hit its iteration cap on 18 % of trotting ticks, Solo12 2 %)
        mass = M[0, 0] if nb else 1.0
        np.matmul(Jj, tau0, out=s2.g)
        s2.g *= -1.0 / mass
        if nb:
            s2.A[:] = Jb.T
            np.multiply(base_wrench, 1.0 / mass, out=s2.b)
        rows = slice(PYRAMID_ROWS * k, PYRAMID_ROWS * k + m.na)
        s2.C[rows] = -Jj.T
        from_stage1 = limited is None
        if limited is None:
            tau1 = tau0 - Jj.T @ self._f
            limited = self.options["torque_limits"] and bool(np.all(np.abs(tau1) <= m.tau_max))
        if limited:
            np.subtract(-m.tau_max, tau0, out=s2.l[rows])
            np.subtract(m.tau_max, tau0, out=s2.u[rows])
            s2.l[rows] *= 1.0 / mass
            s2.u[rows] *= 1.0 / mass
        else:
            s2.l[rows], s2.u[rows] = -INF, INF
        self.stage2_limited = limited
        # after Stage I its forces are feasible: "infeasible" can only be ProxQP's early
        # certificate misfiring; on the fast path it is the expected early exit
        s2.infeasibility_tolerance = (STRICT_INFEASIBILITY_TOLERANCE if from_stage1
                                      else PROXQP_INFEASIBILITY_TOLERANCE)
        np.multiply(self._f, 1.0 / mass, out=self._f_unit)
        if from_stage1 and self._stage2_set_empty():  # Stage I's forces stand, as if ProxQP proved it
            self._stage2_ok = False
            self.stage2_failures += 1
            return 0, 0.0
        # Stage I's (or the last tick's) forces: a good start. On the fast path the set may
        # be empty: only the working-set guess runs there (ProxQP spent 9 iterations proving
        # a trot's three-foot set empty, tick after tick), both stages follow when it fails
        out = s2.solve(x0=self._f_unit, guess_only=not from_stage1)
        self._stage2_ok = out.ok
        if out.ok:
            np.multiply(out.x, mass, out=self._f)
        else:
            self.stage2_failures += 1
        return out.iterations, out.solve_time_s

    def _stage2_set_empty(self) -> bool:
        """Whether Stage II's set is empty, decided without ProxQP where that is exact and
        cheap: with one or two active contacts Stage I's optimal set {f : J_bᵀf = J_bᵀf₁} is
        f₁ plus at most one direction (two point feet: equal and opposite forces along the
        line between them), so every row of Stage II bounds one scalar. A trot's two stance
        feet that must push harder sideways than the friction margin allows left it empty on
        7 % of Go2's trot ticks, and ProxQP spent ~15 iterations proving it each time. Only a
        miss by more than EMPTY_SET_SLACK counts; a closer call goes to ProxQP as before, so
        the answer is the one ProxQP would give."""
        cs, s2 = self.contacts, self.stage2
        act = np.flatnonzero(cs.active)
        if not 0 < act.size <= 2 or self.model.n_base != 6:
            return False
        Cx = s2.C @ self._f_unit
        if act.size == 2:
            cols = np.r_[3 * act[0]:3 * act[0] + 3, 3 * act[1]:3 * act[1] + 3]
            _, sv, vt = np.linalg.svd(s2.A[:, cols])
            if sv[4] <= NULL_TOL * sv[0] or sv[5] > NULL_TOL * sv[0]:
                return False  # not one free direction
            d = s2.C[:, cols] @ vt[5]
        else:
            d = np.zeros_like(Cx)
        # rows as c + s·d ≤ bound: the upper bounds, and the lower ones negated
        c = np.concatenate((Cx, -Cx))
        dd = np.concatenate((d, -d))
        bound = np.concatenate((s2.u, -s2.l))
        finite = bound < INF
        room = bound[finite] + EMPTY_SET_SLACK - c[finite]
        dd = dd[finite]
        flat = np.abs(dd) <= FLAT_ROW
        if (room[flat] < 0.0).any():
            return True
        up, down = dd > FLAT_ROW, dd < -FLAT_ROW
        hi = (room[up] / dd[up]).min(initial=np.inf)
        lo = (room[down] / dd[down]).max(initial=-np.inf)
        return bool(lo > hi)


class QpCoulomb(_QpContact):
    """ID(t_i)QP,μ: Coulomb friction pyramid (seed 000 §6)."""

    name = "qp_coulomb"


class QpNoSlip(_QpContact):
    """ID(t_i)QP,∞: infinite friction in Stage I, only n·f ≥ 0 (seed 000 §6); Stage II
    keeps the forces inside the ground's pyramid when Stage I's optimal set allows."""

    name = "qp_noslip"
    infinite_friction = True
    respects_friction = False
