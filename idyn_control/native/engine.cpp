// The rigid-body side of the compiled tick: a Pinocchio model rebuilt joint by joint from
// the Python model's description (same joint order, placements, inertias, frames, so the
// same q/v layout and frame ids), and the per-tick pass that fills M, h and the contact
// terms straight into the numpy buffers of DynamicsTerms and ContactSet.
//
// Header-only Pinocchio: nothing is linked, so the library needs no ABI match with the
// Python bindings, only the same headers.

#include <pinocchio/algorithm/center-of-mass.hpp>
#include <pinocchio/algorithm/crba.hpp>
#include <pinocchio/algorithm/frames.hpp>
#include <pinocchio/algorithm/jacobian.hpp>
#include <pinocchio/algorithm/kinematics.hpp>
#include <pinocchio/algorithm/rnea.hpp>
#if __has_include(<pinocchio/multibody.hpp>)  // Pinocchio 4
#include <pinocchio/multibody.hpp>
#include <pinocchio/spatial.hpp>
#else  // Pinocchio 3 (ROS 2 Jazzy)
#include <pinocchio/multibody/data.hpp>
#include <pinocchio/multibody/model.hpp>
#include <pinocchio/spatial/explog.hpp>
#endif

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api.h"
#include "native.hpp"

namespace pin = pinocchio;

namespace idyn {

// Joint kinds the description may name (idyn_control/native/__init__.py keeps the same table).
enum JointKind : int {
  FREE_FLYER = 0,
  REVOLUTE_X = 1, REVOLUTE_Y = 2, REVOLUTE_Z = 3, REVOLUTE_AXIS = 4,
  PRISMATIC_X = 5, PRISMATIC_Y = 6, PRISMATIC_Z = 7, PRISMATIC_AXIS = 8,
  UNBOUNDED_X = 9, UNBOUNDED_Y = 10, UNBOUNDED_Z = 11, UNBOUNDED_AXIS = 12,
  SPHERICAL = 13, PLANAR = 14, TRANSLATION = 15,
};

struct Engine {
  pin::Model model;
  pin::Data data;
  Dims dims{};
  std::vector<pin::FrameIndex> contact_frames;
  Terms terms;
  double* position = nullptr;  // k x 3 contact-point positions [m]
  double* rotation = nullptr;  // k x 3 x 3 contact-frame orientations (row-major)
  pin::Data::Matrix6x J6;
  Eigen::VectorXd zero;
  Eigen::MatrixXd kl_H;  // kinematic layer: normal equations
  Eigen::VectorXd kl_rhs;
  Eigen::LLT<Eigen::MatrixXd> kl_llt;

  Engine(pin::Model&& m, Terms&& t) : model(std::move(m)), data(model), terms(std::move(t)) {}
};

Dims engine_dims(const Engine& e) { return e.dims; }
const pin::Model& engine_model(const Engine& e) { return e.model; }  // gait.cpp: its own Data on it
const Terms& engine_terms(const Engine& e) { return e.terms; }

void engine_point_task(Engine& e, int frame, Eigen::Ref<Eigen::MatrixXd> J, Eigen::Ref<Eigen::Vector3d> position,
                       Eigen::Ref<Eigen::Vector3d> velocity, Eigen::Ref<Eigen::Vector3d> drift) {
  const pin::Model& m = e.model;
  pin::Data& d = e.data;
  if (frame < 0) {
    // data holds the zero-acceleration pass, so acom is the CoM drift
    pin::centerOfMass(m, d, e.terms.q, e.terms.v, e.zero, false);
    J = pin::jacobianCenterOfMass(m, d, e.terms.q, false);
    position = d.com[0];
    velocity = d.vcom[0];
    drift = d.acom[0];
    return;
  }
  e.J6.setZero();
  pin::getFrameJacobian(m, d, static_cast<pin::FrameIndex>(frame), pin::LOCAL_WORLD_ALIGNED, e.J6);
  J = e.J6.topRows<3>();
  position = d.oMf[frame].translation();
  velocity.noalias() = J * e.terms.v;
  drift = pin::getFrameClassicalAcceleration(m, d, static_cast<pin::FrameIndex>(frame), pin::LOCAL_WORLD_ALIGNED).linear();
}

int engine_contact_body(const Engine& e, int i) {
  return static_cast<int>(e.model.frames[e.contact_frames[i]].parentJoint);
}

Eigen::Vector3d engine_contact_position(const Engine& e, int i) {
  return Eigen::Map<const Eigen::Vector3d>(e.position + 3 * i);
}

void engine_contact_angular(Engine& e, int i, Eigen::Ref<Eigen::MatrixXd> J, Eigen::Ref<Eigen::Vector3d> drift) {
  const auto fid = e.contact_frames[i];
  e.J6.setZero();
  pin::getFrameJacobian(e.model, e.data, fid, pin::LOCAL_WORLD_ALIGNED, e.J6);
  J = e.J6.bottomRows<3>();
  // data holds the zero-acceleration pass of the last update: the classical acceleration is the drift
  drift = pin::getFrameClassicalAcceleration(e.model, e.data, fid, pin::LOCAL_WORLD_ALIGNED).angular();
}

namespace {

void set_error(char* err, int len, const std::string& what) {
  if (err && len > 0) {
    std::strncpy(err, what.c_str(), static_cast<size_t>(len - 1));
    err[len - 1] = '\0';
  }
}

pin::SE3 placement(const double* p) {  // 12 numbers: R row-major, then translation
  Eigen::Matrix3d R;
  R << p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8];
  return pin::SE3(R, Eigen::Vector3d(p[9], p[10], p[11]));
}

pin::JointModel joint_model(int kind, const double* axis) {
  const Eigen::Vector3d a(axis[0], axis[1], axis[2]);
  switch (kind) {
    case FREE_FLYER: return pin::JointModelFreeFlyer();
    case REVOLUTE_X: return pin::JointModelRX();
    case REVOLUTE_Y: return pin::JointModelRY();
    case REVOLUTE_Z: return pin::JointModelRZ();
    case REVOLUTE_AXIS: return pin::JointModelRevoluteUnaligned(a);
    case PRISMATIC_X: return pin::JointModelPX();
    case PRISMATIC_Y: return pin::JointModelPY();
    case PRISMATIC_Z: return pin::JointModelPZ();
    case PRISMATIC_AXIS: return pin::JointModelPrismaticUnaligned(a);
    case UNBOUNDED_X: return pin::JointModelRUBX();
    case UNBOUNDED_Y: return pin::JointModelRUBY();
    case UNBOUNDED_Z: return pin::JointModelRUBZ();
    case UNBOUNDED_AXIS: return pin::JointModelRevoluteUnboundedUnaligned(a);
    case SPHERICAL: return pin::JointModelSpherical();
    case PLANAR: return pin::JointModelPlanar();
    case TRANSLATION: return pin::JointModelTranslation();
    default: throw std::invalid_argument("unsupported joint kind " + std::to_string(kind));
  }
}

}  // namespace
}  // namespace idyn

using idyn::Engine;

extern "C" {

// Build the model. Per joint j = 1..njoints-1 (index 0 is the universe): parent, kind,
// axis (3), placement (12), inertia (10: mass, lever (3), I xx xy xz yy yz zz about the
// CoM), effort limit unused here. Frames: all of the Python model's frames (parent joint,
// placement) so ids agree. n_base: 6 for a floating base, else 0. Output buffers are the
// numpy arrays of DynamicsTerms / ContactSet (C order). Returns nullptr and fills err on
// failure.
void* idyn_engine_new(int njoints, const int* parents, const int* kinds, const double* axes,
                      const double* placements, const double* inertias, const double* armature,
                      const double* gravity, int nframes, const int* frame_parents,
                      const double* frame_placements, int n_base, int k, const int* contact_frames,
                      double* M, double* h, double* J, double* drift, double* position, double* rotation,
                      double* q_buf, double* v_buf, char* err, int errlen) {
  try {
    pinocchio::Model m;
    for (int j = 1; j < njoints; ++j) {
      const double* in = inertias + 10 * j;
      Eigen::Matrix3d I;
      I << in[4], in[5], in[6], in[5], in[7], in[8], in[6], in[8], in[9];
      const auto jm = idyn::joint_model(kinds[j], axes + 3 * j);
      const auto id = m.addJoint(static_cast<pinocchio::JointIndex>(parents[j]), jm,
                                 idyn::placement(placements + 12 * j), "joint_" + std::to_string(j));
      m.appendBodyToJoint(id, pinocchio::Inertia(in[0], Eigen::Vector3d(in[1], in[2], in[3]), I),
                          pinocchio::SE3::Identity());
    }
    m.armature = Eigen::Map<const Eigen::VectorXd>(armature, m.nv);
    m.gravity.linear(Eigen::Vector3d(gravity[0], gravity[1], gravity[2]));
    // Python frames replace the ones addJoint made, one for one (frame 0 is the universe)
    m.frames.resize(1);
    m.nframes = 1;
    for (int f = 1; f < nframes; ++f) {
      m.addFrame(pinocchio::Frame("frame_" + std::to_string(f), static_cast<pinocchio::JointIndex>(frame_parents[f]),
                                  idyn::placement(frame_placements + 12 * f), pinocchio::OP_FRAME),
                 false);
    }
    const int nv = m.nv, nq = m.nq;
    idyn::Terms terms{idyn::MapRowMat(M, nv, nv), idyn::MapVec(h, nv), idyn::MapRowMat(J, 3 * k, nv),
                      idyn::MapRowMat(drift, k, 3), idyn::MapVec(q_buf, nq), idyn::MapVec(v_buf, nv)};
    auto e = std::make_unique<Engine>(std::move(m), std::move(terms));
    e->dims = {nq, nv, n_base, nv - n_base, k};
    for (int i = 0; i < k; ++i) {
      if (contact_frames[i] <= 0 || contact_frames[i] >= nframes) throw std::invalid_argument("bad contact frame id");
      e->contact_frames.push_back(static_cast<pinocchio::FrameIndex>(contact_frames[i]));
    }
    e->position = position;
    e->rotation = rotation;
    e->J6 = pinocchio::Data::Matrix6x::Zero(6, nv);
    e->zero = Eigen::VectorXd::Zero(nv);
    e->kl_H = Eigen::MatrixXd::Zero(nv, nv);
    e->kl_rhs = Eigen::VectorXd::Zero(nv);
    e->kl_llt = Eigen::LLT<Eigen::MatrixXd>(nv);
    return e.release();
  } catch (const std::exception& ex) {
    idyn::set_error(err, errlen, ex.what());
    return nullptr;
  }
}

void idyn_engine_free(void* e) { delete static_cast<Engine*>(e); }

// The per-tick pass at (q, v) (already in the q/v buffers given at creation): M, h, joint
// Jacobians, zero-acceleration kinematics, and per contact its Jacobian, drift J̇v,
// position and orientation.
void idyn_engine_update(void* handle) {
  auto& e = *static_cast<Engine*>(handle);
  const auto& m = e.model;
  auto& d = e.data;
  auto& t = e.terms;
  pinocchio::computeJointJacobians(m, d, t.q);
  pinocchio::crba(m, d, t.q, pinocchio::Convention::WORLD);
  d.M.triangularView<Eigen::StrictlyLower>() = d.M.transpose().triangularView<Eigen::StrictlyLower>();
  t.M = d.M;
  t.h = pinocchio::nonLinearEffects(m, d, t.q, t.v);
  // zero-acceleration pass: frame classical accelerations are then the drift J̇v
  pinocchio::forwardKinematics(m, d, t.q, t.v, e.zero);
  for (int i = 0; i < e.dims.k; ++i) {
    const auto fid = e.contact_frames[i];
    const auto& oMf = pinocchio::updateFramePlacement(m, d, fid);
    e.J6.setZero();
    pinocchio::getFrameJacobian(m, d, fid, pinocchio::LOCAL_WORLD_ALIGNED, e.J6);
    t.J.middleRows<3>(3 * i) = e.J6.topRows<3>();
    t.drift.row(i) = pinocchio::getFrameClassicalAcceleration(m, d, fid, pinocchio::LOCAL_WORLD_ALIGNED).linear().transpose();
    Eigen::Map<Eigen::Vector3d>(e.position + 3 * i) = oMf.translation();
    Eigen::Map<Eigen::Matrix<double, 3, 3, Eigen::RowMajor>>(e.rotation + 9 * i) = oMf.rotation();
  }
}

// Kinematics of a point task (frame id, or -1 for the CoM) at the last update. J: 3 x nv
// row-major; position, velocity, drift: 3 each.
void idyn_engine_point_task(void* handle, int frame, double* J, double* position, double* velocity, double* drift) {
  auto& e = *static_cast<Engine*>(handle);
  Eigen::MatrixXd Jc(3, e.dims.nv);
  Eigen::Vector3d p, v, a;
  idyn::engine_point_task(e, frame, Jc, p, v, a);
  idyn::MapRowMat J_out(J, 3, e.dims.nv);
  J_out = Jc;
  Eigen::Map<Eigen::Vector3d> p_out(position), v_out(velocity), a_out(drift);
  p_out = p;
  v_out = v;
  a_out = a;
}

// The controller's kinematic layer (idyn_control.controller.Controller.desired_acceleration,
// same equations): q̈_des by weighted least squares over base pose PD (world frame),
// feet (stance: zero acceleration, damped; swing: PD on the reference) and posture PD.
// refs: pointers to the Controller's reference arrays, in the order of KL_REFS in
// idyn_control/native/__init__.py; gains: base_kp, base_kd, base_weight, foot_kp,
// foot_kd, swing_weight, stance_weight, posture_weight, damping.
void idyn_kinematic_layer(void* handle, const double* const* refs, const int* joint_q_index, const std::uint8_t* swing,
                          const std::uint8_t* mask, const double* gains, double* qdd_out) {
  auto& e = *static_cast<Engine*>(handle);
  const auto& t = e.terms;
  const int nv = e.dims.nv, nb = e.dims.nb, na = e.dims.na, k = e.dims.k;
  Eigen::Map<const Eigen::VectorXd> q_ref(refs[0], na), v_ref(refs[1], na), a_ref(refs[2], na),
      joint_kp(refs[3], na), joint_kd(refs[4], na);
  Eigen::Map<Eigen::VectorXd> qdd(qdd_out, nv);
  for (int j = 0; j < na; ++j)
    qdd[nb + j] = a_ref[j] + joint_kp[j] * (q_ref[j] - t.q[joint_q_index[j]]) + joint_kd[j] * (v_ref[j] - t.v[nb + j]);
  if (!nb) return;
  const double base_kp = gains[0], base_kd = gains[1], base_weight = gains[2], foot_kp = gains[3], foot_kd = gains[4],
               swing_weight = gains[5], stance_weight = gains[6], posture_weight = gains[7], damping = gains[8];
  Eigen::Map<const Eigen::Vector3d> p_ref(refs[5]), vel_ref(refs[7]), ang_ref(refs[8]);
  Eigen::Map<const Eigen::Matrix<double, 3, 3, Eigen::RowMajor>> R_ref(refs[6]);
  const Eigen::Matrix3d R = Eigen::Quaterniond(t.q[6], t.q[3], t.q[4], t.q[5]).toRotationMatrix();
  const Eigen::Vector3d v_lin = t.v.head<3>(), w_ang = t.v.segment<3>(3);
  const Eigen::Vector3d p_dd = base_kp * (p_ref - t.q.head<3>()) + base_kd * (vel_ref - R * v_lin);
  const Eigen::Matrix3d R_err = R_ref * R.transpose();
  const Eigen::Vector3d rot_err = pinocchio::log3(R_err);
  const Eigen::Vector3d w_dd = base_kp * rot_err + base_kd * (ang_ref - R * w_ang);
  auto& H = e.kl_H;
  auto& rhs = e.kl_rhs;
  H.setZero();
  rhs.head<3>() = base_weight * (R.transpose() * p_dd - w_ang.cross(v_lin));
  rhs.segment<3>(3) = base_weight * (R.transpose() * w_dd);
  rhs.tail(na) = posture_weight * qdd.tail(na);
  for (int i = 0; i < k; ++i) {
    const auto Ji = t.J.middleRows<3>(3 * i);
    const Eigen::Vector3d vel = Ji * t.v;
    Eigen::Vector3d b;
    double w;
    if (swing[i]) {
      b = Eigen::Map<const Eigen::Vector3d>(refs[11] + 3 * i) +
          foot_kp * (Eigen::Map<const Eigen::Vector3d>(refs[9] + 3 * i) - Eigen::Map<const Eigen::Vector3d>(e.position + 3 * i)) +
          foot_kd * (Eigen::Map<const Eigen::Vector3d>(refs[10] + 3 * i) - vel);
      w = swing_weight;
    } else if (mask[i]) {
      b = -foot_kd * vel;
      w = stance_weight;
    } else {
      continue;
    }
    b -= t.drift.row(i).transpose();
    H.noalias() += w * Ji.transpose() * Ji;
    rhs.noalias() += w * Ji.transpose() * b;
  }
  H.diagonal().head(6).array() += base_weight + damping;
  H.diagonal().tail(na).array() += posture_weight + damping;
  e.kl_llt.compute(H);
  if (e.kl_llt.info() == Eigen::Success)
    qdd = e.kl_llt.solve(rhs);
  else
    qdd = H.ldlt().solve(rhs);  // not positive definite: only with zero weights and damping
}

}  // extern "C"
