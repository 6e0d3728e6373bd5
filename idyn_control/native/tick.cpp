// One controller tick in C++ (idyn_control.native.tick): Controller.update for the compiled
// formulations, with the gait and contact switches, allocation-free.
//
//   gait (gait.cpp, the gait node's tick: /cmd_vel, schedule, swings, IK → references)
//   → contacts held: touching and not swinging, make/break ramped (ContactTransitions)
//   → state (Formulation.prepare) → Pinocchio pass (engine.cpp) → kinematic layer
//   → formulation (solvers.cpp) → rate limit and effort limits (Controller._finish)
//
// Python's controller.py and contacts.py are the reference; this is their tick line for
// line, on the very buffers the Python tick uses (addresses from native/tick.py), so the
// two can alternate tick by tick. The node's compiled loop (rt.cpp) runs it for every
// routine tick, contact switches and a trotting gait included. When the solve fails (or is
// not finite) the tick takes back what it changed (gait and contact state) and returns
// non-zero: the Python tick then runs it again and takes its fallback.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <memory>
#include <type_traits>
#include <vector>

#include "api.h"  // engine.cpp, solvers.cpp, gait.cpp: what the tick calls

// contacts.py's arithmetic is Python's: no fused multiply-add (the ramps round alike)
#pragma GCC optimize("fp-contract=off")

namespace {

constexpr double INF = 1e20;  // idyn_control.qp.INF
constexpr double NEGLIGIBLE_FORCE = 1e-6;  // contacts.NEGLIGIBLE_FORCE

// native/tick.py SLOTS, in order (addresses of numpy buffers and native handles)
enum Slot {
  T_ENGINE, T_LAYER_ARGS0, T_LAYER_ARGS6 = T_LAYER_ARGS0 + 6, T_SOLVER, T_SOLVER_A0, T_SOLVER_A1, T_SOLVER_A2,
  T_SOLVER_A3, T_SOLVER_TASKS, T_SOLVER_OUT0, T_SOLVER_OUT1, T_SOLVER_OUT2, T_SOLVER_OUT3, T_TERMS_Q, T_TERMS_V,
  T_JOINT_Q_INDEX, T_CTRL_QDD_DES, T_F_QDD_DES, T_FORCES, T_F_TAU, T_TAU_LIMIT, T_TAU_PREV, T_SWING, T_ACTIVE,
  T_MAX_NORMAL_FORCE, T_RELEASED, T_BASIS, T_BOUND, T_RATE, T_REQUESTED, T_HELD, T_VERSION, T_GAIT,
  // the running joint trajectory (JointTrajectoryReference; index 0: none) and the references it writes
  T_TRAJ_INDEX, T_TRAJ_TIMES, T_TRAJ_POS, T_TRAJ_VEL, T_TRAJ_START, T_TRAJ_Q, T_TRAJ_V, T_TRAJ_A, T_REF_Q, T_REF_V,
  T_REF_A, T_CTRL_Q_REF, T_CTRL_V_REF, T_CTRL_A_REF, T_COUNT
};
// native/tick.py VALUES, in order
enum Value { V_NQ, V_NV, V_NB, V_NA, V_K, V_SOLVER_KIND, V_N_TASKS, V_RATE_STEP, V_RAMP_TIME, V_DT, V_FORCE_SCALE,
             V_TRAJ_K, V_TRAJ_N, V_COUNT };
enum SolverKind { QP_CONTACT = 0, WBC = 1, RNEA = 2, PIDC = 3 };

static_assert(T_COUNT == IDYN_TICK_SLOTS && V_COUNT == IDYN_TICK_VALUES, "api.h's tick layout");

struct Tick {
  void* p[T_COUNT] = {};
  double val[V_COUNT] = {};
  // what a tick changes besides its outputs, kept to take it back (k entries each)
  std::vector<double> bound, rate, max_normal_force;
  std::vector<std::uint8_t> requested, held, released, active;
  std::int64_t version = 0;

  template <typename T>
  T* at(int slot) const { return static_cast<T*>(p[slot]); }
};

// contacts.py ContactTransitions.update + Controller.update: which contacts the formulation
// holds this tick, with their force bounds; the contact set's version moves on when the
// held or released set changes (its QP rows are then rebuilt)
void hold_contacts(Tick& T, const std::uint8_t* mask) {
  const int k = int(T.val[V_K]);
  const double ramp_time = T.val[V_RAMP_TIME], dt = T.val[V_DT], scale = T.val[V_FORCE_SCALE];
  const std::uint8_t* swing = T.at<std::uint8_t>(T_SWING);
  double* b = T.at<double>(T_BOUND);
  double* rate = T.at<double>(T_RATE);
  std::uint8_t* requested = T.at<std::uint8_t>(T_REQUESTED);
  std::uint8_t* held = T.at<std::uint8_t>(T_HELD);
  std::uint8_t* released = T.at<std::uint8_t>(T_RELEASED);
  std::uint8_t* active = T.at<std::uint8_t>(T_ACTIVE);
  const double* forces = T.at<double>(T_FORCES);  // the last tick's [N], world
  const double* basis = T.at<double>(T_BASIS);    // rows t1, t2, n per contact
  bool released_changed = false, active_changed = false;
  for (int i = 0; i < k; ++i) {
    const bool req = mask[i] && !swing[i];
    if (ramp_time <= 0.0) {
      b[i] = req ? INF : 0.0;
      rate[i] = 0.0;
    } else if (req) {
      if (b[i] < INF) {  // making (or re-making while breaking): ramp up
        b[i] += scale * dt / ramp_time;
        if (b[i] >= scale) b[i] = INF;
      }
    } else {
      if (requested[i]) {  // breaks now: ramp down from the force it carries
        const double* n = basis + 9 * i + 6;
        const double* f = forces + 3 * i;
        const double normal = n[0] * f[0] + n[1] * f[1] + n[2] * f[2];
        b[i] = std::min(b[i], std::max(normal, 0.0));
        if (b[i] <= NEGLIGIBLE_FORCE * scale) b[i] = 0.0;  // carries nothing (to QP accuracy): off now
        rate[i] = b[i] / ramp_time;
      }
      b[i] = std::max(b[i] - rate[i] * dt, 0.0);
      if (b[i] <= 1e-9 * rate[i] * ramp_time) b[i] = 0.0;  // what round-off leaves of the ramp: over
    }
    requested[i] = req;
    held[i] = req || b[i] > 0.0;
    T.at<double>(T_MAX_NORMAL_FORCE)[i] = b[i];
    const std::uint8_t rel = held[i] && !req;
    released_changed |= rel != released[i];
    released[i] = rel;
    active_changed |= held[i] != active[i];
    active[i] = held[i];
  }
  std::int64_t& version = *T.at<std::int64_t>(T_VERSION);
  version += released_changed;
  version += active_changed;
}

// What a tick changes besides its outputs: f(kept copy, slot) for each
template <typename F>
void for_each_kept(Tick& T, F&& f) {
  f(T.bound, T_BOUND);
  f(T.rate, T_RATE);
  f(T.max_normal_force, T_MAX_NORMAL_FORCE);
  f(T.requested, T_REQUESTED);
  f(T.held, T_HELD);
  f(T.released, T_RELEASED);
  f(T.active, T_ACTIVE);
}

void save(Tick& T) {
  const int k = int(T.val[V_K]);
  for_each_kept(T, [&T, k](auto& kept, int slot) {
    using E = typename std::decay_t<decltype(kept)>::value_type;
    const E* now = T.at<E>(slot);
    kept.assign(now, now + k);
  });
  T.version = *T.at<std::int64_t>(T_VERSION);
}

void restore(Tick& T) {
  for_each_kept(T, [&T](auto& kept, int slot) {
    using E = typename std::decay_t<decltype(kept)>::value_type;
    std::copy(kept.begin(), kept.end(), T.at<E>(slot));
  });
  *T.at<std::int64_t>(T_VERSION) = T.version;
  if (T.p[T_GAIT]) idyn_gait_undo(T.p[T_GAIT]);
}

// JointTrajectoryReference.sample (ros/conversions.py) and the node's _apply_references
// (ros/node_loop.py), line for line: the running trajectory's references at now_ns (the
// node's clock) into its joints of the node's full references, which go to the controller.
// false, and nothing written, once it is over (the Python tick ends it).
bool sample_trajectory(Tick& T, std::int64_t now_ns) {
  const int kt = int(T.val[V_TRAJ_K]), n = int(T.val[V_TRAJ_N]), na = int(T.val[V_NA]);
  const double* times = T.at<double>(T_TRAJ_TIMES);
  const double* pos = T.at<double>(T_TRAJ_POS);  // n × kt
  const double* vel = T.at<double>(T_TRAJ_VEL);  // n × kt, or none: linear
  double* q = T.at<double>(T_TRAJ_Q);
  double* v = T.at<double>(T_TRAJ_V);
  double* a = T.at<double>(T_TRAJ_A);
  const double t = double(now_ns - *T.at<std::int64_t>(T_TRAJ_START)) * 1e-9;
  if (t >= times[n - 1]) return false;
  if (t <= times[0]) {
    for (int j = 0; j < kt; ++j) q[j] = pos[j], v[j] = vel ? vel[j] : 0.0, a[j] = 0.0;
  } else {
    const int i = int(std::upper_bound(times, times + n, t) - times) - 1;
    const double h = times[i + 1] - times[i];
    const double s = (t - times[i]) / h;
    const double* p0 = pos + i * kt;
    const double* p1 = p0 + kt;
    if (!vel) {
      for (int j = 0; j < kt; ++j) q[j] = p0[j] + s * (p1[j] - p0[j]), v[j] = (p1[j] - p0[j]) / h, a[j] = 0.0;
    } else {  // cubic Hermite on s ∈ [0, 1]
      const double s2 = s * s, s3 = s * s * s;
      const double c0 = 2 * s3 - 3 * s2 + 1, c1 = s3 - 2 * s2 + s, c2 = -2 * s3 + 3 * s2, c3 = s3 - s2;
      const double d0 = 6 * s2 - 6 * s, d1 = 3 * s2 - 4 * s + 1, d2 = -6 * s2 + 6 * s, d3 = 3 * s2 - 2 * s;
      const double e0 = 12 * s - 6, e1 = 6 * s - 4, e2 = -12 * s + 6, e3 = 6 * s - 2;
      for (int j = 0; j < kt; ++j) {
        const double m0 = vel[i * kt + j] * h, m1 = vel[(i + 1) * kt + j] * h;
        q[j] = c0 * p0[j] + c1 * m0 + c2 * p1[j] + c3 * m1;
        v[j] = (d0 * p0[j] + d1 * m0 + d2 * p1[j] + d3 * m1) / h;
        a[j] = (e0 * p0[j] + e1 * m0 + e2 * p1[j] + e3 * m1) / (h * h);
      }
    }
  }
  const std::int64_t* index = T.at<std::int64_t>(T_TRAJ_INDEX);
  double* qf = T.at<double>(T_REF_Q);
  double* vf = T.at<double>(T_REF_V);
  double* af = T.at<double>(T_REF_A);
  for (int j = 0; j < kt; ++j) qf[index[j]] = q[j], vf[index[j]] = v[j], af[index[j]] = a[j];
  std::memcpy(T.p[T_CTRL_Q_REF], qf, sizeof(double) * na);  // Controller.set_joint_reference
  std::memcpy(T.p[T_CTRL_V_REF], vf, sizeof(double) * na);
  std::memcpy(T.p[T_CTRL_A_REF], af, sizeof(double) * na);
  return true;
}

std::int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// The tick; see the file comment. Returns 0 (τ written), 1 (the solve failed or was not
// finite), 2 (bad state) or 3 (the joint trajectory ends: the Python tick ends it): on
// non-zero nothing changed but the formulation's outputs (and a trajectory's references).
int run(Tick& T, double t, const double* q, const double* v, const std::uint8_t* mask, double now, double* tau,
        int* saturated) {
  const int nq = int(T.val[V_NQ]), nv = int(T.val[V_NV]), nb = int(T.val[V_NB]), na = int(T.val[V_NA]),
            k = int(T.val[V_K]);
  // Formulation.prepare's check: a base quaternion of zero norm is refused
  double norm = 1.0;
  if (nb) {
    norm = std::sqrt(q[3] * q[3] + q[4] * q[4] + q[5] * q[5] + q[6] * q[6]);
    if (!(norm >= 1e-9)) return 2;
  }
  // a running joint trajectory, on the node's clock (CLOCK_REALTIME: the node hands it here
  // only when its ROS clock is the system clock)
  if (T.p[T_TRAJ_INDEX] && !sample_trajectory(T, realtime_ns())) return 3;
  save(T);
  if (T.p[T_GAIT]) idyn_gait_drive(T.p[T_GAIT], t, q, v, mask, now);  // the references of this tick
  hold_contacts(T, mask);
  double* tq = T.at<double>(T_TERMS_Q);
  double* tv = T.at<double>(T_TERMS_V);
  for (int i = 0; i < nq; ++i) tq[i] = (nb && i >= 3 && i < 7) ? q[i] / norm : q[i];
  std::memcpy(tv, v, sizeof(double) * nv);
  idyn_engine_update(T.p[T_ENGINE]);
  void** la = T.p + T_LAYER_ARGS0;
  std::memcpy(la[4], mask, k);  // the kinematic layer's contact mask
  idyn_kinematic_layer(la[0], static_cast<const double* const*>(la[1]), static_cast<const int*>(la[2]),
                       static_cast<const std::uint8_t*>(la[3]), static_cast<const std::uint8_t*>(la[4]),
                       static_cast<const double*>(la[5]), static_cast<double*>(la[6]));
  std::memcpy(T.p[T_F_QDD_DES], T.p[T_CTRL_QDD_DES], sizeof(double) * nv);
  std::memset(T.p[T_FORCES], 0, sizeof(double) * 3 * k);
  const long version = long(*T.at<std::int64_t>(T_VERSION));
  const std::uint8_t* active = T.at<std::uint8_t>(T_ACTIVE);
  int status;
  const int kind = int(T.val[V_SOLVER_KIND]);
  if (kind == QP_CONTACT) {
    status = idyn_qpc_solve(T.p[T_SOLVER], T.at<double>(T_SOLVER_A0), active, version, T.at<double>(T_SOLVER_A2),
                            T.at<double>(T_SOLVER_A3), T.at<double>(T_SOLVER_OUT0), T.at<double>(T_SOLVER_OUT1),
                            T.at<double>(T_SOLVER_OUT2), T.at<double>(T_SOLVER_OUT3));
  } else if (kind == PIDC) {  // pidc_qp and its baselines: λ_d read from the formulation's buffer
    status = idyn_pidc_solve(T.p[T_SOLVER], T.at<double>(T_SOLVER_A0), active, version, T.at<double>(T_SOLVER_A2),
                             T.at<double>(T_SOLVER_A3), T.at<double>(T_SOLVER_OUT0), T.at<double>(T_SOLVER_OUT1),
                             T.at<double>(T_SOLVER_OUT2), T.at<double>(T_SOLVER_OUT3));
  } else if (kind == WBC) {
    status = idyn_wbc_solve(T.p[T_SOLVER], T.at<double>(T_SOLVER_A0), active, version, T.at<double>(T_SOLVER_A2),
                            T.at<double>(T_SOLVER_A3), int(T.val[V_N_TASKS]), T.at<double>(T_SOLVER_TASKS),
                            T.at<double>(T_SOLVER_OUT0), T.at<double>(T_SOLVER_OUT1), T.at<double>(T_SOLVER_OUT2),
                            T.at<double>(T_SOLVER_OUT3));
  } else {  // rnea, fixed base: τ = M q̈ + h
    const double* M = T.at<double>(T_SOLVER_A0);
    const double* h = T.at<double>(T_SOLVER_A1);
    double* qdd = T.at<double>(T_SOLVER_OUT0);
    double* tau_f = T.at<double>(T_SOLVER_OUT1);
    std::memcpy(qdd, T.p[T_F_QDD_DES], sizeof(double) * nv);
    for (int i = 0; i < nv; ++i) {
      double x = h[i];
      for (int j = 0; j < nv; ++j) x += M[i * nv + j] * qdd[j];
      tau_f[i] = x;
    }
    status = 0;
  }
  const double* f_tau = T.at<double>(T_F_TAU);
  bool finite = status == 0;
  for (int i = 0; i < na && finite; ++i) finite = std::isfinite(f_tau[i]);
  if (!finite) {  // the Python tick solves again and takes its fallback
    restore(T);
    return 1;
  }
  // Controller._finish: rate limit, effort limits
  const double* limit = T.at<double>(T_TAU_LIMIT);
  double* prev = T.at<double>(T_TAU_PREV);
  const double step = T.val[V_RATE_STEP];
  int n_saturated = 0;
  for (int i = 0; i < na; ++i) {
    double x = f_tau[i];
    if (step > 0.0) x = std::min(std::max(x, prev[i] - step), prev[i] + step);
    if (std::abs(x) > limit[i]) {
      ++n_saturated;
      x = std::min(std::max(x, -limit[i]), limit[i]);
    }
    tau[i] = prev[i] = x;
  }
  *saturated = n_saturated;
  return 0;
}

}  // namespace

extern "C" {

// A tick on the given buffers (slots: native/tick.py SLOTS, values: VALUES; both copied).
void* idyn_tick_new(const std::uint64_t* slots, const double* values) {
  auto T = std::make_unique<Tick>();
  for (int i = 0; i < T_COUNT; ++i) T->p[i] = reinterpret_cast<void*>(slots[i]);
  for (int i = 0; i < V_COUNT; ++i) T->val[i] = values[i];
  const std::size_t k = std::size_t(std::max(0.0, values[V_K]));
  T->bound.reserve(k);
  T->rate.reserve(k);
  T->max_normal_force.reserve(k);
  T->requested.reserve(k);
  T->held.reserve(k);
  T->released.reserve(k);
  T->active.reserve(k);
  return T.release();
}

void idyn_tick_free(void* h) { delete static_cast<Tick*>(h); }

// The running joint trajectory's references at now_ns [ns, the node's clock], as a tick
// writes them: 1, or 0 once it is over (tests: against the Python tick's).
int idyn_tick_sample_trajectory(void* h, std::int64_t now_ns) {
  Tick& T = *static_cast<Tick*>(h);
  return T.p[T_TRAJ_INDEX] ? int(sample_trajectory(T, now_ns)) : 0;
}

// The buffers and settings of the next ticks (after a Python tick; same sizes).
void idyn_tick_plan(void* h, const std::uint64_t* slots, const double* values) {
  Tick& T = *static_cast<Tick*>(h);
  for (int i = 0; i < T_COUNT; ++i) T.p[i] = reinterpret_cast<void*>(slots[i]);
  for (int i = 0; i < V_COUNT; ++i) T.val[i] = values[i];
}

// One tick at time t [s] (the gait's clock: the input's stamp) with the measured (q, v)
// (q's base quaternion not necessarily normalized) and contact mask (k bytes); now:
// CLOCK_MONOTONIC [s] (the gait's /cmd_vel timeout). τ into tau (na), joints clamped into
// *saturated. Returns 0, or non-zero when the Python tick must run it (see run).
int idyn_tick_run(void* h, double t, const double* q, const double* v, const std::uint8_t* mask, double now,
                  double* tau, int* saturated) {
  return run(*static_cast<Tick*>(h), t, q, v, mask, now, tau, saturated);
}

}  // extern "C"
