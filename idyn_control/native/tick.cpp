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
  T_MAX_NORMAL_FORCE, T_RELEASED, T_BASIS, T_BOUND, T_RATE, T_REQUESTED, T_HELD, T_VERSION, T_GAIT, T_COUNT
};
// native/tick.py VALUES, in order
enum Value { V_NQ, V_NV, V_NB, V_NA, V_K, V_SOLVER_KIND, V_N_TASKS, V_RATE_STEP, V_RAMP_TIME, V_DT, V_FORCE_SCALE,
             V_COUNT };
enum SolverKind { QP_CONTACT = 0, WBC = 1, RNEA = 2 };

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

// The tick; see the file comment. Returns 0 (τ written), 1 (the solve failed or was not
// finite) or 2 (bad state): on non-zero nothing changed but the formulation's outputs.
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
