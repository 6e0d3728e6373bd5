"""Messages ↔ arrays, with the checks that decide whether an input is usable.

Each reader returns a reason string when it drops a message (counted and logged by the
node) and writes accepted values into preallocated buffers. Conventions:

- Joint order: ``model`` order (Pinocchio velocity order); messages are matched by name.
- Floating base (nav_msgs/Odometry): ``q[:3]`` position of the base in the world (odom)
  frame [m], ``q[3:7]`` quaternion (x, y, z, w) — the same order in ROS and Pinocchio;
  ``v[:3]``, ``v[3:6]`` linear [m/s] and angular [rad/s] velocity of the base *expressed
  in the base frame* (Pinocchio's free-flyer convention). REP-105 puts the odometry twist
  in ``child_frame_id`` (the base), so it maps as is; with ``odom_twist_frame = parent``
  (world-frame twists, as some simulators publish) it is rotated by Rᵀ.
"""

from __future__ import annotations

import array
import math
import struct
from typing import Sequence

import numpy as np

from ..model import RobotModel

OK = None

#: a joint state this far outside the URDF's position limits is implausible [rad or m]:
#: no encoder reads it on a working robot (a little outside happens: soft limits, offsets)
POSITION_MARGIN = 0.5
#: joint speeds above VELOCITY_FACTOR × the URDF's velocity limit, clipped to
#: [VELOCITY_FLOOR, VELOCITY_CAP] (URDF limits are often placeholders), are implausible
#: [rad/s or m/s]; the factor leaves room for a fall or an impact
VELOCITY_FACTOR = 10.0
VELOCITY_FLOOR = 100.0
VELOCITY_CAP = 1000.0
#: base estimates beyond these are implausible: position [m], linear [m/s], angular [rad/s]
BASE_POSITION_MAX = 1e4
BASE_LINEAR_MAX = 100.0
BASE_ANGULAR_MAX = 200.0

_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")
CDR_LE = b"\x00\x01"  # encapsulation header of little-endian plain CDR (XCDR1), what rmw_fastrtps sends


def as_array(seq) -> np.ndarray:
    """A message's float64 sequence as an ndarray (zero-copy for the array.array rclpy uses)."""
    return np.frombuffer(seq, dtype=float) if isinstance(seq, array.array) else np.asarray(seq, dtype=float)


def stamp_ns(stamp) -> int:
    """builtin_interfaces/Time → integer nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def cdr_stamp_ns(data: bytes) -> int:
    """The first time of a serialized message (plain CDR, little-endian) in integer
    nanoseconds: the header.stamp of a stamped message, a rosgraph_msgs/Clock's clock."""
    sec, nanosec = _STAMP.unpack_from(data, 4)  # after the 4-byte encapsulation header
    return sec * 1_000_000_000 + nanosec


class JointStateReader:
    """sensor_msgs/JointState → joint positions and velocities in model order.

    Names the model lacks are ignored (and counted by the caller: joint_state_broadcaster
    publishes every joint of the system, e.g. a gripper the ID model leaves out); a message
    that misses a model joint is dropped. The name → index map is cached per name list.

    :meth:`read_serialized` reads the message straight from its CDR bytes (a raw
    subscription): rclpy's conversion to a Python message builds a str per joint name and
    three sequences every time, about half of the middleware → callback dispatch cost
    measured here; the bytes of the name list are compared with the cached ones instead,
    and positions/velocities are read in place. Any other encoding or an unexpected layout
    falls back to the full deserialization and :meth:`read`.

    Attributes:
        q, v: positions [rad or m] and velocities of the last accepted message, model order.
        stamp_ns: its ``header.stamp`` [ns].
        sizes: (names, positions, velocities) lengths of the last message read.
    """

    def __init__(self, model: RobotModel):
        self.model = model
        self.q = np.zeros(model.na)
        self.v = np.zeros(model.na)
        pm, joints = model.pin_model, model.joint_q_index
        # rows: lowest and highest plausible position, highest plausible |velocity| (model
        # order; also read by the compiled loop, idyn_control.native.rt)
        self.bounds = np.empty((3, model.na))
        self.bounds[0] = np.asarray(pm.lowerPositionLimit)[joints] - POSITION_MARGIN
        self.bounds[1] = np.asarray(pm.upperPositionLimit)[joints] + POSITION_MARGIN
        self.bounds[2] = np.clip(VELOCITY_FACTOR * np.abs(model.v_max), VELOCITY_FLOOR, VELOCITY_CAP)
        self.stamp_ns = 0
        self.sizes = (0, 0, 0)
        self._names: list[str] | None = None
        self._index: np.ndarray | None = None
        self.unknown: tuple[str, ...] = ()
        self.missing: tuple[str, ...] = ()
        self._names_at = -1          # byte offset and bytes of the cached name list in the CDR
        self._names_cdr = b""

    def _map(self, names: Sequence[str]) -> None:
        position = {n: i for i, n in enumerate(names)}
        self.missing = tuple(n for n in self.model.joint_names if n not in position)
        self.unknown = tuple(n for n in names if n not in self.model._joint_position)
        dupes = len(position) != len(names)
        self._index = None if (self.missing or dupes) else np.array(
            [position[n] for n in self.model.joint_names], dtype=np.intp)
        self._names = list(names)

    def read(self, msg) -> str | None:
        """Fill :attr:`q`, :attr:`v` from ``msg``; return a drop reason or None."""
        names = msg.name
        self.stamp_ns = stamp_ns(msg.header.stamp)
        self.sizes = (len(names), len(msg.position), len(msg.velocity))
        self._names_at = -1
        if names != self._names:
            self._map(names)
        if self._index is None:
            return "missing_joint"
        n = len(names)
        if len(msg.position) != n or len(msg.velocity) != n:
            return "wrong_size"
        return self._take(as_array(msg.position), as_array(msg.velocity))

    def _take(self, position: np.ndarray, velocity: np.ndarray) -> str | None:
        q, v = self.q, self.v
        np.take(position, self._index, out=q)
        np.take(velocity, self._index, out=v)
        if not (np.isfinite(q).all() and np.isfinite(v).all()):
            return "nonfinite"
        b = self.bounds
        if (q < b[0]).any() or (q > b[1]).any() or (np.abs(v) > b[2]).any():
            return "implausible"
        return OK

    def read_serialized(self, data: bytes) -> str | None:
        """Like :meth:`read`, from the CDR bytes of a sensor_msgs/JointState (raw subscription).

        Layout (plain CDR, offsets after the 4-byte encapsulation header, each field aligned
        to its size): header.stamp (int32 sec, uint32 nanosec), header.frame_id (uint32
        length incl. NUL, chars), name (uint32 count, strings), position, velocity, effort
        (uint32 count, float64 values aligned to 8).
        """
        try:
            if not data.startswith(CDR_LE):
                raise ValueError("not little-endian plain CDR")
            stamp_ns = cdr_stamp_ns(data)
            off = 16 + _U32.unpack_from(data, 12)[0]      # after frame_id
            off = (off + 3) & ~3                          # name count (4-aligned; body starts at 4)
            if off != self._names_at or not data.startswith(self._names_cdr, off):
                names, end = _cdr_strings(data, off)
                self._map(names)
                self._names_at, self._names_cdr = off, data[off:end]
            off += len(self._names_cdr)
            n = len(self._names)
            position, off = _cdr_doubles(data, off)
            velocity, off = _cdr_doubles(data, off)
        except (ValueError, struct.error, UnicodeDecodeError, IndexError):
            from rclpy.serialization import deserialize_message
            from sensor_msgs.msg import JointState

            try:
                msg = deserialize_message(data, JointState)
            except Exception:  # noqa: BLE001 - rmw errors: the bytes are not a JointState
                self.sizes = (0, 0, 0)
                return "malformed"
            return self.read(msg)
        self.stamp_ns = stamp_ns
        self.sizes = (n, position.size, velocity.size)
        if self._index is None:
            return "missing_joint"
        if position.size != n or velocity.size != n:
            return "wrong_size"
        return self._take(position, velocity)


def _cdr_strings(data: bytes, off: int) -> tuple[list[str], int]:
    """A CDR sequence of strings at ``off`` (4-aligned) → (strings, end offset)."""
    count = _U32.unpack_from(data, off)[0]
    off += 4
    if count > len(data):
        raise ValueError("string count beyond the message")
    out = []
    for i in range(count):
        off = (off + 3) & ~3
        length = _U32.unpack_from(data, off)[0]  # including the terminating NUL
        if length == 0 or off + 4 + length > len(data):
            raise ValueError("string beyond the message")
        out.append(data[off + 4:off + 3 + length].decode())
        off += 4 + length
    return out, off


def _cdr_doubles(data: bytes, off: int) -> tuple[np.ndarray, int]:
    """A CDR sequence of float64 at ``off`` → (zero-copy view, end offset)."""
    off = (off + 3) & ~3
    count = _U32.unpack_from(data, off)[0]
    off += 4
    if count == 0:
        return np.zeros(0), off
    off = ((off - 4 + 7) & ~7) + 4  # 8-aligned relative to the CDR body (after the 4-byte header)
    if off + 8 * count > len(data):
        raise ValueError("sequence beyond the message")
    return np.frombuffer(data, dtype="<f8", count=count, offset=off), off + 8 * count


class OdometryReader:
    """nav_msgs/Odometry → free-flyer q[:7], v[:6] (see the module docstring)."""

    def __init__(self, twist_in_parent: bool = False):
        self.q = np.zeros(7)
        self.v = np.zeros(6)
        self.twist_in_parent = twist_in_parent
        self._R = np.zeros((3, 3))

    def read(self, msg) -> str | None:
        p = msg.pose.pose.position
        o = msg.pose.pose.orientation
        t = msg.twist.twist
        q, v = self.q, self.v
        q[0], q[1], q[2], q[3], q[4], q[5], q[6] = p.x, p.y, p.z, o.x, o.y, o.z, o.w
        v[0], v[1], v[2] = t.linear.x, t.linear.y, t.linear.z
        v[3], v[4], v[5] = t.angular.x, t.angular.y, t.angular.z
        if not (np.isfinite(q).all() and np.isfinite(v).all()):
            return "nonfinite"
        if (max(abs(q[0]), abs(q[1]), abs(q[2])) > BASE_POSITION_MAX
                or max(abs(v[0]), abs(v[1]), abs(v[2])) > BASE_LINEAR_MAX
                or max(abs(v[3]), abs(v[4]), abs(v[5])) > BASE_ANGULAR_MAX):
            return "implausible"
        norm = math.sqrt(q[3] * q[3] + q[4] * q[4] + q[5] * q[5] + q[6] * q[6])
        if abs(norm - 1.0) > 0.1:
            return "bad_quaternion"
        q[3:7] /= norm
        if self.twist_in_parent:  # world-frame twist → base frame: Rᵀ v
            R = quaternion_to_matrix(q[3:7], self._R)
            v[:3] = R.T @ v[:3]
            v[3:6] = R.T @ v[3:6]
        return OK


def quaternion_to_matrix(xyzw: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Rotation matrix of a unit quaternion (x, y, z, w), written into ``out``."""
    x, y, z, w = xyzw
    out[0, 0] = 1 - 2 * (y * y + z * z)
    out[0, 1] = 2 * (x * y - z * w)
    out[0, 2] = 2 * (x * z + y * w)
    out[1, 0] = 2 * (x * y + z * w)
    out[1, 1] = 1 - 2 * (x * x + z * z)
    out[1, 2] = 2 * (y * z - x * w)
    out[2, 0] = 2 * (x * z - y * w)
    out[2, 1] = 2 * (y * z + x * w)
    out[2, 2] = 1 - 2 * (x * x + y * y)
    return out


class JointTrajectoryReference:
    """A trajectory_msgs/JointTrajectory as arrays, interpolated in time.

    Points are interpolated with cubic Hermite splines when every point has velocities,
    linearly otherwise; before the first point the trajectory starts from the reference
    held when it arrived (like joint_trajectory_controller), after the last point the
    last position is held with zero velocity.

    Attributes:
        index: model indices of the trajectory's joints.
        t_start_ns: start time on the node's clock [ns] (also as ``start_ns``, one int64).
    """

    def __init__(self, index: np.ndarray, times: np.ndarray, pos: np.ndarray, vel: np.ndarray | None,
                 t_start_ns: int):
        # contiguous float64 / int64: the compiled tick samples them in place (native/tick.py)
        self.index = np.ascontiguousarray(index, dtype=np.int64)
        self.times = np.ascontiguousarray(times, dtype=float)
        self.pos = np.ascontiguousarray(pos, dtype=float)
        self.vel = None if vel is None else np.ascontiguousarray(vel, dtype=float)
        self.t_start_ns = t_start_ns
        self.start_ns = np.array([t_start_ns], dtype=np.int64)
        self.q = np.zeros(index.size)
        self.v = np.zeros(index.size)
        self.a = np.zeros(index.size)

    @classmethod
    def from_msg(cls, msg, model: RobotModel, now_ns: int, q_ref_now: np.ndarray):
        """Build from a message; returns (reference, None) or (None, drop reason)."""
        names = list(msg.joint_names)
        if not names or not msg.points:
            return None, "empty"
        if any(n not in model._joint_position for n in names) or len(set(names)) != len(names):
            return None, "unknown_joint"
        k = len(names)
        index = np.array([model.joint_index(n) for n in names], dtype=np.intp)
        times, pos, vel = [], [], []
        with_vel = all(len(p.velocities) == k for p in msg.points)
        for p in msg.points:
            if len(p.positions) != k or len(p.velocities) not in (0, k):
                return None, "wrong_size"
            times.append(p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec)
            pos.append(list(p.positions))
            vel.append(list(p.velocities) if with_vel else [0.0] * k)
        times_a, pos_a, vel_a = np.array(times), np.array(pos), np.array(vel)
        if not (np.isfinite(times_a).all() and np.isfinite(pos_a).all() and np.isfinite(vel_a).all()):
            return None, "nonfinite"
        if (np.diff(times_a) <= 0.0).any() or times_a[0] < 0.0:
            return None, "time_not_increasing"
        if times_a[0] > 0.0:  # start from the reference held now
            times_a = np.concatenate(([0.0], times_a))
            pos_a = np.vstack((q_ref_now[index], pos_a))
            vel_a = np.vstack((np.zeros(k), vel_a))
        start = stamp_ns(msg.header.stamp) or now_ns
        return cls(index, times_a, pos_a, vel_a if with_vel else None, start), None

    def sample(self, now_ns: int) -> bool:
        """Fill q, v, a at ``now_ns``; return False once the trajectory is finished."""
        t = (now_ns - self.t_start_ns) * 1e-9
        times = self.times
        if t >= times[-1]:
            self.q[:] = self.pos[-1]
            self.v[:] = 0.0
            self.a[:] = 0.0
            return False
        if t <= times[0]:
            self.q[:] = self.pos[0]
            self.v[:] = 0.0 if self.vel is None else self.vel[0]
            self.a[:] = 0.0
            return True
        i = int(np.searchsorted(times, t, side="right")) - 1
        h = times[i + 1] - times[i]
        s = (t - times[i]) / h
        p0, p1 = self.pos[i], self.pos[i + 1]
        if self.vel is None:
            self.q[:] = p0 + s * (p1 - p0)
            self.v[:] = (p1 - p0) / h
            self.a[:] = 0.0
            return True
        m0, m1 = self.vel[i] * h, self.vel[i + 1] * h  # cubic Hermite on s ∈ [0, 1]
        s2, s3 = s * s, s * s * s
        self.q[:] = (2 * s3 - 3 * s2 + 1) * p0 + (s3 - 2 * s2 + s) * m0 + (-2 * s3 + 3 * s2) * p1 + (s3 - s2) * m1
        self.v[:] = ((6 * s2 - 6 * s) * p0 + (3 * s2 - 4 * s + 1) * m0 + (-6 * s2 + 6 * s) * p1
                     + (3 * s2 - 2 * s) * m1) / h
        self.a[:] = ((12 * s - 6) * p0 + (6 * s - 4) * m0 + (-12 * s + 6) * p1 + (6 * s - 2) * m1) / (h * h)
        return True


#: a double no message carries: marks a field's place in its serialized bytes
_MARK = 1.2345678901234567e300


def cdr_template(msg, fields: list[str], stamp: str = "header.stamp") -> tuple[bytearray, int, dict[str, int]]:
    """``msg`` serialized (CDR, as the middleware sends it), the byte offset of its time
    ``stamp`` (a builtin_interfaces/Time field; -1 when it has none) and the byte offset of
    each named float64 field: ``"position[3]"`` (an element of a sequence, which must
    already have its length) or ``"wrench.force.x"``. The fields' values are zero in the
    returned bytes."""
    from rclpy.serialization import serialize_message

    def locate(path):
        *parents, last = path.split(".")
        obj = msg
        for p in parents:
            obj = getattr(obj, p)
        if last.endswith("]"):
            name, index = last[:-1].split("[")
            return getattr(obj, name), int(index)
        return obj, last

    marks = {}
    for j, path in enumerate(fields):
        obj, key = locate(path)
        value = _MARK * (1.0 + j * 1e-9)
        if isinstance(key, int):
            obj[key] = value
        else:
            setattr(obj, key, value)
        marks[path] = np.float64(value).tobytes()
    stamp_at, time = -1, msg
    for name in stamp.split("."):
        time = getattr(time, name, None)
    if time is not None:
        time.sec, time.nanosec = 0x5A5A5A5A, 0x3C3C3C3C
    data = bytearray(serialize_message(msg))
    if time is not None:
        stamp_at = data.find(np.array([0x5A5A5A5A, 0x3C3C3C3C], dtype="<u4").tobytes())
        data[stamp_at:stamp_at + 8] = bytes(8)
    offsets = {}
    for path, mark in marks.items():
        offsets[path] = data.find(mark)
        data[offsets[path]:offsets[path] + 8] = bytes(8)
    return data, stamp_at, offsets


class SerializedMessage:
    """A message kept serialized, as the middleware sends it, whose float64 fields and time
    stamp are written in place (numpy views on its bytes): publishing it costs no Python
    message object and no serialization (``publisher.publish(msg.cdr())``).

    ``groups``: name → field paths (see :func:`cdr_template`) that lie one after the other
    in the bytes, e.g. ``{"position": ["position[0]", ..., "position[11]"]}``; ``views[name]``
    is then a float64 array over them.
    """

    def __init__(self, msg, groups: dict[str, list[str]], stamp: str = "header.stamp"):
        self.data, stamp_at, at = cdr_template(msg, [p for paths in groups.values() for p in paths], stamp)
        self.views: dict[str, np.ndarray] = {}
        for name, paths in groups.items():
            first = at[paths[0]]
            if any(at[p] != first + 8 * j for j, p in enumerate(paths)):
                raise ValueError(f"{name}: fields {paths} are not consecutive in the serialized message")
            self.views[name] = np.frombuffer(self.data, dtype="<f8", count=len(paths), offset=first)
        self._stamp = np.frombuffer(self.data, dtype="<i4", count=2, offset=stamp_at) if stamp_at >= 0 else None

    def set_stamp(self, sec: int, nanosec: int) -> None:
        self._stamp[0], self._stamp[1] = sec, nanosec

    def cdr(self) -> bytes:
        return bytes(self.data)
