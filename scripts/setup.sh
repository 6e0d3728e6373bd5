#!/usr/bin/env bash
# Set up the development environment on a fresh machine (Python 3.10+, pip, gcc):
# a virtual environment at ${IDYN_VENV:-.venv} with the pinned dependencies
# (requirements-dev.txt) and this package installed editable. Idempotent and quiet.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${IDYN_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.idyn-setup"
want="$(cat "$root/requirements-dev.txt" "$root/setup.py" "$root"/idyn_control/native/*.cpp "$root"/idyn_control/native/*.hpp | sha1sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "setup: creating $venv (pinned dependencies, ~1 min)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$root"
# the native tick (C++, header-only Pinocchio + ProxQP); needs a C++ compiler
if ! command -v c++ >/dev/null && ! command -v g++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing g++ for the native tick" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  fi
fi
echo "setup: compiling the native tick (~2 min)" >&2
"$venv/bin/python" -m idyn_control.native.build >&2 || {
  echo "setup: native tick not built: formulations run their Python code (slower)" >&2
  [ -z "${IDYN_REQUIRE_NATIVE:-}" ] || exit 1
}
echo "$want" > "$stamp"
echo "setup: done ($venv)" >&2
