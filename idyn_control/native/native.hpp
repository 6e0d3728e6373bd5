// Shared declarations of the compiled tick (idyn_control.native).
//
// engine.cpp owns the Pinocchio model (rigid-body terms, contact and task kinematics);
// solvers.cpp owns the ProxQP problems of the formulations. They meet here through
// plain Eigen types so that each translation unit compiles on its own.
#pragma once

#include <Eigen/Core>

namespace idyn {

using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRowMat = Eigen::Map<RowMat>;
using MapVec = Eigen::Map<Eigen::VectorXd>;

struct Engine;  // engine.cpp

// Sizes of the model and its contact set.
struct Dims {
  int nq, nv, nb, na, k;
};
Dims engine_dims(const Engine& e);

// Views of the per-tick outputs, owned by Python (numpy) and written by engine_update.
struct Terms {
  MapRowMat M;      // nv x nv, symmetric
  MapVec h;         // nv
  MapRowMat J;      // 3k x nv, translational Jacobians of the contact points, world
  MapRowMat drift;  // k x 3, J̇v at zero q̈ [m/s²]
  MapVec q, v;      // the state of the last update
};
const Terms& engine_terms(const Engine& e);

// Kinematics of one 3-D point task at the last update: frame origin, or the CoM for
// frame < 0. J: 3 x nv (col-major, preallocated). Fills position, velocity, drift (J̇v).
void engine_point_task(Engine& e, int frame, Eigen::Ref<Eigen::MatrixXd> J, Eigen::Ref<Eigen::Vector3d> position,
                       Eigen::Ref<Eigen::Vector3d> velocity, Eigen::Ref<Eigen::Vector3d> drift);

// Contact i's rigid body (its frame's parent joint), position at the last update [m], and
// its body's angular Jacobian (3 x nv) and angular drift J̇_ω v (world frame): a flat foot's
// one rigid-body constraint (wbc_qp, ContactSet.held_rows).
int engine_contact_body(const Engine& e, int i);
Eigen::Vector3d engine_contact_position(const Engine& e, int i);
void engine_contact_angular(Engine& e, int i, Eigen::Ref<Eigen::MatrixXd> J, Eigen::Ref<Eigen::Vector3d> drift);

}  // namespace idyn
