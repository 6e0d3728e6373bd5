// The QP side of the compiled tick: persistent, warm-started ProxQP problems and the
// formulations that run entirely here (wbc_qp, qp_coulomb / qp_noslip, and at the end of
// the file pidc_qp with its baselines pidc_qp_howsm and pidcwcu).
//
// Each function is a line-by-line port of the Python formulation of the same name
// (idyn_control/formulations/wbc_qp.py, qp_contact.py, pidc_qp.py): same QPs, same settings, same
// fallbacks. The Python code is the reference; test/test_native.py checks agreement.
// Buffers are sized at creation; a tick allocates nothing.

#include <proxsuite/proxqp/dense/dense.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <array>
#include <optional>
#include <vector>

#include "api.h"
#include "native.hpp"

namespace idyn {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;
namespace pq = proxsuite::proxqp;

constexpr double INF = 1e20;
// ProxQP's infeasibility certificate tolerances (idyn_control.qp): its default, and the
// strict one of wbc_qp
constexpr double PROXQP_INFEASIBILITY_TOLERANCE = 1e-4;
constexpr double STRICT_INFEASIBILITY_TOLERANCE = 1e-9;
// held points of one body whose pairwise cross products stay below this [m²] lie on a line
// (contacts.py COLLINEAR_M2)
constexpr double COLLINEAR_M2 = 1e-8;
constexpr double ELASTIC_WEIGHT = 1e4;  // as qp.ELASTIC_WEIGHT
constexpr int GUESS_STEPS = 4;                 // as qp.GUESS_STEPS
constexpr double GUESS_REGULARIZATION = 1e-12;  // as qp.GUESS_REGULARIZATION
constexpr double INCONSISTENT_ROWS = 100.0;  // as wbc_qp.INCONSISTENT_ROWS
constexpr double CONTACT_RANK_TOLERANCE = 1e-3;  // as wbc_qp.CONTACT_RANK_TOLERANCE
constexpr double BASE_ROWS_TOL = 1e-7;       // as wbc_qp.BASE_ROWS_TOL
constexpr int RESCUE_MAX_ITER = 1000;        // as qp_contact.RESCUE_MAX_ITER
constexpr int PYRAMID_ROWS = 5;
constexpr double STAGE2_TIKHONOV = 1e-9;  // as qp_contact.STAGE2_TIKHONOV
constexpr double STAGE1_TIKHONOV = 1e-7;  // as qp_contact.STAGE1_TIKHONOV
constexpr double STAGE1_TIKHONOV_RETRY = 1e-5;  // as qp_contact.STAGE1_TIKHONOV_RETRY
constexpr double STANCE_DAMPING = 1e-9;   // as qp_contact.STANCE_DAMPING
constexpr double EMPTY_SET_SLACK = 1e-6;  // as qp_contact.EMPTY_SET_SLACK
constexpr double NULL_TOL = 1e-8;         // as qp_contact.NULL_TOL
constexpr double FLAT_ROW = 1e-12;        // as qp_contact.FLAT_ROW
// values of qp_contact's ``dissipation`` option, in qp_contact.DISSIPATION's order
enum Dissipation { DISSIPATE_CONTACTS = 0, DISSIPATE_DESIRED = 1, DISSIPATE_BASE_MOMENTUM = 2 };

enum Status : int { SOLVED = 0, MAX_ITER = 1, INFEASIBLE = 2, FAILED = 3 };

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// idyn_control.qp.QpSolver with solver="proxqp": init once, then update (preconditioner
// kept) and warm start from the previous result; a cold retry when a warm solve fails;
// never warm-starts from NaN. With `guess`, the working set of the last solution first
// (QpSolver._solve_guess: the equality-constrained QP, its KKT conditions checked).
struct Qp {
  int n, n_eq, n_in;
  MatrixXd H, A, C;
  VectorXd g, b, l, u, x, y, z;
  bool warm_start, initialized = false;
  double eps_abs;
  int max_iter;
  double infeasibility_tolerance;
  std::optional<pq::dense::QP<double>> holder;  // none for an empty problem (n = 0)
  pq::dense::QP<double>* qp_ = nullptr;
  int iterations = 0;
  double solve_time = 0.0;
  bool stale_z = false;  // a row's bounds moved since the last solve (set_row_bounds)
  // the working-set guess: per inequality row the bound the last solution held (+1 upper,
  // −1 lower, 0 none); workspace sized for every row at once
  bool guess, guessed = false;
  std::vector<signed char> working, work;
  std::vector<std::uint8_t> fixed;
  std::vector<int> rows;
  MatrixXd gL, gE, gV, gS;
  VectorXd ge, gw, gx, gs, gr, glam, gCx;

  Qp(int n_, int n_eq_, int n_in_, bool warm, double eps_abs_, int max_iter_,
     double infeasibility_tolerance_ = PROXQP_INFEASIBILITY_TOLERANCE, bool guess_ = false)
      : n(n_), n_eq(n_eq_), n_in(n_in_), H(MatrixXd::Zero(n_, n_)), A(MatrixXd::Zero(n_eq_, n_)),
        C(MatrixXd::Zero(n_in_, n_)), g(VectorXd::Zero(n_)), b(VectorXd::Zero(n_eq_)),
        l(VectorXd::Constant(n_in_, -INF)), u(VectorXd::Constant(n_in_, INF)), x(VectorXd::Zero(n_)),
        y(VectorXd::Zero(n_eq_)), z(VectorXd::Zero(n_in_)), warm_start(warm), eps_abs(eps_abs_), max_iter(max_iter_),
        infeasibility_tolerance(infeasibility_tolerance_), guess(guess_ && warm), working(n_in_, 0) {
    if (guess) {
      const int m = n_eq + n_in;
      work.assign(n_in, 0);
      fixed.assign(n_in, 0);
      rows.reserve(m);
      gL.resize(n, n);
      gE.resize(m, n);
      gV.resize(n, m);
      gS.resize(m, m);
      ge.resize(m);
      gw.resize(n);
      gx.resize(n);
      gs.resize(m);
      gr.resize(m);
      glam.resize(m);
      gCx.resize(n_in);
    }
    make();
  }

  // QpSolver.reset: the next solve starts cold, without a working set
  void forget() {
    initialized = false;
    std::fill(working.begin(), working.end(), 0);
    guessed = false;
  }

  // A fresh ProxQP object: at construction, and for a cold retry (init on a used object
  // keeps its adapted proximal parameters and last result, which mislead the retry).
  void make() {
    if (n == 0) return;
    holder.emplace(n, n_eq, n_in, false, pq::HessianType::Dense, pq::DenseBackend::PrimalDualLDLT);
    qp_ = &*holder;
    auto& s = qp_->settings;
    s.eps_abs = eps_abs;
    s.eps_rel = 1e-10;
    s.max_iter = max_iter;
    s.max_iter_in = 20;
    s.verbose = false;
    s.initial_guess = warm_start ? pq::InitialGuessStatus::WARM_START_WITH_PREVIOUS_RESULT
                                 : pq::InitialGuessStatus::NO_INITIAL_GUESS;
    initialized = false;
  }

  // QpSolver.set_row_bounds: a row whose bounds move loses its multiplier from the warm
  // start (ProxQP stops on residuals, not complementarity)
  void set_row_bounds(int row, double lower, double upper) {
    if (l[row] != lower || u[row] != upper) {
      l[row] = lower;
      u[row] = upper;
      z[row] = 0.0;
      stale_z = true;
    }
  }

  int attempt(const VectorXd* x0) {
    using proxsuite::nullopt;
    auto& qp = *qp_;
    // the previous result, minus the multipliers set_row_bounds dropped, or the guess's
    // (ProxQP's own is older)
    if (!x0 && (stale_z || guessed) && warm_start && initialized) x0 = &x;
    stale_z = false;
    qp.settings.eps_primal_inf = infeasibility_tolerance;  // may change between solves
    qp.settings.eps_dual_inf = infeasibility_tolerance;
    if (!initialized) {
      if (n_eq)
        qp.init(H, g, A, b, C, l, u);
      else
        qp.init(H, g, nullopt, nullopt, C, l, u);
      initialized = true;
    } else if (n_eq) {
      qp.update(H, g, A, b, C, l, u, false);
    } else {
      qp.update(H, g, nullopt, nullopt, C, l, u, false);
    }
    if (x0 && warm_start) {
      qp.settings.initial_guess = pq::InitialGuessStatus::WARM_START;
      qp.solve(*x0, y, z);
      qp.settings.initial_guess = pq::InitialGuessStatus::WARM_START_WITH_PREVIOUS_RESULT;
    } else {
      qp.solve();
    }
    const auto& r = qp.results;
    iterations += static_cast<int>(r.info.iter);
    if (!(r.x.allFinite() && r.y.allFinite() && r.z.allFinite())) {
      initialized = false;
      return FAILED;
    }
    x = r.x;
    y = r.y;
    z = r.z;
    switch (r.info.status) {
      case pq::QPSolverOutput::PROXQP_SOLVED: return SOLVED;
      case pq::QPSolverOutput::PROXQP_MAX_ITER_REACHED: return MAX_ITER;
      case pq::QPSolverOutput::PROXQP_PRIMAL_INFEASIBLE:
      case pq::QPSolverOutput::PROXQP_DUAL_INFEASIBLE:
      case pq::QPSolverOutput::PROXQP_SOLVED_CLOSEST_PRIMAL_FEASIBLE: return INFEASIBLE;
      default: return FAILED;
    }
  }

  // QpSolver._solve_guess: the active-set steps it took (> 0) when its answer is the
  // optimum (in x, y, z), else minus the steps spent. In place: nothing allocates.
  int solve_guess() {
    using Eigen::Lower;
    const double tol = eps_abs;
    gL = H;
    Eigen::LLT<Eigen::Ref<MatrixXd>> hl(gL);
    if (hl.info() != Eigen::Success) return 0;
    gw = g;
    gL.triangularView<Lower>().solveInPlace(gw);  // L⁻¹ g
    for (int i = 0; i < n_in; ++i) {
      fixed[i] = l[i] == u[i] && std::abs(l[i]) < INF;
      // a row held at a bound that went to infinity since (a lifted foot's freed rows,
      // torque limits dropped) is free: held there it would only give NaN
      const bool gone = (working[i] > 0 && u[i] >= INF) || (working[i] < 0 && l[i] <= -INF);
      work[i] = fixed[i] || gone ? 0 : working[i];
    }
    for (int step = 1; step <= GUESS_STEPS; ++step) {
      rows.clear();
      for (int i = 0; i < n_in; ++i)
        if (fixed[i] || work[i]) rows.push_back(i);
      const int m = n_eq + static_cast<int>(rows.size());
      auto E = gE.topRows(m);
      auto e = ge.head(m);
      E.topRows(n_eq) = A;
      e.head(n_eq) = b;
      for (int j = 0; j < static_cast<int>(rows.size()); ++j) {
        const int i = rows[j];
        E.row(n_eq + j) = C.row(i);
        e[n_eq + j] = work[i] < 0 ? l[i] : u[i];
      }
      auto V = gV.leftCols(m);
      V = E.transpose();
      gL.triangularView<Lower>().solveInPlace(V);  // L⁻¹ Eᵀ
      auto S = gS.topLeftCorner(m, m);
      S.noalias() = V.transpose() * V;  // E H⁻¹ Eᵀ, scaled to a unit diagonal
      auto sc = gs.head(m);
      for (int k = 0; k < m; ++k) sc[k] = S(k, k) > 0.0 ? 1.0 / std::sqrt(S(k, k)) : 1.0;
      S.array().colwise() *= sc.array();
      S.array().rowwise() *= sc.transpose().array();
      S.diagonal().array() += GUESS_REGULARIZATION;
      Eigen::Ref<MatrixXd> S_ref(S);
      Eigen::LLT<Eigen::Ref<MatrixXd>> sl(S_ref);
      if (sl.info() != Eigen::Success) return -step;
      auto lam = glam.head(m);
      auto r = gr.head(m);
      r = e;
      r.noalias() += V.transpose() * gw;
      r.array() *= sc.array();
      sl.solveInPlace(r);
      lam = -(sc.array() * r.array()).matrix();
      for (int pass = 0; pass < 2; ++pass) {
        gx = gw;
        gx.noalias() += V * lam;
        gL.transpose().triangularView<Eigen::Upper>().solveInPlace(gx);
        gx = -gx;
        if (pass) break;
        // one step of iterative refinement takes out what the Tikhonov term left on E x = e
        r = -e;
        r.noalias() += E * gx;
        r.array() *= sc.array();
        sl.solveInPlace(r);
        lam.array() += sc.array() * r.array();
      }
      r = -e;
      r.noalias() += E * gx;
      const bool consistent = m == 0 || r.cwiseAbs().maxCoeff() <= tol;
      gCx.noalias() = C * gx;
      bool ok = consistent;
      // primal-dual active-set step: hold the free rows crossed (at the bound they cross) ...
      for (int i = 0; i < n_in; ++i) {
        if (fixed[i] || work[i]) continue;
        if (gCx[i] > u[i] + tol) ok = false, work[i] = 1;
        else if (gCx[i] < l[i] - tol) ok = false, work[i] = -1;
      }
      // ... and release the held row that pulls hardest (an upper bound's z < 0, a lower
      // one's > 0), one at a time: a contact at zero force holds its five pyramid rows,
      // dependent, and their least-norm multipliers need not all have the certifying sign
      int release = -1;
      double hardest = -tol;
      for (int j = 0; j < static_cast<int>(rows.size()); ++j) {
        const int i = rows[j];
        if (fixed[i]) continue;
        const double pull = work[i] * lam[n_eq + j];
        if (pull < hardest) hardest = pull, release = i;
      }
      if (release >= 0) ok = false, work[release] = 0;
      if (ok) {
        x = gx;
        y = lam.head(n_eq);
        z.setZero();
        for (int j = 0; j < static_cast<int>(rows.size()); ++j) z[rows[j]] = lam[n_eq + j];
        std::copy(work.begin(), work.end(), working.begin());
        return step;
      }
    }
    return -GUESS_STEPS;
  }

  // QpSolver._hold_working_set: after ProxQP the rows its answer holds at a bound (within
  // eps_abs, with a multiplier of that bound's sign); the sign alone is rounding noise on
  // rows far from their bounds
  void hold_working_set(int status) {
    guessed = false;
    std::fill(working.begin(), working.end(), 0);
    if (status != SOLVED) return;
    gCx.noalias() = C * x;
    for (int i = 0; i < n_in; ++i) {
      if (l[i] == u[i]) continue;
      if (z[i] > 0.0 && u[i] < INF && gCx[i] >= u[i] - eps_abs) working[i] = 1;
      else if (z[i] < 0.0 && l[i] > -INF && gCx[i] <= l[i] + eps_abs) working[i] = -1;
    }
  }

  // Solve with the current data; iterations and solve_time hold this call's effort.
  // guess_only (QpSolver.solve): no ProxQP after a guess that does not certify an optimum.
  int solve(const VectorXd* x0 = nullptr, bool guess_only = false) {
    const double t0 = now_s();
    iterations = 0;
    int guessed_steps = 0;
    if (n && guess) {
      guessed_steps = solve_guess();
      if (guessed_steps > 0 || guess_only) {
        if (guessed_steps > 0) guessed = true;
        iterations = std::abs(guessed_steps);
        solve_time = now_s() - t0;
        return guessed_steps > 0 ? SOLVED : FAILED;
      }
    }
    int status = n == 0 ? SOLVED : attempt(x0);
    if (status != SOLVED && warm_start && n > 0) {
      make();  // a warm start from a bad previous tick can mislead ProxQP: retry cold, fresh
      status = attempt(nullptr);
    }
    if (guess) hold_working_set(status);
    iterations -= guessed_steps;
    solve_time = now_s() - t0;
    return status;
  }
};

// ContactSet.fill_friction_rows: lo ≤ C f ≤ hi for the stacked forces of all contacts.
template <typename Block>
void fill_friction_rows(Block C, Eigen::Ref<VectorXd> lo, Eigen::Ref<VectorXd> hi, const double* rows,
                        const std::uint8_t* active, int k, bool unilateral_only) {
  C.setZero();
  for (int i = 0; i < k; ++i) {
    const int r = PYRAMID_ROWS * i, c = 3 * i;
    Eigen::Map<const Eigen::Matrix<double, PYRAMID_ROWS, 3, Eigen::RowMajor>> D(rows + 15 * i);
    if (active[i] && unilateral_only) {
      C.block(r + 4, c, 1, 3) = D.row(4);
      lo.segment(r, 5).setConstant(-INF);
      hi.segment(r, 5).setConstant(INF);
      hi[r + 4] = 0.0;
    } else if (active[i]) {
      C.block(r, c, 5, 3) = D;
      lo.segment(r, 5).setConstant(-INF);
      hi.segment(r, 5).setZero();
    } else {
      C.block(r, c, 3, 3).setIdentity();
      lo.segment(r, 3).setZero();
      hi.segment(r, 3).setZero();
      lo.segment(r + 3, 2).setConstant(-INF);
      hi.segment(r + 3, 2).setConstant(INF);
    }
  }
}

// ContactSet.max_normal_force (ContactTransitions: a making or breaking contact's ramp) as
// the upper side of each active contact's unilateral row, −n·f ≥ −bound, scaled by `scale`
// (1 / mass for forces per unit mass); with infinite friction (`tangential`) the
// tangential force of a ramping contact is bounded alike in the two free rows, |t·f| ≤
// bound. Forces are qp's variables from column `col`. (qp_contact._bound_normal_forces, wbc_qp.py)
void bound_contact_forces(Qp& qp, int col, const double* bound, const double* basis, const std::uint8_t* active,
                          int k, double scale, bool tangential) {
  for (int i = 0; i < k; ++i) {
    if (!active[i]) continue;
    const int r = PYRAMID_ROWS * i;
    const bool ramp = bound[i] < INF;
    qp.set_row_bounds(r + 4, ramp ? -bound[i] * scale : -INF, qp.u[r + 4]);
    if (!tangential) continue;
    for (int j = 0; j < 2; ++j) {  // rows r, r + 1 are free for μ = ∞
      if (ramp)
        qp.C.block(r + j, col + 3 * i, 1, 3) = Eigen::Map<const Eigen::RowVector3d>(basis + 9 * i + 3 * j);
      else
        qp.C.block(r + j, col + 3 * i, 1, 3).setZero();
      qp.set_row_bounds(r + j, ramp ? -bound[i] * scale : -INF, ramp ? bound[i] * scale : INF);
    }
  }
}

// ---------------------------------------------------------------------------- wbc_qp
struct Wbc {
  Engine* engine;
  Dims d;
  Qp qp;
  Qp elastic;  // the last resort: contact rows as penalties, base rows kept (wbc_qp.py)
  const double* friction_rows;  // ContactSet.friction_rows (k x 5 x 3)
  const double* max_normal_force;  // ContactSet.max_normal_force (k)
  const std::uint8_t* released;    // ContactSet.released (k)
  long version = -1;
  long torque_limits_dropped = 0;  // ticks solved without the torque limits
  long contacts_elastic = 0;       // ticks solved with elastic contact rows
  bool redundant_contacts = false;  // rank of the held contacts' rows < their number
  double eps_abs;
  MatrixXd Jt;
  VectorXd left;  // acceleration left at the contact points (3k)
  Eigen::ColPivHouseholderQR<MatrixXd> qr;
  VectorXd gen;                  // M q̈ + h − Jᵀ f
  Eigen::LLT<MatrixXd> base_llt;  // of the base block of M
  Eigen::Vector3d position, velocity, drift, a;
  // flat feet (ContactSet.held_rows): each contact's body; per body with several held
  // points (reference, second, angular rows, farthest); rows the held contacts fill
  std::vector<int> body;
  std::vector<std::array<int, 4>> bodies;
  std::vector<std::uint8_t> own_rows;  // held contacts that keep their 3 point rows
  int held_rows = 0;
  MatrixXd Jang;
  Eigen::Vector3d dang;

  Wbc(Engine* e, const double* rows, const double* bound, const std::uint8_t* released_, bool warm, double eps_abs)
      : engine(e), d(engine_dims(*e)),
        qp(d.nv + 3 * d.k, d.nb + 3 * d.k, PYRAMID_ROWS * d.k + d.na, warm, eps_abs, 100,
           STRICT_INFEASIBILITY_TOLERANCE, true),
        elastic(d.nv + 3 * d.k, d.nb, PYRAMID_ROWS * d.k + d.na, warm, eps_abs, 100, STRICT_INFEASIBILITY_TOLERANCE),
        friction_rows(rows), max_normal_force(bound), released(released_), eps_abs(eps_abs), Jt(3, d.nv), left(VectorXd::Zero(3 * d.k)), qr(3 * d.k, d.nv),
        gen(VectorXd::Zero(d.nv)), base_llt(d.nb), body(d.k), own_rows(d.k, 0), Jang(3, d.nv) {
    for (int i = 0; i < d.k; ++i) body[i] = engine_contact_body(*e, i);
    bodies.reserve(d.k);
    qr.setThreshold(CONTACT_RANK_TOLERANCE);  // pivots relative to the largest (wbc_qp.py)
  }

  // ContactSet.held_rows: one rigid-body constraint per body with several held points
  // (at a contact switch only; the vectors were reserved at construction)
  void plan_bodies(const std::uint8_t* active) {
    bodies.clear();
    held_rows = 0;
    for (int i = 0; i < d.k; ++i) {
      const bool held = active[i] && !released[i];
      own_rows[i] = held;
      held_rows += held ? 3 : 0;
    }
    for (int i = 0; i < d.k; ++i) {
      if (!own_rows[i]) continue;
      int second = -1, far = -1, members = 1;
      double far_sq = -1.0;
      const Eigen::Vector3d p0 = engine_contact_position(*engine, i);
      for (int j = i + 1; j < d.k; ++j) {
        if (!(active[j] && !released[j]) || body[j] != body[i]) continue;
        ++members;
        if (second < 0) second = j;
        const double sq = (engine_contact_position(*engine, j) - p0).squaredNorm();
        if (sq > far_sq) far_sq = sq, far = j;
      }
      if (members < 2) continue;
      const Eigen::Vector3d line = engine_contact_position(*engine, far) - p0;
      bool planar = false;
      for (int j = i + 1; j < d.k; ++j) {
        if (!(active[j] && !released[j]) || body[j] != body[i]) continue;
        own_rows[j] = 0;
        planar |= line.cross(engine_contact_position(*engine, j) - p0).norm() > COLLINEAR_M2;
      }
      const int n_angular = planar ? 3 : 2;
      held_rows -= 3 * (members - 1) - n_angular;
      bodies.push_back({i, second, n_angular, far});
    }
  }

  // WbcQp._body_rows: the body's angular rows in its second point's rows
  void body_rows(const Terms& t, const std::array<int, 4>& b, double contact_gain) {
    const int r = d.nb + 3 * b[1];
    engine_contact_angular(*engine, b[0], Jang, dang);
    a = -dang;
    if (contact_gain != 0.0) a.noalias() -= contact_gain * (Jang * t.v);
    if (b[2] == 3) {
      qp.A.block(r, 0, 3, d.nv) = Jang;
      qp.b.segment<3>(r) = a;
      return;
    }
    // across the line ref → far (tangent_basis of contacts.py: its first two rows)
    const Eigen::Vector3d n = (engine_contact_position(*engine, b[3]) - engine_contact_position(*engine, b[0])).normalized();
    const Eigen::Vector3d helper = std::abs(n.x()) < 0.9 ? Eigen::Vector3d::UnitX() : Eigen::Vector3d::UnitY();
    const Eigen::Vector3d t1 = helper.cross(n).normalized(), t2 = n.cross(t1);
    qp.A.row(r).head(d.nv).noalias() = t1.transpose() * Jang;
    qp.A.row(r + 1).head(d.nv).noalias() = t2.transpose() * Jang;
    qp.A.row(r + 2).head(d.nv).setZero();
    qp.b[r] = t1.dot(a);
    qp.b[r + 1] = t2.dot(a);
    qp.b[r + 2] = 0.0;
  }

  // WbcQp._contact_rows_least_squares: rank of the contact rows J q̈ = b (QR with column
  // pivoting) and the largest residual of their least-squares solution, b − Q_r Q_rᵀ b
  double contact_rows_residual(int& rank) {
    const int n = 3 * d.k;
    qr.compute(qp.A.block(d.nb, 0, n, d.nv));
    rank = static_cast<int>(qr.rank());
    left = qp.b.segment(d.nb, n);
    qr.householderQ().adjoint().applyThisOnTheLeft(left);
    left.head(rank).setZero();
    qr.householderQ().applyThisOnTheLeft(left);
    return n ? left.cwiseAbs().maxCoeff() : 0.0;
  }

  // WbcQp._solve_elastic: the QP with the contact rows J q̈ = b as a penalty and the torque
  // limits in place (feasible with f = 0 and any τ within them)
  int solve_elastic(const Terms& t, const Eigen::Map<const VectorXd>& tau_max, double inv_m) {
    const int nv = d.nv, nb = d.nb, na = d.na, n_fr = PYRAMID_ROWS * d.k, n = 3 * d.k;
    const auto Ac = qp.A.block(nb, 0, n, nv);
    const auto bc = qp.b.segment(nb, n);
    const double weight = ELASTIC_WEIGHT * std::max(1.0, qp.H.diagonal().maxCoeff());
    elastic.H = qp.H;
    elastic.H.topLeftCorner(nv, nv).noalias() += weight * Ac.transpose() * Ac;
    elastic.g = qp.g;
    elastic.g.head(nv).noalias() -= weight * Ac.transpose() * bc;
    if (nb) {
      elastic.A = qp.A.topRows(nb);
      elastic.b = qp.b.head(nb);
    }
    elastic.C = qp.C;
    elastic.l = qp.l;
    elastic.u = qp.u;
    elastic.l.segment(n_fr, na) = inv_m * (-tau_max - t.h.tail(na));
    elastic.u.segment(n_fr, na) = inv_m * (tau_max - t.h.tail(na));
    return elastic.solve();
  }
};

// Per task, 19 numbers: in: frame (−1 = CoM), weight, target (3), position_ref (3),
// velocity_ref (3), kp, kd; out: position (3), velocity (3).
constexpr int TASK_STRIDE = 19;

int wbc_solve(Wbc& w, const double* qdd_des_p, const std::uint8_t* active, long version, const double* weights,
              const double* tau_max_p, int n_tasks, double* tasks, double* qdd_out, double* tau_out, double* f_out,
              double* info) {
  const Dims& d = w.d;
  const Terms& t = engine_terms(*w.engine);
  const int nv = d.nv, nb = d.nb, na = d.na, k = d.k, n = 3 * k;
  Qp& qp = w.qp;
  Eigen::Map<const VectorXd> qdd_des(qdd_des_p, nv), tau_max(tau_max_p, na);
  const double w_base = weights[0], w_posture = weights[1], w_force = weights[2], contact_gain = weights[3];
  // rows in newtons are divided by the robot mass and the forces solved per unit mass
  // (f̂ = f / m): the same tolerances hold for a 1 kg and a 100 kg robot (wbc_qp.py)
  const double mass = weights[4], inv_m = 1.0 / mass;

  // cost
  qp.H.setZero();
  qp.H.diagonal().head(nb).setConstant(w_base);
  qp.H.diagonal().segment(nb, na).setConstant(w_posture);
  qp.H.diagonal().tail(n).setConstant(w_force);
  qp.g.head(nv) = -qp.H.diagonal().head(nv).cwiseProduct(qdd_des);
  qp.g.tail(n).setZero();
  for (int i = 0; i < n_tasks; ++i) {
    double* task = tasks + TASK_STRIDE * i;
    engine_point_task(*w.engine, static_cast<int>(task[0]), w.Jt, w.position, w.velocity, w.drift);
    Eigen::Map<Eigen::Vector3d>(task + 13) = w.position;
    Eigen::Map<Eigen::Vector3d>(task + 16) = w.velocity;
    const double weight = task[1], kp = task[11], kd = task[12];
    if (weight == 0.0) continue;
    w.a = Eigen::Map<const Eigen::Vector3d>(task + 2);
    if (kp != 0.0 || kd != 0.0)
      w.a += kp * (Eigen::Map<const Eigen::Vector3d>(task + 5) - w.position) +
             kd * (Eigen::Map<const Eigen::Vector3d>(task + 8) - w.velocity);
    qp.H.topLeftCorner(nv, nv).noalias() += weight * w.Jt.transpose() * w.Jt;
    qp.g.head(nv).noalias() -= weight * w.Jt.transpose() * (w.a - w.drift);
  }

  // equalities: base rows, then 3 rows per contact (zero rows for inactive ones)
  if (nb) {
    qp.A.topLeftCorner(nb, nv) = inv_m * t.M.topRows(nb);
    qp.A.block(0, nv, nb, n) = -t.J.leftCols(nb).transpose();
    qp.b.head(nb) = -inv_m * t.h.head(nb);
  }
  if (version != w.version) w.plan_bodies(active);
  for (int i = 0; i < k; ++i) {
    if (w.own_rows[i]) {  // a released contact keeps its bounded force, not its point
      qp.A.block(nb + 3 * i, 0, 3, nv) = t.J.middleRows<3>(3 * i);
      qp.b.segment<3>(nb + 3 * i) = -t.drift.row(i).transpose();
      if (contact_gain != 0.0) qp.b.segment<3>(nb + 3 * i).noalias() -= contact_gain * (t.J.middleRows<3>(3 * i) * t.v);
    } else {
      qp.A.block(nb + 3 * i, 0, 3, nv).setZero();
      qp.b.segment<3>(nb + 3 * i).setZero();
    }
  }
  for (const auto& b : w.bodies) w.body_rows(t, b, contact_gain);  // flat feet: one rigid-body constraint each
  // inequalities: friction (rebuilt when the active set changed), torque limits
  const int n_fr = PYRAMID_ROWS * k;
  const bool switched = version != w.version;
  if (switched) {
    fill_friction_rows(qp.C.block(0, nv, n_fr, n), qp.l.head(n_fr), qp.u.head(n_fr), w.friction_rows, active, k,
                       false);
    w.version = version;
  }
  bound_contact_forces(qp, nv, w.max_normal_force, nullptr, active, k, inv_m, false);
  qp.C.block(n_fr, 0, na, nv) = inv_m * t.M.bottomRows(na);
  qp.C.block(n_fr, nv, na, n) = -t.J.rightCols(na).transpose();
  qp.l.segment(n_fr, na) = inv_m * (-tau_max - t.h.tail(na));
  qp.u.segment(n_fr, na) = inv_m * (tau_max - t.h.tail(na));

  int n_active = 0;
  for (int i = 0; i < k; ++i) n_active += active[i] ? 1 : 0;
  // contact rows no q̈ meets make every QP with them infeasible: checked every tick for a
  // redundant layout, after a failure otherwise (wbc_qp.py)
  int rank = 0, status = FAILED, iterations = 0;
  double solve_time = 0.0;
  const double inconsistent_above = INCONSISTENT_ROWS * w.eps_abs;
  int inconsistent = -1;  // unknown
  if (switched) {
    inconsistent = w.contact_rows_residual(rank) > inconsistent_above;
    w.redundant_contacts = rank < w.held_rows;
  } else if (w.redundant_contacts) {
    inconsistent = w.contact_rows_residual(rank) > inconsistent_above;
  }
  bool dropped = false, elastic = false, tried = false;
  if (inconsistent != 1) {
    status = qp.solve();
    iterations = qp.iterations;
    solve_time = qp.solve_time;
    tried = true;
    if (status != SOLVED && inconsistent < 0) inconsistent = w.contact_rows_residual(rank) > inconsistent_above;
  }
  if (tried && status != SOLVED && na && inconsistent != 1) {
    // no torque within the limits holds the contacts (or ProxQP says so): solve without
    // the limits; the controller's safety layer clamps what exceeds them (wbc_qp.py)
    qp.l.segment(n_fr, na).setConstant(-INF);
    qp.u.segment(n_fr, na).setConstant(INF);
    const int unlimited = qp.solve();
    iterations += qp.iterations;
    solve_time += qp.solve_time;
    if (unlimited == SOLVED || !n_active) {
      status = unlimited;
      dropped = true;
    }
  }
  const VectorXd* x = &qp.x;
  if (status != SOLVED && n_active) {  // no q̈ holds the contacts: the last resort
    status = w.solve_elastic(t, tau_max, inv_m);
    iterations += w.elastic.iterations;
    solve_time += w.elastic.solve_time;
    x = &w.elastic.x;
    elastic = true;
  }
  Eigen::Map<VectorXd> qdd(qdd_out, nv), f(f_out, n), tau(tau_out, na);
  qdd = x->head(nv);
  f = mass * x->tail(n);
  for (int i = 0; i < k; ++i)
    if (!active[i]) f.segment<3>(3 * i).setZero();  // bound to zero in the QP; make it exact
  // the base rows are the dynamics: what ProxQP's tolerance left on them beyond
  // BASE_ROWS_TOL of max(1, ‖M q̈ + h‖) is taken up by the base acceleration (wbc_qp.py)
  w.gen.noalias() = t.M * qdd;
  w.gen += t.h;
  const double scale = std::max(1.0, w.gen.norm());
  w.gen.noalias() -= t.J.transpose() * f;
  if (nb && w.gen.head(nb).norm() > BASE_ROWS_TOL * scale) {
    w.base_llt.compute(t.M.topLeftCorner(nb, nb));
    qdd.head(nb) -= w.base_llt.solve(w.gen.head(nb));
  }
  tau = t.M.bottomRows(na) * qdd + t.h.tail(na) - t.J.rightCols(na).transpose() * f;
  info[0] = iterations;
  info[1] = solve_time;
  info[2] = dropped ? 1.0 : 0.0;
  info[3] = elastic ? 1.0 : 0.0;
  info[4] = 0.0;  // Result.relaxed: torque-limit excess [N·m], acceleration left [m/s²]
  info[5] = 0.0;
  if (dropped) {
    ++w.torque_limits_dropped;
    info[4] = std::max(0.0, (tau.cwiseAbs() - tau_max).maxCoeff());
  }
  if (elastic) {
    ++w.contacts_elastic;
    double worst = 0.0;
    // per held point, whatever its rows (a flat foot's body rows): J_i q̈ + J̇_i v (+ k_c J_i v)
    for (int i = 0; i < k; ++i) {
      if (!(active[i] && !w.released[i])) continue;
      w.a.noalias() = t.J.middleRows<3>(3 * i) * qdd;
      w.a += t.drift.row(i).transpose();
      if (contact_gain != 0.0) w.a.noalias() += contact_gain * (t.J.middleRows<3>(3 * i) * t.v);
      worst = std::max(worst, w.a.norm());
    }
    info[5] = worst;
  }
  return status;
}

// ------------------------------------------------------------- qp_coulomb / qp_noslip
struct Qpc {
  Engine* engine;
  Dims d;
  double dt;
  bool unilateral_only;
  Qp stage1, stage2;
  Qp stage1_unit;  // Stage I's last resort, per unit mass (qp_contact._rescue_stage1)
  const double* friction_rows;  // ContactSet.friction_rows (k x 5 x 3)
  const double* basis;          // ContactSet.basis (k x 3 x 3), rows t1, t2, n
  const double* phi;            // ContactSet.phi (k)
  const double* max_normal_force;  // ContactSet.max_normal_force (k)
  std::vector<int> body;  // each contact's body (parent joint): a flat foot's points share one
  long version = -1;
  bool stage2_ok = false, stage2_limited = true;
  long fast_path_ticks = 0, stage2_failures = 0, non_penetration_dropped = 0, stage1_rescued = 0;
  double penetration = 0.0;  // Result.relaxed["non_penetration"] of the last tick [m/s]
  int effort_iterations = 0;
  double effort_time = 0.0;
  VectorXd f, f_unit, qdd, qdd_b, vq_plus, p, wv, tau0, tau1, v_plus, gap, base_wrench, rhs_h, vb_star, approach, cq;
  MatrixXd Z, N, rhs_b, G;
  Eigen::LLT<MatrixXd> A_chol;
  // the fast path's consistency check (qp_contact._base_wrench_reachable): J_bᵀ of the
  // active contacts (inactive columns zero), its QR, least-squares forces and residual
  double eps_abs;
  MatrixXd JbT_active;
  Eigen::ColPivHouseholderQR<MatrixXd> range_qr;
  VectorXd f_ls, wrench_residual;
  // Stage II's empty-set check (qp_contact._stage2_set_empty): two feet's base Jacobian and
  // its SVD (fixed size: no allocation), the rows at f₁ and along the free direction
  Eigen::Matrix<double, 6, 6> A2;
  Eigen::JacobiSVD<Eigen::Matrix<double, 6, 6>> svd2;
  VectorXd Cx, Cd;

  Qpc(Engine* e, double dt_, bool unilateral, bool warm, double eps_abs, const double* rows, const double* basis_,
      const double* phi_, const double* bound)
      : engine(e), d(engine_dims(*e)), dt(dt_), unilateral_only(unilateral),
        stage1(3 * d.k, 0, (PYRAMID_ROWS + 1) * d.k, warm, eps_abs, 100, PROXQP_INFEASIBILITY_TOLERANCE, true),
        stage2(3 * d.k, d.nb, PYRAMID_ROWS * d.k + d.na + d.k, warm, eps_abs, 100, PROXQP_INFEASIBILITY_TOLERANCE,
               true),
        stage1_unit(3 * d.k, 0, (PYRAMID_ROWS + 1) * d.k, warm, eps_abs, RESCUE_MAX_ITER,
                    STRICT_INFEASIBILITY_TOLERANCE),
        friction_rows(rows), basis(basis_),
        phi(phi_), max_normal_force(bound), body(d.k), f(VectorXd::Zero(3 * d.k)), f_unit(VectorXd::Zero(3 * d.k)), qdd(VectorXd::Zero(d.nv)), qdd_b(d.nb), vq_plus(d.na), p(d.nb), wv(d.nb),
        tau0(d.na), tau1(d.na), v_plus(d.nv), gap(d.k), base_wrench(d.nb), rhs_h(d.nb), Z(d.nb, 3 * d.k),
        N(d.k, d.nv), rhs_b(d.nb, 1), A_chol(d.nb) {
    vb_star.resize(d.nb);
    approach.resize(d.k);
    this->eps_abs = eps_abs;
    JbT_active.resize(d.nb, 3 * d.k);
    range_qr = Eigen::ColPivHouseholderQR<MatrixXd>(d.nb, 3 * d.k);
    f_ls.resize(3 * d.k);
    wrench_residual.resize(d.nb);
    cq.resize(3 * d.k);
    G.resize(d.nb, d.nb);
    Cx.resize(stage2.C.rows());
    Cd.resize(stage2.C.rows());
    for (int i = 0; i < d.k; ++i) body[i] = engine_contact_body(*e, i);
  }

  // Stage II's centre-of-pressure rows (option cop_margin = c; qp_contact._fill_cop_rows):
  // each active point of a body with several active points keeps n_iᵀf_i ≥ c · mean_j n_jᵀf_j
  // over that body's active points; other rows are free. At a contact switch only.
  void fill_cop_rows(const std::uint8_t* active, double margin) {
    const int k = d.k, r0 = PYRAMID_ROWS * k + d.na;
    auto C = stage2.C.middleRows(r0, k);
    C.setZero();
    stage2.l.segment(r0, k).setConstant(-INF);
    stage2.u.segment(r0, k).setConstant(INF);
    if (margin == 0.0) return;
    for (int i = 0; i < k; ++i) {
      if (!active[i]) continue;
      int members = 0;
      for (int j = 0; j < k; ++j) members += active[j] && body[j] == body[i];
      if (members < 2) continue;
      for (int j = 0; j < k; ++j)
        if (active[j] && body[j] == body[i])
          C.block<1, 3>(i, 3 * j) -= (margin / members) * Eigen::Map<const Eigen::RowVector3d>(basis + 9 * j + 6);
      C.block<1, 3>(i, 3 * i) += Eigen::Map<const Eigen::RowVector3d>(basis + 9 * i + 6);
      stage2.l[r0 + i] = 0.0;
    }
  }

  // Whether some forces of the active contacts (friction aside) give the base wrench
  // `base_wrench`: its least-squares residual per unit mass is within 100 eps_abs. With two
  // feet (6 forces, rank 5) it generically is not, and Stage II on the fast path would only
  // spend its iterations on finding that out.
  bool base_wrench_reachable(const std::uint8_t* active) {
    const Terms& t = engine_terms(*engine);
    const int k = d.k, nb = d.nb;
    JbT_active = t.J.leftCols(nb).transpose();
    for (int i = 0; i < k; ++i)
      if (!active[i]) JbT_active.middleCols<3>(3 * i).setZero();
    range_qr.compute(JbT_active);
    f_ls.noalias() = range_qr.solve(base_wrench);
    wrench_residual.noalias() = JbT_active * f_ls;
    wrench_residual -= base_wrench;
    return wrench_residual.norm() / t.M(0, 0) <= 100.0 * eps_abs;
  }

  void add_effort(const Qp& qp) {
    effort_iterations += qp.iterations;
    effort_time += qp.solve_time;
  }

  // Whether Stage II's set is empty, decided without ProxQP where that is exact and cheap
  // (qp_contact._stage2_set_empty): with one or two active contacts Stage I's optimal set is
  // f₁ plus at most one direction, so every row bounds one scalar; only a clear miss counts.
  bool stage2_set_empty(const std::uint8_t* active) {
    if (d.nb != 6) return false;
    int act[2], n = 0;
    for (int i = 0; i < d.k; ++i) {
      if (!active[i]) continue;
      if (n == 2) return false;
      act[n++] = i;
    }
    if (n == 0) return false;
    const Qp& s2 = stage2;
    Cx.noalias() = s2.C * f_unit;
    if (n == 2) {
      for (int j = 0; j < 2; ++j) A2.middleCols<3>(3 * j) = s2.A.middleCols<3>(3 * act[j]);
      svd2.compute(A2, Eigen::ComputeFullV);
      const auto& sv = svd2.singularValues();
      if (sv[4] <= NULL_TOL * sv[0] || sv[5] > NULL_TOL * sv[0]) return false;  // not one free direction
      Cd.noalias() = s2.C.middleCols<3>(3 * act[0]) * svd2.matrixV().col(5).head<3>();
      Cd.noalias() += s2.C.middleCols<3>(3 * act[1]) * svd2.matrixV().col(5).tail<3>();
    } else {
      Cd.setZero();
    }
    double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
    for (Eigen::Index r = 0; r < Cx.size(); ++r) {
      for (int side = 0; side < 2; ++side) {  // c + s·d ≤ bound: the upper bound, the lower one negated
        const double bound = side == 0 ? s2.u[r] : -s2.l[r];
        if (bound >= INF) continue;
        const double c = side == 0 ? Cx[r] : -Cx[r], dd = side == 0 ? Cd[r] : -Cd[r];
        const double room = bound + EMPTY_SET_SLACK - c;
        if (std::abs(dd) <= FLAT_ROW) {
          if (room < 0.0) return true;
        } else if (dd > 0.0) {
          hi = std::min(hi, room / dd);
        } else {
          lo = std::max(lo, room / dd);
        }
      }
    }
    return lo > hi;
  }

  // min ½‖τ(f)‖² over feasible f with J_bᵀ f = base_wrench (Stage I's optimal set).
  // limited: 1/0 = with/without |τ| ≤ τ_max; −1 = only if the current forces meet them.
  void run_stage2(const std::uint8_t* active, const Eigen::Map<const VectorXd>& tau_max, bool torque_limits,
                  int limited) {
    const bool from_stage1 = limited < 0;
    const Terms& t = engine_terms(*engine);
    const int nb = d.nb, na = d.na, k = d.k;
    Qp& s2 = stage2;
    tau0.noalias() = t.M.bottomRows(na) * qdd;
    tau0 += t.h.tail(na);
    const auto Jj = t.J.rightCols(na);
    s2.H.noalias() = Jj * Jj.transpose();
    s2.H.diagonal().array() += STAGE2_TIKHONOV * std::max(1.0, s2.H.trace());
    // solved per unit mass (τ/m, f/m; qp_contact.py): the same tolerances for 1 and 100 kg
    const double mass = nb ? t.M(0, 0) : 1.0, inv_m = 1.0 / mass;
    s2.g.noalias() = -inv_m * (Jj * tau0);
    if (nb) {
      s2.A = t.J.leftCols(nb).transpose();
      s2.b = inv_m * base_wrench;
    }
    const int r0 = PYRAMID_ROWS * k;
    s2.C.middleRows(r0, na) = -Jj.transpose();
    if (limited < 0) {
      tau1 = tau0;
      tau1.noalias() -= Jj.transpose() * f;
      limited = torque_limits && (tau1.cwiseAbs().array() <= tau_max.array()).all();
    }
    if (limited) {
      s2.l.segment(r0, na) = inv_m * (-tau_max - tau0);
      s2.u.segment(r0, na) = inv_m * (tau_max - tau0);
    } else {
      s2.l.segment(r0, na).setConstant(-INF);
      s2.u.segment(r0, na).setConstant(INF);
    }
    stage2_limited = limited;
    // after Stage I its forces are feasible: "infeasible" can only be ProxQP's early
    // certificate misfiring; on the fast path (limited ≥ 0) it is the expected early exit
    s2.infeasibility_tolerance = from_stage1 ? STRICT_INFEASIBILITY_TOLERANCE : PROXQP_INFEASIBILITY_TOLERANCE;
    f_unit = inv_m * f;
    if (from_stage1 && stage2_set_empty(active)) {  // Stage I's forces stand, as if ProxQP proved it
      stage2_ok = false;
      ++stage2_failures;
      return;
    }
    // Stage I's (or the last tick's) forces: a good start. On the fast path the set may be
    // empty: only the working-set guess runs there, both stages follow when it fails
    const int status = s2.solve(&f_unit, !from_stage1);
    stage2_ok = status == SOLVED;
    if (stage2_ok)
      f = mass * s2.x;
    else
      ++stage2_failures;
    add_effort(s2);
  }
};

int qpc_solve(Qpc& c, const double* qdd_des_p, const std::uint8_t* active, long version, const double* options,
              const double* tau_max_p, double* qdd_out, double* tau_out, double* f_out, double* info) {
  const Dims& d = c.d;
  const Terms& t = engine_terms(*c.engine);
  const int nv = d.nv, nb = d.nb, na = d.na, k = d.k, n = 3 * k;
  const double dt = c.dt;
  const bool stage2 = options[0] != 0.0, torque_limits = options[1] != 0.0, fast_path = options[2] != 0.0;
  const int dissipation = static_cast<int>(options[3]);
  const double friction_margin = options[4], cop_margin = options[5];
  Eigen::Map<const VectorXd> tau_max(tau_max_p, na);
  Eigen::Map<const VectorXd> phi(c.phi, k);
  c.qdd = Eigen::Map<const VectorXd>(qdd_des_p, nv);
  c.effort_iterations = 0;
  c.effort_time = 0.0;
  c.penetration = 0.0;
  bool relaxed_penetration = false;
  int status = SOLVED;
  int n_active = 0;
  for (int i = 0; i < k; ++i) n_active += active[i] ? 1 : 0;
  if (version != c.version) {
    const int n_rows = PYRAMID_ROWS * k;
    // Stage II always uses the ground's pyramid: with infinite friction it only chooses,
    // among the no-slip forces of Stage I's optimal set, ones the ground can hold
    fill_friction_rows(c.stage1.C.topRows(n_rows), c.stage1.l.head(n_rows), c.stage1.u.head(n_rows),
                       c.friction_rows, active, k, c.unilateral_only);
    fill_friction_rows(c.stage2.C.topRows(n_rows), c.stage2.l.head(n_rows), c.stage2.u.head(n_rows),
                       c.friction_rows, active, k, false);
    if (friction_margin != 0.0) {
      // Stage II's facets (t-part) − μn → (t-part) − (1 − m)μn; the four facets sum to −4μn
      for (int i = 0; i < k; ++i) {
        if (!active[i]) continue;
        Eigen::Vector3d mu_n = Eigen::Vector3d::Zero();
        for (int r = 0; r < 4; ++r) mu_n -= Eigen::Map<const Eigen::Vector3d>(c.friction_rows + 15 * i + 3 * r) / 4.0;
        for (int r = 0; r < 4; ++r) c.stage2.C.block<1, 3>(PYRAMID_ROWS * i + r, 3 * i) += friction_margin * mu_n.transpose();
      }
    }
    c.fill_cop_rows(active, cop_margin);
    c.version = version;
  }
  const double scale2 = nb ? 1.0 / t.M(0, 0) : 1.0;  // Stage II: forces per unit mass
  bound_contact_forces(c.stage1, 0, c.max_normal_force, c.basis, active, k, 1.0, c.unilateral_only);
  bound_contact_forces(c.stage2, 0, c.max_normal_force, c.basis, active, k, scale2, false);
  bool done = false;
  if (nb && n_active) {
    const auto Jb = t.J.leftCols(nb);
    const auto B = t.M.topRightCorner(nb, na);
    c.vq_plus = t.v.tail(na) + dt * c.qdd.tail(na);
    c.A_chol.compute(t.M.topLeftCorner(nb, nb));
    c.Z = c.A_chol.solve(Jb.transpose());  // q̈_b = Z f + p
    c.rhs_h.noalias() = B * c.qdd.tail(na);
    c.rhs_h += t.h.head(nb);
    c.p = -c.A_chol.solve(c.rhs_h);
    // Stage I's target base velocity v_b* (qp_contact.DISSIPATION)
    if (dissipation == DISSIPATE_DESIRED) {
      c.vb_star = t.v.head(nb) + dt * c.qdd.head(nb);
    } else if (dissipation == DISSIPATE_CONTACTS) {
      // least squares over the active rows of J_b v_b* = −J_q v_q⁺ (contacts kept still)
      c.cq.noalias() = t.J.rightCols(na) * c.vq_plus;
      c.G.setZero();
      c.wv.setZero();
      for (int i = 0; i < k; ++i) {
        if (!active[i]) continue;
        const auto Jbi = t.J.block(3 * i, 0, 3, nb);
        c.G.noalias() += Jbi.transpose() * Jbi;
        c.wv.noalias() += Jbi.transpose() * c.cq.segment<3>(3 * i);
      }
      c.G.diagonal().array() += STANCE_DAMPING * std::max(1.0, c.G.trace());
      c.vb_star = -c.G.llt().solve(c.wv);
    } else {
      c.wv.noalias() = B * c.vq_plus;
      c.vb_star = -c.A_chol.solve(c.wv);  // zero base momentum: −A⁻¹ B v_q⁺
    }
    for (int i = 0; i < k; ++i)
      c.N.row(i).noalias() = Eigen::Map<const Eigen::RowVector3d>(c.basis + 9 * i + 6) * t.J.middleRows<3>(3 * i);
    // lower bound of each normal velocity after the step (qp_contact._approach_bound)
    c.approach = -phi / dt;
    if (dissipation == DISSIPATE_DESIRED) {
      c.v_plus = t.v + dt * c.qdd;  // the desired motion
      c.gap.noalias() = c.N * c.v_plus;
      c.approach = c.approach.cwiseMin(c.gap);
    }
    if (stage2 && fast_path) {
      // fast path (exact): Stage I's optimum v_b⁺ = v_b*, if non-penetrating and feasible
      c.qdd_b = c.qdd.head(nb);  // restored when the fast path does not apply
      c.qdd.head(nb) = (c.vb_star - t.v.head(nb)) / dt;
      c.v_plus = t.v + dt * c.qdd;
      c.gap.noalias() = c.N * c.v_plus;
      c.gap -= c.approach;
      bool penetrates = false;
      for (int i = 0; i < k; ++i) penetrates |= active[i] && c.gap[i] < 0.0;
      if (!penetrates) {
        c.base_wrench.noalias() = t.M.topRows(nb) * c.qdd;
        c.base_wrench += t.h.head(nb);
      }
      if (!penetrates && !c.base_wrench_reachable(active)) {
        c.qdd.head(nb) = c.qdd_b;
      } else if (!penetrates) {
        c.run_stage2(active, tau_max, torque_limits, torque_limits ? 1 : 0);
        if (c.stage2_ok) {
          ++c.fast_path_ticks;
          done = true;
        } else {
          --c.stage2_failures;  // not a failure: the set was empty, both stages follow
          c.qdd.head(nb) = c.qdd_b;
        }
      } else {
        c.qdd.head(nb) = c.qdd_b;
      }
    }
    if (!done) {
      // Stage I: ½ ‖v_b⁺ − v_b*‖²_A as a function of f, scaled by 1/Δt²
      Qp& s1 = c.stage1;
      s1.H.noalias() = Jb * c.Z;
      const double trace1 = s1.H.trace();
      s1.H.diagonal().array() += STAGE1_TIKHONOV * trace1;  // as qp_contact.py
      c.v_plus.head(nb) = t.v.head(nb) + dt * c.p - c.vb_star;
      s1.g.noalias() = Jb * c.v_plus.head(nb);
      s1.g /= dt;
      // non-penetration: n_iᵀ J_i v⁺ ≥ −φ_i/Δt with v⁺ = v + Δt q̈, q̈_b = Z f + p
      const int r0 = PYRAMID_ROWS * k;
      s1.C.middleRows(r0, k).noalias() = c.N.leftCols(nb) * c.Z;
      c.gap.noalias() = c.N * t.v;
      s1.l.segment(r0, k) = c.approach / dt - c.gap / dt;
      s1.l.segment(r0, k).noalias() -= c.N.leftCols(nb) * c.p;
      s1.l.segment(r0, k).noalias() -= c.N.rightCols(na) * c.qdd.tail(na);
      for (int i = 0; i < k; ++i) {
        if (!active[i]) {
          s1.C.row(r0 + i).setZero();
          s1.l[r0 + i] = -INF;
        }
      }
      int s1_status = s1.solve();
      c.add_effort(s1);
      if (s1_status == MAX_ITER) {
        // flat along internal forces: once more, more regularized (qp_contact.py)
        s1.H.diagonal().array() += (STAGE1_TIKHONOV_RETRY - STAGE1_TIKHONOV) * trace1;
        s1_status = s1.solve();
        c.add_effort(s1);
      }
      status = s1_status;
      if (s1_status != SOLVED) {
        // prescribed joint motion drives a foot into the ground faster than the base
        // can yield: drop non-penetration, keep friction (always feasible: f = 0, so
        // ProxQP's early "infeasible" certificate is not trusted), and answer with it,
        // counted (qp_contact.py relaxations())
        s1.C.middleRows(r0, k).setZero();
        s1.l.segment(r0, k).setConstant(-INF);
        s1.infeasibility_tolerance = STRICT_INFEASIBILITY_TOLERANCE;
        int relaxed = s1.solve();
        s1.infeasibility_tolerance = PROXQP_INFEASIBILITY_TOLERANCE;
        c.add_effort(s1);
        c.f = s1.x;
        if (relaxed != SOLVED) {
          // once more per unit mass: f̂ = f/m, cost divided by m (qp_contact._rescue_stage1)
          Qp& r = c.stage1_unit;
          const double mass = t.M(0, 0);
          r.H = mass * s1.H;
          r.g = s1.g;
          r.C = s1.C;
          r.l = s1.l;
          r.u = s1.u;
          for (Eigen::Index i = 0; i < r.l.size(); ++i) {  // finite bounds (ramping forces) per unit mass
            if (std::abs(r.l[i]) < INF) r.l[i] /= mass;
            if (std::abs(r.u[i]) < INF) r.u[i] /= mass;
          }
          relaxed = r.solve();
          c.add_effort(r);
          c.f = mass * r.x;
          if (relaxed == SOLVED) ++c.stage1_rescued;
        }
        if (relaxed == SOLVED) {
          s1_status = status = SOLVED;
          ++c.non_penetration_dropped;
          relaxed_penetration = true;
        }
      } else {
        c.f = s1.x;
      }
      if (s1_status != SOLVED) c.f.setZero();  // no usable forces: predict none (free fall), which is always safe
      c.qdd.head(nb).noalias() = c.Z * c.f;
      c.qdd.head(nb) += c.p;
      if (relaxed_penetration) {
        // how much faster than the bound the answer lets a contact approach (_report_penetration)
        c.v_plus = t.v + dt * c.qdd;
        c.gap.noalias() = c.N * c.v_plus;
        c.gap -= c.approach;
        for (int i = 0; i < k; ++i)
          if (active[i]) c.penetration = std::max(c.penetration, -c.gap[i]);
      }
      if (stage2 && s1_status == SOLVED) {
        c.base_wrench.noalias() = Jb.transpose() * c.f;
        c.run_stage2(active, tau_max, torque_limits, -1);
      }
    }
  } else if (nb) {  // floating and no contact: free flight
    c.rhs_h.noalias() = t.M.topRightCorner(nb, na) * c.qdd.tail(na);
    c.rhs_h += t.h.head(nb);
    c.A_chol.compute(t.M.topLeftCorner(nb, nb));
    c.qdd.head(nb) = -c.A_chol.solve(c.rhs_h);
    c.f.setZero();
  } else {  // fixed base: contacts cannot change the motion; Stage II only
    c.f.setZero();
    if (n_active && stage2) c.run_stage2(active, tau_max, torque_limits, -1);
  }
  for (int i = 0; i < k; ++i)
    if (!active[i]) c.f.segment<3>(3 * i).setZero();
  Eigen::Map<VectorXd>(qdd_out, nv) = c.qdd;
  Eigen::Map<VectorXd>(f_out, n) = c.f;
  Eigen::Map<VectorXd> tau(tau_out, na);
  tau.noalias() = t.M.bottomRows(na) * c.qdd;
  tau += t.h.tail(na);
  tau.noalias() -= t.J.rightCols(na).transpose() * c.f;
  info[0] = c.effort_iterations;
  info[1] = c.effort_time;
  info[2] = static_cast<double>(c.fast_path_ticks);
  info[3] = static_cast<double>(c.stage2_failures);
  info[4] = c.stage2_limited ? 1.0 : 0.0;
  info[5] = static_cast<double>(c.non_penetration_dropped);
  info[6] = static_cast<double>(c.stage1_rescued);
  info[7] = relaxed_penetration ? 1.0 : 0.0;
  info[8] = c.penetration;
  return status;
}

}  // namespace
}  // namespace idyn

extern "C" {

void* idyn_wbc_new(void* engine, const double* friction_rows, const double* max_normal_force,
                   const std::uint8_t* released, int warm_start, double eps_abs) {
  try {
    return new idyn::Wbc(static_cast<idyn::Engine*>(engine), friction_rows, max_normal_force, released,
                         warm_start != 0, eps_abs);
  } catch (...) {
    return nullptr;
  }
}

void idyn_wbc_free(void* w) { delete static_cast<idyn::Wbc*>(w); }

void idyn_wbc_reset(void* w) {
  auto& wbc = *static_cast<idyn::Wbc*>(w);
  wbc.qp.forget();
  wbc.elastic.forget();
  wbc.version = -1;
}

int idyn_wbc_solve(void* w, const double* qdd_des, const std::uint8_t* active, long version, const double* weights,
                   const double* tau_max, int n_tasks, double* tasks, double* qdd, double* tau, double* forces,
                   double* info) {
  return idyn::wbc_solve(*static_cast<idyn::Wbc*>(w), qdd_des, active, version, weights, tau_max, n_tasks, tasks,
                         qdd, tau, forces, info);
}

long idyn_wbc_torque_limits_dropped(void* w) { return static_cast<idyn::Wbc*>(w)->torque_limits_dropped; }

long idyn_wbc_contacts_elastic(void* w) { return static_cast<idyn::Wbc*>(w)->contacts_elastic; }

void* idyn_qpc_new(void* engine, double dt, int unilateral_only, int warm_start, double eps_abs,
                   const double* friction_rows, const double* basis, const double* phi, const double* max_normal_force) {
  try {
    return new idyn::Qpc(static_cast<idyn::Engine*>(engine), dt, unilateral_only != 0, warm_start != 0, eps_abs,
                         friction_rows, basis, phi, max_normal_force);
  } catch (...) {
    return nullptr;
  }
}

void idyn_qpc_free(void* c) { delete static_cast<idyn::Qpc*>(c); }

void idyn_qpc_reset(void* c) {
  auto& q = *static_cast<idyn::Qpc*>(c);
  q.stage1.forget();
  q.stage1_unit.forget();
  q.stage2.forget();
  q.version = -1;
}

int idyn_qpc_solve(void* c, const double* qdd_des, const std::uint8_t* active, long version, const double* options,
                   const double* tau_max, double* qdd, double* tau, double* forces, double* info) {
  return idyn::qpc_solve(*static_cast<idyn::Qpc*>(c), qdd_des, active, version, options, tau_max, qdd, tau, forces,
                         info);
}

}  // extern "C"

// ============================================================================================
// pidc_qp and its baselines pidc_qp_howsm, pidcwcu (seed 004 §III–IV): a line-by-line port of
// idyn_control/formulations/pidc_qp.py (and of the idyn_control/linalg.py routines it calls).
// Work arrays follow the active contact set: they are resized when it changes and a tick on
// an unchanged set allocates nothing (the SVD fallbacks of rank-deficient matrices and the
// last resorts excepted, as in Python).

namespace idyn {
namespace {

// as pidc_qp.py
constexpr double PIDC_RANK_TOL = 1e-9;              // _RANK_TOL
constexpr double PIDC_ACTIVE_TOL = 1e-7;            // _ACTIVE_TOL
constexpr double FRICTION_SLACK_WEIGHT = 1e2;       // FRICTION_SLACK_WEIGHT
constexpr double LAST_RESORT_EPS_ABS = 1e-7;        // LAST_RESORT_EPS_ABS
constexpr double EXCESS_ONLY_REGULARIZATION = 1e-3; // EXCESS_ONLY_REGULARIZATION
// as linalg.py
constexpr double COND_MAX = 1e8;       // COND_MAX
constexpr double RCOND_MARGIN = 1e-3;  // _RCOND_MARGIN
enum PidcMethod : int { PIDC_QP = 0, PIDC_HOWSM = 1, PIDCWCU = 2 };

// linalg._cond_limit: the largest 1-norm condition number the Cholesky/QR routes accept
double cond_limit(double rcond) { return rcond > 0.0 ? std::min(COND_MAX, RCOND_MARGIN / rcond) : COND_MAX; }

template <typename Derived>
double norm1(const Eigen::MatrixBase<Derived>& A) {  // largest absolute column sum (0 for an empty matrix)
  return A.size() ? A.cwiseAbs().colwise().sum().maxCoeff() : 0.0;
}

// linalg.pinv_and_null_space / linalg.pinv: A⁺ (n x m) and an orthonormal basis of null(A)
// (n x (n − rank)) for A (m x n). Full rank and 1-norm condition below cond_limit(rcond):
// one Householder QR of the tall one of A, Aᵀ (linalg estimates the condition with LAPACK,
// here it is computed exactly: R is at most a few dozen rows); otherwise the SVD, singular
// values below rcond × the largest counting as zero (numpy.linalg.pinv).
struct PinvNull {
  MatrixXd pinv, null;
  MatrixXd B, Q, Rinv, Y;
  VectorXd workspace;
  Eigen::HouseholderQR<MatrixXd> qr;
  Eigen::JacobiSVD<MatrixXd> svd;

  template <typename Derived>
  void compute(const Eigen::MatrixBase<Derived>& A, double rcond, bool with_null) {
    const int m = int(A.rows()), n = int(A.cols());
    if (m == 0 || n == 0) {
      pinv.setZero(n, m);
      null.setIdentity(n, n);
      return;
    }
    if (fast(A, rcond, with_null)) return;
    svd.compute(A, Eigen::ComputeFullU | Eigen::ComputeFullV);
    const auto& s = svd.singularValues();
    const double tol = rcond * s[0];
    int r = 0;
    while (r < s.size() && s[r] > tol) ++r;
    pinv.noalias() = svd.matrixV().leftCols(r) * s.head(r).cwiseInverse().asDiagonal() *
                     svd.matrixU().leftCols(r).transpose();
    null = svd.matrixV().rightCols(n - r);
  }

  // linalg._qr_pinv
  template <typename Derived>
  bool fast(const Eigen::MatrixBase<Derived>& A, double rcond, bool with_null) {
    const int m = int(A.rows()), n = int(A.cols());
    const bool wide = m <= n;
    if (wide)
      B = A.transpose();
    else
      B = A;
    const int p = int(B.rows()), r = int(B.cols());  // B = Q R, p ≥ r
    qr.compute(B);
    const auto R = qr.matrixQR().topRows(r).template triangularView<Eigen::Upper>();
    Rinv.setIdentity(r, r);
    R.solveInPlace(Rinv);
    double normR = 0.0;  // ‖R‖₁ (its upper triangle)
    for (int j = 0; j < r; ++j) normR = std::max(normR, qr.matrixQR().col(j).head(j + 1).cwiseAbs().sum());
    if (!(normR * norm1(Rinv) <= cond_limit(rcond))) return false;  // NaN/inf (singular R) included
    workspace.resize(p);
    Q.resize(p, p);
    qr.householderQ().evalTo(Q, workspace);
    Y.noalias() = Rinv * Q.leftCols(r).transpose();  // R⁻¹ Q₁ᵀ (r x p)
    if (wide) {  // A = Rᵀ Q₁ᵀ: A⁺ = Q₁ R⁻ᵀ, null(A) = Q₂
      pinv = Y.transpose();
      if (with_null) null = Q.rightCols(p - r);
    } else {  // A = Q₁ R: A⁺ = R⁻¹ Q₁ᵀ, null(A) = {0}
      pinv = Y;
      null.resize(n, 0);
    }
    return true;
  }
};

// linalg.psd_pinv_solve: G⁺B for a symmetric PSD G (a Delassus matrix): Cholesky while G is
// well conditioned (1-norm condition below cond_limit(rcond)), else the eigendecomposition with
// eigenvalues below rcond × the largest counting as zero (numpy.linalg.pinv, hermitian).
struct PsdSolve {
  Eigen::LLT<MatrixXd> llt;
  MatrixXd inverse;
  Eigen::SelfAdjointEigenSolver<MatrixXd> eig;

  template <typename Derived, typename Out>
  void solve(const MatrixXd& G, const Eigen::MatrixBase<Derived>& B, double rcond, Out& X) {
    llt.compute(G);
    if (llt.info() == Eigen::Success) {
      inverse.setIdentity(G.rows(), G.cols());
      llt.solveInPlace(inverse);
      if (norm1(G) * norm1(inverse) <= cond_limit(rcond)) {
        X.noalias() = inverse * B;
        return;
      }
    }
    eig.compute(G);
    const auto& lambda = eig.eigenvalues();
    const double tol = rcond * lambda.cwiseAbs().maxCoeff();
    VectorXd inv = VectorXd::Zero(lambda.size());
    for (int i = 0; i < lambda.size(); ++i)
      if (std::abs(lambda[i]) > tol) inv[i] = 1.0 / lambda[i];
    X.noalias() = eig.eigenvectors() * inv.asDiagonal() * (eig.eigenvectors().transpose() * B);
  }
};

struct Pidc {
  Engine* engine;
  Dims d;
  int method;
  Qp qp_motion, qp_motion_loose, qp_force, qp_force_elastic;
  const double* friction_rows;  // ContactSet.friction_rows (k x 5 x 3)
  const double* basis;          // ContactSet.basis (k x 3 x 3), rows t1, t2, n
  const std::uint8_t* chain;    // _ProjectedForceControl.chain (k x na): joints on each contact's chain
  const std::uint8_t* is_force; // _ProjectedForceControl.is_force_contact (k)
  const double* lambda_des;     // _ProjectedForceControl.lambda_des (k x 3) [N, world], read every tick
  long version = -1;
  long stage1_loose = 0, friction_elastic = 0;
  int n_active_inequalities = 0;
  double friction_excess = -1.0;  // Result.relaxed["friction"] of this tick [N]; < 0: none
  int iterations = 0;
  double solve_time = 0.0;

  // active-set caches (_on_active_set)
  int n = 0;                       // active contacts
  std::vector<int> order;          // their configured indices (the controller's order)
  std::vector<std::uint8_t> force_active;
  std::vector<int> force_order;    // configured indices of the active force contacts
  std::vector<int> sel, unsel;     // B_m (stage I) and B_f joints
  std::vector<int> tracked;        // stacked force rows whose error is the stage-II cost
  std::vector<int> k_order;        // row of K_blocks that is each joint's row of K
  // per tick (_project and the stages)
  Eigen::LLT<MatrixXd> M_llt;
  MatrixXd J, Minv_JT, G, rhs, lam, Lam, P, W, K_blocks, K, L, Lg, Jg, A2, seen, blind, Lt_all, Lt, Ht, N_unsel, I_P;
  VectorXd drift, qdd_c, gen_c, tau_md, lam_h, y, free, tau_I, lam_I, targets, error_I, x_track, lam_track, ft,
      x_free, Cx, tau, lam_out, gen, w, x2, tau_cd;
  PinvNull pn_J, pn_W, pn_Lg, pn_a, pn_b;
  PsdSolve delassus;
  Eigen::LLT<MatrixXd> H_llt;

  Pidc(Engine* e, int method_, bool warm, double eps_abs, const double* rows, const double* basis_,
       const std::uint8_t* chain_, const std::uint8_t* is_force_, const double* lambda_des_)
      : engine(e), d(engine_dims(*e)), method(method_),
        qp_motion(d.na, 0, d.na, warm, eps_abs, 100),
        qp_motion_loose(d.na, 0, d.na, warm, std::max(eps_abs, LAST_RESORT_EPS_ABS), 100),
        qp_force(d.na, 0, PYRAMID_ROWS * d.k + d.na, warm, eps_abs, 100),
        qp_force_elastic(d.na + PYRAMID_ROWS * d.k, 0, PYRAMID_ROWS * d.k + d.na, warm,
                         std::max(eps_abs, LAST_RESORT_EPS_ABS), 100, STRICT_INFEASIBILITY_TOLERANCE),
        friction_rows(rows), basis(basis_), chain(chain_), is_force(is_force_), lambda_des(lambda_des_),
        M_llt(d.nv) {
    qp_motion.C.setIdentity();
    qp_motion_loose.C.setIdentity();
    const int n_fr = PYRAMID_ROWS * d.k;
    qp_force_elastic.C.block(0, d.na, n_fr, n_fr) = -MatrixXd::Identity(n_fr, n_fr);
    order.reserve(d.k);
    force_active.reserve(d.k);
    force_order.reserve(d.k);
    sel.reserve(d.na);
    unsel.reserve(d.na);
    tracked.reserve(3 * d.k);
    k_order.resize(d.na);
    K_blocks.setZero(d.na, d.na);
    K.setZero(d.na, d.na);
    free.setZero(d.na);
    tau.setZero(d.na);
  }

  // _ProjectedForceControl._on_active_set and PidcQp._on_active_set (with the method hooks)
  void on_active_set(const std::uint8_t* active) {
    const int k = d.k, na = d.na;
    order.clear();
    force_active.clear();
    force_order.clear();
    for (int i = 0; i < k; ++i) {
      if (!active[i]) continue;
      order.push_back(i);
      force_active.push_back(is_force[i] ? 1 : 0);
      if (is_force[i]) force_order.push_back(i);
    }
    n = int(order.size());
    sel.clear();
    unsel.clear();
    for (int a = 0; a < na; ++a) {
      bool motion_chain = false, force_chain = false;
      for (int j = 0; j < n; ++j) {
        const bool on = chain[order[j] * na + a] != 0;
        (force_active[j] ? force_chain : motion_chain) |= on;
      }
      const bool force_joint = force_chain && !motion_chain;  // B_f: moves force contacts only
      // _motion_joints: all but the force legs (pidc_qp); all (HOWSM)
      if (method == PIDC_HOWSM || !force_joint)
        sel.push_back(a);
      else
        unsel.push_back(a);
    }
    tracked.clear();  // _tracked_rows: the force group (pidc_qp); every contact (HOWSM)
    for (int j = 0; j < n; ++j)
      if (method == PIDC_HOWSM || force_active[j])
        for (int r = 0; r < 3; ++r) tracked.push_back(3 * j + r);
    const int ns = int(sel.size()), nf = int(unsel.size());
    for (int i = 0; i < ns; ++i) k_order[sel[i]] = i;  // K's rows grouped (B_m, B_f) → joint order
    for (int i = 0; i < nf; ++i) k_order[unsel[i]] = ns + i;
    K_blocks.setZero();
    K_blocks.block(ns, 0, nf, nf).setIdentity();
    // friction rows of inactive contacts are unused: C = 0, −∞ ≤ · ≤ ∞
    const int n_fr = PYRAMID_ROWS * k;
    qp_force.C.topRows(n_fr).setZero();
    qp_force.l.head(n_fr).setConstant(-INF);
    qp_force.u.head(n_fr).setConstant(INF);
  }

  // _ProjectedForceControl._project: P, J⁺, q̈_c, τ_m,d and λ(τ) = λ_h + Λ τ. False: M is not PD.
  bool project(const Eigen::Map<const VectorXd>& qdd_des, double rcond) {
    const Terms& t = engine_terms(*engine);
    const int nv = d.nv, nb = d.nb, na = d.na, m3 = 3 * n;
    J.resize(m3, nv);
    drift.resize(m3);
    for (int j = 0; j < n; ++j) {
      J.middleRows(3 * j, 3) = t.J.middleRows(3 * order[j], 3);
      drift.segment<3>(3 * j) = t.drift.row(order[j]).transpose();
    }
    M_llt.compute(t.M);
    if (M_llt.info() != Eigen::Success) return false;
    if (n) {
      pn_J.compute(J, rcond, true);  // J⁺ = pn_J.pinv, N = pn_J.null
      const MatrixXd& N = pn_J.null;
      P.noalias() = N * N.transpose();  // = I − J⁺J
      qdd_c.noalias() = P * qdd_des;
      qdd_c.noalias() -= pn_J.pinv * drift;
      Minv_JT = J.transpose();
      M_llt.solveInPlace(Minv_JT);
      rhs.resize(m3, 1 + na);
      rhs.col(0).noalias() = Minv_JT.transpose() * t.h;
      rhs.col(0) -= drift;
      rhs.rightCols(na).noalias() = -Minv_JT.bottomRows(na).transpose();
      G.noalias() = J * Minv_JT;  // the Delassus matrix J M⁻¹ Jᵀ
      lam.resize(m3, 1 + na);
      delassus.solve(G, rhs, rcond, lam);
      lam_h = lam.col(0);
      Lam = lam.rightCols(na);
    } else {
      pn_J.pinv.resize(nv, 0);
      pn_J.null.setIdentity(nv, nv);
      P.setIdentity(nv, nv);
      qdd_c = qdd_des;
      lam_h.resize(0);
      Lam.resize(0, na);
    }
    gen_c.noalias() = t.M * qdd_c;
    gen_c += t.h;
    tau_md.noalias() = P * gen_c;
    return true;
  }

  // _desired_all: λ_d for every active contact, desired for force contacts, implicit (eq. 13) else
  void desired_all(VectorXd& out) const {
    out.noalias() = pn_J.pinv.transpose() * gen_c;
    for (int j = 0; j < n; ++j)
      if (force_active[j]) out.segment<3>(3 * j) = Eigen::Map<const Eigen::Vector3d>(lambda_des + 3 * order[j]);
  }

  // _apply: τ, the contact forces λ it produces and q̈ = M⁻¹(Bτ − h + Jᵀλ)
  void apply(const VectorXd& tau_in, const VectorXd& lam_in, double* qdd_out, double* tau_out, double* f_out) {
    const Terms& t = engine_terms(*engine);
    const int nv = d.nv, na = d.na;
    Eigen::Map<VectorXd>(tau_out, na) = tau_in;
    gen = -t.h;
    gen.tail(na) += tau_in;
    if (n) {
      gen.noalias() += J.transpose() * lam_in;
      for (int j = 0; j < n; ++j) Eigen::Map<Eigen::Vector3d>(f_out + 3 * order[j]) = lam_in.segment<3>(3 * j);
    }
    M_llt.solveInPlace(gen);
    Eigen::Map<VectorXd>(qdd_out, nv) = gen;
  }

  // PidcQp._count_active
  static int count_active(const Qp& qp, const VectorXd& x, VectorXd& Cx) {
    Cx.noalias() = qp.C * x;
    int count = 0;
    for (int r = 0; r < qp.n_in; ++r) {
      if (!(qp.C.row(r).array() != 0.0).any()) continue;
      const double u = qp.u[r], l = qp.l[r];
      const bool upper = u < INF && u - Cx[r] <= PIDC_ACTIVE_TOL * (1.0 + std::abs(u));
      const bool lower = l > -INF && Cx[r] - l <= PIDC_ACTIVE_TOL * (1.0 + std::abs(l));
      count += upper || lower;
    }
    return count;
  }

  // PidcQp._solve_stage: the QP, or its unconstrained optimum x_free when that already meets
  // every inequality (fast_path). Returns the status; *x the answer, *n_binding the
  // inequalities at their bound. assemble() fills the QP's cost when it has to be solved.
  template <typename Assemble>
  int solve_stage(Qp& qp, const VectorXd* x_free, bool fast_path, Assemble assemble, const VectorXd** x,
                  int* n_binding, int* iters, double* time) {
    if (fast_path && x_free) {
      Cx.noalias() = qp.C * *x_free;
      if ((Cx.array() <= qp.u.array()).all() && (Cx.array() >= qp.l.array()).all()) {
        *x = x_free;
        *n_binding = 0;
        *iters = 0;
        *time = 0.0;
        return SOLVED;
      }
    }
    assemble();
    const int status = qp.solve();
    *x = &qp.x;
    *iters = qp.iterations;
    *time = qp.solve_time;
    *n_binding = count_active(qp, qp.x, Cx);
    return status;
  }

  // PidcQp._fill_motion_qp: ‖P B_m τ − τ_m,d‖², regularized on null(P B_m) and the B_f joints
  void fill_motion_qp(double eps) {
    Qp& qp = qp_motion;
    const int ns = int(sel.size());
    const MatrixXd& Ns = pn_W.null;
    qp.H.setZero();
    for (int i = 0; i < ns; ++i)
      for (int j = 0; j < ns; ++j) qp.H(sel[i], sel[j]) = W.col(i).dot(W.col(j));  // (P B_m)ᵀ P B_m
    const double scale = eps * std::max(1.0, qp.H.diagonal().maxCoeff());
    for (int i = 0; i < ns; ++i)
      for (int j = 0; j < ns; ++j) qp.H(sel[i], sel[j]) += scale * Ns.row(i).dot(Ns.row(j));
    for (int a : unsel) qp.H(a, a) += scale;
    qp.g.setZero();
    for (int i = 0; i < ns; ++i) qp.g[sel[i]] = -W.col(i).dot(y);  // −(P B_m)ᵀ τ_m,d
  }

  // PidcQp._add_internal_force_cost: + w‖T λ_s‖² on the directions the tracked forces are blind to
  void add_internal_force_cost(double weight, int nk, const MatrixXd& blind) {
    Qp& qp = qp_force;
    int n_support = 0;
    for (int j = 0; j < n; ++j) n_support += !force_active[j];
    if (weight <= 0.0 || !n_support || !(blind.array() != 0.0).any()) return;
    Lt_all.resize(2 * n_support, nk);
    ft.resize(2 * n_support);
    for (int j = 0, s = 0; j < n; ++j) {
      if (force_active[j]) continue;
      for (int r = 0; r < 2; ++r, ++s) {
        const Eigen::Map<const Eigen::RowVector3d> tangent(basis + 9 * order[j] + 3 * r);
        Lt_all.row(s).noalias() = tangent * L.block(3 * j, 0, 3, nk);
        ft[s] = tangent.dot(lam_track.segment<3>(3 * j));
      }
    }
    Lt.noalias() = Lt_all * blind;
    Ht.noalias() = Lt.transpose() * Lt;
    const double top = Ht.diagonal().maxCoeff();
    // HOWSM tracks every contact: there T L Π is round-off, and no internal force is free
    if (top <= PIDC_RANK_TOL * Lt_all.cwiseAbs2().colwise().sum().maxCoeff()) return;
    const double w_ = weight * std::max(1.0, qp.H.diagonal().maxCoeff()) / top;
    qp.H.topLeftCorner(nk, nk) += w_ * Ht;
    qp.g.head(nk).noalias() += w_ * (Lt.transpose() * ft);
  }

  // PidcQp._fill_inequalities: friction pyramids of the active contacts, torque limits
  void fill_inequalities(const Eigen::Map<const VectorXd>& tau_max) {
    Qp& qp = qp_force;
    const int na = d.na;
    for (int j = 0; j < n; ++j) {  // read every tick: set_friction takes effect
      const int i = order[j];
      const Eigen::Map<const Eigen::Matrix<double, PYRAMID_ROWS, 3, Eigen::RowMajor>> D(friction_rows + 15 * i);
      qp.C.block(PYRAMID_ROWS * i, 0, PYRAMID_ROWS, na).noalias() = D * L.middleRows(3 * j, 3);
      qp.u.segment<PYRAMID_ROWS>(PYRAMID_ROWS * i).noalias() = -(D * lam_I.segment<3>(3 * j));
    }
    qp.C.bottomRows(na) = K;
    qp.l.tail(na) = -tau_max - tau_I;
    qp.u.tail(na) = tau_max - tau_I;
  }

  // PidcQp._solve_force_elastic: stage II with elastic friction rows (its last resort)
  int solve_force_elastic(int* iters, double* time) {
    Qp &qp = qp_force, &e = qp_force_elastic;
    const int na = d.na, n_fr = PYRAMID_ROWS * d.k;
    const double weight = FRICTION_SLACK_WEIGHT * std::max(1.0, qp.H.diagonal().maxCoeff());
    e.H.topLeftCorner(na, na) = qp.H;
    e.H.diagonal().tail(n_fr).setConstant(weight);
    e.g.head(na) = qp.g;
    e.C.leftCols(na) = qp.C;
    e.l = qp.l;
    e.u = qp.u;
    // x = 0 within the torque rows even where stage I's torques sit on a limit to round-off
    e.l.tail(na) = e.l.tail(na).cwiseMin(0.0);
    e.u.tail(na) = e.u.tail(na).cwiseMax(0.0);
    int status = e.solve();
    *iters = e.iterations;
    *time = e.solve_time;
    x2 = e.x.head(na);
    if (status != SOLVED) {
      // the penalty's conditioning defeated ProxQP: the least excess alone, torques regularized
      e.H.setZero();
      e.H.diagonal().head(na).setConstant(EXCESS_ONLY_REGULARIZATION);
      e.H.diagonal().tail(n_fr).setConstant(1.0);
      e.g.setZero();
      status = e.solve();
      *iters += e.iterations;
      *time += e.solve_time;
      // failed too: stage I's torques alone, inside their limits, and the status says so
      if (status == SOLVED)
        x2 = e.x.head(na);
      else
        x2.setZero(na);
    }
    ++friction_elastic;
    double excess = 0.0;
    for (int r = 0; r < n_fr; ++r)
      if (qp.u[r] < INF) excess = std::max(excess, qp.C.row(r).dot(x2) - qp.u[r]);
    friction_excess = excess;
    return status;
  }

  // PidcQp._compute (pidc_qp, pidc_qp_howsm)
  int compute_qp(const Eigen::Map<const VectorXd>& tau_max, const double* options, double* qdd_out,
                 double* tau_out, double* f_out) {
    const double eps = options[0], internal_weight = options[2], rcond = options[3];
    const bool fast_path = options[1] != 0.0;
    const int nb = d.nb, na = d.na;
    const MatrixXd& N = pn_J.null;
    const int dn = int(N.cols()), ns = int(sel.size()), nf = int(unsel.size());
    // P B_m = N W (NᵀN = I): (P B_m)⁺ = W⁺Nᵀ, null(P B_m) = null(W)
    W.resize(dn, ns);
    for (int i = 0; i < ns; ++i) W.col(i) = N.row(nb + sel[i]).transpose();
    pn_W.compute(W, rcond, true);
    const MatrixXd &W_pinv = pn_W.pinv, &Ns = pn_W.null;
    y.noalias() = N.transpose() * tau_md;  // τ_m,d in the coordinates N of the motion space

    // stage I (eq. 17): motion-space error with the selected joints only
    Qp& qp1 = qp_motion;
    qp1.l = -tau_max;
    qp1.u = tau_max;
    free.setZero();
    if (ns) {
      x_free.noalias() = W_pinv * y;  // the optimum without limits (regularizer: min-norm)
      for (int i = 0; i < ns; ++i) free[sel[i]] = x_free[i];
    }
    const VectorXd* x1 = nullptr;
    int n_active = 0, it1 = 0;
    double t1 = 0.0;
    int status1 = solve_stage(qp1, &free, fast_path, [&] { fill_motion_qp(eps); }, &x1, &n_active, &it1, &t1);
    if (status1 != SOLVED) {  // a box is always feasible: ProxQP's accuracy, not the problem
      Qp& loose = qp_motion_loose;
      loose.H = qp1.H;
      loose.g = qp1.g;
      loose.l = qp1.l;
      loose.u = qp1.u;
      if (loose.solve() == SOLVED) {
        x1 = &loose.x;
        status1 = SOLVED;
        it1 += loose.iterations;
        t1 += loose.solve_time;
        ++stage1_loose;
      }
    }
    tau_I = *x1;

    // stage II (eq. 26): torques K x with P B K = 0 leave the motion of stage I intact
    const int nk = nf + int(Ns.cols());  // used columns of K (the others stay zero)
    N_unsel.resize(dn, nf);
    for (int i = 0; i < nf; ++i) N_unsel.col(i) = N.row(nb + unsel[i]).transpose();
    K_blocks.block(0, 0, ns, nf).noalias() = -W_pinv * N_unsel;  // −(P B_m)⁺ P B_f
    K_blocks.block(0, nf, ns, nk - nf) = Ns;
    K_blocks.block(0, nk, ns, na - nk).setZero();
    for (int a = 0; a < na; ++a) K.row(a) = K_blocks.row(k_order[a]);
    lam_I = lam_h;
    lam_I.noalias() += Lam * tau_I;
    L.noalias() = Lam * K;
    Qp& qp = qp_force;
    const int nt = int(tracked.size());
    x_track.setZero(nk);  // the least-norm x that tracks exactly (no inequalities)
    if (nt) {
      Lg.resize(nt, na);
      Jg.resize(nt, d.nv);
      for (int r = 0; r < nt; ++r) {
        Lg.row(r) = L.row(tracked[r]);
        Jg.row(r) = J.row(tracked[r]);
      }
      A2.noalias() = Jg.transpose() * Lg;  // torque-space image of the tracked force error (eq. 25)
      qp.H.noalias() = A2.transpose() * A2;
      // _tracked_targets: desired forces of the force group (pidc_qp); every contact's (HOWSM)
      targets.resize(nt);
      if (method == PIDC_HOWSM) {
        desired_all(targets);
      } else {
        for (int s = 0; s < int(force_order.size()); ++s)
          targets.segment<3>(3 * s) = Eigen::Map<const Eigen::Vector3d>(lambda_des + 3 * force_order[s]);
      }
      error_I.resize(nt);
      for (int r = 0; r < nt; ++r) error_I[r] = lam_I[tracked[r]] - targets[r];
      lam_track.noalias() = Jg.transpose() * error_I;  // (scratch)
      qp.g.noalias() = A2.transpose() * lam_track;
      pn_Lg.compute(Lg.leftCols(nk), PIDC_RANK_TOL, false);
      seen.noalias() = pn_Lg.pinv * Lg.leftCols(nk);  // Lg⁺Lg
      x_track.noalias() -= pn_Lg.pinv * error_I;
    } else {
      qp.H.setZero();
      qp.g.setZero();
      seen.setZero(nk, nk);
    }
    const double scale = eps * std::max(1.0, qp.H.diagonal().maxCoeff());
    blind = -seen;  // I − Lg⁺Lg
    blind.diagonal().array() += 1.0;
    lam_track = lam_I;
    lam_track.noalias() += L.leftCols(nk) * x_track;
    add_internal_force_cost(internal_weight, nk, blind);
    // + scale (I − Lg⁺Lg): only where the tracked forces are blind
    qp.H.diagonal().array() += scale;
    qp.H.topLeftCorner(nk, nk) -= scale * seen;
    fill_inequalities(tau_max);
    const VectorXd* x_free_p = nullptr;
    if (fast_path) {
      H_llt.compute(qp.H);
      if (H_llt.info() == Eigen::Success)
        x_free = H_llt.solve(-qp.g);
      else
        x_free = qp.H.partialPivLu().solve(-qp.g);
      x_free_p = &x_free;
    }
    const VectorXd* x = nullptr;
    int n_binding = 0, it2 = 0;
    double t2 = 0.0;
    int status2 = solve_stage(qp, x_free_p, fast_path, [] {}, &x, &n_binding, &it2, &t2);
    if (status2 != SOLVED && status1 == SOLVED) {
      int it3 = 0;
      double t3 = 0.0;
      status2 = solve_force_elastic(&it3, &t3);
      it2 = it3;
      t2 = t3;
      x = &x2;
    }
    n_active_inequalities = n_active + n_binding;
    tau = tau_I;
    tau.noalias() += K * *x;
    lam_out = lam_I;
    lam_out.noalias() += L * *x;
    apply(tau, lam_out, qdd_out, tau_out, f_out);
    iterations = it1 + it2;
    solve_time = t1 + t2;
    return std::max(status1, status2);  // the worse (Status is ordered: solved < max_iter < ...)
  }

  // Pidcwcu._compute: eq. 14 (Dehio et al.), closed form
  int compute_wcu(const double* options, double* qdd_out, double* tau_out, double* f_out) {
    const double rcond = options[3];
    const int nv = d.nv, nb = d.nb, na = d.na;
    const MatrixXd& N = pn_J.null;
    I_P = MatrixXd::Identity(nv, nv) - P;
    // eq. 11 (no external disturbance): M̄(τ_m,d − Ph + Ṗq̇) = M q̈_c
    targets.resize(3 * n);
    desired_all(targets);
    tau_cd.noalias() = I_P * gen_c;
    tau_cd.noalias() -= J.transpose() * targets;
    w.noalias() = I_P * tau_cd;
    gen = w;
    // P B = N [0, N_jᵀ] (NᵀN = I, N_j the joint rows of N): (P B)⁺ = [0; (N_jᵀ)⁺ Nᵀ]
    pn_a.compute(N.bottomRows(na).transpose(), rcond, false);
    y.noalias() = N.transpose() * tau_md;
    gen.tail(na).noalias() += pn_a.pinv * y;
    if (nb) {  // Z keeps the base rows of I − P: Z⁺ = [(I − P)_b⁺, 0]
      pn_b.compute(I_P.topRows(nb), rcond, false);
      gen.noalias() -= pn_b.pinv * w.head(nb);
    }
    // base rows of gen vanish (realizable); the forces follow from the dynamics
    tau = gen.tail(na);
    lam_out = lam_h;
    if (n) lam_out.noalias() += Lam * tau;
    apply(tau, lam_out, qdd_out, tau_out, f_out);
    iterations = 0;
    solve_time = 0.0;
    return SOLVED;
  }
};

}  // namespace
}  // namespace idyn

namespace idyn {
namespace {

// PidcQp / PidcQpHowsm / Pidcwcu._compute. options: IDYN_PIDC_OPTIONS; info: IDYN_PIDC_INFO.
int pidc_solve(Pidc& c, const double* qdd_des_p, const std::uint8_t* active, long version, const double* options,
               const double* tau_max_p, double* qdd_out, double* tau_out, double* f_out, double* info) {
  const Dims& d = c.d;
  Eigen::Map<const VectorXd> qdd_des(qdd_des_p, d.nv), tau_max(tau_max_p, d.na);
  c.friction_excess = -1.0;
  c.n_active_inequalities = 0;
  c.iterations = 0;
  c.solve_time = 0.0;
  if (version != c.version) {
    c.on_active_set(active);
    c.version = version;
  }
  int status;
  const bool singular = !c.project(qdd_des, options[3]);
  if (singular)  // Python raises LinAlgError("mass matrix is not positive definite")
    status = FAILED;
  else if (c.method == PIDCWCU)
    status = c.compute_wcu(options, qdd_out, tau_out, f_out);
  else
    status = c.compute_qp(tau_max, options, qdd_out, tau_out, f_out);
  info[0] = c.iterations;
  info[1] = c.solve_time;
  info[2] = c.n_active_inequalities;
  info[3] = static_cast<double>(c.stage1_loose);
  info[4] = static_cast<double>(c.friction_elastic);
  info[5] = c.friction_excess >= 0.0 ? 1.0 : 0.0;
  info[6] = std::max(c.friction_excess, 0.0);
  info[7] = singular ? 1.0 : 0.0;
  return status;
}

}  // namespace
}  // namespace idyn

extern "C" {

void* idyn_pidc_new(void* engine, int method, int warm_start, double eps_abs, const double* friction_rows,
                    const double* basis, const std::uint8_t* chain, const std::uint8_t* is_force_contact,
                    const double* lambda_des) {
  if (method < idyn::PIDC_QP || method > idyn::PIDCWCU) return nullptr;
  try {
    return new idyn::Pidc(static_cast<idyn::Engine*>(engine), method, warm_start != 0, eps_abs, friction_rows, basis,
                          chain, is_force_contact, lambda_des);
  } catch (...) {
    return nullptr;
  }
}

void idyn_pidc_free(void* c) { delete static_cast<idyn::Pidc*>(c); }

void idyn_pidc_reset(void* c) {
  auto& p = *static_cast<idyn::Pidc*>(c);
  for (idyn::Qp* qp : {&p.qp_motion, &p.qp_motion_loose, &p.qp_force, &p.qp_force_elastic}) qp->forget();
}

int idyn_pidc_solve(void* c, const double* qdd_des, const std::uint8_t* active, long version, const double* options,
                    const double* tau_max, double* qdd, double* tau, double* forces, double* info) {
  return idyn::pidc_solve(*static_cast<idyn::Pidc*>(c), qdd_des, active, version, options, tau_max, qdd, tau, forces,
                          info);
}

}  // extern "C"
