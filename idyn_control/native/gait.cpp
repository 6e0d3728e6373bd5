// The gait generator in C++ (idyn_control.native.gait): idyn_control/gait.py line for line.
//
// The phase clock, the contact schedule, swing trajectories re-targeted during the swing,
// Raibert foot placement, base references from the commanded planar velocity and the
// foot-to-joint inverse kinematics of Gait._solve_ik (seed 000 §7.2.1), so that the
// node's compiled tick evaluates the gait itself. gait.py is the reference: test_gait_native.py
// runs both along trots with contact switches and compares the references.
//
// All state lives in one array of doubles owned by Python (native/gait.py STATE names the
// slots, in this order), so Python reads it without copies, writes a command into it and
// can take back the state before a tick the loop hands to Python (idyn_gait_undo).
// Configuration (native/gait.py CONFIG) is derived by the Python Gait and copied here once.
// The tick writes the Controller's reference arrays in place, as Gait._write_references does.
// A tick allocates nothing.

#include <pinocchio/algorithm/frames.hpp>
#include <pinocchio/algorithm/jacobian.hpp>
#include <pinocchio/algorithm/kinematics.hpp>
#if __has_include(<pinocchio/multibody.hpp>)  // Pinocchio 4
#include <pinocchio/multibody.hpp>
#else  // Pinocchio 3 (ROS 2 Jazzy)
#include <pinocchio/multibody/data.hpp>
#include <pinocchio/multibody/model.hpp>
#endif
#include <Eigen/Cholesky>
#include <Eigen/LU>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "api.h"
#include "native.hpp"

namespace pin = pinocchio;

namespace idyn {
const pin::Model& engine_model(const Engine& e);  // engine.cpp
}

// gait.py's arithmetic is numpy's: no fused multiply-add in this file's own code (the
// phase, swing and schedule decisions then round exactly as Python's)
#pragma GCC optimize("fp-contract=off")

namespace idyn {
namespace {

constexpr double NaN = std::numeric_limits<double>::quiet_NaN();
constexpr double MAX_GROUND_SLOPE = 1.0;  // gait.py MAX_GROUND_SLOPE
constexpr double GROUND_RIDGE = 0.01;     // gait.py GROUND_RIDGE
constexpr double GROUND_DEADBAND = 0.005; // gait.py GROUND_DEADBAND

// native/gait.py CONFIG, in order: scalars, then touchdown phases (k), foot offsets (k x 3),
// CoM offset (3), joint lower / upper limits (na each)
enum ConfigSlot {
  C_PERIOD, C_DUTY_FACTOR, C_STEP_HEIGHT, C_MAX_ACCELERATION, C_MAX_YAW_ACCELERATION, C_FEEDBACK_GAIN,
  C_MAX_STEP_CORRECTION, C_MAX_POSITION_ERROR, C_TOUCHDOWN_DEPTH, C_GROUND_TOLERANCE, C_EARLY_TOUCHDOWN,
  C_LATE_DESCENT_SPEED, C_LATE_TOUCHDOWN_TIME, C_REGAIN_CONTACT_TIME, C_STAND_UP_TIME, C_STAND_SHIFT_SPEED,
  C_IK_ITERATIONS, C_SWING_DURATION, C_STANCE_DURATION, C_CMD_VEL_TIMEOUT, C_VERTICAL_FRACTION, C_TOUCHDOWN_SPEED,
  C_VELOCITY_PRODUCT, C_TOUCHDOWN_REACH, C_FOLLOW_GROUND, C_GROUND_TILT, C_TRIP_HEIGHT, C_TRIP_PHASE, C_TRIP_RISE,
  C_MAX_TRIPS, C_TRIP_TICKS, C_OBSTACLE_RISE_FRACTION, C_OBSTACLE_VERTICAL_FRACTION, C_OBSTACLE_SWING_STRETCH, C_SCALARS
};
// native/gait.py STATE, the scalars first (NaN stands for Python's None; mode 0 stand, 1 trot)
enum StateScalar {
  S_MODE, S_STOP_REQUESTED, S_T_STOPPED, S_T_CYCLE0, S_T_PREV, S_BASE_YAW_REF, S_STAND_FROM, S_T_RESET,
  S_GROUND_HEIGHT, S_STANDING_HEIGHT, S_GROUND_OFFSET, S_TRIPS, S_SCALARS
};
enum Mode { STAND = 0, TROT = 1 };
// Controller arrays the gait writes (native/gait.py CONTROLLER_REFS), in order
enum Ref {
  R_Q, R_V, R_A, R_BASE_POSITION, R_BASE_ROTATION, R_BASE_VELOCITY, R_BASE_ANGULAR, R_FOOT_POSITION,
  R_FOOT_VELOCITY, R_FOOT_ACCELERATION, R_COUNT
};

using Vec3 = Eigen::Vector3d;
using Rows3 = Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor>>;

// Python's float % (numpy's remainder): the result has the sign of the divisor
double pymod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0.0) {
    if ((b < 0.0) != (m < 0.0)) m += b;
  } else {
    m = std::copysign(0.0, b);
  }
  return m;
}

double clip(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

// gait.min_jerk: quintic 0 → 1, value and d/ds
void min_jerk(double s, double& m, double& dm, double& ddm) {
  s = std::min(std::max(s, 0.0), 1.0);
  m = std::pow(s, 3.0) * (10.0 - 15.0 * s + 6.0 * s * s);
  dm = 30.0 * s * s * std::pow(1.0 - s, 2.0);
  ddm = 60.0 * s * (1.0 - s) * (1.0 - 2.0 * s);
}

// gait.swing_bump: 64 s³(1 − s)³
void swing_bump(double s, double& b, double& db, double& ddb) {
  s = std::min(std::max(s, 0.0), 1.0);
  const double u = 1.0 - s;
  b = 64.0 * std::pow(s, 3.0) * std::pow(u, 3.0);
  db = 192.0 * s * s * u * u * (u - s);
  ddb = 384.0 * s * u * (1.0 - 5.0 * s + 5.0 * s * s);
}

// gait.touchdown_ramp: −4s³ + 7s⁴ − 3s⁵
void touchdown_ramp(double s, double& r, double& dr, double& ddr) {
  s = std::min(std::max(s, 0.0), 1.0);
  r = std::pow(s, 3.0) * (-4.0 + 7.0 * s - 3.0 * s * s);
  dr = s * s * (-12.0 + 28.0 * s - 15.0 * s * s);
  ddr = s * (-24.0 + 84.0 * s - 60.0 * s * s);
}

// gait.obstacle_profile: up to apex over the first a of the swing, held, down over the last a
void obstacle_profile(double s, double z0, double z1, double apex, double a, double& z, double& dz, double& ddz) {
  s = std::min(std::max(s, 0.0), 1.0);
  double m, dm, ddm;
  if (s < a) {
    min_jerk(s / a, m, dm, ddm);
    z = z0 + (apex - z0) * m;
    dz = (apex - z0) * dm / a;
    ddz = (apex - z0) * ddm / (a * a);
  } else if (s > 1.0 - a) {
    min_jerk((1.0 - s) / a, m, dm, ddm);
    z = z1 + (apex - z1) * m;
    dz = -(apex - z1) * dm / a;
    ddz = (apex - z1) * ddm / (a * a);
  } else {
    z = apex;
    dz = 0.0;
    ddz = 0.0;
  }
}

Eigen::Matrix3d rot_z(double yaw) {
  const double c = std::cos(yaw), s = std::sin(yaw);
  Eigen::Matrix3d R;
  R << c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0;
  return R;
}

struct Gait {
  const pin::Model& model;
  pin::Data data;
  int k, nq, nv, nb, na, state_size;
  std::vector<double> config;
  std::vector<int> joint_q_index;
  std::vector<pin::FrameIndex> feet_ids;
  double* st;                  // the state (Python's array)
  std::vector<double> undo;    // the state before the last tick
  double* ref[R_COUNT];        // the Controller's reference arrays
  std::uint8_t* swing_out;     // Controller.swing
  // views of the state (native/gait.py STATE order after the scalars)
  double *velocity_command, *velocity_filtered, *base_position_ref, *base_velocity_ref, *base_angular_ref;
  double *body_offset, *body_offset_velocity, *ground_plane, *base_tilt;
  double *planned_stance, *swinging, *swung, *off_ground, *swing_start, *swing_time, *obstacle_apex, *trips, *touching;
  double *liftoff, *touchdown, *stance_position, *foot_position_ref, *foot_velocity_ref, *foot_acceleration_ref;
  double *q_joint_ref, *v_joint_ref, *a_joint_ref, *q_ik;
  // configuration arrays
  const double *touchdown_phases, *foot_offsets, *com_offset, *q_lower, *q_upper;
  // scratch, sized once
  Eigen::MatrixXd feet;        // k x 3 measured foot positions
  Eigen::MatrixXd J;           // 3k x nv foot Jacobians (translation, world-aligned)
  pin::Data::Matrix6x J6;
  Eigen::VectorXd err, dq, work_v;
  Eigen::MatrixXd rhs, sol, A, work_m;
  Eigen::LLT<Eigen::MatrixXd> llt;
  Eigen::VectorXd v_base;
  Eigen::VectorXd v_ik, a_zero;  // nv: the reference velocity at the IK's configuration, zeros
  std::vector<std::uint8_t> due, in_window;
  std::vector<double> since;
  // the /cmd_vel command (another thread writes it)
  std::mutex command_mutex;
  double command[3] = {0.0, 0.0, 0.0};
  double command_time = -std::numeric_limits<double>::infinity();  // CLOCK_MONOTONIC [s]

  Gait(const pin::Model& m, int k_, int nb_) : model(m), data(m), k(k_), nq(m.nq), nv(m.nv), nb(nb_), na(m.nv - nb_) {}

  double& s(int slot) { return st[slot]; }
  const double& c(int slot) const { return config[slot]; }
  // gait.py Gait.ground_at (a known terrain runs in Python): the footholds' plane, or flat
  double ground_at(double x, double y) const {
    if (c(C_FOLLOW_GROUND) != 0.0) return ground_plane[0] + ground_plane[1] * x + ground_plane[2] * y;
    return st[S_GROUND_HEIGHT];
  }
};

// gait.py Gait._tilt_target: ground_tilt times the plane's slope, heading frame (pitch, roll)
void tilt_target(const Gait& g, double& pitch, double& roll) {
  const double sx = g.ground_plane[1], sy = g.ground_plane[2];
  pitch = 0.0;
  roll = 0.0;
  if (sx == 0.0 && sy == 0.0) return;
  const double c = std::cos(g.st[S_BASE_YAW_REF]), s = std::sin(g.st[S_BASE_YAW_REF]);
  const double k = g.c(C_GROUND_TILT);
  pitch = -k * std::atan(c * sx + s * sy);
  roll = k * std::atan(-s * sx + c * sy);
}

// gait.py Gait.base_rotation: the heading, pitched and rolled by base_tilt
Eigen::Matrix3d base_rotation(const Gait& g) {
  const Eigen::Matrix3d Rz = rot_z(g.st[S_BASE_YAW_REF]);
  const double pitch = g.base_tilt[0], roll = g.base_tilt[1];
  if (pitch == 0.0 && roll == 0.0) return Rz;
  const double cp = std::cos(pitch), sp = std::sin(pitch), cr = std::cos(roll), sr = std::sin(roll);
  Eigen::Matrix3d T;
  T << cp, sp * sr, sp * cr, 0.0, cr, -sr, -sp, cp * sr, cp * cr;
  return Rz * T;
}

void update_base(Gait& g, double t, double dt, const double* q) {
  const double max_acc = g.c(C_MAX_ACCELERATION);
  const double step[3] = {max_acc * dt, max_acc * dt, g.c(C_MAX_YAW_ACCELERATION) * dt};
  double* vf = g.velocity_filtered;
  for (int j = 0; j < 3; ++j) vf[j] += clip(g.velocity_command[j] - vf[j], -step[j], step[j]);
  const bool stand = g.s(S_MODE) == STAND;
  if (stand) std::fill(vf, vf + 3, 0.0);
  const double vx = vf[0], vy = vf[1], wz = vf[2];
  g.s(S_BASE_YAW_REF) += wz * dt;
  const Eigen::Matrix3d Rz = rot_z(g.s(S_BASE_YAW_REF));
  Eigen::Map<Vec3> bv(g.base_velocity_ref), bp(g.base_position_ref);
  bv = Rz * Vec3(vx, vy, 0.0);
  g.base_angular_ref[0] = 0.0;
  g.base_angular_ref[1] = 0.0;
  g.base_angular_ref[2] = wz;
  bp[0] += bv[0] * dt;
  bp[1] += bv[1] * dt;
  if (stand) {  // bring the CoM over the centre of the feet, slowly, plus the body offset
    double mean[2] = {0.0, 0.0};
    for (int i = 0; i < g.k; ++i) {
      mean[0] += g.stance_position[3 * i];
      mean[1] += g.stance_position[3 * i + 1];
    }
    const Vec3 com = Rz * (Eigen::Map<const Vec3>(g.com_offset) - Eigen::Map<const Vec3>(g.body_offset));
    const double speed = g.c(C_STAND_SHIFT_SPEED), limit = speed * dt;
    for (int j = 0; j < 2; ++j) {
      const double target = mean[j] / g.k - com[j];
      bp[j] += clip(target - bp[j], -limit, limit);
    }
    const Vec3 shift_velocity = Rz * Eigen::Map<const Vec3>(g.body_offset_velocity);
    for (int j = 0; j < 2; ++j) bv[j] += clip(shift_velocity[j], -speed, speed);
  }
  const double lead[2] = {bp[0] - q[0], bp[1] - q[1]};
  const double dist = std::hypot(lead[0], lead[1]);
  const double max_error = g.c(C_MAX_POSITION_ERROR);
  if (dist > max_error) {  // no wind-up: stay within reach of the robot
    for (int j = 0; j < 2; ++j) bp[j] = q[j] + lead[j] * (max_error / dist);
  }
  const double T = g.c(C_STAND_UP_TIME);
  const double s = T <= 0.0 ? 1.0 : (t - g.s(S_T_RESET)) / T;
  double h, dh, ddh;
  min_jerk(s, h, dh, ddh);
  const double rise = g.s(S_STANDING_HEIGHT) - g.s(S_STAND_FROM);
  bp[2] = g.s(S_STAND_FROM) + rise * h;
  bv[2] = (T <= 0.0 || s >= 1.0) ? 0.0 : rise * dh / T;
  if (stand) {  // a squat
    bp[2] += g.body_offset[2];
    bv[2] += g.body_offset_velocity[2];
  }
  if (g.c(C_FOLLOW_GROUND) != 0.0) {  // the standing height above the footholds' plane (gait.py)
    const double* plane = g.ground_plane;
    const double target = plane[0] + plane[1] * bp[0] + plane[2] * bp[1] - g.s(S_GROUND_HEIGHT);
    const double rate = plane[1] * bv[0] + plane[2] * bv[1] + (target - g.s(S_GROUND_OFFSET)) / g.c(C_PERIOD);
    g.s(S_GROUND_OFFSET) += rate * dt;
    bp[2] += g.s(S_GROUND_OFFSET);
    bv[2] += rate;
    // pitch and roll towards the plane's, over one gait period
    double pitch, roll;
    tilt_target(g, pitch, roll);
    const double pitch_rate = (pitch - g.base_tilt[0]) / g.c(C_PERIOD);
    const double roll_rate = (roll - g.base_tilt[1]) / g.c(C_PERIOD);
    g.base_tilt[0] += pitch_rate * dt;
    g.base_tilt[1] += roll_rate * dt;
    if (pitch_rate != 0.0 || roll_rate != 0.0) {
      const double p = g.base_tilt[0];
      Eigen::Map<Vec3>(g.base_angular_ref) += Rz * Vec3(roll_rate * std::cos(p), pitch_rate, -roll_rate * std::sin(p));
    }
  }
}

// gait.py Gait._new_swing: the usual profile, no trip yet
void new_swing(Gait& g, int i) {
  g.obstacle_apex[i] = NaN;
  g.trips[i] = 0.0;
  g.touching[i] = 0.0;
}

void update_schedule(Gait& g, double t, const std::uint8_t* mask) {
  const double period = g.c(C_PERIOD);
  const double phase = pymod((t - g.s(S_T_CYCLE0)) / period, 1.0);
  const double swing_frac = 1.0 - g.c(C_DUTY_FACTOR);
  const bool moving = g.velocity_filtered[0] != 0.0 || g.velocity_filtered[1] != 0.0 || g.velocity_filtered[2] != 0.0;
  if (g.s(S_STOP_REQUESTED) != 0.0 && std::isnan(g.s(S_T_STOPPED)) && !moving) g.s(S_T_STOPPED) = t;
  const bool no_new_swings = !std::isnan(g.s(S_T_STOPPED)) && t - g.s(S_T_STOPPED) >= period;
  bool any_due = false;
  for (int i = 0; i < g.k; ++i) {
    g.since[i] = pymod(phase - (g.touchdown_phases[i] - swing_frac), 1.0);  // cycles since lift-off phase
    g.in_window[i] = g.since[i] < swing_frac;
    g.due[i] = g.in_window[i] && g.swung[i] == 0.0 && g.swinging[i] == 0.0 &&
               g.since[i] * period < 0.5 * g.c(C_SWING_DURATION) && !no_new_swings;
    any_due |= bool(g.due[i]);
  }
  if (any_due) {
    // lift only when the feet that stay down are on the ground (sensed, or within
    // ground_tolerance of it): gait.py _update_schedule says why
    int n_staying = 0;
    bool staying_down = true;
    for (int i = 0; i < g.k; ++i) {
      const bool staying = !g.due[i] && g.swinging[i] == 0.0;
      const bool down = mask[i] || g.feet(i, 2) - g.ground_at(g.feet(i, 0), g.feet(i, 1)) <= g.c(C_GROUND_TOLERANCE);
      n_staying += staying;
      if (staying && !down) staying_down = false;
    }
    if (n_staying >= 2 && staying_down) {
      for (int i = 0; i < g.k; ++i) {
        if (!g.due[i]) continue;
        g.swinging[i] = 1.0;
        g.swung[i] = 1.0;
        g.swing_start[i] = t;
        g.swing_time[i] = g.c(C_SWING_DURATION);
        new_swing(g, i);
        for (int j = 0; j < 3; ++j) g.liftoff[3 * i + j] = g.feet(i, j);
      }
    }
  }
  bool any_swinging = false;
  for (int i = 0; i < g.k; ++i) {
    if (!g.in_window[i]) g.swung[i] = 0.0;  // the next window starts a new swing
    g.planned_stance[i] = !(g.in_window[i] && (g.swinging[i] != 0.0 || !no_new_swings));
    any_swinging |= g.swinging[i] != 0.0;
  }
  if (no_new_swings && !any_swinging) {
    g.s(S_MODE) = STAND;
    g.s(S_STOP_REQUESTED) = 0.0;
    g.s(S_T_STOPPED) = NaN;
    std::fill(g.planned_stance, g.planned_stance + g.k, 1.0);
  }
}

// gait.py Gait._landing: a contact in the final descent, or within touchdown_reach of the
// travel from the foothold, lands the foot; farther, it tripped and swings on
bool landing(const Gait& g, int i, double s) {
  if (s >= 1.0 - g.c(C_VERTICAL_FRACTION)) return true;
  const double* target = g.touchdown + 3 * i;
  const double* start = g.liftoff + 3 * i;
  const double travel = std::hypot(target[0] - start[0], target[1] - start[1]);
  const double miss = std::hypot(target[0] - g.feet(i, 0), target[1] - g.feet(i, 1));
  return miss <= g.c(C_TOUCHDOWN_REACH) * std::max(travel, g.c(C_STEP_HEIGHT));
}

// gait.py Gait._fit_ground: the plane through every foot's last foothold, same order
void fit_ground(Gait& g) {
  const double* P = g.stance_position;
  const int k = g.k;
  bool flat = true;
  for (int i = 0; i < k; ++i) flat = flat && std::abs(P[3 * i + 2] - g.s(S_GROUND_HEIGHT)) <= GROUND_DEADBAND;
  if (flat) {
    g.ground_plane[0] = g.s(S_GROUND_HEIGHT);
    g.ground_plane[1] = 0.0;
    g.ground_plane[2] = 0.0;
    return;
  }
  double mx = 0.0, my = 0.0, mz = 0.0;
  for (int i = 0; i < k; ++i) {
    mx += P[3 * i];
    my += P[3 * i + 1];
    mz += P[3 * i + 2];
  }
  mx /= k;
  my /= k;
  mz /= k;
  double axx = 0.0, axy = 0.0, ayy = 0.0, bx = 0.0, by = 0.0;
  for (int i = 0; i < k; ++i) {
    const double dx = P[3 * i] - mx, dy = P[3 * i + 1] - my, dz = P[3 * i + 2] - mz;
    axx += dx * dx;
    axy += dx * dy;
    ayy += dy * dy;
    bx += dx * dz;
    by += dy * dz;
  }
  const double ridge = GROUND_RIDGE * 0.5 * (axx + ayy) + 1e-12;
  axx += ridge;
  ayy += ridge;
  const double det = axx * ayy - axy * axy;
  double sx = (ayy * bx - axy * by) / det;
  double sy = (axx * by - axy * bx) / det;
  const double norm = std::hypot(sx, sy);
  if (norm > MAX_GROUND_SLOPE) {
    sx *= MAX_GROUND_SLOPE / norm;
    sy *= MAX_GROUND_SLOPE / norm;
  }
  g.ground_plane[0] = mz - sx * mx - sy * my;
  g.ground_plane[1] = sx;
  g.ground_plane[2] = sy;
}

// gait.py Gait._plant (touched: a sensed contact, not a late swing given up)
void plant(Gait& g, int i, bool touched = true) {
  const bool follow = g.c(C_FOLLOW_GROUND) != 0.0;
  g.swinging[i] = 0.0;
  double* p = g.stance_position + 3 * i;
  for (int j = 0; j < 3; ++j) p[j] = g.feet(i, j);
  // not above the ground expected there (following it, a foot that touched above it: not
  // more than step_height above; on the start level, only more than GROUND_DEADBAND above)
  const double expected = g.ground_at(g.feet(i, 0), g.feet(i, 1));
  if (p[2] > expected) {
    // on the level it started on, a touch within GROUND_DEADBAND above it is that level
    const bool level = g.ground_plane[0] == g.s(S_GROUND_HEIGHT) && g.ground_plane[1] == 0.0 && g.ground_plane[2] == 0.0;
    const bool up = follow && touched && (p[2] - expected > GROUND_DEADBAND || !level);
    double limit = expected + g.c(C_STEP_HEIGHT);
    if (!std::isnan(g.obstacle_apex[i])) limit = std::max(limit, g.obstacle_apex[i]);  // over an obstacle: its apex
    p[2] = up ? std::min(p[2], limit) : expected;
  }
  for (int j = 0; j < 3; ++j) {
    g.foot_position_ref[3 * i + j] = p[j];
    g.foot_velocity_ref[3 * i + j] = 0.0;
    g.foot_acceleration_ref[3 * i + j] = 0.0;
  }
  if (follow) fit_ground(g);
}

// gait.py _raibert_target: the hip's nominal foot position at touchdown, half the stance's
// travel, a capture-point correction of the velocity error
void raibert_target(Gait& g, int i, double t_td, double t, const double* q, const Vec3& v_world, double* target) {
  const double remaining = std::max(t_td - t, 0.0);
  const double wz = g.velocity_filtered[2];
  const double yaw_td = g.s(S_BASE_YAW_REF) + wz * remaining;
  const Eigen::Matrix3d Rz_td = rot_z(yaw_td);
  const double* bv = g.base_velocity_ref;
  const double base_td[2] = {q[0] + bv[0] * remaining, q[1] + bv[1] * remaining};
  const Vec3 offset = Rz_td * Eigen::Map<const Vec3>(g.foot_offsets + 3 * i);
  const double hip_velocity[2] = {bv[0] + wz * -offset[1], bv[1] + wz * offset[0]};
  const double gain = g.c(C_FEEDBACK_GAIN);
  double correction[2] = {gain * (v_world[0] - bv[0]), gain * (v_world[1] - bv[1])};
  const double norm = std::hypot(correction[0], correction[1]);
  const double max_correction = g.c(C_MAX_STEP_CORRECTION);
  if (norm > max_correction) {
    correction[0] *= max_correction / norm;
    correction[1] *= max_correction / norm;
  }
  const double half_stance = 0.5 * g.c(C_STANCE_DURATION);
  for (int j = 0; j < 2; ++j) target[j] = base_td[j] + offset[j] + half_stance * hip_velocity[j] + correction[j];
  target[2] = g.ground_at(target[0], target[1]) - g.c(C_TOUCHDOWN_DEPTH);
}

// gait.py Gait._tripped: a contact in the swing's first half, the foot well above where it
// lifted off
bool tripped(const Gait& g, int i, double s) {
  const double first = g.trips[i] != 0.0 ? g.c(C_OBSTACLE_RISE_FRACTION) : g.c(C_TRIP_PHASE);
  if (g.trips[i] >= g.c(C_MAX_TRIPS) || s >= g.c(C_EARLY_TOUCHDOWN) || s < first) return false;
  return g.feet(i, 2) - g.liftoff[3 * i + 2] > g.c(C_TRIP_HEIGHT) * g.c(C_STEP_HEIGHT);
}

// gait.py Gait._trip: swing again from where the foot is, over an obstacle above it
void trip(Gait& g, int i, double t) {
  g.trips[i] += 1.0;
  g.s(S_TRIPS) += 1.0;
  g.touching[i] = 0.0;
  for (int j = 0; j < 3; ++j) g.liftoff[3 * i + j] = g.feet(i, j);
  g.swing_start[i] = t;
  g.swing_time[i] = g.c(C_SWING_DURATION) * g.c(C_OBSTACLE_SWING_STRETCH);
  const double apex = g.feet(i, 2) + g.c(C_TRIP_RISE) * (g.s(S_STANDING_HEIGHT) - g.s(S_GROUND_HEIGHT));
  const double previous = g.obstacle_apex[i];
  g.obstacle_apex[i] = std::isnan(previous) ? apex : std::max(apex, previous);
}

void update_feet(Gait& g, double t, double dt, const double* q, const Vec3& v_world, const std::uint8_t* mask) {
  const bool trot = g.s(S_MODE) == TROT;
  for (int i = 0; i < g.k; ++i) {
    double Ts = g.swinging[i] != 0.0 ? g.swing_time[i] : g.c(C_SWING_DURATION);
    double* fp = g.foot_position_ref + 3 * i;
    double* fv = g.foot_velocity_ref + 3 * i;
    double* fa = g.foot_acceleration_ref + 3 * i;
    if (g.swinging[i] == 0.0) {
      // a planted foot that lost the ground goes back down onto its foothold, slowly
      g.off_ground[i] = mask[i] ? 0.0 : g.off_ground[i] + 1.0;
      if (g.off_ground[i] * std::max(dt, 1e-9) >= g.c(C_REGAIN_CONTACT_TIME) && trot) {
        g.swinging[i] = 1.0;
        g.swing_time[i] = Ts;
        g.swing_start[i] = t - Ts;  // past the end of the trajectory: descend
        double* td = g.touchdown + 3 * i;
        for (int j = 0; j < 3; ++j) {
          g.liftoff[3 * i + j] = g.feet(i, j);
          td[j] = g.stance_position[3 * i + j];
        }
        td[2] = g.ground_at(td[0], td[1]) - g.c(C_TOUCHDOWN_DEPTH);
        g.off_ground[i] = 0.0;
        new_swing(g, i);
        continue;
      }
      for (int j = 0; j < 3; ++j) {
        fp[j] = g.stance_position[3 * i + j];
        fv[j] = 0.0;
        fa[j] = 0.0;
      }
      continue;
    }
    double s = (t - g.swing_start[i]) / Ts;
    if (mask[i] && s >= g.c(C_EARLY_TOUCHDOWN) && landing(g, i, s)) {  // touchdown (early or on time)
      plant(g, i);
      continue;
    }
    g.touching[i] = mask[i] ? g.touching[i] + 1.0 : 0.0;
    if (g.touching[i] >= g.c(C_TRIP_TICKS) && trot && tripped(g, i, s)) {
      trip(g, i, t);
      Ts = g.swing_time[i];
      s = 0.0;
    }
    // the foot travels to its foothold over the middle [f, 1 - f] of the swing
    const bool over = !std::isnan(g.obstacle_apex[i]);
    const double f = over ? std::max(g.c(C_VERTICAL_FRACTION), g.c(C_OBSTACLE_VERTICAL_FRACTION)) : g.c(C_VERTICAL_FRACTION);
    const double travel = (1.0 - 2.0 * f) * Ts;
    if (s < f + 0.8 * (1.0 - 2.0 * f) && trot)  // re-target until the travel's last fifth
      raibert_target(g, i, g.swing_start[i] + Ts, t, q, v_world, g.touchdown + 3 * i);
    const double* p0 = g.liftoff + 3 * i;
    const double* p1 = g.touchdown + 3 * i;
    if (s < 1.0) {
      double m, dm, ddm, b, db, ddb;
      min_jerk((s - f) / (1.0 - 2.0 * f), m, dm, ddm);
      swing_bump(s, b, db, ddb);
      const double Ts2 = std::pow(Ts, 2.0);
      const double travel2 = std::pow(travel, 2.0);
      for (int j = 0; j < 3; ++j) {
        const double d = p1[j] - p0[j];
        fp[j] = p0[j] + d * m;
        fv[j] = d * dm / travel;
        fa[j] = d * ddm / travel2;
      }
      if (over) {
        double z, dz, ddz;
        obstacle_profile(s, p0[2], p1[2], g.obstacle_apex[i], g.c(C_OBSTACLE_RISE_FRACTION), z, dz, ddz);
        fp[2] = z;
        fv[2] = dz / Ts;
        fa[2] = ddz / Ts2;
      } else {
        const double h = g.c(C_STEP_HEIGHT);
        fp[2] += h * b;
        fv[2] += h * db / Ts;
        fa[2] += h * ddb / Ts2;
      }
      const double v_td = g.c(C_TOUCHDOWN_SPEED);
      if (v_td > 0.0) {
        double r, dr, ddr;
        touchdown_ramp(s, r, dr, ddr);
        fp[2] -= v_td * Ts * r;
        fv[2] -= v_td * dr;
        fa[2] -= v_td * ddr / Ts;
      }
    } else {  // late: the ground is lower than planned; keep going down, then give up
      const double late = t - (g.swing_start[i] + Ts);
      const double speed = g.c(C_LATE_DESCENT_SPEED);
      fp[0] = p1[0];
      fp[1] = p1[1];
      fp[2] = p1[2] - speed * late;
      fv[0] = 0.0;
      fv[1] = 0.0;
      fv[2] = -speed;
      fa[0] = fa[1] = fa[2] = 0.0;
      if (late >= g.c(C_LATE_TOUCHDOWN_TIME)) plant(g, i, false);
    }
  }
}

// gait.py _damped_factor: A = Jj Jjᵀ + λI and its Cholesky factor (Jj = the joint columns of J)
void damped_factor(Gait& g) {
  const auto Jj = g.J.rightCols(g.na);
  g.A.noalias() = Jj * Jj.transpose();
  g.A.diagonal().array() += 1e-8;
  g.llt.compute(g.A);
}

// gait.py _damped_solve: Jjᵀ (Jj Jjᵀ + λI)⁻¹ rhs into out, with the factor of damped_factor
template <typename Rhs, typename Out, typename Work>
void factored_solve(Gait& g, const Rhs& rhs, Out& out, Work& work) {
  const auto Jj = g.J.rightCols(g.na);
  if (g.llt.info() == Eigen::Success)
    work.noalias() = g.llt.solve(rhs);
  else
    work.noalias() = g.A.partialPivLu().solve(rhs);  // not positive definite: never with λ > 0
  out.noalias() = Jj.transpose() * work;
}

template <typename Rhs, typename Out, typename Work>
void damped_solve(Gait& g, const Rhs& rhs, Out& out, Work& work) {
  damped_factor(g);
  factored_solve(g, rhs, out, work);
}

void solve_ik(Gait& g) {
  const pin::Model& m = g.model;
  pin::Data& d = g.data;
  Eigen::Map<Eigen::VectorXd> q(g.q_ik, g.nq);
  for (int j = 0; j < 3; ++j) q[j] = g.base_position_ref[j];
  const Eigen::Matrix3d R = base_rotation(g);
  const Eigen::Quaterniond quat(R);
  q[3] = quat.x();
  q[4] = quat.y();
  q[5] = quat.z();
  q[6] = quat.w();
  const int iterations = int(g.c(C_IK_ITERATIONS));
  for (int it = 0; it <= iterations; ++it) {
    pin::computeJointJacobians(m, d, q);
    pin::updateFramePlacements(m, d);
    for (int i = 0; i < g.k; ++i) {
      g.J6.setZero();
      pin::getFrameJacobian(m, d, g.feet_ids[i], pin::LOCAL_WORLD_ALIGNED, g.J6);
      g.J.middleRows<3>(3 * i) = g.J6.topRows<3>();
      g.err.segment<3>(3 * i) = Eigen::Map<const Vec3>(g.foot_position_ref + 3 * i) - d.oMf[g.feet_ids[i]].translation();
    }
    if (it == iterations) break;  // J at the solution: for the velocities below
    damped_solve(g, g.err, g.dq, g.work_v);
    for (int j = 0; j < g.na; ++j) q[g.joint_q_index[j]] += g.dq[j];
  }
  for (int j = 0; j < g.na; ++j) {
    double& x = q[g.joint_q_index[j]];
    x = clip(x, g.q_lower[j], g.q_upper[j]);
    g.q_joint_ref[j] = x;
  }
  g.v_base.head<3>() = R.transpose() * Eigen::Map<const Vec3>(g.base_velocity_ref);  // base frame
  g.v_base.tail<3>() = R.transpose() * Eigen::Map<const Vec3>(g.base_angular_ref);
  g.rhs.col(0) = Eigen::Map<const Eigen::VectorXd>(g.foot_velocity_ref, 3 * g.k);
  g.rhs.col(0).noalias() -= g.J.leftCols(g.nb) * g.v_base;
  if (g.c(C_VELOCITY_PRODUCT) == 0.0) {  // seed 000's pipeline: J_j a_j = a_foot
    g.rhs.col(1) = Eigen::Map<const Eigen::VectorXd>(g.foot_acceleration_ref, 3 * g.k);
    damped_solve(g, g.rhs, g.sol, g.work_m);
    for (int j = 0; j < g.na; ++j) {
      g.v_joint_ref[j] = g.sol(j, 0);
      g.a_joint_ref[j] = g.sol(j, 1);
    }
    return;
  }
  damped_factor(g);  // J is the same for both solves
  auto v_joint = g.sol.col(0);
  factored_solve(g, g.rhs.col(0), v_joint, g.work_v);
  // J_j a_j = a_foot − J̇v (the drift at the reference velocity)
  g.v_ik.head(g.nb) = g.v_base;
  g.v_ik.tail(g.na) = v_joint;
  pin::forwardKinematics(m, d, q, g.v_ik, g.a_zero);
  for (int i = 0; i < g.k; ++i)
    g.rhs.col(1).segment<3>(3 * i) =
        Eigen::Map<const Vec3>(g.foot_acceleration_ref + 3 * i) -
        pin::getFrameClassicalAcceleration(m, d, g.feet_ids[i], pin::LOCAL_WORLD_ALIGNED).linear();
  auto a_joint = g.sol.col(1);
  factored_solve(g, g.rhs.col(1), a_joint, g.work_v);
  for (int j = 0; j < g.na; ++j) {
    g.v_joint_ref[j] = g.sol(j, 0);
    g.a_joint_ref[j] = g.sol(j, 1);
  }
}

// gait.py _write_references: the Controller's base, feet and joint references
void write_references(Gait& g) {
  std::memcpy(g.ref[R_BASE_POSITION], g.base_position_ref, 3 * sizeof(double));
  Eigen::Map<Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(g.ref[R_BASE_ROTATION]) = base_rotation(g);
  std::memcpy(g.ref[R_BASE_VELOCITY], g.base_velocity_ref, 3 * sizeof(double));
  std::memcpy(g.ref[R_BASE_ANGULAR], g.base_angular_ref, 3 * sizeof(double));
  std::memcpy(g.ref[R_FOOT_POSITION], g.foot_position_ref, 3 * g.k * sizeof(double));
  std::memcpy(g.ref[R_FOOT_VELOCITY], g.foot_velocity_ref, 3 * g.k * sizeof(double));
  std::memcpy(g.ref[R_FOOT_ACCELERATION], g.foot_acceleration_ref, 3 * g.k * sizeof(double));
  for (int i = 0; i < g.k; ++i) g.swing_out[i] = g.swinging[i] != 0.0;
  std::memcpy(g.ref[R_Q], g.q_joint_ref, g.na * sizeof(double));
  std::memcpy(g.ref[R_V], g.v_joint_ref, g.na * sizeof(double));
  std::memcpy(g.ref[R_A], g.a_joint_ref, g.na * sizeof(double));
}

void feet_from(Gait& g, const double* q) {
  pin::framesForwardKinematics(g.model, g.data, Eigen::Map<const Eigen::VectorXd>(q, g.nq));
  for (int i = 0; i < g.k; ++i) g.feet.row(i) = g.data.oMf[g.feet_ids[i]].translation().transpose();
}

// gait.py Gait.update
void update(Gait& g, double t, const double* q, const double* v, const std::uint8_t* mask) {
  const double dt = std::isnan(g.s(S_T_PREV)) ? 0.0 : std::max(t - g.s(S_T_PREV), 0.0);
  g.s(S_T_PREV) = t;
  const Eigen::Matrix3d R = Eigen::Quaterniond(q[6], q[3], q[4], q[5]).toRotationMatrix();
  const Vec3 v_world = R * Eigen::Map<const Vec3>(v);
  feet_from(g, q);
  update_base(g, t, dt, q);
  if (g.s(S_MODE) == TROT)
    update_schedule(g, t, mask);
  else
    std::fill(g.planned_stance, g.planned_stance + g.k, 1.0);
  update_feet(g, t, dt, q, v_world, mask);
  solve_ik(g);
  write_references(g);
}

// gait.py Gait.reset: stand where the robot is (mask: the feet on the ground, or null = all)
void reset(Gait& g, double t, const double* q, const double* v, const std::uint8_t* mask) {
  feet_from(g, q);
  g.s(S_MODE) = STAND;
  g.s(S_STOP_REQUESTED) = 0.0;
  g.s(S_T_STOPPED) = NaN;
  std::fill(g.velocity_command, g.velocity_command + 3, 0.0);
  const Eigen::Matrix3d R = Eigen::Quaterniond(q[6], q[3], q[4], q[5]).toRotationMatrix();
  g.s(S_BASE_YAW_REF) = std::atan2(R(1, 0), R(0, 0));
  // a reset while moving starts from the measured planar velocity (heading frame)
  const Vec3 v_heading = rot_z(g.s(S_BASE_YAW_REF)).transpose() * (R * Eigen::Map<const Vec3>(v));
  const Vec3 w_world = R * Eigen::Map<const Vec3>(v + 3);
  g.velocity_filtered[0] = v_heading[0];
  g.velocity_filtered[1] = v_heading[1];
  g.velocity_filtered[2] = w_world[2];
  for (int j = 0; j < 3; ++j) g.base_position_ref[j] = q[j];
  g.s(S_STAND_FROM) = q[2];
  g.s(S_T_RESET) = t;
  g.s(S_T_PREV) = t;
  for (int i = 0; i < g.k; ++i) {
    g.planned_stance[i] = 1.0;
    g.swinging[i] = 0.0;
    g.swung[i] = 0.0;
    g.off_ground[i] = 0.0;
    for (int j = 0; j < 3; ++j) g.stance_position[3 * i + j] = g.feet(i, j);
  }
  // the ground is where the feet touching it are; heights are kept relative to it
  const double clearance = g.s(S_STANDING_HEIGHT) - g.s(S_GROUND_HEIGHT);
  bool any = false;
  for (int i = 0; i < g.k; ++i) any |= !mask || mask[i];
  double sum = 0.0;
  int n = 0;
  for (int i = 0; i < g.k; ++i) {
    if (any && mask && !mask[i]) continue;
    sum += g.stance_position[3 * i + 2];
    ++n;
  }
  g.s(S_GROUND_HEIGHT) = sum / n;
  if (any && mask)
    for (int i = 0; i < g.k; ++i)
      if (!mask[i]) g.stance_position[3 * i + 2] = g.s(S_GROUND_HEIGHT);
  g.s(S_STANDING_HEIGHT) = g.s(S_GROUND_HEIGHT) + clearance;
  g.ground_plane[0] = g.s(S_GROUND_HEIGHT);
  g.ground_plane[1] = 0.0;
  g.ground_plane[2] = 0.0;
  g.s(S_GROUND_OFFSET) = 0.0;
  g.base_tilt[0] = 0.0;
  g.base_tilt[1] = 0.0;
  if (g.c(C_FOLLOW_GROUND) != 0.0) {
    fit_ground(g);
    g.s(S_GROUND_OFFSET) = g.ground_plane[0] + g.ground_plane[1] * q[0] + g.ground_plane[2] * q[1] - g.s(S_GROUND_HEIGHT);
    g.s(S_STAND_FROM) = q[2] - g.s(S_GROUND_OFFSET);  // no jump: the base is where it is
    tilt_target(g, g.base_tilt[0], g.base_tilt[1]);
  }
  std::memcpy(g.foot_position_ref, g.stance_position, 3 * g.k * sizeof(double));
  std::fill(g.foot_velocity_ref, g.foot_velocity_ref + 3 * g.k, 0.0);
  std::fill(g.foot_acceleration_ref, g.foot_acceleration_ref + 3 * g.k, 0.0);
  std::memcpy(g.q_ik, q, g.nq * sizeof(double));
  for (int j = 0; j < g.na; ++j) {
    g.q_joint_ref[j] = q[g.joint_q_index[j]];
    g.v_joint_ref[j] = 0.0;
  }
}

// gait.py Gait.start (t NaN: at the last update's time)
void start(Gait& g, double t) {
  if (g.s(S_MODE) != TROT) {
    g.s(S_MODE) = TROT;
    g.s(S_T_CYCLE0) = std::isnan(t) ? (std::isnan(g.s(S_T_PREV)) ? 0.0 : g.s(S_T_PREV)) : t;
    std::fill(g.swung, g.swung + g.k, 0.0);
  }
  g.s(S_STOP_REQUESTED) = 0.0;
  g.s(S_T_STOPPED) = NaN;
}

// gait.py Gait.stop
void stop(Gait& g) {
  std::fill(g.velocity_command, g.velocity_command + 3, 0.0);
  if (g.s(S_MODE) == TROT) g.s(S_STOP_REQUESTED) = 1.0;
}

// The gait node's tick (ros/gait_controller_node.py _apply_references): a fresh non-zero
// /cmd_vel trots at that velocity, a zero or stale one stops; then the gait's update.
// Without a /cmd_vel timeout (NaN) only the update: the caller commands the gait.
void drive(Gait& g, double t, const double* q, const double* v, const std::uint8_t* mask, double now) {
  if (std::isnan(g.c(C_CMD_VEL_TIMEOUT))) {
    update(g, t, q, v, mask);
    return;
  }
  double command[3], command_time;
  {
    std::lock_guard<std::mutex> lock(g.command_mutex);
    std::memcpy(command, g.command, sizeof command);
    command_time = g.command_time;
  }
  const bool fresh = now - command_time <= g.c(C_CMD_VEL_TIMEOUT);
  if (fresh && (command[0] != 0.0 || command[1] != 0.0 || command[2] != 0.0)) {
    std::memcpy(g.velocity_command, command, sizeof command);
    start(g, t);
  } else if (g.s(S_MODE) == TROT) {
    stop(g);
  }
  update(g, t, q, v, mask);
}

}  // namespace
}  // namespace idyn

using idyn::Gait;

extern "C" {

// A gait on the engine's model. sizes: k, nb, state size; config: native/gait.py CONFIG
// (copied); joint_q_index (na), foot frame ids (k); state: the state array (kept, Python
// owns it); refs: the Controller's arrays in native/gait.py CONTROLLER_REFS order, swing:
// Controller.swing. Returns nullptr when the sizes do not match the model.
void* idyn_gait_new(void* engine, int k, int nb, int state_size, const double* config, int config_size,
                    const int* joint_q_index, const int* foot_frames, double* state, double* const* refs,
                    std::uint8_t* swing) {
  try {
    const auto& model = idyn::engine_model(*static_cast<idyn::Engine*>(engine));
    auto g = std::make_unique<Gait>(model, k, nb);
    const int na = g->na;
    if (config_size != idyn::C_SCALARS + k + 3 * k + 3 + 2 * na) return nullptr;
    g->config.assign(config, config + config_size);
    g->touchdown_phases = g->config.data() + idyn::C_SCALARS;
    g->foot_offsets = g->touchdown_phases + k;
    g->com_offset = g->foot_offsets + 3 * k;
    g->q_lower = g->com_offset + 3;
    g->q_upper = g->q_lower + na;
    g->joint_q_index.assign(joint_q_index, joint_q_index + na);
    for (int i = 0; i < k; ++i) {
      if (foot_frames[i] <= 0 || foot_frames[i] >= int(model.nframes)) return nullptr;
      g->feet_ids.push_back(static_cast<pinocchio::FrameIndex>(foot_frames[i]));
    }
    double* p = state + idyn::S_SCALARS;
    double** views3[] = {&g->velocity_command, &g->velocity_filtered, &g->base_position_ref, &g->base_velocity_ref,
                         &g->base_angular_ref, &g->body_offset, &g->body_offset_velocity, &g->ground_plane};
    for (double** v : views3) { *v = p; p += 3; }
    g->base_tilt = p;  // pitch, roll
    p += 2;
    double** views_k[] = {&g->planned_stance, &g->swinging, &g->swung,        &g->off_ground,
                          &g->swing_start,    &g->swing_time, &g->obstacle_apex, &g->trips,
                          &g->touching};
    for (double** v : views_k) { *v = p; p += k; }
    double** views_k3[] = {&g->liftoff, &g->touchdown, &g->stance_position, &g->foot_position_ref,
                           &g->foot_velocity_ref, &g->foot_acceleration_ref};
    for (double** v : views_k3) { *v = p; p += 3 * k; }
    double** views_na[] = {&g->q_joint_ref, &g->v_joint_ref, &g->a_joint_ref};
    for (double** v : views_na) { *v = p; p += na; }
    g->q_ik = p;
    p += g->nq;
    if (p - state != state_size) return nullptr;
    g->st = state;
    g->state_size = state_size;
    g->undo.assign(state, state + state_size);
    for (int r = 0; r < idyn::R_COUNT; ++r) g->ref[r] = refs[r];
    g->swing_out = swing;
    const int n = 3 * k;
    g->feet = Eigen::MatrixXd::Zero(k, 3);
    g->J = Eigen::MatrixXd::Zero(n, g->nv);
    g->J6 = pinocchio::Data::Matrix6x::Zero(6, g->nv);
    g->err = Eigen::VectorXd::Zero(n);
    g->dq = Eigen::VectorXd::Zero(na);
    g->rhs = Eigen::MatrixXd::Zero(n, 2);
    g->sol = Eigen::MatrixXd::Zero(na, 2);
    g->A = Eigen::MatrixXd::Zero(n, n);
    g->work_m = Eigen::MatrixXd::Zero(n, 2);
    g->work_v = Eigen::VectorXd::Zero(n);
    g->llt = Eigen::LLT<Eigen::MatrixXd>(n);
    g->v_base = Eigen::VectorXd::Zero(6);
    g->v_ik = Eigen::VectorXd::Zero(g->nv);
    g->a_zero = Eigen::VectorXd::Zero(g->nv);
    g->due.assign(k, 0);
    g->in_window.assign(k, 0);
    g->since.assign(k, 0.0);
    return g.release();
  } catch (const std::exception&) {
    return nullptr;
  }
}

void idyn_gait_free(void* g) { delete static_cast<Gait*>(g); }

// Gait.update at time t [s] with the measured (q, v) and contact mask (k bytes).
void idyn_gait_update(void* h, double t, const double* q, const double* v, const std::uint8_t* mask) {
  idyn::update(*static_cast<Gait*>(h), t, q, v, mask);
}

// The node's gait tick (see drive): now is CLOCK_MONOTONIC [s], as time.monotonic().
// Keeps the state before the tick for idyn_gait_undo.
void idyn_gait_drive(void* h, double t, const double* q, const double* v, const std::uint8_t* mask, double now) {
  auto& g = *static_cast<Gait*>(h);
  std::memcpy(g.undo.data(), g.st, g.state_size * sizeof(double));
  idyn::drive(g, t, q, v, mask, now);
}

// Back to the state before the last idyn_gait_drive (the loop handed that tick to Python,
// which runs it again).
void idyn_gait_undo(void* h) {
  auto& g = *static_cast<Gait*>(h);
  std::memcpy(g.st, g.undo.data(), g.state_size * sizeof(double));
}

void idyn_gait_reset(void* h, double t, const double* q, const double* v, const std::uint8_t* mask) {
  idyn::reset(*static_cast<Gait*>(h), t, q, v, mask);
}

void idyn_gait_start(void* h, double t) { idyn::start(*static_cast<Gait*>(h), t); }
void idyn_gait_stop(void* h) { idyn::stop(*static_cast<Gait*>(h)); }

// The /cmd_vel command (any thread) and its receive time (CLOCK_MONOTONIC [s]).
void idyn_gait_command(void* h, double vx, double vy, double yaw_rate, double now) {
  auto& g = *static_cast<Gait*>(h);
  std::lock_guard<std::mutex> lock(g.command_mutex);
  g.command[0] = vx;
  g.command[1] = vy;
  g.command[2] = yaw_rate;
  g.command_time = now;
}

}  // extern "C"
