#!/usr/bin/env bash
# Create the virtual environment of the benchmark peer (PlaCo's C++ DynamicsSolver).
#
# placo pins its own Pinocchio (pin==3.8.0) and numpy, which conflict with the project's
# environment, so it lives in a venv of its own: ${IDYN_PEER_VENV:-.peer-venv}, relative
# to the repository root unless absolute (.peer-venv/ is git-ignored).
#
# Idempotent: a venv that already has the pinned versions and imports placo is left as
# it is. Needs python3 (>= 3.10, with the venv module) and pip's access to PyPI; wheels
# only (--only-binary), so nothing is compiled. Exits non-zero with a message if placo
# cannot be installed.
#
# Usage:  bash bench/setup_peer.sh            # then: .peer-venv/bin/python bench/peer_placo.py ...
# Env:    IDYN_PEER_VENV  venv location (default .peer-venv)
#         PYTHON          interpreter that creates the venv (default python3)
set -euo pipefail

PLACO_VERSION="0.10.2"   # latest on PyPI when chosen (2026-11); requires pin==3.8.0
PIN_VERSION="3.8.0"
NUMPY_VERSION="2.3.5"    # what pip resolves for placo 0.10.2; pinned so timings are comparable

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="${IDYN_PEER_VENV:-.peer-venv}"
case "$venv" in
  /*) ;;
  *) venv="$root/$venv" ;;
esac
python="${PYTHON:-python3}"

die() {
  echo "setup_peer: ERROR: $*" >&2
  exit 1
}

command -v "$python" >/dev/null 2>&1 || die "'$python' not found (set PYTHON=...)"
"$python" - <<'EOF' || die "placo $PLACO_VERSION needs Python >= 3.10; '$python' is $("$python" -V 2>&1)"
import sys
sys.exit(0 if sys.version_info >= (3, 10) else 1)
EOF

peer_py="$venv/bin/python"

# Already set up? (placo, pin and numpy at the pinned versions, and placo imports.)
check_installed() {
  [ -x "$peer_py" ] || return 1
  PLACO_VERSION="$PLACO_VERSION" PIN_VERSION="$PIN_VERSION" NUMPY_VERSION="$NUMPY_VERSION" \
    "$peer_py" - <<'EOF' >/dev/null 2>&1
import os, sys
from importlib import metadata
want = {"placo": os.environ["PLACO_VERSION"], "pin": os.environ["PIN_VERSION"],
        "numpy": os.environ["NUMPY_VERSION"]}
for dist, version in want.items():
    if metadata.version(dist) != version:
        sys.exit(1)
import placo  # noqa: F401  (the C++ extension loads)
placo.DynamicsSolver
EOF
}

if check_installed; then
  echo "setup_peer: placo $PLACO_VERSION already installed in $venv"
else
  if [ -e "$venv" ] && ! "$peer_py" -c "import sys" >/dev/null 2>&1; then
    echo "setup_peer: $venv exists but its python does not run; recreating it"
    rm -rf "$venv"
  fi
  if [ ! -x "$peer_py" ]; then
    echo "setup_peer: creating venv $venv with $("$python" -V 2>&1)"
    "$python" -m venv "$venv" ||
      die "'$python -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"
  fi
  echo "setup_peer: installing placo==$PLACO_VERSION pin==$PIN_VERSION numpy==$NUMPY_VERSION (wheels only)"
  if ! "$peer_py" -m pip install --disable-pip-version-check --no-input --only-binary=:all: \
      "placo==$PLACO_VERSION" "pin==$PIN_VERSION" "numpy==$NUMPY_VERSION"; then
    die "pip could not install placo==$PLACO_VERSION into $venv.
  placo is published as binary wheels for a limited set of platforms and CPython versions (>= 3.10);
  check 'pip download --no-deps --only-binary=:all: placo==$PLACO_VERSION' and network access to PyPI."
  fi
  check_installed || die "placo installed into $venv but 'import placo' fails there:
$("$peer_py" -c 'import placo' 2>&1 | tail -n 5)"
fi

"$peer_py" - <<'EOF'
import sys
from importlib import metadata
print("setup_peer: ok: " + ", ".join(f"{d} {metadata.version(d)}" for d in ("placo", "pin", "numpy", "eigenpy")))
print(f"setup_peer: peer python: {sys.executable}")
EOF
echo "PEER_PYTHON=$peer_py"
