// The C interface of the node's compiled loop (rt.cpp), for its Python binding
// (rt_bindings.cpp). rt.cpp includes it, so the two cannot drift apart.
#pragma once

#include <cstddef>
#include <cstdint>

// Layout shared with Python (native/rt.py PLAN_SLOTS, PLAN_VALUES, RECORD, COUNTERS, RING);
// rt.cpp checks its enums against these at compile time.
#define IDYN_RT_PLAN_SLOTS 13
#define IDYN_RT_PLAN_VALUES 11
#define IDYN_RT_RECORD_WIDTH 9
#define IDYN_RT_RING 1024
#define IDYN_RT_COUNTERS 4
#define IDYN_RT_INPUT_STATE 9  // t_base, t_contacts, odometry stamp, 6 drop counts (rt.py INPUT_DROPS)

extern "C" {

// A tick the compiled loop hands to Python: the input's CDR bytes, its receive and wake-up
// times [ns]; ctx is the value given to idyn_rt_new. Called on the loop thread.
typedef void (*idyn_rt_slow_fn)(void* ctx, const std::uint8_t* data, std::size_t size, std::int64_t received_ns,
                                std::int64_t wake_ns);

void* idyn_rt_new(void* sub, void* pub, std::uint8_t* cmd, std::size_t cmd_size, idyn_rt_slow_fn slow, void* slow_ctx,
                  int notify_fd, int priority, const int* cpus, int n_cpus, int drain_every, int k, int na, int nv);
int idyn_rt_start(void* h);
void idyn_rt_stop(void* h);
void idyn_rt_free(void* h);
void idyn_rt_plan(void* h, const std::uint64_t* slots, const double* values, const std::uint8_t* names,
                  std::size_t names_len);
void idyn_rt_sync(void* h, int fast, std::int64_t stamp);
void idyn_rt_set_spin(void* h, double seconds, double period);
void idyn_rt_set_fast(void* h, int fast);
void idyn_rt_set_params(void* h, double timeout, double threshold);
void idyn_rt_set_base(void* h, const double* q, const double* v);
void idyn_rt_set_contacts(void* h, const double* values);
void idyn_rt_force_refs(void* h, double* lambda_des, const double* rotation, const std::uint8_t* is_force,
                        double timeout);
void idyn_rt_set_desired_force(void* h, int index, const double* force, int local, double t);
double idyn_rt_last_tick(void* h);
void idyn_rt_lock(void* h);
void idyn_rt_unlock(void* h);
const double* idyn_rt_records(void* h);
int idyn_rt_pending(void* h, std::uint64_t* first);
void idyn_rt_consume(void* h, int n);
const double* idyn_rt_counters(void* h);
void idyn_rt_monitor(void* h, int every, int n, const std::uint64_t* pubs, const std::uint64_t* bufs,
                     const std::uint64_t* sizes, const std::int64_t* stamp_at, const int* first, const int* count,
                     int n_fields, const std::int64_t* field_at, const std::uint64_t* field_src, const double* rotation,
                     const double* forces, double* local, int k);
int idyn_rt_inputs(void* h, void* odom_sub, void* contacts_sub, int twist_in_parent, const double* limits,
                   double* base_q, double* base_v, double* contacts);
void idyn_rt_input_state(void* h, double* out);

}  // extern "C"
