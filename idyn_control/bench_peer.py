"""The benchmark peer (PlaCo's C++ DynamicsSolver) as a long-lived subprocess, block by block.

PlaCo pins its own Pinocchio, so it runs in a virtual environment of its own
(``bench/setup_peer.sh`` makes ``.peer-venv``; ``$IDYN_PEER_VENV`` moves it) with
``bench/peer_placo.py --serve``: one JSON request per line on its stdin ("run n ticks",
"quit"), one JSON answer per line on its stdout (the ticks' times, the sanity summary).
:func:`idyn_control.bench.run` alternates its blocks with the project's in the same time
window. Nothing here is needed when the peer is off (CI does not build its venv).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from . import robots

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "peer_placo.py"
#: how long the peer may take to load and answer one request [s]
TIMEOUT_S = 120.0


class PeerError(RuntimeError):
    """The peer could not start, or answered with an error (its message and stderr's tail)."""


def peer_python(root: Path | None = None, *, setup: bool = False) -> Path | None:
    """The PlaCo venv's interpreter (None when there is none and ``setup`` is False);
    ``setup`` runs bench/setup_peer.sh first when the venv is missing."""
    root = root or ROOT
    venv = Path(os.environ.get("IDYN_PEER_VENV", root / ".peer-venv"))
    if not venv.is_absolute():
        venv = root / venv
    python = venv / "bin" / "python"
    if not python.exists() and setup and (root / "bench" / "setup_peer.sh").exists():
        subprocess.run(["bash", str(root / "bench" / "setup_peer.sh")], check=True)
    return python if python.exists() and SCRIPT.exists() else None


class PeerProcess:
    """``bench/peer_placo.py --serve`` replaying ``sequence`` (a TickSequence .npz) for ``robot``."""

    def __init__(self, python: Path, sequence: Path, robot: str = "solo12", timeout_s: float = TIMEOUT_S):
        spec = robots.spec(robot)
        urdf = spec.urdf_path()
        if not isinstance(urdf, Path):
            raise PeerError(f"{robot}: the peer needs a URDF file, not robot_description text")
        cmd = [str(python), str(SCRIPT), "--serve", "--sequence", str(sequence), "--urdf", str(urdf),
               "--package-dir", str(robots.example_robot_data_dir().parent)]
        self.timeout_s = timeout_s
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                     text=True, bufsize=1)
        try:
            self.hello = self._read()
        except PeerError:
            self.close()
            raise

    def _read(self) -> dict:
        ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise PeerError(f"no answer from the peer ({'timeout' if not ready else 'it exited'}): "
                            f"{self._stderr_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(f"{answer['error']} {self._stderr_tail()}".strip())
        return answer

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].strip()

    def _request(self, **request) -> dict:
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise PeerError(f"the peer is gone ({err}): {self._stderr_tail()}") from None
        return self._read()

    def run_block(self, ticks: int) -> tuple[np.ndarray, np.ndarray]:
        """The peer's next ``ticks`` ticks of the sequence; their wall and thread CPU times [s]."""
        answer = self._request(op="run", ticks=int(ticks))
        return (np.asarray(answer["times_ns"], dtype=float) * 1e-9, np.asarray(answer["cpu_ns"], dtype=float) * 1e-9)

    def close(self) -> dict | None:
        """Stop the peer; its sanity summary (None if it could not give one)."""
        sanity = None
        if self.proc.poll() is None:
            try:
                sanity = self._request(op="quit").get("sanity")
            except PeerError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self._stderr):
            stream.close()
        return sanity
