"""Closed-loop runs over real DDS: the simulation bridge and a controller node as child
processes on a private ``ROS_DOMAIN_ID``, driven by the calling process (a recorder, a
reference streamer). Shared by ``idyn-control demo`` and ``idyn-control experiments seed004
--ros`` (no ``ros2 launch`` here: the launch packages are not on PyPI).

    env = private_environment(None)
    with Processes(out, env.variables) as procs:
        procs.start("bridge", bridge_command("anymal_c", friction=0.7))
        ...  # wait until this process hears the bridge's state
        procs.start("controller", node_command("idyn_control.ros.controller_node", params_yaml))
        ...  # spin until done, checking procs.dead()
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

#: node names of the bridge and the controller (their topics: /<name>/...)
BRIDGE = "idyn_sim"
CONTROLLER = "idyn_controller"


@dataclass(frozen=True)
class PrivateEnvironment:
    """A ROS domain of the run's own (nothing else on the machine hears it) and the child
    processes' environment variables."""

    domain_id: int
    variables: dict[str, str]


def private_environment(domain_id: int | None = None, *, probe_s: float = 1.5,
                        attempts: int = 8) -> PrivateEnvironment:
    """``domain_id``, else ``$IDYN_DEMO_DOMAIN_ID``, else a random one in [100, 230] on which
    no node was discovered within ``probe_s`` (up to ``attempts`` draws; the last one is
    taken regardless). Other runs on the machine pick their domains at random too: two in
    one domain would drive each other's robot (both name their nodes alike)."""
    if domain_id is None:
        domain_id = int(os.environ.get("IDYN_DEMO_DOMAIN_ID", 0))
    if not domain_id:
        draw = random.Random(os.getpid() ^ time.time_ns())
        for attempt in range(attempts):
            domain_id = draw.randint(100, 230)
            if attempt == attempts - 1 or not _domain_has_nodes(domain_id, probe_s):
                break
    return PrivateEnvironment(domain_id, dict(os.environ, ROS_DOMAIN_ID=str(domain_id), PYTHONUNBUFFERED="1"))


def _domain_has_nodes(domain_id: int, probe_s: float) -> bool:
    """Whether a node of another participant is discovered on ``domain_id`` within ``probe_s``."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    node = rclpy.create_node("idyn_domain_probe", context=context)
    try:
        end = time.monotonic() + probe_s
        while time.monotonic() < end:
            if any(name != "idyn_domain_probe" for name, _ in node.get_node_names_and_namespaces()):
                return True
            time.sleep(0.05)
        return False
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def bridge_command(robot: str, *, friction: float, compliant: bool = False, crouch: float = 0.0,
                   contact_states_topic: str = f"/{CONTROLLER}/contact_states",
                   command_topic: str = "/effort_controller/commands") -> list[str]:
    """``idyn_sim`` lock-step (not real time: each state waits for the command answering it)
    for ``robot`` (a shipped robot's name or a robot file's path)."""
    return [sys.executable, "-m", "idyn_control.ros.sim_bridge_node", "--ros-args",
            "-p", f"robot:={robot}", "-p", "real_time:=false", "-p", "lockstep:=true",
            "-p", f"spawn_crouch:={float(crouch)}", "-p", f"friction:={float(friction)}",
            "-p", f"compliant:={str(bool(compliant)).lower()}",
            "-p", f"contact_states_topic:={contact_states_topic}", "-p", f"command_topic:={command_topic}"]


def node_command(module: str, params_file: Path | str, remaps: Sequence[tuple[str, str]] = ()) -> list[str]:
    """A node module (``python -m``) with its params file and topic remappings."""
    cmd = [sys.executable, "-m", module, "--ros-args", "--params-file", str(params_file)]
    for src, dst in remaps:
        cmd += ["-r", f"{src}:={dst}"]
    return cmd


class Processes:
    """Child processes of a run, each logging to ``<out>/<name>.log``; :meth:`close` (or the
    end of a ``with`` block) stops them: SIGTERM, then SIGKILL after ``grace_s``."""

    def __init__(self, out: Path, env: dict[str, str], grace_s: float = 10.0):
        self.out, self.env, self.grace_s = Path(out), env, grace_s
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: list = []

    def start(self, name: str, cmd: list[str]) -> subprocess.Popen:
        log = open(self.out / f"{name}.log", "w")
        self._logs.append(log)
        proc = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self.procs[name] = proc
        return proc

    def dead(self) -> list[str]:
        """Names of the processes that have exited."""
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def stop(self, name: str) -> None:
        """Stop one process (SIGTERM, then SIGKILL after ``grace_s``); its log stays open."""
        _stop([self.procs[name]], self.grace_s)

    def close(self) -> None:
        _stop(list(self.procs.values()), self.grace_s)
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> "Processes":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux), so a run killed from
    outside (a test's timeout) leaves no node behind to drive another run's robot."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _stop(procs: list[subprocess.Popen], grace_s: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
