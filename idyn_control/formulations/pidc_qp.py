"""``pidc_qp``: exact interaction-force control with projected ID and two QPs (seed 004 §III);
its baselines ``pidc_qp_howsm`` and ``pidcwcu`` (seed 004 §IV).

Notation of seed 004 §II: J the stacked Jacobian of the active contacts, P = I − J⁺J the
projector onto the motion space, B = [0; I] the actuation matrix, q̈_c = P q̈_des − J⁺J̇v
the contact-consistent desired acceleration and τ_m,d = P(M q̈_c + h) the desired motion
torque (eq. 4 and 8 with the controller's acceleration task in place of the Cartesian
impedance of §II-B). Contacts named in the ``force_contacts`` option are force
contacts: their desired force λ_d [N, world] comes from :meth:`set_desired_forces`. The
other active contacts support the motion. B_f selects the joints that move force contacts
only (the pressing leg), B_m = B − B_f the rest.

Stage I (QP_I, eq. 17): τ_I = argmin ‖P B_m τ − τ_m,d‖² over |τ| ≤ τ_max. It fixes the
motion q̈* (eq. 4): only P B τ moves the robot.

Stage II (QP_II, eq. 26) with the realizable reading of eq. 27. The paper's composition
B τ* = P B_m τ_I + (I − P) B_f τ_II has non-zero base rows in general, which no joint
torque can produce. Dropping them, as τ* = Bᵀ(…) does, moves the base and detunes the
force: on ANYmal C standing, both stages solved by least squares, λ_LF came out as
(0.4, 1.3, 139.7) N for (0, 0, 140) N, with a base angular acceleration of ~11 rad/s².
Here the torques added in stage II are restricted to those that leave the motion of
stage I unchanged, P B Δτ = 0:

    τ* = τ_I + K x,   K = [ K_f | K_m ],

K_f = the force-leg joints (B_f) completed by the smallest motion-leg torque that cancels
their motion-space part, −(P B_m)⁺ P B_f; K_m = a basis of the null space of P B_m (internal
forces among the support legs, which leave the force contacts untouched). The predicted
forces are the bilateral-contact forces of τ*, λ(x) = λ(τ_I) + Λ K x with Λ the
forward-dynamics map, so the cost (25) becomes ‖J_fᵀ(λ_f(x) − λ_d)‖² (the constraint-space
error of the force group) and the constraints (21), (23), (24) hold for the forces and
torques actually produced. Regularization acts only on the null space of the tracking
terms, so λ_f = λ_d and q̈ = q̈* exactly whenever no inequality is active; under active
inequalities the force is traded off, as the paper says.

Baselines (§IV):
- ``pidc_qp_howsm``: B in place of B_m and B_f. Stage I uses all joints; stage II moves in
  the whole null space of P B and, with no force/motion split, tracks the constraint-space
  error of all contacts: desired forces for force contacts, the implicit forces of
  eq. 13 (τ_c = 0) for the others. The balance of the base makes these targets
  incompatible, so the pressing force is a compromise. While no inequality binds this is
  the least-squares realizable constraint torque, i.e. the same torque as eq. 14.
- ``pidcwcu``: eq. 14 (Dehio et al.), closed form, B square: B τ = (P B)⁺ τ_m,d
  + (I − [(I − B)(I − P)]⁺)(I − P) τ_c,d, τ_c,d from eq. 11 with the same desired forces.
  Its base rows are zero, so it is realizable, but the underactuation term (I − P) τ_u
  shifts the forces away from λ_d.

**Always an answer.** Stage I ignores friction, so its forces can be outside a pyramid
and no torque stage II may add (within the limits, leaving the motion) brings them all
inside: stage II was infeasible on ~30 % of random states of six quadrupeds. Its friction
rows then become elastic (``_solve_force_elastic``), ``friction_elastic`` counts it and
``Result.relaxed["friction"]`` says how far outside its pyramid the worst force is. Stage I
(a box) is solved again at ``LAST_RESORT_EPS_ABS`` when ProxQP stops at its cap on it
(``stage1_loose``).

q̈ and forces of every result are those the returned τ produces with the active contacts
held (so M q̈ + h = Bτ + Jᵀλ holds exactly): read from the stage-II force map for the two
QP methods, from constrained forward dynamics for ``pidcwcu`` (its forces are implicit).

**Compiled.** With ``backend`` "auto" (default) the three methods run compiled
(:mod:`idyn_control.native`, solvers.cpp ``pidc_solve``: the same algorithm line for line,
this module staying the reference) when the native tick is built; the compiled solver reads
``lambda_des`` in place, so a new desired force is an ordinary tick (the node's compiled loop
keeps it). ``"native"`` insists, ``"python"`` runs this code.

Computation (the 1 kHz path): one QR of Jᵀ gives J⁺ and an orthonormal basis N of null(J),
so P = N Nᵀ and P B_s = N W with W = (rows s of N)ᵀ, a d × n_s matrix (d = dim null(J),
6 on a quadruped): pseudo-inverses and null spaces of P B_s come from W (NᵀN = I), M⁻¹ is
applied through its Cholesky factor, the Delassus matrix J M⁻¹ Jᵀ is inverted by Cholesky.
:mod:`idyn_control.linalg` falls back to the SVD wherever a matrix is rank-deficient or
ill-conditioned, so the rank decisions (``rcond``) are those of the SVD. Index sets that
depend on the active contacts only are rebuilt when the contact set changes.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .. import native
from ..errors import ShapeError, UnknownNameError
from ..linalg import chol_solve, cholesky, pinv, pinv_and_null_space, psd_pinv_solve, solve_pd
from ..qp import INF, SOLVED, STRICT_INFEASIBILITY_TOLERANCE, QpOutcome, QpSolver
from .base import Formulation, check_vector

#: rank cut-off relative to the largest singular value
_RANK_TOL = 1e-9
#: a QP inequality is counted active when its slack is below this (relative) value
_ACTIVE_TOL = 1e-7
_STATUS_RANK = {SOLVED: 0, "max_iter": 1, "infeasible": 2, "failed": 3}
#: weight of the friction slacks of stage II's last resort, relative to the largest
#: diagonal of its cost (whose unit is a torque-space force error squared): the forces'
#: excess over their pyramids was within 0.1 % of its minimum (a QP on the slacks alone)
#: on 18 HyQ states where it was needed; ELASTIC_WEIGHT (1e4) made ProxQP stop at its cap
#: on all 18
FRICTION_SLACK_WEIGHT = 1e2
#: accuracy of the last resorts [N·m, N]: stage II's elastic QP (at 1e-9 ProxQP stopped at
#: its cap where stage I's torques sat on their limits to round-off), and stage I again when
#: ProxQP stopped at its cap (Solo12, a Hessian of condition 1e13: 1 iteration at 1e-7,
#: 212 at 1e-9)
LAST_RESORT_EPS_ABS = 1e-7
#: weight of the torques [1/(N·m)² against 1/N² of the excess] when only the excess is
#: minimized: Solo12 with toe and heel points, 27 of 300 random states where the penalty
#: QP stopped at its cap (its cost's diagonal spans 1e-2 to 1e6) all solved in ≤ 33
#: iterations at 1e-3 (at 1e-6 one stopped at the cap)
EXCESS_ONLY_REGULARIZATION = 1e-3


class _ProjectedForceControl(Formulation):
    """Per-tick projected-dynamics terms shared by the three methods (seed 004 §II)."""

    defaults = {
        "force_contacts": (),  # frames whose force is controlled (set_desired_forces)
        "rcond": 1e-10,        # cut-off of small singular values in pseudo-inverses
        "backend": "auto",     # "auto" | "native" | "python": the compiled tick (idyn_control.native)
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        pm, nb, k = model.pin_model, model.n_base, self.contacts.size
        force_frames = tuple(self.options["force_contacts"])
        self.contacts.check_frames(force_frames)
        self.is_force_contact = np.zeros(k, dtype=bool)
        for frame in force_frames:
            self.is_force_contact[model.contact_index(frame)] = True
        self.lambda_des = np.zeros((k, 3))  # desired forces [N, world], per configured contact
        # actuated joints on the kinematic chain of each contact (structural zeros of J)
        self.chain = np.zeros((k, model.na), dtype=bool)
        for i, fid in enumerate(model.contact_frame_ids):
            for jid in pm.supports[pm.frames[fid].parentJoint]:
                iv = pm.joints[jid].idx_v
                if jid > 0 and iv >= nb and pm.joints[jid].nv == 1:
                    self.chain[i, iv - nb] = True
        self._eye_nv = np.eye(model.nv)
        self._rhs = np.zeros((3 * k, 1 + model.na))  # right-hand sides of the Delassus solve
        self._active_version = -1  # contacts.version the active-set caches were built for
        self._native = None
        self._counts = [0, 0, 0]  # the Python backend's: see the properties below
        self._native = self._native_backend(native.Pidc)

    # counters of the QP methods; with the compiled backend they are the C++ solver's, so they
    # include the ticks the node's compiled loop ran without Python (slots of native.Pidc.info)
    def _count(self, i: int) -> int:
        return int(self._native.info[2 + i]) if self._native is not None else self._counts[i]

    @property
    def n_active_inequalities(self) -> int:
        """Inequalities at their bound after the last solve (stage I + stage II); 0 when the
        unconstrained optima were feasible (fast path)."""
        return self._count(0)

    @n_active_inequalities.setter
    def n_active_inequalities(self, value: int) -> None:
        self._counts[0] = value

    @property
    def stage1_loose(self) -> int:
        """Ticks whose stage I needed its last resort (solved again at LAST_RESORT_EPS_ABS)."""
        return self._count(1)

    @stage1_loose.setter
    def stage1_loose(self, value: int) -> None:
        self._counts[1] = value

    @property
    def friction_elastic(self) -> int:
        """Ticks whose stage-II friction rows were elastic (its last resort)."""
        return self._count(2)

    @friction_elastic.setter
    def friction_elastic(self, value: int) -> None:
        self._counts[2] = value

    def _native_compute(self) -> tuple[str, int, float]:
        """The tick in C++ (``backend``): same outputs, counters and relaxations as ``_compute``."""
        status, iterations, solve_time = self._native.solve()
        info = self._native.info
        if info[5]:
            self.relax("friction", info[6])
        return native.STATUS[status], iterations, solve_time

    # ------------------------------------------------------------------ inputs
    def set_desired_forces(self, forces: Mapping[str, np.ndarray] | np.ndarray) -> None:
        """Desired forces [N, world frame] of force contacts: ``{frame: f_world (3,)}``
        (frames not given keep their previous value, initially zero), or an array (k, 3) in
        the order of the configured contacts whose force-contact rows are taken (the other
        rows are not read).
        """
        if not isinstance(forces, Mapping):
            arr = np.asarray(forces, dtype=float)
            k = self.contacts.size
            if arr.shape != (k, 3):
                raise ShapeError("desired forces", arr.shape, (k, 3))
            rows = arr[self.is_force_contact]
            check_vector("desired forces", rows.reshape(-1), rows.size)
            self.lambda_des[self.is_force_contact] = rows
            return
        force_frames = [c for c, f in zip(self.model.contact_frames, self.is_force_contact) if f]
        for frame, f in forces.items():
            if frame not in force_frames:
                raise UnknownNameError("force contact", frame, force_frames)
            force = check_vector(f"desired force of {frame!r}", f, 3)
            self.lambda_des[self.model.contact_index(frame)] = force

    # ------------------------------------------------------------------ shared algebra
    def _on_active_set(self) -> None:
        """Active force contacts (stacked rows) and the joints that move only them (B_f)."""
        order = self.contacts.order
        self.force_active = self.is_force_contact[order]
        self.force_rows = np.repeat(self.force_active, 3)
        self.force_order = order[self.force_active]  # configured indices of the active force contacts
        motion_chain = self.chain[order[~self.force_active]].any(axis=0)
        self.force_joints = self.chain[self.force_order].any(axis=0) & ~motion_chain

    def _project(self) -> None:
        """P, J⁺, q̈_c, τ_m,d and the bilateral forward-dynamics map λ(τ) = λ_h + Λ τ."""
        m, M, h = self.model, self.terms.M, self.terms.h
        nb, rcond = m.n_base, self.options["rcond"]
        if self.contacts.version != self._active_version:
            self._on_active_set()
            self._active_version = self.contacts.version
        J = self.stacked_jacobian()
        self.J = J
        self.M_chol = cholesky(M)  # lower factor: M⁻¹X by chol_solve
        if self.M_chol is None:
            raise np.linalg.LinAlgError("mass matrix is not positive definite")
        if J.shape[0]:
            self.J_pinv, self.N = pinv_and_null_space(J, rcond)
            self.P = self.N @ self.N.T  # = I − J⁺J
            drift = self.stacked_drift()
            self.qdd_c = self.P @ self.qdd_des - self.J_pinv @ drift
            Minv_JT = chol_solve(self.M_chol, J.T)
            rhs = self._rhs[: J.shape[0]]
            np.matmul(h, Minv_JT, out=rhs[:, 0])
            rhs[:, 0] -= drift
            np.negative(Minv_JT[nb:].T, out=rhs[:, 1:])
            lam = psd_pinv_solve(J @ Minv_JT, rhs, rcond)  # Delassus matrix J M⁻¹ Jᵀ
            self.lam_h = lam[:, 0]
            self.Lam = lam[:, 1:]
        else:
            self.J_pinv = np.zeros((m.nv, 0))
            self.N = self._eye_nv
            self.P = self._eye_nv.copy()
            self.qdd_c = self.qdd_des.copy()
            self.lam_h = np.zeros(0)
            self.Lam = np.zeros((0, m.na))
        self.gen_c = M @ self.qdd_c + h
        self.tau_md = self.P @ self.gen_c

    def _desired_all(self) -> np.ndarray:
        """λ_d for every active contact: desired for force contacts, implicit (eq. 13) else."""
        lam = (self.J_pinv.T @ self.gen_c).reshape(-1, 3)
        lam[self.force_active] = self.lambda_des[self.force_order]
        return lam.reshape(-1)

    def _apply(self, tau: np.ndarray, lam: np.ndarray | None = None) -> None:
        """Write τ, the contact forces it produces and q̈ = M⁻¹(Bτ − h + Jᵀλ)."""
        nb = self.model.n_base
        self.tau[:] = tau
        if lam is None:
            lam = self.lam_h + self.Lam @ tau
        gen = -self.terms.h
        gen[nb:] += tau
        if lam.size:
            gen += self.J.T @ lam
            self.set_forces(lam)
        self.qdd[:] = chol_solve(self.M_chol, gen)


class PidcQp(_ProjectedForceControl):
    """Hierarchical QPs with selection matrices B_m (stage I) and B_f (stage II), seed 004 §III."""

    name = "pidc_qp"
    respects_torque_limits = True
    respects_friction = True
    defaults = {
        **_ProjectedForceControl.defaults,
        "regularization": 1e-6,  # weight of the null-space regularizer, relative to the cost
        "solver": "proxqp",      # QP backend; "proxqp" is persistent and warm-started
        "warm_start": True,      # warm-start ProxQP from the previous tick
        "eps_abs": 1e-9,         # QP accuracy (absolute)
        "fast_path": True,       # skip a QP whose unconstrained optimum is feasible (exact)
        # weight of the support feet's tangential forces on the directions the tracked
        # forces are blind to (internal forces), relative to the tracking cost; 0 = off
        "internal_force_weight": 1e-3,
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        na, k, o = model.na, self.contacts.size, self.options
        qp_args = dict(solver=o["solver"], warm_start=o["warm_start"], eps_abs=o["eps_abs"])
        # fixed sizes for all configured contacts: the warm start survives contact switches
        self.qp_motion = QpSolver(na, 0, na, **qp_args)
        self.qp_motion.C[:] = np.eye(na)
        self.qp_force = QpSolver(na, 0, 5 * k + na, **qp_args)
        # stage II's last resort: a slack s per friction row, D λ(x) − s ≤ 0, ½ w ‖s‖² in the cost
        self.qp_force_elastic = QpSolver(na + 5 * k, 0, 5 * k + na, solver=o["solver"], warm_start=o["warm_start"],
                                         eps_abs=max(o["eps_abs"], LAST_RESORT_EPS_ABS),
                                         infeasibility_tolerance=STRICT_INFEASIBILITY_TOLERANCE)
        self.qp_force_elastic.C[: 5 * k, na:] = -np.eye(5 * k)
        # stage I's last resort: the same QP at the last resorts' accuracy
        self.qp_motion_loose = QpSolver(na, 0, na, solver=o["solver"], warm_start=o["warm_start"],
                                        eps_abs=max(o["eps_abs"], LAST_RESORT_EPS_ABS))
        self.qp_motion_loose.C[:] = np.eye(na)
        self._K = np.zeros((na, na))
        self._K_blocks = np.zeros((na, na))  # K with its rows ordered (B_m joints, B_f joints)
        self._free = np.zeros(na)
        self._eye_na = np.eye(na)

    def reset(self):
        self.qp_motion.reset()
        self.qp_motion_loose.reset()
        self.qp_force.reset()
        self.qp_force_elastic.reset()
        if self._native is not None:
            self._native.reset()

    def relaxations(self) -> dict[str, int]:
        return {"friction_elastic": self.friction_elastic}

    # ---------------------------------------------------------------- method hooks
    def _motion_joints(self) -> np.ndarray:
        """Joints of stage I (B_m): all but the force legs. Stage II moves the others."""
        return ~self.force_joints

    def _tracked_rows(self) -> np.ndarray:
        """Stacked force rows whose error is the stage-II cost: the force group only."""
        return self.force_rows

    def _tracked_targets(self) -> np.ndarray:
        return self.lambda_des[self.force_order].reshape(-1)

    # ---------------------------------------------------------------- active-set caches
    def _on_active_set(self) -> None:
        """Joint and row index sets of the two stages; the method hooks are evaluated here."""
        super()._on_active_set()
        nb, k = self.model.n_base, self.contacts.size
        sel = self._motion_joints()
        self.sel = np.flatnonzero(sel)       # B_m (stage I) joints
        self.unsel = np.flatnonzero(~sel)    # B_f joints
        self.sel_block = np.ix_(self.sel, self.sel)
        self._sel_v, self._unsel_v = nb + self.sel, nb + self.unsel  # their rows of N
        self.tracked = np.flatnonzero(self._tracked_rows())
        # K is assembled with its rows grouped (B_m, B_f), then put in joint order
        self._K_order = np.argsort(np.concatenate((self.sel, self.unsel)))
        nf = self.unsel.size
        self._K_blocks[:] = 0.0
        self._K_blocks[self.sel.size:, :nf] = self._eye_na[:nf, :nf]
        # friction rows of inactive contacts are unused: C = 0, −∞ ≤ · ≤ ∞
        qp = self.qp_force
        qp.C[: 5 * k] = 0.0
        qp.l[: 5 * k] = -INF
        qp.u[: 5 * k] = INF

    # ---------------------------------------------------------------- the two stages
    def _compute(self):
        if self._native is not None:
            return self._native_compute()
        m = self.model
        rcond, eps = self.options["rcond"], self.options["regularization"]
        self._project()
        N, sel, unsel = self.N, self.sel, self.unsel
        ns, nf = sel.size, unsel.size
        # P B_m = N W (NᵀN = I): (P B_m)⁺ = W⁺Nᵀ, null(P B_m) = null(W)
        W = N[self._sel_v].T
        W_pinv, Ns = pinv_and_null_space(W, rcond)
        y = N.T @ self.tau_md  # τ_m,d in the coordinates N of the motion space

        # stage I (eq. 17): motion-space error with the selected joints only
        qp = self.qp_motion
        qp.l[:] = -m.tau_max
        qp.u[:] = m.tau_max
        free = self._free
        free[:] = 0.0
        free[sel] = W_pinv @ y  # the optimum without limits (regularizer: min-norm)
        out1, n_active = self._solve_stage(qp, free, lambda: self._fill_motion_qp(W, Ns, y))
        if not out1.ok:  # a box is always feasible: ProxQP's accuracy, not the problem
            loose = self.qp_motion_loose
            for a, b in ((loose.H, qp.H), (loose.g, qp.g), (loose.l, qp.l), (loose.u, qp.u)):
                np.copyto(a, b)
            retry = loose.solve()
            if retry.ok:
                out1 = QpOutcome(retry.x, retry.y, retry.z, retry.status, out1.iterations + retry.iterations,
                                 out1.solve_time_s + retry.solve_time_s)
                self.stage1_loose += 1
        tau_I = out1.x.copy()

        # stage II (eq. 26): torques K x with P B K = 0 leave the motion of stage I intact
        nk = nf + Ns.shape[1]  # used columns of K (the others stay zero)
        Kb = self._K_blocks  # B_f completed by the least motion-joint torque cancelling P B_f
        Kb[:ns, :nf] = -W_pinv @ N[self._unsel_v].T  # −(P B_m)⁺ P B_f
        Kb[:ns, nf:nk] = Ns
        Kb[:ns, nk:] = 0.0
        K = np.take(Kb, self._K_order, axis=0, out=self._K)
        lam_I = self.lam_h + self.Lam @ tau_I
        L = self.Lam @ K
        rows = self.tracked
        qp = self.qp_force
        x_track = np.zeros(nk)  # the least-norm x that tracks exactly (no inequalities)
        if rows.size:
            Lg = L[rows]
            Jg = self.J[rows]
            A2 = Jg.T @ Lg  # torque-space image of the tracked force error (eq. 25)
            np.matmul(A2.T, A2, out=qp.H)
            error_I = lam_I[rows] - self._tracked_targets()
            qp.g[:] = A2.T @ (Jg.T @ error_I)
            Lg_used = Lg[:, :nk]
            Lg_pinv = pinv(Lg_used, _RANK_TOL)
            seen = Lg_pinv @ Lg_used  # Lg⁺Lg; zero on the unused columns
            x_track -= Lg_pinv @ error_I
        else:
            qp.H[:] = 0.0
            qp.g[:] = 0.0
            seen = np.zeros((nk, nk))
        scale = eps * max(1.0, float(qp.H.diagonal().max()))
        blind = np.eye(nk) - seen
        self._add_internal_force_cost(qp, L[:, :nk], lam_I + L[:, :nk] @ x_track, blind)
        # + scale (I − Lg⁺Lg): only where the tracked forces are blind
        qp.H += scale * self._eye_na
        qp.H[:nk, :nk] -= scale * seen
        self._fill_inequalities(qp, L, lam_I, tau_I)
        x_free = solve_pd(qp.H, -qp.g) if self.options["fast_path"] else None
        out2, n_binding = self._solve_stage(qp, x_free)
        if not out2.ok and out1.ok:
            out2 = self._solve_force_elastic()
        x = out2.x
        self.n_active_inequalities = n_active + n_binding
        self._apply(tau_I + K @ x, lam_I + L @ x)

        status = max(out1.status, out2.status, key=lambda s: _STATUS_RANK.get(s, 3))
        return status, out1.iterations + out2.iterations, out1.solve_time_s + out2.solve_time_s

    def _add_internal_force_cost(self, qp: QpSolver, L: np.ndarray, lam_track: np.ndarray,
                                 blind: np.ndarray) -> None:
        """+ w‖T λ_s‖² on the blind directions Π = I − Lg⁺Lg: the support feet's tangential
        forces T λ_s at the tracking optimum, reduced with what the tracked forces cannot see.

        Those directions are the internal forces among the support feet (on flat ground
        purely tangential), which the tracking cost leaves to the regularizer, i.e. to the
        least-norm torque of stage I. On ANYmal C pressing 170–190 N that put a support
        foot at |f_t|/f_n = 0.69 for μ = 0.7, where it slipped and lost contact in MuJoCo
        and the next tick's QP was infeasible. The term only acts on Π, so the tracked
        forces stay exact while no inequality binds.
        """
        weight = self.options["internal_force_weight"]
        support = ~self.force_active
        if weight <= 0.0 or not support.any() or not blind.any():
            return
        n, nk = self.force_active.size, L.shape[1]
        tangents = self.contacts.basis[self.contacts.order[support]][:, :2, :]  # (n_s, 2, 3)
        Lt_all = (tangents @ L.reshape(n, 3, nk)[support]).reshape(-1, nk)
        Lt = Lt_all @ blind
        ft = (tangents @ lam_track.reshape(n, 3, 1)[support]).reshape(-1)
        Ht = Lt.T @ Lt
        top = float(Ht.diagonal().max())
        # HOWSM tracks every contact: there T L Π is round-off, and no internal force is free
        if top <= _RANK_TOL * float((Lt_all * Lt_all).sum(axis=0).max()):
            return
        w = weight * max(1.0, float(qp.H.diagonal().max())) / top
        qp.H[:nk, :nk] += w * Ht
        qp.g[:nk] += w * (Lt.T @ ft)

    def _fill_motion_qp(self, W: np.ndarray, Ns: np.ndarray, y: np.ndarray) -> None:
        """Stage-I cost ‖P B_m τ − τ_m,d‖², regularized on null(P B_m) and the B_f joints."""
        qp, eps = self.qp_motion, self.options["regularization"]
        qp.H[:] = 0.0
        qp.H[self.sel_block] = W.T @ W  # (P B_m)ᵀ P B_m
        scale = eps * max(1.0, float(qp.H.diagonal().max()))
        # regularize null(P B_m) and the unselected joints: the motion stays exact
        qp.H[self.sel_block] += scale * (Ns @ Ns.T)
        qp.H[self.unsel, self.unsel] += scale
        qp.g[:] = 0.0
        qp.g[self.sel] = -(W.T @ y)  # −(P B_m)ᵀ τ_m,d

    def _solve_stage(self, qp: QpSolver, x_free: np.ndarray | None,
                     assemble=None) -> tuple[QpOutcome, int]:
        """The QP, or its unconstrained optimum when that already meets every inequality.

        ``assemble`` fills the QP's cost when it has to be solved (the fast path does not
        need it). Returns the outcome and the number of inequalities at their bound (0
        when none binds).
        """
        if self.options["fast_path"] and x_free is not None:
            Cx = qp.C @ x_free
            if (Cx <= qp.u).all() and (Cx >= qp.l).all():
                return QpOutcome(x_free, np.zeros(0), np.zeros(qp.n_in), SOLVED, 0, 0.0), 0
        if assemble is not None:
            assemble()
        out = qp.solve()
        return out, self._count_active(qp, out.x)

    def _fill_inequalities(self, qp: QpSolver, L, lam_I, tau_I) -> None:
        """Friction pyramids of the active contacts (21, 23) and torque limits (24).

        Rows of inactive contacts were cleared when the contact set changed.
        """
        c, na = self.contacts, self.model.na
        k, order = c.size, c.order
        D = c.friction_rows[order]  # (n, 5, 3), read every tick: set_friction takes effect
        n = order.size
        qp.C[: 5 * k].reshape(k, 5, na)[order] = D @ L.reshape(n, 3, na)
        qp.u[: 5 * k].reshape(k, 5)[order] = -(D @ lam_I.reshape(n, 3, 1))[:, :, 0]
        qp.C[5 * k:] = self._K
        np.subtract(-self.model.tau_max, tau_I, out=qp.l[5 * k:])
        np.subtract(self.model.tau_max, tau_I, out=qp.u[5 * k:])

    def _solve_force_elastic(self) -> QpOutcome:
        """Stage II with elastic friction rows, when no torque the stage may add puts the
        forces inside every pyramid (stage I ignores friction, so its forces can be outside
        and stay so within the torque limits): min cost + ½ w ‖s‖², D λ(x) − s ≤ 0, the
        torque limits kept (x = 0, s = max(D λ_I, 0) is feasible), w =
        ``FRICTION_SLACK_WEIGHT`` × the largest diagonal of the cost; if ProxQP fails on
        that, the least excess alone (½‖s‖² + ½ r‖x‖², r = ``EXCESS_ONLY_REGULARIZATION``).
        ``friction_elastic`` counts such ticks, ``Result.relaxed`` says how far outside its
        pyramid the worst force is [N]. Allocates, on such ticks only."""
        qp, e, na = self.qp_force, self.qp_force_elastic, self.model.na
        n_fr = 5 * self.contacts.size
        weight = FRICTION_SLACK_WEIGHT * max(1.0, float(qp.H.diagonal().max()))
        e.H[:na, :na] = qp.H
        np.einsum("ii->i", e.H)[na:] = weight
        e.g[:na] = qp.g
        e.C[:, :na] = qp.C
        np.copyto(e.l, qp.l)
        np.copyto(e.u, qp.u)
        # x = 0 within the torque rows even where stage I's torques sit on a limit to
        # round-off (else ProxQP's strict certificate calls the QP infeasible)
        np.minimum(e.l[n_fr:], 0.0, out=e.l[n_fr:])
        np.maximum(e.u[n_fr:], 0.0, out=e.u[n_fr:])
        out = e.solve()
        if not out.ok:
            # the penalty's conditioning defeated ProxQP (redundant contacts: toe and heel
            # on one foot): the least excess alone, torques regularized
            e.H[:] = 0.0
            np.einsum("ii->i", e.H)[:na] = EXCESS_ONLY_REGULARIZATION
            np.einsum("ii->i", e.H)[na:] = 1.0
            e.g[:] = 0.0
            retry = e.solve()
            # failed too (a Delassus matrix near singular: forces of 1e5-1e6 N on Solo12):
            # stage I's torques alone, inside their limits, and the status says so
            x = retry.x if retry.ok else np.zeros(e.n)
            out = QpOutcome(x, retry.y, retry.z, retry.status, out.iterations + retry.iterations,
                            out.solve_time_s + retry.solve_time_s)
        self.friction_elastic += 1
        x = out.x[:na]
        used = qp.u[:n_fr] < INF
        excess = qp.C[:n_fr][used] @ x - qp.u[:n_fr][used]
        self.relax("friction", max(0.0, float(excess.max(initial=0.0))))
        return QpOutcome(x, out.y, out.z, out.status, out.iterations, out.solve_time_s)

    @staticmethod
    def _count_active(qp: QpSolver, x: np.ndarray) -> int:
        Cx = qp.C @ x
        used = qp.C.any(axis=1)
        upper = (qp.u < INF) & (qp.u - Cx <= _ACTIVE_TOL * (1.0 + np.abs(qp.u))) & used
        lower = (qp.l > -INF) & (Cx - qp.l <= _ACTIVE_TOL * (1.0 + np.abs(qp.l))) & used
        return int(np.count_nonzero(upper | lower))


class PidcQpHowsm(PidcQp):
    """HOWSM baseline (seed 004 §IV): B in place of B_m and B_f, no force/motion split."""

    name = "pidc_qp_howsm"

    def _motion_joints(self):
        return np.ones(self.model.na, dtype=bool)

    def _tracked_rows(self):
        return np.ones(3 * self.contacts.n_active, dtype=bool)

    def _tracked_targets(self):
        return self._desired_all()


class Pidcwcu(_ProjectedForceControl):
    """PIDCWCU baseline: projected ID contact-wrench control for underactuated robots, eq. 14."""

    name = "pidcwcu"

    def _compute(self):
        if self._native is not None:
            return self._native_compute()
        nb, rcond = self.model.n_base, self.options["rcond"]
        self._project()
        N = self.N
        I_P = self._eye_nv - self.P
        # eq. 11 (no external disturbance): M̄(τ_m,d − Ph + Ṗq̇) = M q̈_c
        tau_cd = I_P @ self.gen_c - self.J.T @ self._desired_all()
        # B τ = (P B)⁺ τ_m,d + (I − Z⁺)(I − P) τ_c,d with B = [0; I], Z = (I − B)(I − P)
        w = I_P @ tau_cd
        gen = w.copy()
        # P B = N [0, N_jᵀ] (NᵀN = I, N_j the joint rows of N): (P B)⁺ = [0; (N_jᵀ)⁺ Nᵀ]
        gen[nb:] += pinv(N[nb:].T, rcond) @ (N.T @ self.tau_md)
        if nb:  # Z keeps the base rows of I − P: Z⁺ = [(I − P)_b⁺, 0]
            gen -= pinv(I_P[:nb], rcond) @ w[:nb]
        # base rows of gen vanish (realizable); the forces follow from the dynamics
        self._apply(gen[nb:])
        return SOLVED, 0, 0.0
