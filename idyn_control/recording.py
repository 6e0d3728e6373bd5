"""ROS 2 MCAP recording without a ROS install: real message schemas, CDR payloads.

Files written here open in Foxglove Studio and in ``ros2 bag`` (storage plugin mcap):
profile ``ros2``, schemas in ``ros2msg`` encoding (the concatenated ``.msg`` definition
with its dependencies, as rosbag2 writes it), messages in CDR. The ``.msg`` texts come
from the installed ROS 2 message packages (``<prefix>/share/<pkg>/msg/<Type>.msg``: the
PyPI wheels and a distro install both ship them).

Two ways in:

- :meth:`McapRecorder.write` takes a message as a dict (or any object with the fields
  as attributes) and encodes it with ``mcap-ros2-support`` (pure Python: fine for a
  lock-step run, too slow for 10⁴ messages/s);
- :meth:`McapRecorder.write_cdr` takes an already serialized message (``rclpy``
  subscriptions with ``raw=True``): no decoding, no encoding, cheap at 1 kHz.

Log times are wall-clock: a run stamped in simulated time from 0 gives
``time_offset_ns`` (the wall time at its start), else viewers place it in 1970. Each
channel carries rosbag2's ``offered_qos_profiles`` (the publishers' QoS, :func:`qos_yaml`)
so ``ros2 bag play`` offers what was recorded instead of its default.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import yaml
from mcap_ros2.writer import Writer as _Ros2Writer

from .errors import ModelError

PRIMITIVES = {
    "bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16",
    "int32", "uint32", "int64", "uint64", "string", "wstring",
}
_SEPARATOR = "=" * 80 + "\n"
_FIELD = re.compile(r"^\s*([A-Za-z0-9_/]+)(?:<=\d+)?(\[[^\]]*\])?\s+([A-Za-z0-9_]+)")


def _share_dirs() -> list[Path]:
    dirs = [Path(sys.prefix) / "share"]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            dirs.append(Path(prefix) / "share")
    return dirs


def _normalize(datatype: str) -> tuple[str, str]:
    """"pkg/msg/Type" or "pkg/Type" → (pkg, Type)."""
    parts = datatype.split("/")
    if len(parts) == 3 and parts[1] == "msg":
        return parts[0], parts[2]
    if len(parts) == 2:
        return parts[0], parts[1]
    raise ValueError(f"not a ROS 2 message type: {datatype!r}")


@lru_cache(maxsize=None)
def _msg_text(pkg: str, name: str) -> str:
    for share in _share_dirs():
        path = share / pkg / "msg" / f"{name}.msg"
        if path.is_file():
            return path.read_text()
    raise ModelError(f"no definition of {pkg}/msg/{name} (looked for share/{pkg}/msg/{name}.msg "
                     f"under {[str(d) for d in _share_dirs()]}); install the ROS 2 message package")


def _dependencies(pkg: str, text: str) -> list[tuple[str, str]]:
    deps = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        match = _FIELD.match(line)
        if not match or "=" in line.split(match.group(3), 1)[1][:2]:
            continue  # not a field, or a constant
        ftype = match.group(1)
        if ftype in PRIMITIVES:
            continue
        if "/" in ftype:
            dep_pkg, dep_name = ftype.split("/")[0], ftype.split("/")[-1]
        elif ftype == "Header":
            dep_pkg, dep_name = "std_msgs", "Header"
        else:
            dep_pkg, dep_name = pkg, ftype
        deps.append((dep_pkg, dep_name))
    return deps


@lru_cache(maxsize=None)
def msgdef(datatype: str) -> str:
    """The concatenated ROS 2 message definition of ``datatype`` (rosbag2's format)."""
    pkg, name = _normalize(datatype)
    text = _msg_text(pkg, name)
    seen = {(pkg, name)}
    parts = [text.rstrip("\n") + "\n"]
    queue = _dependencies(pkg, text)
    while queue:
        dep = queue.pop(0)
        if dep in seen:
            continue
        seen.add(dep)
        dep_text = _msg_text(*dep)
        parts.append(f"{_SEPARATOR}MSG: {dep[0]}/{dep[1]}\n{dep_text.rstrip(chr(10))}\n")
        queue.extend(_dependencies(dep[0], dep_text))
    return "".join(parts)


#: rmw's "infinite" duration (RMW_DURATION_INFINITE), as rosbag2 writes it
_INFINITE = {"sec": 9223372036, "nsec": 854775807}


def qos_yaml(profiles: Iterable[dict[str, Any]]) -> str:
    """rosbag2's ``offered_qos_profiles`` (metadata version ≥ 9: policies by name).

    Each profile: ``reliability`` ("reliable" | "best_effort"), ``durability``
    ("volatile" | "transient_local"), ``history`` ("keep_last" | "keep_all"), ``depth``;
    deadline, lifespan and liveliness lease are left unspecified (infinite)."""
    out = []
    for p in profiles:
        out.append({
            "history": p.get("history", "keep_last"), "depth": int(p.get("depth", 10)),
            "reliability": p.get("reliability", "reliable"), "durability": p.get("durability", "volatile"),
            "deadline": dict(_INFINITE), "lifespan": dict(_INFINITE), "liveliness": "automatic",
            "liveliness_lease_duration": dict(_INFINITE), "avoid_ros_namespace_conventions": False,
        })
    return yaml.safe_dump(out, sort_keys=False)


def rclpy_qos(profile: Any) -> dict[str, Any]:
    """The fields :func:`qos_yaml` reads, from an ``rclpy.qos.QoSProfile``."""
    return {"history": profile.history.name.lower(), "depth": int(profile.depth),
            "reliability": profile.reliability.name.lower(), "durability": profile.durability.name.lower()}


class McapRecorder:
    """An MCAP file of ROS 2 messages (see the module docstring)::

        with McapRecorder("run.mcap") as rec:
            rec.write("/joint_states", "sensor_msgs/msg/JointState", {...}, t_ns)
    """

    def __init__(self, path: str | os.PathLike, *, time_offset_ns: int = 0):
        self.path = Path(path)
        self.time_offset_ns = int(time_offset_ns)  # added to every t_ns: wall clock at t = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._writer = _Ros2Writer(self._file)
        self._schemas: dict[str, Any] = {}
        self._channels: dict[str, int] = {}
        self.counts: dict[str, int] = {}

    def schema(self, datatype: str):
        pkg, name = _normalize(datatype)
        key = f"{pkg}/msg/{name}"
        if key not in self._schemas:
            self._schemas[key] = self._writer.register_msgdef(key, msgdef(key))
        return self._schemas[key]

    def write(self, topic: str, datatype: str, message: Any, t_ns: int, *, qos: str | None = None) -> None:
        """Encode and write one message (dict or attribute object) at log time ``t_ns``
        (+ the offset); ``qos``: the channel's offered QoS (:func:`qos_yaml`), read once."""
        schema = self.schema(datatype)
        if topic not in self._channels:
            # register the channel with its metadata; the mcap-ros2 writer then reuses it
            self._writer._channel_ids[topic] = self._channel(topic, schema, qos)
        t = int(t_ns) + self.time_offset_ns
        self._writer.write_message(topic, schema, message, log_time=t, publish_time=t)
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def write_cdr(self, topic: str, datatype: str, data: bytes, t_ns: int, *, qos: str | None = None) -> None:
        """Write one already CDR-serialized message (see :meth:`write`)."""
        channel = self._channels.get(topic)
        if channel is None:
            channel = self._channel(topic, self.schema(datatype), qos)
        t = int(t_ns) + self.time_offset_ns
        self._writer._writer.add_message(channel_id=channel, log_time=t, publish_time=t, sequence=0, data=bytes(data))
        self.counts[topic] = self.counts.get(topic, 0) + 1

    def _channel(self, topic: str, schema: Any, qos: str | None) -> int:
        # the mcap-ros2 writer's own McapWriter: same file, same schema records
        channel = self._writer._writer.register_channel(
            topic=topic, message_encoding="cdr", schema_id=schema.id,
            metadata={"offered_qos_profiles": qos if qos is not None else qos_yaml([{}])})
        self._channels[topic] = channel
        return channel

    def close(self) -> None:
        if not self._file.closed:
            self._writer.finish()
            self._file.close()

    def __enter__(self) -> "McapRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_topics(path: str | os.PathLike, topics: Iterable[str] | None = None):
    """Yield (topic, log_time_ns, decoded message) from an MCAP file (ROS 2 CDR)."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _schema, channel, message, decoded in reader.iter_decoded_messages(topics=topics):
            yield channel.topic, message.log_time, decoded
