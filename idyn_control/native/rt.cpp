// The controller node's input → command path without Python (idyn_control.native.rt).
//
// A thread of its own (SCHED_FIFO when asked) is woken by the middleware when a
// /joint_states sample arrives (rcl_subscription_set_on_new_message_callback), takes it as
// CDR bytes, and, when the node has declared the tick routine (active, inputs fresh, the
// joint-name layout unchanged since the last Python tick, a compiled formulation), runs
// the whole tick here: joint states → state → the compiled controller tick (tick.cpp: gait,
// contacts held (switches and their ramps included), Pinocchio pass, kinematic layer,
// formulation, clamps) → command CDR → rcl_publish_serialized_message. No Python, no GIL,
// no allocation. Everything else (first tick, new references or gains, watchdog, failed
// solves) is handed to Python with the same bytes, and Python's tick runs as before, on
// this thread. Monitoring messages (~/state, the predicted contact wrenches, the gait's
// references) are published from here too, every `monitor_every` fast ticks, from
// serialized templates whose values the tick patches in. Bookkeeping (statistics,
// counters, diagnostics) is left to a Python thread: each fast tick appends a record to a
// single-producer single-consumer ring and, every `drain_every` records, signals an eventfd
// that thread waits on. The loop thread never waits for Python in a routine tick.
//
// The compiled tick lives in the main native library; Python passes its function pointer,
// its handle and the node's numpy buffers, so this library needs only rcl.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <rcl/publisher.h>
#include <rcl/subscription.h>
#include <rcutils/allocator.h>
#include <rcutils/error_handling.h>
#include <rmw/serialized_message.h>

#include "rt_api.h"

namespace {

// tick.cpp idyn_tick_run: (tick, t [s], q, v, mask, now [s, monotonic], τ out, saturated out) → 0 = done
using TickFn = int (*)(void*, double, const double*, const double*, const uint8_t*, double, double*, int*);
using SlowFn = idyn_rt_slow_fn;

// Plan: what one fast tick works on (numpy buffers and native handles, addresses from
// Python, idyn_control/native/rt.py PLAN_* names in this order).
enum PlanSlot {
  P_TICK_FN, P_TICK, P_JOINT_Q_INDEX, P_NODE_TAU, P_NODE_Q, P_NODE_V, P_NODE_MASK, P_IN_JQ, P_IN_JV, P_CMD_INDEX,
  P_CMD_VIEW, P_NAMES_INDEX, P_STATE_BOUNDS, P_COUNT
};
// Scalars of the plan (doubles): sizes, limits.
enum PlanValue {
  V_NV, V_NB, V_NA, V_K, V_N_CMD, V_NAMES_AT, V_NAMES_LEN, V_N_NAMES, V_UNKNOWN, V_TIMEOUT, V_THRESHOLD, V_COUNT
};
// One fast tick's record for Python's bookkeeping (doubles, REC_* in rt.py).
enum Record {
  R_RECEIVED_NS, R_WAKE_NS, R_START_NS, R_PUBLISHED_NS, R_START_MONO, R_PUBLISHED_MONO, R_SATURATED,
  R_STAMP_NS, R_OVERWRITTEN, R_WIDTH
};
constexpr uint64_t RING = 1024;  // records not yet read by Python (full: counted and dropped)

double mono() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}
int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

inline uint32_t u32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

struct Rt {
  const rcl_subscription_t* sub;
  const rcl_publisher_t* pub;
  SlowFn slow;
  void* slow_ctx;  // the binding's object, passed back to slow
  int notify_fd;  // eventfd the bookkeeping thread waits on
  int priority;
  std::vector<int> cpus;
  int drain_every;

  std::thread thread;
  std::mutex wake_mutex;
  std::condition_variable wake;
  std::atomic<size_t> events{0};
  std::atomic<bool> sleeping{false};
  std::atomic<bool> stop{false};
  double spin_s = 0.0;    // poll this long either side of the next sample's expected arrival
  double period_s = 0.0;  // the input's period (expected arrival = last wake-up + period)
  std::mutex tick_mutex;  // one tick at a time (Python's watchdog tick takes it too)

  // the plan (written by Python while it holds tick_mutex or from the slow tick on this thread)
  void* p[P_COUNT] = {};
  double val[V_COUNT] = {};
  std::vector<uint8_t> names;  // the CDR bytes of the expected name list
  std::atomic<int> fast{0};    // Python's "the routine tick may run here"
  std::atomic<double> last_tick{0.0};  // CLOCK_MONOTONIC start of the last fast tick [s]

  // inputs from Python callbacks (odometry, contact estimates), under input_mutex
  std::mutex input_mutex;
  double base_q[7] = {0, 0, 0, 0, 0, 0, 1}, base_v[6] = {};
  double t_base = 0.0, t_contacts = 0.0;
  std::vector<double> contacts;
  int64_t last_stamp = 0;

  // records for Python: written at head by this thread, read from tail by Python's
  double ring[RING][R_WIDTH];
  std::atomic<uint64_t> head{0}, tail{0};
  int since_notify = 0;
  // fast ticks, handed to Python, unknown-joint messages, records dropped (rt.py COUNTERS)
  double counters[4] = {};

  rcl_serialized_message_t in = rmw_get_zero_initialized_serialized_message();
  rcl_serialized_message_t out = rmw_get_zero_initialized_serialized_message();
  std::vector<double> v, qb, jq, jv;

  // monitoring (idyn_rt_monitor): per message a publisher, its CDR bytes (Python's), the
  // offset of its header stamp (-1: none) and a range of fields: (byte offset, source double)
  struct Message {
    const rcl_publisher_t* pub;
    rcl_serialized_message_t cdr;
    int64_t stamp_at;
    int first, count;
  };
  std::vector<Message> monitors;
  // odometry and contact estimates taken here too (idyn_rt_inputs), not by Python: a tick
  // then uses the samples that arrived before its joint states (through Python's executor
  // they could lag it by ticks while the robot moves)
  const rcl_subscription_t* odom_sub = nullptr;
  const rcl_subscription_t* contacts_sub = nullptr;
  rcl_serialized_message_t odom_in = rmw_get_zero_initialized_serialized_message();
  rcl_serialized_message_t contacts_in = rmw_get_zero_initialized_serialized_message();
  bool twist_in_parent = false;
  double base_limits[3] = {0, 0, 0};  // |position| [m], |linear| [m/s], |angular| [rad/s]
  double* py_base_q = nullptr;        // the node's _in_base_q (7), _in_base_v (6), _in_contacts (k)
  double* py_base_v = nullptr;
  double* py_contacts = nullptr;
  int64_t odom_stamp = 0;
  // drops (rt.py INPUT_DROPS): odom nonfinite, implausible, bad_quaternion, out_of_order;
  // contact estimates wrong_size, nonfinite
  double input_drops[6] = {};
  std::vector<int64_t> field_at;
  std::vector<const double*> field_src;
  int monitor_every = 0, monitor_countdown = 0;
  // contact forces in the contact frames for the wrench messages: Rᵢᵀ fᵢ into wrench_local
  const double* rotation = nullptr;  // k x 3 x 3
  const double* forces = nullptr;    // k x 3, world
  double* wrench_local = nullptr;    // k x 3
  int monitor_k = 0;

  // desired forces of force contacts (idyn_rt_force_refs, idyn_rt_set_desired_force), under
  // input_mutex: the latest accepted reference per contact [N], whether it is in the contact
  // frame, its arrival (CLOCK_MONOTONIC [s], 0: none yet)
  struct ForceRefs {
    double* lambda_des = nullptr;      // the formulation's k x 3 desired forces [N, world]
    const double* rotation = nullptr;  // ContactSet.rotation, k x 3 x 3: the last tick's
    std::vector<uint8_t> is_force;     // contacts whose reference the tick writes
    std::vector<double> force, t;      // k x 3, k
    std::vector<uint8_t> local;        // k
    double timeout = 0.0;              // contacts.desired_wrench_timeout [s]; 0: held forever
  } refs;
};

inline double f64(const uint8_t* p) {
  double x;
  std::memcpy(&x, p, 8);
  return x;
}

// conversions.OdometryReader.read + ControllerNode._on_odom on the CDR bytes of a
// nav_msgs/Odometry; a drop is counted in input_drops
void take_odometry(Rt* rt, const uint8_t* d, size_t size, double now) {
  if (size < 16 || d[0] != 0 || d[1] != 1) return;  // not little-endian CDR: Python never sees it either
  int32_t sec;
  std::memcpy(&sec, d + 4, 4);
  const int64_t stamp = int64_t(sec) * 1000000000LL + u32(d + 8);
  size_t off = 16 + size_t(u32(d + 12));                     // header.frame_id
  off = (off + 3) & ~size_t(3);
  if (off + 4 > size) return;
  off += 4 + size_t(u32(d + off));                           // child_frame_id
  off = ((off - 4 + 7) & ~size_t(7)) + 4;                    // doubles: 8-aligned in the payload
  const size_t twist_at = off + 8 * (7 + 36);
  if (twist_at + 8 * 6 > size) return;
  double q[7], v[6];
  for (int i = 0; i < 7; ++i) q[i] = f64(d + off + 8 * i);
  for (int i = 0; i < 6; ++i) v[i] = f64(d + twist_at + 8 * i);
  double check = 0.0;
  for (double x : q) check += 0.0 * x;
  for (double x : v) check += 0.0 * x;
  if (check != 0.0) {
    rt->input_drops[0] += 1;
    return;
  }
  const double* lim = rt->base_limits;
  auto over = [](const double* x, double m) { return std::max({std::abs(x[0]), std::abs(x[1]), std::abs(x[2])}) > m; };
  if (over(q, lim[0]) || over(v, lim[1]) || over(v + 3, lim[2])) {
    rt->input_drops[1] += 1;
    return;
  }
  const double norm = std::sqrt(q[3] * q[3] + q[4] * q[4] + q[5] * q[5] + q[6] * q[6]);
  if (std::abs(norm - 1.0) > 0.1) {
    rt->input_drops[2] += 1;
    return;
  }
  for (int i = 3; i < 7; ++i) q[i] /= norm;
  if (rt->twist_in_parent) {  // world-frame twist → base frame: Rᵀ v (conversions.quaternion_to_matrix)
    const double x = q[3], y = q[4], z = q[5], w = q[6];
    const double R[9] = {1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                         2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                         2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)};
    for (int b = 0; b < 6; b += 3) {
      const double a[3] = {v[b], v[b + 1], v[b + 2]};
      for (int r = 0; r < 3; ++r) v[b + r] = R[r] * a[0] + R[3 + r] * a[1] + R[6 + r] * a[2];
    }
  }
  // a stamp older than the last one is dropped; a jump back > 1 s is a clock reset (accepted)
  if (stamp != 0 && stamp < rt->odom_stamp && rt->odom_stamp - stamp <= 1000000000LL) {
    rt->input_drops[3] += 1;
    return;
  }
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  std::memcpy(rt->base_q, q, sizeof q);
  std::memcpy(rt->base_v, v, sizeof v);
  std::memcpy(rt->py_base_q, q, sizeof q);
  std::memcpy(rt->py_base_v, v, sizeof v);
  rt->t_base = now;
  rt->odom_stamp = stamp;
}

// ControllerNode._on_contacts on the CDR bytes of a std_msgs/Float64MultiArray
void take_contacts(Rt* rt, const uint8_t* d, size_t size, double now) {
  if (size < 12 || d[0] != 0 || d[1] != 1) return;
  size_t off = 4;
  const uint32_t n_dim = u32(d + off);  // layout.dim: label (string), size, stride each
  off += 4;
  for (uint32_t i = 0; i < n_dim; ++i) {
    off = (off + 3) & ~size_t(3);
    if (off + 4 > size) return;
    off += 4 + size_t(u32(d + off));
    off = (off + 3) & ~size_t(3);
    off += 8;
  }
  off = (off + 3) & ~size_t(3);
  off += 4;  // layout.data_offset
  if (off + 4 > size) return;
  const uint32_t n = u32(d + off);
  off = ((off + 4 - 4 + 7) & ~size_t(7)) + 4;
  const size_t k = rt->contacts.size();
  if (n != k) {
    rt->input_drops[4] += 1;
    return;
  }
  if (off + 8 * k > size) return;
  double check = 0.0;
  for (size_t i = 0; i < k; ++i) check += 0.0 * f64(d + off + 8 * i);
  if (check != 0.0) {
    rt->input_drops[5] += 1;
    return;
  }
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  for (size_t i = 0; i < k; ++i) rt->contacts[i] = rt->py_contacts[i] = f64(d + off + 8 * i);
  rt->t_contacts = now;
}

// The newest odometry and contact estimates that arrived (all are read, in order)
void take_inputs(Rt* rt) {
  rmw_message_info_t info = rmw_get_zero_initialized_message_info();
  const double now = mono();
  if (rt->odom_sub)
    while (rcl_take_serialized_message(rt->odom_sub, &rt->odom_in, &info, nullptr) == RCL_RET_OK)
      take_odometry(rt, rt->odom_in.buffer, rt->odom_in.buffer_length, now);
  if (rt->contacts_sub)
    while (rcl_take_serialized_message(rt->contacts_sub, &rt->contacts_in, &info, nullptr) == RCL_RET_OK)
      take_contacts(rt, rt->contacts_in.buffer, rt->contacts_in.buffer_length, now);
  rcutils_reset_error();
}

// The monitoring messages of a fast tick (its input's stamp), after its command is out.
void publish_monitors(Rt* rt, int64_t stamp) {
  if (rt->monitor_every <= 0 || --rt->monitor_countdown > 0) return;
  rt->monitor_countdown = rt->monitor_every;
  for (int i = 0; i < rt->monitor_k; ++i) {
    const double* R = rt->rotation + 9 * i;
    const double* f = rt->forces + 3 * i;
    for (int r = 0; r < 3; ++r) rt->wrench_local[3 * i + r] = R[r] * f[0] + R[3 + r] * f[1] + R[6 + r] * f[2];
  }
  int64_t sec64 = stamp / 1000000000LL;  // Python's divmod: the remainder is never negative
  if (stamp - sec64 * 1000000000LL < 0) --sec64;
  const int32_t sec = int32_t(sec64);
  const uint32_t nanosec = uint32_t(stamp - sec64 * 1000000000LL);
  for (auto& m : rt->monitors) {
    uint8_t* buf = m.cdr.buffer;
    if (m.stamp_at >= 0) {
      std::memcpy(buf + m.stamp_at, &sec, 4);
      std::memcpy(buf + m.stamp_at + 4, &nanosec, 4);
    }
    for (int j = m.first; j < m.first + m.count; ++j) std::memcpy(buf + rt->field_at[j], rt->field_src[j], 8);
    if (rcl_publish_serialized_message(m.pub, &m.cdr, nullptr) != RCL_RET_OK) rcutils_reset_error();
  }
}

// The desired forces of this tick into the formulation's buffer, as the Python tick's
// _apply_desired_forces (hold rt->input_mutex): a reference in the contact frame is turned
// into the world with the last tick's orientation. False when one is older than the
// timeout: the Python tick takes it back to zero, warns and counts.
bool apply_force_refs(Rt* rt, double now) {
  auto& r = rt->refs;
  if (!r.lambda_des) return true;
  for (size_t i = 0; i < r.is_force.size(); ++i) {
    if (!r.is_force[i]) continue;
    if (r.timeout > 0.0 && r.t[i] > 0.0 && now - r.t[i] > r.timeout) return false;
    const double* f = &r.force[3 * i];
    double* out = r.lambda_des + 3 * i;
    if (r.local[i]) {
      const double* R = r.rotation + 9 * i;  // row-major
      for (int a = 0; a < 3; ++a) out[a] = R[3 * a] * f[0] + R[3 * a + 1] * f[1] + R[3 * a + 2] * f[2];
    } else {
      out[0] = f[0];
      out[1] = f[1];
      out[2] = f[2];
    }
  }
  return true;
}

void on_message(const void* user, size_t n) {
  Rt* rt = const_cast<Rt*>(static_cast<const Rt*>(user));
  rt->events.fetch_add(n);
  if (rt->sleeping.load()) {  // else the loop is polling (or about to re-check): no wake-up needed
    std::lock_guard<std::mutex> lock(rt->wake_mutex);
    rt->wake.notify_one();
  }
}

// The fast tick on the message in rt->in; false: hand it to Python.
bool fast_tick(Rt* rt, int64_t received_ns, int64_t wake_ns, int overwritten) {
  const double* val = rt->val;
  void** p = rt->p;
  const uint8_t* d = rt->in.buffer;
  const size_t size = rt->in.buffer_length;
  const int nb = int(val[V_NB]), na = int(val[V_NA]), k = int(val[V_K]);
  const size_t names_at = size_t(val[V_NAMES_AT]), names_len = size_t(val[V_NAMES_LEN]);
  const uint32_t n_names = uint32_t(val[V_N_NAMES]);
  // ---- joint states: the layout Python last accepted, finite values, in order
  if (size < 16 || d[0] != 0 || d[1] != 1) return false;
  const double start_mono = mono();
  const int64_t start_ns = realtime_ns();
  int32_t sec;
  std::memcpy(&sec, d + 4, 4);
  const int64_t stamp = int64_t(sec) * 1000000000LL + u32(d + 8);
  size_t off = 16 + size_t(u32(d + 12));
  off = (off + 3) & ~size_t(3);
  if (off != names_at || off + names_len > size || std::memcmp(d + off, rt->names.data(), names_len) != 0)
    return false;
  off += names_len;
  const double* seq[2];
  for (int s = 0; s < 2; ++s) {
    off = (off + 3) & ~size_t(3);
    if (off + 4 > size || u32(d + off) != n_names) return false;
    off += 4;
    off = ((off - 4 + 7) & ~size_t(7)) + 4;
    if (off + 8 * size_t(n_names) > size) return false;
    seq[s] = reinterpret_cast<const double*>(d + off);  // unaligned in memory: read with memcpy
    off += 8 * size_t(n_names);
  }
  if (stamp != 0 && stamp < rt->last_stamp) return false;  // out of order: Python drops and counts it
  const int64_t* names_index = static_cast<const int64_t*>(p[P_NAMES_INDEX]);
  double check = 0.0;
  for (int i = 0; i < na; ++i) {
    double a, b;
    std::memcpy(&a, seq[0] + names_index[i], 8);
    std::memcpy(&b, seq[1] + names_index[i], 8);
    rt->jq[i] = a;
    rt->jv[i] = b;
    check += 0.0 * a + 0.0 * b;
  }
  if (check != 0.0) return false;  // NaN/inf
  // implausible (far outside the joint limits): Python drops and counts it
  const double* bounds = static_cast<const double*>(p[P_STATE_BOUNDS]);  // rows: q low, q high, |v| max
  for (int i = 0; i < na; ++i)
    if (rt->jq[i] < bounds[i] || rt->jq[i] > bounds[na + i] || std::abs(rt->jv[i]) > bounds[2 * na + i]) return false;
  // ---- the other inputs: fresh; the contact mask from the estimates
  const double now = start_mono, timeout = val[V_TIMEOUT];
  uint8_t* mask = static_cast<uint8_t*>(p[P_NODE_MASK]);
  {
    std::lock_guard<std::mutex> lock(rt->input_mutex);
    if (nb && !(rt->t_base > 0.0 && now - rt->t_base < timeout)) return false;
    if (rt->t_contacts > 0.0 && !(now - rt->t_contacts < timeout)) return false;
    for (int c = 0; c < k; ++c) mask[c] = rt->contacts[c] >= val[V_THRESHOLD];
    if (!apply_force_refs(rt, now)) return false;
    std::memcpy(rt->qb.data(), rt->base_q, sizeof rt->base_q);
    std::memcpy(rt->v.data(), rt->base_v, sizeof rt->base_v);
  }
  // ---- state: q = base + joints (the tick normalizes the quaternion)
  const int32_t* jqi = static_cast<const int32_t*>(p[P_JOINT_Q_INDEX]);
  double* node_q = static_cast<double*>(p[P_NODE_Q]);
  double* node_v = static_cast<double*>(p[P_NODE_V]);
  if (nb) {
    for (int i = 0; i < 7; ++i) node_q[i] = rt->qb[i];
    for (int i = 0; i < 6; ++i) node_v[i] = rt->v[i];
  }
  for (int i = 0; i < na; ++i) {
    node_q[jqi[i]] = rt->jq[i];
    node_v[nb + i] = rt->jv[i];
    static_cast<double*>(p[P_IN_JQ])[i] = rt->jq[i];
    static_cast<double*>(p[P_IN_JV])[i] = rt->jv[i];
  }
  // ---- the controller tick (gait time: the input's stamp, as the Python tick's)
  double* tau = static_cast<double*>(p[P_NODE_TAU]);
  int saturated = 0;
  if (reinterpret_cast<TickFn>(p[P_TICK_FN])(p[P_TICK], double(stamp) * 1e-9, node_q, node_v, mask, start_mono, tau,
                                             &saturated) != 0)
    return false;  // Python's tick solves again and takes its fallback
  // ---- the command
  const int64_t* cmd_index = static_cast<const int64_t*>(p[P_CMD_INDEX]);
  double* cmd = static_cast<double*>(p[P_CMD_VIEW]);
  for (int i = 0, n = int(val[V_N_CMD]); i < n; ++i) cmd[i] = tau[cmd_index[i]];
  rcl_ret_t ret = rcl_publish_serialized_message(rt->pub, &rt->out, nullptr);
  const int64_t published_ns = realtime_ns();
  const double published_mono = mono();
  if (ret != RCL_RET_OK) rcutils_reset_error();
  rt->last_stamp = stamp;
  rt->last_tick.store(start_mono, std::memory_order_relaxed);
  rt->counters[0] += 1;
  if (val[V_UNKNOWN] != 0.0) rt->counters[2] += 1;
  const uint64_t h = rt->head.load(std::memory_order_relaxed);
  if (h - rt->tail.load(std::memory_order_acquire) >= RING) {  // Python is far behind
    rt->counters[3] += 1;
    publish_monitors(rt, stamp);
    return true;
  }
  double* r = rt->ring[h % RING];
  r[R_RECEIVED_NS] = double(received_ns);
  r[R_WAKE_NS] = double(wake_ns);
  r[R_START_NS] = double(start_ns);
  r[R_PUBLISHED_NS] = double(published_ns);
  r[R_START_MONO] = start_mono;
  r[R_PUBLISHED_MONO] = published_mono;
  r[R_SATURATED] = saturated;
  r[R_STAMP_NS] = double(stamp);
  r[R_OVERWRITTEN] = overwritten;
  rt->head.store(h + 1, std::memory_order_release);
  publish_monitors(rt, stamp);
  if (++rt->since_notify >= rt->drain_every) {
    rt->since_notify = 0;
    const uint64_t one = 1;
    const ssize_t written = write(rt->notify_fd, &one, sizeof one);  // fails only when it overflows:
    (void)written;                                                     // the reader is awake then
  }
  return true;
}

void run(Rt* rt) {
  pthread_setname_np(pthread_self(), "idyn_loop");  // as top -H / ps -L show it
  prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
  if (!rt->cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : rt->cpus) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  if (rt->priority > 0) {
    sched_param sp{};
    sp.sched_priority = rt->priority;
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  }
  rmw_message_info_t info = rmw_get_zero_initialized_message_info(), scratch = info;
  double last_wake = 0.0;
  for (;;) {
    if (rt->spin_s > 0.0 && last_wake > 0.0 && rt->events.load() == 0) {
      // sleep until shortly before the next sample is due, then poll for it: the loop is
      // running (no wake-up) and its core warm when it arrives
      const double due = last_wake + rt->period_s, now = mono();
      if (due - rt->spin_s > now) {
        std::unique_lock<std::mutex> lock(rt->wake_mutex);
        rt->sleeping.store(true);
        rt->wake.wait_for(lock, std::chrono::duration<double>(due - rt->spin_s - now),
                          [rt] { return rt->events.load() > 0 || rt->stop.load(); });
        rt->sleeping.store(false);
      }
      const double until = due + rt->spin_s;
      while (rt->events.load() == 0 && !rt->stop.load() && mono() < until) __builtin_ia32_pause();
    }
    if (rt->events.load() == 0) {
      std::unique_lock<std::mutex> lock(rt->wake_mutex);
      rt->sleeping.store(true);
      rt->wake.wait_for(lock, std::chrono::milliseconds(20), [rt] { return rt->events.load() > 0 || rt->stop.load(); });
      rt->sleeping.store(false);
    }
    if (rt->stop.load()) break;
    if (rt->events.exchange(0) == 0) continue;
    last_wake = mono();
    const int64_t wake_ns = realtime_ns();
    // the newest sample (depth 1: usually the only one)
    int taken = 0;
    while (rcl_take_serialized_message(rt->sub, &rt->in, &scratch, nullptr) == RCL_RET_OK) {
      info = scratch;  // a failed take may clear it
      ++taken;
    }
    rcutils_reset_error();
    if (!taken) continue;
    std::lock_guard<std::mutex> tick(rt->tick_mutex);
    take_inputs(rt);  // the state around these joint states
    const int64_t received_ns = info.received_timestamp ? info.received_timestamp : wake_ns;
    if (rt->fast.load(std::memory_order_acquire) && fast_tick(rt, received_ns, wake_ns, taken - 1)) continue;
    rt->counters[1] += 1;
    rt->slow(rt->slow_ctx, rt->in.buffer, rt->in.buffer_length, received_ns, wake_ns);
  }
}

static_assert(P_COUNT == IDYN_RT_PLAN_SLOTS && V_COUNT == IDYN_RT_PLAN_VALUES && R_WIDTH == IDYN_RT_RECORD_WIDTH &&
                  RING == IDYN_RT_RING && sizeof(Rt::counters) / sizeof(double) == IDYN_RT_COUNTERS,
              "rt_api.h's layout (and native/rt.py's names) must follow rt.cpp's");

}  // namespace

extern "C" {

// sub, pub: rcl_subscription_t* / rcl_publisher_t* (rclpy handles' .pointer); cmd: the
// command's CDR bytes (published as they are, the tick writes its efforts in place).
void* idyn_rt_new(void* sub, void* pub, uint8_t* cmd, size_t cmd_size, SlowFn slow, void* slow_ctx, int notify_fd,
                  int priority, const int* cpus, int n_cpus, int drain_every, int k, int na, int nv) {
  Rt* rt = new Rt();
  rt->sub = static_cast<const rcl_subscription_t*>(sub);
  rt->pub = static_cast<const rcl_publisher_t*>(pub);
  rt->slow = slow;
  rt->slow_ctx = slow_ctx;
  rt->notify_fd = notify_fd;
  rt->priority = priority;
  rt->cpus.assign(cpus, cpus + n_cpus);
  rt->drain_every = std::max(1, std::min(drain_every, int(RING / 2)));
  rt->contacts.assign(k, 1.0);
  rt->v.assign(nv, 0.0);
  rt->qb.assign(7, 0.0);
  rt->jq.assign(na, 0.0);
  rt->jv.assign(na, 0.0);
  rt->refs.force.assign(3 * size_t(k), 0.0);
  rt->refs.t.assign(k, 0.0);
  rt->refs.local.assign(k, 0);
  rt->refs.is_force.assign(k, 0);
  rcutils_allocator_t alloc = rcutils_get_default_allocator();
  if (rmw_serialized_message_init(&rt->in, 4096, &alloc) != RMW_RET_OK) {
    rcutils_reset_error();
    delete rt;
    return nullptr;
  }
  rt->out.buffer = cmd;
  rt->out.buffer_length = cmd_size;
  rt->out.buffer_capacity = cmd_size;
  rt->out.allocator = alloc;
  return rt;
}

int idyn_rt_start(void* h) {
  Rt* rt = static_cast<Rt*>(h);
  rt->thread = std::thread(run, rt);
  if (rcl_subscription_set_on_new_message_callback(rt->sub, on_message, rt) != RCL_RET_OK) {
    rcutils_reset_error();
    return -1;
  }
  return 0;
}

void idyn_rt_stop(void* h) {
  Rt* rt = static_cast<Rt*>(h);
  rcl_subscription_set_on_new_message_callback(rt->sub, nullptr, nullptr);
  rcutils_reset_error();
  {
    std::lock_guard<std::mutex> lock(rt->wake_mutex);
    rt->stop.store(true);
  }
  rt->wake.notify_one();
  if (rt->thread.joinable()) rt->thread.join();
}

void idyn_rt_free(void* h) {
  Rt* rt = static_cast<Rt*>(h);
  idyn_rt_stop(rt);
  rmw_serialized_message_fini(&rt->in);
  if (rt->odom_in.buffer) rmw_serialized_message_fini(&rt->odom_in);
  if (rt->contacts_in.buffer) rmw_serialized_message_fini(&rt->contacts_in);
  rcutils_reset_error();
  delete rt;
}

// The plan of the fast tick (see PlanSlot / PlanValue) and the expected name-list bytes.
void idyn_rt_plan(void* h, const uint64_t* slots, const double* values, const uint8_t* names, size_t names_len) {
  Rt* rt = static_cast<Rt*>(h);
  for (int i = 0; i < P_COUNT; ++i) rt->p[i] = reinterpret_cast<void*>(slots[i]);
  for (int i = 0; i < V_COUNT; ++i) rt->val[i] = values[i];
  rt->names.assign(names, names + names_len);
}

// After each Python tick: whether the fast tick may run, the stamp of its input.
void idyn_rt_sync(void* h, int fast, int64_t stamp) {
  Rt* rt = static_cast<Rt*>(h);
  rt->last_stamp = stamp;  // Python's view: it also accepts a clock reset (a stamp jump back > 1 s)
  rt->fast.store(fast, std::memory_order_release);
}

void idyn_rt_set_spin(void* h, double seconds, double period) {
  static_cast<Rt*>(h)->spin_s = seconds;
  static_cast<Rt*>(h)->period_s = period;
}

void idyn_rt_set_fast(void* h, int fast) { static_cast<Rt*>(h)->fast.store(fast, std::memory_order_release); }

void idyn_rt_set_params(void* h, double timeout, double threshold) {
  Rt* rt = static_cast<Rt*>(h);
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  rt->val[V_TIMEOUT] = timeout;
  rt->val[V_THRESHOLD] = threshold;
}

void idyn_rt_set_base(void* h, const double* q, const double* v) {
  Rt* rt = static_cast<Rt*>(h);
  const double now = mono();
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  std::memcpy(rt->base_q, q, sizeof rt->base_q);
  std::memcpy(rt->base_v, v, sizeof rt->base_v);
  rt->t_base = now;
}

void idyn_rt_set_contacts(void* h, const double* values) {
  Rt* rt = static_cast<Rt*>(h);
  const double now = mono();
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  std::memcpy(rt->contacts.data(), values, sizeof(double) * rt->contacts.size());
  rt->t_contacts = now;
}

// Odometry (nav_msgs/Odometry) and contact estimates (std_msgs/Float64MultiArray) taken by
// the loop at each joint-state sample (before the loop starts): subscriptions (null: none),
// twist frame, plausibility limits (3), and the node's buffers its Python ticks read (base
// q (7), v (6), contact estimates (k)). Returns non-zero when buffers cannot be allocated.
int idyn_rt_inputs(void* h, void* odom_sub, void* contacts_sub, int twist_in_parent, const double* limits,
                   double* base_q, double* base_v, double* contacts) {
  Rt* rt = static_cast<Rt*>(h);
  rcutils_allocator_t alloc = rcutils_get_default_allocator();
  for (auto* m : {&rt->odom_in, &rt->contacts_in})
    if (!m->buffer && rmw_serialized_message_init(m, 4096, &alloc) != RMW_RET_OK) {
      rcutils_reset_error();
      return -1;
    }
  rt->odom_sub = static_cast<const rcl_subscription_t*>(odom_sub);
  rt->contacts_sub = static_cast<const rcl_subscription_t*>(contacts_sub);
  rt->twist_in_parent = twist_in_parent != 0;
  std::memcpy(rt->base_limits, limits, sizeof rt->base_limits);
  rt->py_base_q = base_q;
  rt->py_base_v = base_v;
  rt->py_contacts = contacts;
  return 0;
}

// When the inputs were last taken [s, CLOCK_MONOTONIC; 0: never] and the last odometry
// stamp [ns]: out = (t_base, t_contacts, odom stamp); the drop counters (6).
void idyn_rt_input_state(void* h, double* out) {
  Rt* rt = static_cast<Rt*>(h);
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  out[0] = rt->t_base;
  out[1] = rt->t_contacts;
  out[2] = double(rt->odom_stamp);
  for (int i = 0; i < 6; ++i) out[3 + i] = rt->input_drops[i];
}

// Monitoring from the fast ticks (call while the loop is stopped or from its thread):
// every `every` ticks (0: none) the n messages (publisher, CDR buffer of `sizes` bytes
// that the tick patches and publishes, stamp offset or -1, fields [first, first + count))
// whose fields are (byte offset, address of the double to copy); rotation / forces: the
// contact frames' orientations (k x 3 x 3) and world forces (k x 3), turned into the
// contact frames in `local` (k x 3) before the fields are copied.
void idyn_rt_monitor(void* h, int every, int n, const uint64_t* pubs, const uint64_t* bufs, const uint64_t* sizes,
                     const int64_t* stamp_at, const int* first, const int* count, int n_fields, const int64_t* field_at,
                     const uint64_t* field_src, const double* rotation, const double* forces, double* local, int k) {
  Rt* rt = static_cast<Rt*>(h);
  rt->monitors.clear();
  rcutils_allocator_t alloc = rcutils_get_default_allocator();
  for (int i = 0; i < n; ++i) {
    Rt::Message m{reinterpret_cast<const rcl_publisher_t*>(pubs[i]), rmw_get_zero_initialized_serialized_message(),
                  stamp_at[i], first[i], count[i]};
    m.cdr.buffer = reinterpret_cast<uint8_t*>(bufs[i]);
    m.cdr.buffer_length = m.cdr.buffer_capacity = sizes[i];
    m.cdr.allocator = alloc;
    rt->monitors.push_back(m);
  }
  rt->field_at.assign(field_at, field_at + n_fields);
  rt->field_src.clear();
  for (int j = 0; j < n_fields; ++j) rt->field_src.push_back(reinterpret_cast<const double*>(field_src[j]));
  rt->rotation = rotation;
  rt->forces = forces;
  rt->wrench_local = local;
  rt->monitor_k = k;
  rt->monitor_every = every;
  rt->monitor_countdown = 1;
}

// Desired forces (formulations with force contacts, pidc_qp): the fast tick writes the latest
// reference of each contact flagged in is_force (k) into lambda_des (k x 3, world), turning one
// given in the contact frame with rotation (k x 3 x 3, the last tick's), and hands the tick to
// Python when one is older than timeout [s] (> 0). lambda_des null: none. Call while the loop
// is locked or from its thread; the references received so far are kept.
void idyn_rt_force_refs(void* h, double* lambda_des, const double* rotation, const uint8_t* is_force, double timeout) {
  Rt* rt = static_cast<Rt*>(h);
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  auto& r = rt->refs;
  const size_t k = rt->contacts.size();
  r.lambda_des = lambda_des;
  r.rotation = rotation;
  r.is_force.assign(k, 0);
  if (lambda_des) std::memcpy(r.is_force.data(), is_force, k);
  r.timeout = timeout;
  if (r.force.size() != 3 * k) {
    r.force.assign(3 * k, 0.0);
    r.t.assign(k, 0.0);
    r.local.assign(k, 0);
  }
}

// An accepted desired force of contact `index` [N] (validated by the node), in its contact
// frame (local) or the world's, received at t (CLOCK_MONOTONIC [s]).
void idyn_rt_set_desired_force(void* h, int index, const double* force, int local, double t) {
  Rt* rt = static_cast<Rt*>(h);
  std::lock_guard<std::mutex> lock(rt->input_mutex);
  auto& r = rt->refs;
  if (index < 0 || size_t(index) >= r.t.size()) return;
  std::memcpy(&r.force[3 * index], force, 3 * sizeof(double));
  r.local[index] = local != 0;
  r.t[index] = t;
}

// CLOCK_MONOTONIC start of the last fast tick [s] (0: none yet): the watchdog's "input alive".
double idyn_rt_last_tick(void* h) { return static_cast<Rt*>(h)->last_tick.load(std::memory_order_relaxed); }

// Python's own ticks (watchdog) take the tick lock: never two ticks at once.
void idyn_rt_lock(void* h) { static_cast<Rt*>(h)->tick_mutex.lock(); }
void idyn_rt_unlock(void* h) { static_cast<Rt*>(h)->tick_mutex.unlock(); }

// The record ring (RING x R_WIDTH) and the counters.
const double* idyn_rt_records(void* h) { return &static_cast<Rt*>(h)->ring[0][0]; }

// Records not yet consumed: their count, and in *first the ring index of the oldest.
int idyn_rt_pending(void* h, uint64_t* first) {
  Rt* rt = static_cast<Rt*>(h);
  const uint64_t t = rt->tail.load(std::memory_order_relaxed);
  *first = t % RING;
  return int(rt->head.load(std::memory_order_acquire) - t);
}

// Python has read the n oldest records.
void idyn_rt_consume(void* h, int n) { static_cast<Rt*>(h)->tail.fetch_add(uint64_t(n), std::memory_order_release); }
const double* idyn_rt_counters(void* h) { return static_cast<Rt*>(h)->counters; }

}  // extern "C"
