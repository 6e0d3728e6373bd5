#!/usr/bin/env bash
# Set up the development environment on a fresh machine (Python 3.10+, pip, gcc):
# a virtual environment at ${IDYN_VENV:-.venv} with the pinned dependencies
# (requirements-dev.txt) and this package installed editable. Idempotent and quiet.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${IDYN_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.idyn-setup"
want="$(cat "$root/requirements-dev.txt" "$root/setup.py" "$root/pyproject.toml" "$root"/idyn_control/native/*.cpp "$root"/idyn_control/native/*.h* "$root/idyn_control/native/build.py" | sha1sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "setup: creating $venv (pinned dependencies, ~1 min)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
# the package's build compiles the native tick (C++, header-only Pinocchio + ProxQP, a Python
# extension): a C++ compiler and Python's headers (a distro's Python keeps them in python3-dev)
missing=()
command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=(g++)
"$venv/bin/python" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  || missing+=("python3-dev")
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "setup: installing ${missing[*]} for the native tick" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null || true
fi
echo "setup: installing the package editable, compiling the native tick (~4 min)" >&2
# no build isolation: the build uses the pinned setuptools, pybind11 and headers installed above
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
if ! "$venv/bin/python" -c 'import sys, idyn_control.native as n, idyn_control.native.rt as rt
ok, what = n.status()
print(f"setup: native tick: {what}", file=sys.stderr)
try:
    rt.load_rt()
    print("setup: compiled loop: built", file=sys.stderr)
except n.NativeUnavailable as err:
    ok = False
    print(f"setup: compiled loop: {err}", file=sys.stderr)
sys.exit(0 if ok else 1)'; then
  echo "setup: native parts missing: formulations and the node run their Python code (slower)" >&2
  [ -z "${IDYN_REQUIRE_NATIVE:-}" ] || exit 1
fi
echo "$want" > "$stamp"
echo "setup: done ($venv)" >&2
