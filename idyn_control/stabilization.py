"""VIIP balance stabilization: virtual compressive forces along the contact normals.

Seed 000 §7.3 (Figs. 7, 10): besides the configuration-space PID, every controller's
desired accelerations carry a stabilization term: "an inverted pendulum model for balance,
applying only virtual compressive forces along the contact normal to stabilize the robot
(Sugihara & Nakamura, 2003)" — the variable-impedance inverted pendulum (VIIP): an
impedance (PD) on the base pose asks for a restoring wrench, and only the part of it the
feet can produce by *pushing* on the ground (compressive normal forces, the ZMP inside the
support polygon) is applied.

Per tick, with the feet the formulation holds:

1. the base's pose and twist errors (world frame; rows x, y, z, roll, pitch, yaw) give a
   restoring acceleration a = K_p e + K_d ė [m/s², rad/s²] of the pendulum's mass and of
   its rotation, turned into the centroidal wrench w = (m a_lin, I_c a_ang) [N, N·m] with the
   locked robot's mass and inertia about its centre of mass (read off M_bb), so the gains
   are robot-independent like base_kp;
2. the virtual normal forces f_n ≥ 0 [N] minimize ‖G f_n − w‖² in the acceleration metric
   (force residual / √m, moment residual through I_c^(−1/2)), G's column i being the wrench
   about the CoM of a unit push along contact i's normal;
3. they enter the command either as the base acceleration they produce, δq̈_b = M_bb⁻¹ G f_n,
   accumulated into q̈_des through the kinematic layer's base task (``output="acceleration"``,
   seed 000 §7.3: "accumulate … into the vector of desired acceleration"), or as the joint
   torques of legs pressing those forces into the ground, τ = −Σ J_{q,i}ᵀ n_i f_{n,i}, added
   to the formulation's torques (``output="torque"``, how Pacer's published experiment
   configuration applies it).

Pacer maps w through Gᵀ and clips negative entries; the non-negative least squares here is
the same sign rule (a foot that would have to pull gets nothing) with forces in newtons that
reproduce as much of w as pushing can.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin
from scipy.optimize import nnls

STABILIZATIONS = ("none", "viip")
VIIP_OUTPUTS = ("acceleration", "torque")

#: rows of the VIIP gains: base position x, y, z and orientation roll, pitch, yaw (world axes)
VIIP_AXES = ("x", "y", "z", "roll", "pitch", "yaw")

#: relative ridge of the virtual-force least squares (its bias on a reachable wrench ~ RIDGE²)
RIDGE = 1e-2


@dataclass(frozen=True)
class ViipForces:
    """One tick of the VIIP stabilizer.

    Attributes:
        forces_n: (k,) virtual normal force per configured contact [N], ≥ 0, zero for
            contacts not used (not held).
        wrench_desired: (6,) the restoring wrench asked for, (m a, I_c ω̇) [N, N·m], about
            the centre of mass, base-frame axes.
        wrench_applied: (6,) what the compressive forces give, G f_n, same frame (the part
            of the desired wrench that pushing can produce).
        qdd_base: (6,) base acceleration the applied wrench gives the locked robot,
            M_bb⁻¹ G f_n [m/s², rad/s²] (free-flyer coordinates).
        tau: (na,) joint torques that press the forces into the ground, −Σ J_{q,i}ᵀ n_i f_i [N·m].
    """

    forces_n: np.ndarray
    wrench_desired: np.ndarray
    wrench_applied: np.ndarray
    qdd_base: np.ndarray
    tau: np.ndarray


class ViipStabilizer:
    """Virtual compressive contact-normal forces from the base pose error (seed 000 §7.3).

    Args:
        kp: (6,) stiffness [1/s²] per axis x, y, z, roll, pitch, yaw (world frame).
        kd: (6,) damping [1/s] per axis.
    """

    def __init__(self, model, kp, kd):
        if not model.floating_base:
            raise ValueError("VIIP stabilization needs a floating base")
        self.model = model
        self.kp = np.zeros(6)
        self.kd = np.zeros(6)
        self.set_gains(kp, kd)
        self._a_world = np.zeros(6)

    def set_gains(self, kp, kd) -> None:
        self.kp[:] = np.broadcast_to(np.asarray(kp, dtype=float), (6,))
        self.kd[:] = np.broadcast_to(np.asarray(kd, dtype=float), (6,))

    def compute(self, q: np.ndarray, v: np.ndarray, M: np.ndarray, contacts, used: np.ndarray,
                position_ref: np.ndarray, rotation_ref: np.ndarray, velocity_ref: np.ndarray,
                angular_ref: np.ndarray) -> ViipForces:
        """Virtual forces at state (q, v) given the contact Jacobians ``contacts.J`` (world,
        prepared for q), the mass matrix ``M`` at q, the contacts ``used`` (k bool: the held
        feet) and the base references (world position [m], rotation, linear [m/s] and angular
        [rad/s] velocity)."""
        m = self.model
        nb = m.n_base
        R = pin.Quaternion(q[6], q[3], q[4], q[5]).toRotationMatrix()
        a = self._a_world
        a[:3] = self.kp[:3] * (position_ref - q[:3]) + self.kd[:3] * (velocity_ref - R @ v[:3])
        a[3:] = self.kp[3:] * pin.log3(rotation_ref @ R.T) + self.kd[3:] * (angular_ref - R @ v[3:6])
        # the locked robot's inertia about its centre of mass, base-frame axes, from M_bb =
        # [[m 1, m [c]×ᵀ], [m [c]×, I_c − m [c]×[c]×]] (c: the CoM in the base frame)
        M_bb = M[:nb, :nb]
        mass = M_bb[0, 0]
        cx = M_bb[3:6, 0:3] / mass
        com = np.array((cx[2, 1], cx[0, 2], cx[1, 0]))
        inertia_com = M_bb[3:6, 3:6] + mass * cx @ cx
        # desired centroidal wrench [N, N·m], base-frame axes: m a_CoM and I_c ω̇
        wrench = np.concatenate((mass * (R.T @ a[:3]), inertia_com @ (R.T @ a[3:])))
        k = len(m.contacts)
        forces = np.zeros(k)
        tau = np.zeros(m.na)
        applied = np.zeros(6)
        idx = np.flatnonzero(used)
        if idx.size and np.any(wrench):
            normals = contacts.basis[idx, 2]                            # (m, 3) world
            n_b = normals @ R                                           # base frame (rows Rᵀ n)
            r_b = (contacts.position[idx] - q[:3]) @ R - com            # from the CoM, base frame
            G = np.empty((6, idx.size))                                 # centroidal wrench of unit pushes
            G[:3] = n_b.T
            G[3] = r_b[:, 1] * n_b[:, 2] - r_b[:, 2] * n_b[:, 1]        # r × n written out (np.cross: slow)
            G[4] = r_b[:, 2] * n_b[:, 0] - r_b[:, 0] * n_b[:, 2]
            G[5] = r_b[:, 0] * n_b[:, 1] - r_b[:, 1] * n_b[:, 0]
            # least squares in the acceleration metric (residual force / √m, moment through
            # I_c^(−1/2)): newtons and newton-metres weighed by what they do to the body; a
            # small ridge makes redundant pushes (four feet, three useful rows) share the load
            # instead of NNLS's vertex solution on two feet
            L_inv = np.linalg.inv(np.linalg.cholesky(inertia_com))
            A = np.zeros((6 + idx.size, idx.size))
            b = np.zeros(6 + idx.size)
            A[:3] = G[:3] / np.sqrt(mass)
            b[:3] = wrench[:3] / np.sqrt(mass)
            A[3:6] = L_inv @ G[3:]
            b[3:6] = L_inv @ wrench[3:]
            A[6:] = RIDGE * np.sqrt(np.einsum("ij,ij->", A[:6], A[:6]) / idx.size) * np.eye(idx.size)
            f, _ = nnls(A, b)
            forces[idx] = f
            applied = G @ f
            # the same pushes as a generalized base force (free-flyer coordinates): Σ J_bᵀ n f
            generalized = np.einsum("ijk,ij,i->k", contacts.J[idx, :, :nb], normals, f)
            # legs press f_i n_i into the ground: τ = −Σ J_{q,i}ᵀ n_i f_i
            tau = -np.einsum("ijk,ij,i->k", contacts.J[idx, :, nb:], normals, f)
            qdd_base = np.linalg.solve(M_bb, generalized)
        else:
            qdd_base = np.zeros(6)
        return ViipForces(forces_n=forces, wrench_desired=wrench, wrench_applied=applied, qdd_base=qdd_base, tau=tau)
