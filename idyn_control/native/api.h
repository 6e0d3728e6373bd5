// The C interface of the compiled tick (engine.cpp, solvers.cpp), in one place.
//
// Two callers use it: the Python binding (bindings.cpp, pybind11) and the node's compiled
// loop (rt.cpp), which receives these functions' addresses and calls them per tick without
// Python. The definitions include this header, so a signature that drifts from its
// declaration is a compile error, not a silent ABI mismatch.
#pragma once

#include <cstdint>

// Sizes the C side reads (at least) from the buffers Python passes; keep them with the code
// that reads them (engine.cpp idyn_kinematic_layer, solvers.cpp wbc_solve / qpc_solve).
#define IDYN_KINEMATIC_LAYER_REFS 12  // reference arrays (native/__init__.py KL_REFS)
#define IDYN_KINEMATIC_LAYER_GAINS 9  // gains and weights (KL_GAINS)
#define IDYN_WBC_WEIGHTS 5            // w_base, w_posture, w_force, contact_gain, mass
#define IDYN_WBC_INFO 6               // iterations, time, limits dropped, contacts elastic, their amounts
#define IDYN_WBC_TASK_STRIDE 19       // numbers per task row (solvers.cpp TASK_STRIDE)
#define IDYN_QPC_OPTIONS 6            // stage2, torque_limits, fast_path, dissipation, friction_margin, cop_margin
#define IDYN_QPC_INFO 9               // ..., dropped, stage1 rescued, non-penetration relaxed, its amount
#define IDYN_PIDC_OPTIONS 4           // regularization, fast_path, internal_force_weight, rcond
#define IDYN_PIDC_INFO 8              // iterations, time, binding inequalities, stage1_loose, friction_elastic,
                                      // friction relaxed (0/1), its amount [N], mass matrix not PD (0/1)

extern "C" {

// engine.cpp
void* idyn_engine_new(int njoints, const int* parents, const int* kinds, const double* axes,
                      const double* placements, const double* inertias, const double* armature,
                      const double* gravity, int nframes, const int* frame_parents,
                      const double* frame_placements, int n_base, int k, const int* contact_frames,
                      double* M, double* h, double* J, double* drift, double* position, double* rotation,
                      double* q_buf, double* v_buf, char* err, int errlen);
void idyn_engine_free(void* e);
void idyn_engine_update(void* handle);
void idyn_engine_point_task(void* handle, int frame, double* J, double* position, double* velocity, double* drift);
void idyn_kinematic_layer(void* handle, const double* const* refs, const int* joint_q_index, const std::uint8_t* swing,
                          const std::uint8_t* mask, const double* gains, double* qdd_out);

// solvers.cpp
void* idyn_wbc_new(void* engine, const double* friction_rows, const double* max_normal_force,
                   const std::uint8_t* released, int warm_start, double eps_abs);
void idyn_wbc_free(void* w);
void idyn_wbc_reset(void* w);
int idyn_wbc_solve(void* w, const double* qdd_des, const std::uint8_t* active, long version, const double* weights,
                   const double* tau_max, int n_tasks, double* tasks, double* qdd, double* tau, double* forces,
                   double* info);
long idyn_wbc_torque_limits_dropped(void* w);
long idyn_wbc_contacts_elastic(void* w);
void* idyn_qpc_new(void* engine, double dt, int unilateral_only, int warm_start, double eps_abs,
                   const double* friction_rows, const double* basis, const double* phi, const double* max_normal_force);
void idyn_qpc_free(void* c);
void idyn_qpc_reset(void* c);
int idyn_qpc_solve(void* c, const double* qdd_des, const std::uint8_t* active, long version, const double* options,
                   const double* tau_max, double* qdd, double* tau, double* forces, double* info);
// pidc_qp (method 0), pidc_qp_howsm (1), pidcwcu (2); chain: k x na, is_force_contact: k, both
// 0/1; lambda_des: k x 3 desired forces [N, world], read by every solve. idyn_pidc_solve has
// idyn_qpc_solve's signature (options: IDYN_PIDC_OPTIONS, info: IDYN_PIDC_INFO).
void* idyn_pidc_new(void* engine, int method, int warm_start, double eps_abs, const double* friction_rows,
                    const double* basis, const std::uint8_t* chain, const std::uint8_t* is_force_contact,
                    const double* lambda_des);
void idyn_pidc_free(void* c);
void idyn_pidc_reset(void* c);
int idyn_pidc_solve(void* c, const double* qdd_des, const std::uint8_t* active, long version, const double* options,
                    const double* tau_max, double* qdd, double* tau, double* forces, double* info);

// gait.cpp: the gait generator (native/gait.py STATE, CONFIG, CONTROLLER_REFS)
void* idyn_gait_new(void* engine, int k, int nb, int state_size, const double* config, int config_size,
                    const int* joint_q_index, const int* foot_frames, double* state, double* const* refs,
                    std::uint8_t* swing);
void idyn_gait_free(void* g);
void idyn_gait_update(void* g, double t, const double* q, const double* v, const std::uint8_t* mask);
void idyn_gait_drive(void* g, double t, const double* q, const double* v, const std::uint8_t* mask, double now);
void idyn_gait_undo(void* g);
void idyn_gait_reset(void* g, double t, const double* q, const double* v, const std::uint8_t* mask);
void idyn_gait_start(void* g, double t);
void idyn_gait_stop(void* g);
void idyn_gait_command(void* g, double vx, double vy, double yaw_rate, double now);

// tick.cpp: one controller tick (native/tick.py SLOTS, VALUES)
#define IDYN_TICK_SLOTS 52
#define IDYN_TICK_VALUES 13
void* idyn_tick_new(const std::uint64_t* slots, const double* values);
void idyn_tick_free(void* t);
int idyn_tick_sample_trajectory(void* t, std::int64_t now_ns);
void idyn_tick_plan(void* t, const std::uint64_t* slots, const double* values);
int idyn_tick_run(void* t, double time, const double* q, const double* v, const std::uint8_t* mask, double now,
                  double* tau, int* saturated);

}  // extern "C"
