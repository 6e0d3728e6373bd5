"""``lcp_noslip``: ID(t_i)LCP,∞ — inverse dynamics with no-slip rigid contact (seed 000 §4).

Velocity level (seed 000 §3, §4.2): over one control period Δt the contact forces f
(world frame [N]) and the torques τ act on the robot, q̈ = (v⁺ − v)/Δt, and

    M q̈ + h = Sᵀτ + Σ_i J_iᵀ f_i                      (eq. 37, divided by Δt)
    q̈_j = q̈_des,j                                     inverse dynamics (eq. 38–39)
    t1ᵢ·J_i v⁺ = 0,  t2ᵢ·J_i v⁺ = 0                    no slip (eq. 40–41)
    0 ≤ n_i·f_i  ⊥  n_i·J_i v⁺ + φ_i/Δt ≥ 0            unilateral + Baumgarte (eq. 35–36)

**Contact target** (option ``contact_target``): as written, the rows hold the contacts
still after the step (J v⁺ = 0, n·J v⁺ ≥ −φ/Δt: ``"rest"``). In closed loop that stops a
creeping or landing foot within one period, which the kinematic layer's stance task
(damping foot velocity over several ticks) contradicts; ``"desired"`` (default, floating
base) holds each contact to the desired motion's velocity instead (see
``_target_velocity``), as qp_contact's ``dissipation="desired"`` does for the QP.

With the joint accelerations prescribed, the only free motion is the base's: the MLCP
(eq. 42–43) keeps M_bb (6×6) as its "A" block, and with L Lᵀ = M_bb and the contact rows
scaled as B̃ = J_b L⁻ᵀ the LCP (eq. 44–45) is M_lcp = H Hᵀ with H an n×6 matrix — never
formed (§4.7), so the cost grows linearly with the number of contacts.

Per tick:

1. Find-Indices (Alg. 1): a linearly independent subset of the tangent rows, found with
   a Cholesky factor grown one bordered row at a time (:func:`find_indices`), so the
   MLCP's A block is invertible; the rest carry no force (App. E). "Independent" means
   more than 10 % (√``rank_tol``, in the base's inverse-inertia metric) away from the
   span of the kept rows, so a kept row's force is at most 1/rank_tol = 100× what it
   would be alone. Feet a few millimetres off a common plane (one foot landing, two
   feet abreast) make rows that are only 0.01–2.5 % independent; kept at a 1 % cut-off
   they turned a small base acceleration into ±1.5 kN of tangential force on a 2.9 kg
   quadruped standing on its front feet; genuine rows (two diagonal feet) are ≥ 65 %.
2. The LCP is solved with the principal pivoting method warm-started from the previous
   tick's non-basic set (Alg. 2, §4.6), so indeterminate stances (four feet, or many
   points per foot) keep loading the same contacts; Lemke is the fallback.
3. If the desired accelerations are inconsistent with the contacts (a dropped tangent
   row is violated — e.g. legs splaying — or the LCP has no solution), the consistency
   QP of §4.5 (eq. 46–51) finds the nearest consistent q̈_j (persistent ProxQP, elastic
   slacks so it stays feasible, see ``_consistency_qp``), and the LCP is solved again
   with it. q̈ then differs from q̈_des (reported in ``adjusted``). If the LCP still
   fails (rare: e.g. a no-slip row dropped as near-dependent, in violent motions) the
   status is "failed" and ``_fallback`` gives zero forces, q̈_j = 0. (The QP's own
   forces are no safer: without complementarity it may push on feet that leave.)
4. Among the forces with the same motion, the normal ones are the least-norm ones
   (``_spread``) and the tangential ones are shared in proportion to the normal load
   (``_spread_tangential``); a contact left with tangential but no normal force (a foot
   pulling sideways) is released and the rest solved again (``_release``).
5. q̈_b follows from the base rows with the forces found and τ from the joint rows
   (``torque_from_dynamics``), so the dynamics hold to round-off.

Fixed-base robots have no free motion: with contacts, forces are zero when the desired
motion is compatible, else the QP adjusts q̈; without contacts this is plain ID.
"""

from __future__ import annotations

import time

import numpy as np

from ..lcp import (Lemke, LcpResult, PrincipalPivoting, cholesky_lower, cholesky_solve,
                   triangular_solve)
from ..errors import ConfigError
from ..qp import FAILED, INF, SOLVED, QpSolver
from .base import Formulation

#: values of the ``contact_target`` option (see ``VelocityLevelContact._target_velocity``)
CONTACT_TARGETS = ("desired", "rest")


def find_indices(rows: np.ndarray, *, tol: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """Seed 000 Alg. 1 (Find-Indices): a maximal independent subset of ``rows``, in order.

    ``rows`` (m, d) are the tangent rows (t1, t2 of contact 1, then contact 2, …) scaled
    so that Alg. 1's test matrix XᵀM⁻¹X reduces to their Gram matrix. A row is kept when
    its Cholesky pivot against the rows kept so far exceeds ``tol`` times its squared
    norm. The factor grows by one bordered row per kept row (O(r·m) work each, r ≤ d);
    all remaining candidates are tested against it at once, which keeps the same rows
    as testing them one by one (a rejected row stays dependent: the factor only grows).

    Returns:
        (indices of the kept rows, lower Cholesky factor L of rows[kept] rows[kept]ᵀ).
    """
    m, d = rows.shape
    rmax = min(m, d)
    L = np.zeros((rmax, rmax))
    if rmax == 0:
        return np.zeros(0, dtype=int), L
    sq = np.einsum("ij,ij->i", rows, rows)
    resid = sq.copy()  # squared distance of every row to the span of the kept rows
    accept = tol * sq
    np.maximum(accept, 1e-12 * max(float(sq.max()), 1e-300), out=accept)  # zero rows never enter
    V = np.zeros((rmax, m))  # V = L⁻¹ rows[kept] rowsᵀ
    kept: list[int] = []
    start, r = 0, 0
    while r < rmax and start < m:
        ok = np.flatnonzero(resid[start:] > accept[start:])
        if ok.size == 0:
            break
        i = start + int(ok[0])
        L[r, :r] = V[:r, i]
        L[r, r] = np.sqrt(resid[i])
        V[r] = (rows @ rows[i] - L[r, :r] @ V[:r]) / L[r, r]
        resid -= V[r] * V[r]
        kept.append(i)
        r += 1
        start = i + 1
    return np.array(kept, dtype=int), L[:r, :r]


class VelocityLevelContact(Formulation):
    """Shared set-up of seed 000's velocity-level contact formulations (§3, §4.2, §5).

    With the joint accelerations q̈_j prescribed, everything is expressed through the
    base block: ``_reduce`` computes per active contact (in result order)

    - ``_Jc``: Jacobians in the contact basis (rows t1, t2, n), (n, 3, nv);
    - ``_c``: the contact-point velocity-level acceleration with zero contact force,
      R_i (J_i (q̈₀ + v/Δt) [+ J̇v]) + (0, 0, φ_i/Δt²) [m/s²], q̈₀ the free-floating
      acceleration (base rows with f = 0);
    - ``_Bt``: the base columns of ``_Jc`` scaled by L⁻ᵀ (L Lᵀ = M_bb), so that the
      contact-space response to forces is ``_Bt _Btᵀ``.

    ``_finish`` turns world-frame forces into q̈ (base rows) and τ (joint rows).
    """

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        if self.options.get("contact_target", "rest") not in CONTACT_TARGETS:
            raise ConfigError("contact_target", self.options["contact_target"],
                              f"must be one of {CONTACT_TARGETS}")
        k, nv, nb = self.contacts.size, model.nv, model.n_base
        self._Jc = np.zeros((k, 3, nv))
        self._c = np.zeros((k, 3))
        self._Bt = np.zeros((k, 3, nb))
        self._f_world = np.zeros((k, 3))
        self._qdd0 = np.zeros(nv)
        self._u = np.zeros(nv)
        self._u_des = np.zeros(nv)
        self._target = np.zeros((k, 3))
        self._qdd_j = np.zeros(model.na)
        self._L_base = np.zeros((nb, nb))
        self._sel = np.zeros(0, dtype=int)   # Find-Indices: kept tangent rows
        self._may_release = True             # see LcpNoSlip._release
        self._Lk = np.zeros((0, 0))          # Cholesky factor of their Gram matrix

    def _reduce(self, qdd_j: np.ndarray) -> int:
        """Fill the reduced contact terms for joint accelerations ``qdd_j``; returns n."""
        m, terms, cs = self.model, self.terms, self.contacts
        nb, M, h = m.n_base, terms.M, terms.h
        self._qdd0[nb:] = qdd_j
        if nb:
            self._L_base[:] = cholesky_lower(M[:nb, :nb])  # M_bb is SPD
            self._qdd0[:nb] = cholesky_solve(self._L_base, -(M[:nb, nb:] @ qdd_j + h[:nb]))
        order = cs.order
        n = order.size
        if n == 0:
            return 0
        R = cs.basis[order]
        Jc = np.matmul(R, cs.J[order], out=self._Jc[:n])
        np.multiply(terms.v, 1.0 / self.dt, out=self._u)
        self._u += self._qdd0
        c = self._c[:n]
        np.matmul(Jc, self._u, out=c)
        if self.options["drift"]:
            c += np.einsum("nij,nj->ni", R, cs.drift[order])
        c -= self._target_velocity(n) / self.dt
        if nb:
            Bt = self._Bt[:n].reshape(3 * n, nb)
            Bt[:] = triangular_solve(self._L_base, Jc[:, :, :nb].reshape(3 * n, nb).T).T
        return n

    def _target_velocity(self, n: int) -> np.ndarray:
        """Each active contact's velocity after the step that the LCP rows ask for, in its
        basis (t1, t2, n) [m/s]: sticking rows t·J v⁺ = target, normal rows n·J v⁺ ≥ target.

        ``contact_target="rest"`` is seed 000 §4 as written: (0, 0, −φ/Δt), the contacts
        stop within one step (Baumgarte §3.2). ``"desired"`` (default, floating base) takes
        the contact velocity of the desired motion, R J (v + Δt q̈_des), whose stance rows the
        kinematic layer damps over several ticks, with the Baumgarte term −φ/Δt added to the
        normal one. In closed loop the one-step stop of a creeping or landing foot (6–19 mm/s
        median, 0.1 m/s at touchdown on the project quadruped trotting) became joint-
        acceleration corrections of up to 100 rad/s² and predicted impulses the ground never
        applied; see qp_contact's ``dissipation`` for the same choice in the QP.

        Unlike qp_contact's approach bound, the normal target is not clipped at −φ/Δt
        (min(−φ/Δt, ·) would forbid following a desired motion that lifts a resting foot by
        a few mm/s): with complementarity, such a foot then has w > 0 and never carries
        load — the contact estimate (0.1 N) loses it and the trot schedule waits for it.
        Measured (quadruped, trot from 0.5 s, rigid): clipped, fell at 1.7 s (μ ∞ and 0.1,
        3 s trot) and 1.5 s (waypoints); unclipped, 3 s trots walk, waypoints fall at 5.7 s.
        A fixed base has no kinematic-layer contact task: it keeps "rest".
        """
        cs = self.contacts
        order = cs.order
        target = self._target[:n]
        if self.options["contact_target"] == "desired" and self.model.n_base:
            np.multiply(self.qdd_des, self.dt, out=self._u_des)
            self._u_des += self.terms.v
            np.matmul(self._Jc[:n], self._u_des, out=target)
            target[:, 2] -= cs.phi[order] / self.dt
        else:
            target[:, :2] = 0.0
            np.multiply(cs.phi[order], -1.0 / self.dt, out=target[:, 2])
        return target

    def _find_indices(self, n: int) -> None:
        """Find-Indices (seed 000 Alg. 1) on the active tangent rows: ``_sel``, ``_Lk``."""
        nb = self.model.n_base
        if nb:
            self._sel, self._Lk = find_indices(self._Bt[:n, :2].reshape(2 * n, nb),
                                               tol=self.options["rank_tol"])
        else:  # no free motion: every tangent row is "dropped" (no force can move it)
            self._sel, self._Lk = np.zeros(0, dtype=int), np.zeros((0, 0))

    def _make_consistent(self, n: int, qdd_j: np.ndarray) -> bool:
        """Seed 000 §4.5 in closed form: the nearest q̈_j whose stance feet can all stick.

        The kept tangent rows (``_sel``) are held by their forces whatever q̈_j is, so
        consistency is decided by the rows Find-Indices dropped alone: a dropped row is
        r = A r_kept in the base directions (A from the Gram factor ``_Lk``), and its
        slip t·J v⁺ = c_d − A c_k does not depend on the contact forces — it is purely
        kinematic (legs splaying, a kinematic layer that damps foot velocity at the
        acceleration level while the contact asks for J v⁺ = 0 in one period). It is
        affine in q̈_j; the minimum-norm correction ‖δq̈_j‖ (eq. 46's objective) that
        zeroes it is a least-squares solve of (#dropped × n_a) — no QP, no re-solve of
        the LCP. Normal rows are left to the LCP (separation is allowed).

        Changes ``qdd_j`` in place and re-reduces; returns True when it changed it.
        """
        m, M = self.model, self.terms.M
        nb = m.n_base
        sel = self._sel
        dropped = np.ones(2 * n, dtype=bool)
        dropped[sel] = False
        if not dropped.any():
            return False
        c_t = self._c[:n, :2].reshape(2 * n)
        J_t = self._Jc[:n, :2].reshape(2 * n, m.nv)
        if sel.size:
            T_rows = self._Bt[:n, :2].reshape(2 * n, nb)
            # A = T_d T_kᵀ (T_k T_kᵀ)⁻¹: dropped rows in terms of the kept ones
            A = cholesky_solve(self._Lk, T_rows[sel] @ T_rows[dropped].T).T
            resid = c_t[dropped] - A @ c_t[sel]
            G_full = J_t[dropped] - A @ J_t[sel]
        else:
            resid = c_t[dropped].copy()
            G_full = J_t[dropped].copy()
        scale = max(1.0, float(np.abs(self._c[:n]).max()))
        if float(np.abs(resid).max()) <= self.options["consistency_tol"] * scale:
            return False
        G = G_full[:, nb:]
        if nb:  # q̈_j also moves the free-floating base acceleration q̈₀,b = −M_bb⁻¹(M_bj q̈_j + h_b)
            G = G - G_full[:, :nb] @ cholesky_solve(self._L_base, M[:nb, nb:])
        delta = np.linalg.lstsq(G, -resid, rcond=1e-10)[0]
        qdd_j += delta
        self._reduce(qdd_j)
        return True

    def _finish(self, f_world: np.ndarray, qdd_j: np.ndarray) -> None:
        """q̈ from the base rows with forces ``f_world`` (n, 3), τ from the joint rows."""
        m, M, h = self.model, self.terms.M, self.terms.h
        nb = m.n_base
        self.qdd[nb:] = qdd_j
        f = f_world.reshape(-1)
        if nb:
            rhs = -(M[:nb, nb:] @ qdd_j + h[:nb])
            if f.size:
                rhs += self.stacked_jacobian()[:, :nb].T @ f
            self.qdd[:nb] = cholesky_solve(self._L_base, rhs)
        if f.size:
            self.set_forces(f)
        self.torque_from_dynamics(self.qdd, f)

    def _no_contact(self) -> tuple[str, int, float]:
        """No active contact: the base flies freely, τ realizes q̈_des,j."""
        self._qdd_j[:] = self.qdd_des[self.model.n_base:]
        self._reduce(self._qdd_j)
        self._finish(self._f_world[:0], self._qdd_j)
        return SOLVED, 0, 0.0

    def _fallback(self) -> None:
        """Last-resort output when no contact solution exists: zero forces, q̈_j = 0.

        Fixed base: τ = h, gravity (and Coriolis) compensation. Floating base: the base
        is in free flight, where gravity cancels, so τ only cancels velocity-dependent
        and base-coupling terms. Finite, independent of q̈_des, dynamics exact.
        """
        self._qdd_j[:] = 0.0
        self._reduce(self._qdd_j)
        self._finish(self._f_world[:0], self._qdd_j)


class LcpNoSlip(VelocityLevelContact):
    """ID(t_i)LCP,∞ of seed 000 §4 (see the module docstring for the algorithm)."""

    name = "lcp_noslip"
    defaults = {
        # PPM starts from the previous non-basic set (§4.6); False: cold start every tick
        "warm_start": True,
        # among equivalent normal forces (indeterminate stance) return the least-norm
        # ones — every touching foot loaded — instead of the pivoting basis' vertex
        "spread_forces": True,
        # tangential forces among the loaded feet with the same motion: "torque" minimum
        # torques, "load" in proportion to the normal force, False the rows Find-Indices kept
        "spread_friction": "torque",
        # add Δt·J̇v to the contact velocity (seed 000 keeps J constant over Δt)
        "drift": False,
        # the contacts' velocity after the step (see _target_velocity): "desired" the
        # desired motion's, "rest" zero as in seed 000 §4 (Baumgarte −φ/Δt on the normal)
        "contact_target": "desired",
        # Find-Indices: a tangent row within √rank_tol (10 %) of the kept rows' span is dependent
        "rank_tol": 1e-2,
        # PPM: relative tolerance on w ≥ 0, z ≥ 0
        "lcp_tol": 1e-9,
        # tangent rows may miss by this × max(1, |c|) [m/s²] (100× after the consistency QP)
        "consistency_tol": 1e-7,
        # consistency QP: weight of ‖f/(m g)‖² next to ‖q̈_j − q̈_des,j‖²
        "force_regularization": 1e-6,
        # consistency QP: weight ρ of the elastic slacks of the contact rows
        "slack_weight": 1e6,
        # consistency QP: multiplier updates that drive the slacks to zero
        "slack_refinements": 4,
        # backend of the consistency QP (eq. 46–51), see idyn_control.qp
        "solver": "proxqp",
    }

    def __init__(self, model, *, dt=1e-3, **options):
        super().__init__(model, dt=dt, **options)
        k, nv, nb = self.contacts.size, model.nv, model.n_base
        self._ppm = PrincipalPivoting(max(k, 1), tol=self.options["lcp_tol"])
        self._ppm_spread = PrincipalPivoting(max(k, 1), tol=self.options["lcp_tol"])
        self._lemke = Lemke(max(k, 1))
        self._nonbasic = np.zeros(k, dtype=bool)  # per configured contact, carried over ticks
        self._H = np.zeros((k, nb))
        self._f_loc = np.zeros((k, 3))
        # consistency QP: (q̈, f, tangent slacks, normal slacks); base + no-slip rows; normal rows
        self._qp = QpSolver(nv + 6 * k, nb + 2 * k, 2 * k, solver=self.options["solver"])
        # the consistency QP's force unit: the robot's weight [N]
        self._force_scale = max(1.0, 9.81 * sum(inertia.mass for inertia in model.pin_model.inertias))
        #: True when the last tick's q̈_des was inconsistent and the QP replaced q̈_j
        self.adjusted = False
        #: the last LCP result (normal forces z, basis = contacts loaded)
        self.lcp_result: LcpResult | None = None
        #: indices (into the 2n tangent rows of the active contacts) kept by Find-Indices
        self.tangent_rows = np.zeros(0, dtype=int)
        self._qp_outcome = None
        self._qp_iterations = 0
        self._after_qp = False  # the QP's q̈_j holds the rows only to its accuracy

    def reset(self):
        self._nonbasic[:] = False
        self._qp.reset()

    @property
    def nonbasic(self) -> np.ndarray:
        """Configured contacts in the LCP's non-basic set (normal force computed) last tick."""
        return self._nonbasic.copy()

    # ------------------------------------------------------------------ per tick
    def _compute(self):
        self.adjusted = False
        self._after_qp = False
        if self.contacts.n_active == 0:
            return self._no_contact()
        nb = self.model.n_base
        self._qdd_j[:] = self.qdd_des[nb:]
        n = self._reduce(self._qdd_j)
        self._find_indices(n)
        self.tangent_rows = self._sel
        self.adjusted = self._make_consistent(n, self._qdd_j)
        consistent, iters, solve_time = self._solve_contacts(n)
        if consistent:
            return SOLVED, iters, solve_time
        # the LCP has no solution (e.g. a fixed base pushed into a surface: no force can
        # stop it) or a near-dependent row still slips: the QP of eq. 46–51 (rare)
        t0 = time.perf_counter()
        qdd_j = self._consistency_qp(n)
        solve_time += time.perf_counter() - t0
        iters += self._qp_iterations
        if qdd_j is not None:
            self._qdd_j[:] = qdd_j
            self.adjusted = self._after_qp = True
            self._reduce(self._qdd_j)
            consistent, it, dt_s = self._solve_contacts(n)
            iters += it
            solve_time += dt_s
            if consistent:
                return SOLVED, iters, solve_time
        self._fallback()
        return FAILED, iters, solve_time

    def _solve_contacts(self, n: int) -> tuple[bool, int, float]:
        """Find-Indices + LCP for the current reduction; writes q̈, τ, forces when consistent."""
        nb, cs = self.model.n_base, self.contacts
        c = self._c[:n]
        c_t = c[:, :2].reshape(-1)
        c_n = c[:, 2]
        scale = max(1.0, float(np.abs(c).max()))
        if nb:
            Bt = self._Bt[:n]
            T_rows = Bt[:, :2].reshape(2 * n, nb)
            N_rows = Bt[:, 2]
            sel, Lk = self._sel, self._Lk
            H = self._H[:n]
            if sel.size:
                W = triangular_solve(Lk, T_rows[sel])  # orthonormal rows
                y = triangular_solve(Lk, c_t[sel])
                NW = N_rows @ W.T
                np.subtract(N_rows, NW @ W, out=H)
                q = c_n - NW @ y                                   # eq. 45: r = φ/Δt + CᵀA⁻¹g
                x0 = -(W.T @ y)
            else:
                H[:] = N_rows
                q = c_n.copy()
                x0 = np.zeros(nb)
        else:
            sel = self._sel
            H = self._H[:n]
            q = c_n.copy()
        # ---- LCP (eq. 44–45), warm-started PPM (Alg. 2) with Lemke as the fallback
        t0 = time.perf_counter()
        warm = self._nonbasic[cs.order] if self.options["warm_start"] else None
        # after the consistency QP, q is only as accurate as the QP (see below)
        lcp_tol = scale * (self.options["consistency_tol"] * 100.0 if self._after_qp
                           else self.options["lcp_tol"])
        res = self._ppm.solve(q, H=H, warm=warm, tol=lcp_tol)
        iters = res.iterations
        if not res.ok:
            res = self._lemke.solve(H @ H.T, q)
            iters += res.iterations
        solve_time = time.perf_counter() - t0
        self.lcp_result = res
        if not res.ok:
            return False, iters, solve_time
        z = res.z
        if nb and self.options["spread_forces"]:
            z = self._spread(H, res, lcp_tol)
        f_loc = self._f_loc[:n]
        f_loc[:] = 0.0
        f_loc[:, 2] = z
        if nb:
            x = x0 + H.T @ z
            if sel.size:
                f_sel = -triangular_solve(Lk, y + W @ (N_rows.T @ z), transpose=True)
                f_loc[sel // 2, sel % 2] = f_sel  # tangent row 2i+j is contact i, direction j
                if self.options["spread_friction"]:
                    self._spread_tangential(T_rows, W, f_loc, x)
            # every tangent row, kept or dropped, must hold (App. E); else q̈_des is inconsistent.
            # A dropped row is only known to lie within √rank_tol·‖row‖ of the kept rows'
            # span, so it may slip by that times the base response ‖x‖.
            slip = np.abs(c_t + T_rows @ x)
            row_norms = np.sqrt(np.einsum("ij,ij->i", T_rows, T_rows))
            slip -= np.sqrt(self.options["rank_tol"]) * row_norms * np.linalg.norm(x)
        else:
            slip = np.abs(c_t)
        # after the consistency QP the rows hold only to the QP's accuracy: allow 100×
        tol = self.options["consistency_tol"] * (100.0 if self._after_qp else 1.0) * scale
        if float(slip.max(initial=0.0)) > tol:
            return False, iters, solve_time
        if nb:
            f_tol = 1e-9 * max(1.0, float(np.abs(f_loc).max()))
            pulling = (f_loc[:, 2] <= f_tol) & (np.abs(f_loc[:, :2]).max(axis=1) > f_tol)
            if pulling.any() and self._may_release:
                ok, it, dt_s = self._release(n, pulling)
                return ok, iters + it, solve_time + dt_s
        self._nonbasic[cs.order] = res.basis
        f_world = self._f_world[:n]
        np.einsum("nij,ni->nj", cs.basis[cs.order], f_loc, out=f_world)
        self._finish(f_world, self._qdd_j)
        return True, iters, solve_time

    def _release(self, n: int, released: np.ndarray) -> tuple[bool, int, float]:
        """Solve again without the ``released`` contacts; they must not penetrate.

        The no-slip rows of §4 hold whatever the normal force: a contact the LCP leaves
        with zero normal force may still be given tangential force when the loaded
        contacts cannot produce the wrench on their own — a foot that pulls sideways on
        the ground, which no friction can do (seen trotting at touchdown; the cone test
        then rejected the answer and Lemke's sliding one at μ = 1e3 predicted 60 N of
        friction against 25 N measured). Such contacts are released (their rows carry
        nothing; the rows of the others are unchanged) and the rest is solved again; the
        answer stands if they then do not penetrate (n·J v⁺ ≥ target). Otherwise they are
        needed and the answer with them is returned: §4's, for ``lcp_noslip``; for
        ``lcp_coulomb`` the cone test rejects it and Lemke's answer follows.
        """
        entry_Bt, entry_c = self._Bt[:n].copy(), self._c[:n].copy()  # deeper calls release more
        keep_Bt, keep_c = entry_Bt[released], entry_c[released]
        self._Bt[:n][released] = 0.0
        self._c[:n][released] = 0.0
        self._c[:n, 2][released] = 1.0   # w = 1 > 0: no force
        self._find_indices(n)
        ok, iters, solve_time = self._solve_contacts(n)
        if ok:
            # their normal rows after the step: c_n + N x, with x the base response
            nb = self.model.n_base
            x = self._L_base.T @ (self.qdd[:nb] - self._qdd0[:nb])   # Bt = J_b L⁻ᵀ
            scale = max(1.0, float(np.abs(keep_c[:, 2]).max()))
            ok = bool(np.all(keep_c[:, 2] + keep_Bt[:, 2] @ x >= -self.options["consistency_tol"] * scale))
        if not ok:  # they are needed: back to the answer with them (the cone test judges it)
            self._Bt[:n] = entry_Bt
            self._c[:n] = entry_c
            self._find_indices(n)
            self._may_release = False
            try:
                ok, it, dt_s = self._solve_contacts(n)
            finally:
                self._may_release = True
            iters += it
            solve_time += dt_s
        return ok, iters, solve_time

    def _spread_tangential(self, T_rows: np.ndarray, W: np.ndarray, f_loc: np.ndarray, x: np.ndarray) -> None:
        """Tangential forces shared among the loaded contacts, same motion (in place).

        Find-Indices keeps a maximal independent set of tangent rows and gives the others
        no force (seed 000 App. E): on a plane that is three rows (f_x, f_y and the yaw
        moment: horizontal forces at coplanar feet span no more), so the rows kept — the
        first contacts' — carry all the friction, even when their contact carries no normal
        force: a foot that pulls sideways (the project quadruped trotting: 10 N tangential
        at zero normal force, rejected by the cone test, after which Lemke's sliding answer
        at μ = 1e3 carried ±2·10⁴ N), or two diagonal feet of which one takes all the
        forward force. Tangential forces f_t with the same wrench along the kept rows
        (orthonormal ``W``, r × n_b) give the same motion to App. E's accuracy; the rest is
        internal force between the feet, which only the torques see. Among them, with
        none on feet without normal force (D = diag(f_N)):

        - ``spread_friction="load"``: min Σ_i ‖f_t,i‖² / f_N,i, friction in proportion to
          the normal load, f_t = D T Wᵀ (W Tᵀ D T Wᵀ)⁻¹ W Tᵀ f_t;
        - ``"torque"`` (default): min ‖τ‖² (+ 1e-6 of the above, a tie-break), the
          minimum-torque internal forces, as the QP's Stage II picks them (seed 000
          eq. 102–112). τ = (M q̈ + h)_j − J_N,jᵀ f_N − J_t,jᵀ f_t with q̈ (``x``: the base
          response, q̈_b = q̈₀_b + L⁻ᵀ x) and f_N fixed: an equality-constrained least
          squares, solved through its KKT system. On the 30 s waypoint task (quadruped,
          rigid μ∞) the robot fell at 1.2 s with "load", at 7.0 s with "torque"
          (torques saturating less after a foot lands late). Minimum torques sit on the
          friction cones' faces, so with finite μ (``_within_friction``) the answer is the
          blend of the two closest to minimum torque that the cones admit (both have the
          wrench, so every blend does): at μ 0.1 the sticking answer was taken in 0 % of
          the ticks of a 3 s trot with pure minimum torque, 41 % with the blend.

        Kept as found when the loaded contacts cannot produce that wrench (the r × r
        matrix W Tᵀ D T Wᵀ is near-singular).
        """
        n = f_loc.shape[0]
        d = np.repeat(np.maximum(f_loc[:, 2], 0.0), 2)
        if n < 2 or not d.any():
            return
        f_t = f_loc[:, :2].reshape(2 * n)
        TW = T_rows @ W.T                  # (2n, r): the rows in the kept directions
        DTW = TW * d[:, None]
        L = cholesky_lower(TW.T @ DTW)     # (r, r), SPD when the loaded feet span the rows
        if L is None:
            return
        pivots = np.abs(np.diag(L))
        if float(pivots.min()) <= 1e-6 * float(pivots.max()):
            return
        wrench = TW.T @ f_t
        if self.options["spread_friction"] != "torque":
            f_loc[:, :2] = (DTW @ cholesky_solve(L, wrench)).reshape(n, 2)
            return
        nb = self.model.n_base
        loaded = np.flatnonzero(d > 0.0)
        m, r = loaded.size, TW.shape[1]
        qdd = self.qdd
        qdd[nb:] = self._qdd_j
        qdd[:nb] = self._qdd0[:nb] + triangular_solve(self._L_base, x, transpose=True)
        Jc = self._Jc[:n]
        tau_rest = self.terms.M[nb:] @ qdd + self.terms.h[nb:] - Jc[:, 2, nb:].T @ f_loc[:, 2]
        Jt = Jc[:, :2, nb:].reshape(2 * n, -1)[loaded]        # (m, n_a): τ = tau_rest − Jtᵀ f_t
        K = np.zeros((m + r, m + r))
        np.matmul(Jt, Jt.T, out=K[:m, :m])
        tie = 1e-6 * max(1.0, float(np.trace(K[:m, :m])) / m) * float(d[loaded].mean())
        K[np.arange(m), np.arange(m)] += tie / d[loaded]
        K[m:, :m] = TW[loaded].T
        K[:m, m:] = TW[loaded]
        sol = np.linalg.solve(K, np.concatenate((Jt @ tau_rest, wrench)))
        by_load = (DTW @ cholesky_solve(L, wrench)).reshape(n, 2)
        by_torque = np.zeros((n, 2))
        by_torque.reshape(-1)[loaded] = sol[:m]
        # both have the wrench, so does every blend: the most torque-minimal one inside the
        # friction cones (the load-proportional split is the likeliest to fit)
        if not self._within_friction(by_load, f_loc[:, 2]) or self._within_friction(by_torque, f_loc[:, 2]):
            f_loc[:, :2] = by_torque
            return
        lo, hi = 0.0, 1.0
        for _ in range(12):
            mid = 0.5 * (lo + hi)
            if self._within_friction(by_load + mid * (by_torque - by_load), f_loc[:, 2]):
                lo = mid
            else:
                hi = mid
        f_loc[:, :2] = by_load + lo * (by_torque - by_load)

    def _within_friction(self, f_t: np.ndarray, f_n: np.ndarray) -> bool:
        """Whether tangential forces ``f_t`` (n, 2) fit the friction model at normal forces
        ``f_n``: always, for no-slip contact (μ = ∞)."""
        return True

    def _spread(self, H: np.ndarray, res: LcpResult, tol: float) -> np.ndarray:
        """The least-norm normal forces among those equivalent to the LCP's ``res.z``.

        Standing on four feet the LCP is indeterminate (seed 000 §2.3.3, §4.6, Fig. 5):
        M = H Hᵀ has rank 3, and a pivoting method returns a vertex of the solution set,
        which loads three feet, or two, and leaves the others at exactly zero force. The
        motion w is the same for every solution, so any z ≥ 0 that is zero where w > 0
        and has the same base response Hᵀz is one (a "preferred distribution", §2.3.3).
        With S the contacts at w = 0, U = [U_r N] the left singular vectors of H_S and
        z₀ = U_r U_rᵀ z_S (the least-norm particular solution), the least-norm one,

            min ½‖z_S‖²  s.t.  H_Sᵀ z_S = H_Sᵀ res.z_S,  z_S ≥ 0,

        is z₀ + N u with min ½‖u‖² s.t. N u ≥ −z₀, whose dual is the PSD LCP
        (q = z₀, M = N Nᵀ): its w *is* the answer. Unique, so forces vary continuously
        from tick to tick, and every foot that can carry load does (a contact estimator
        that thresholds the measured force keeps seeing it). The warm start of §4.6
        still picks the basis; it no longer decides the distribution.
        """
        z, w = res.z, res.w
        support = np.flatnonzero(w <= tol)
        if support.size < 2:
            return z
        U, sv, _ = np.linalg.svd(H[support], full_matrices=True)
        rank = int(np.count_nonzero(sv > 1e-9 * max(float(sv[0]), 1e-300))) if sv.size else 0
        if rank >= support.size:
            return z  # unique
        Ur, N = U[:, :rank], U[:, rank:]
        z0 = Ur @ (Ur.T @ z[support])
        dual = self._ppm_spread.solve(z0, H=N)
        if not dual.ok:
            return z
        out = np.zeros_like(z)
        out[support] = np.maximum(dual.w, 0.0)
        return out

    def _consistency_qp(self, n: int) -> np.ndarray | None:
        """Seed 000 §4.5, eq. 46–51: the consistent joint accelerations nearest q̈_des,j.

        Variables x = (q̈, f, s_t, s_n): f in the contact bases, one slot per configured
        contact (active contacts first), no force on the tangent rows Find-Indices
        dropped (as in the LCP, App. E); minimize

            ‖q̈_j − q̈_des,j‖² + ε‖f/(m g)‖² + ρ(‖s_t‖² + ‖s_n‖²)

        subject to the base rows of the dynamics, no slip t·(J q̈ + c) + s_t = 0,
        non-penetration with Baumgarte n·(J q̈ + c) + s_n ≥ 0, and n·f ≥ 0; unused slots
        carry zero force. The slacks (elastic mode) keep the QP feasible — and its
        equality rows independent — also when the no-slip rows over-constrain a body
        (several points per foot), where the paper's "always feasible" argument fails;
        a slack left non-zero then shows up in the consistency check after the LCP.
        For the solver the unknowns are divided by a per-tick scale (v/Δt terms make
        them O(10³)) and every row has unit norm.

        Returns q̈_j [rad/s²], or None when the QP is not solved.
        """
        m, cs, M, h = self.model, self.contacts, self.terms.M, self.terms.h
        nv, nb, k = m.nv, m.n_base, cs.size
        qp = self._qp
        Jc = self._Jc[:n]
        # velocity-level terms without the prescribed q̈: R (J v/Δt [+ J̇v]) − target/Δt
        c_free = Jc @ (self.terms.v / self.dt)
        if self.options["drift"]:
            c_free += np.einsum("nij,nj->ni", cs.basis[cs.order], cs.drift[cs.order])
        c_free -= self._target_velocity(n) / self.dt
        qdd_des_j = self.qdd_des[nb:]
        s_f = self._force_scale
        s_a = max(1.0, float(np.abs(c_free).max()), float(np.abs(qdd_des_j).max(initial=0.0)),
                  float(np.abs(h[:nb]).max(initial=0.0)) / s_f)
        f0, st0, sn0 = nv, nv + 3 * k, nv + 5 * k  # first force, tangent slack, normal slack
        # unknowns: q̈ / s_a, f / (s_f s_a), slacks / s_a; objective and rows divided accordingly
        qp.H[:] = 0.0
        np.fill_diagonal(qp.H[nb:nv, nb:nv], 1.0)
        np.fill_diagonal(qp.H[f0:st0, f0:st0], self.options["force_regularization"])
        np.fill_diagonal(qp.H[st0:, st0:], self.options["slack_weight"])
        qp.g[:] = 0.0
        qp.g[nb:nv] = -qdd_des_j / s_a
        qp.A[:] = 0.0
        qp.b[:] = 0.0
        qp.C[:] = 0.0
        qp.l[:] = -INF
        qp.u[:] = INF
        if nb:
            qp.A[:nb, :nv] = M[:nb] / s_f
            qp.A[:nb, f0:f0 + 3 * n] = -Jc[:, :, :nb].reshape(3 * n, nb).T
            qp.b[:nb] = -h[:nb] / (s_f * s_a)
            # tangent rows Find-Indices dropped carry no force (App. E), here as in the LCP:
            # their force leaves the base rows (and ε‖f‖² then holds it at zero)
            dropped = np.ones(2 * n, dtype=bool)
            dropped[self.tangent_rows] = False
            slots = np.flatnonzero(dropped)
            qp.A[:nb, f0 + 3 * (slots // 2) + slots % 2] = 0.0
        for s in range(k):
            rows = slice(nb + 2 * s, nb + 2 * s + 2)
            if s < n:
                qp.A[rows, :nv] = Jc[s, :2]
                qp.A[rows, st0 + 2 * s:st0 + 2 * s + 2] = np.eye(2)
                qp.b[rows] = -c_free[s, :2] / s_a
                qp.C[2 * s, :nv] = Jc[s, 2]
                qp.C[2 * s, sn0 + s] = 1.0
                qp.l[2 * s] = -c_free[s, 2] / s_a
                qp.C[2 * s + 1, f0 + 3 * s + 2] = 1.0
                qp.l[2 * s + 1] = 0.0
            else:
                qp.A[rows, f0 + 3 * s:f0 + 3 * s + 2] = np.eye(2)
                qp.C[2 * s + 1, f0 + 3 * s + 2] = 1.0
                qp.l[2 * s + 1] = 0.0
                qp.u[2 * s + 1] = 0.0
        norms = np.linalg.norm(qp.A, axis=1)
        norms[norms < 1e-12] = 1.0
        qp.A /= norms[:, None]
        qp.b /= norms
        norms = np.linalg.norm(qp.C[::2], axis=1)
        norms[norms < 1e-12] = 1.0
        qp.C[::2] /= norms[:, None]
        qp.l[::2] /= norms
        outcome = qp.solve()
        iterations = outcome.iterations
        # method of multipliers on the slacks: shift their linear cost by ρ·s and re-solve
        # (warm-started) until they vanish, which they do when the rows are consistent
        rho = self.options["slack_weight"]
        for _ in range(self.options["slack_refinements"]):
            if not outcome.ok or float(np.abs(outcome.x[st0:]).max(initial=0.0)) <= qp.eps_abs:
                break
            qp.g[st0:] += rho * outcome.x[st0:]
            outcome = qp.solve()
            iterations += outcome.iterations
        self._qp_outcome = outcome
        self._qp_iterations = iterations
        return outcome.x[nb:nv] * s_a if outcome.ok else None
