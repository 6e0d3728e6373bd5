#!/usr/bin/env bash
# Set up the development environment on a fresh machine (Python 3.10+, pip, gcc):
# a virtual environment at ${IDYN_VENV:-.venv} with the pinned dependencies
# (requirements-dev.txt) and this package installed editable. Idempotent and quiet.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${IDYN_VENV:-$root/.venv}"
python="${PYTHON:-python3}"
stamp="$venv/.idyn-setup"
want="$(sha1sum "$root/requirements-dev.txt" "$root/setup.py" | sha1sum | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "setup: creating $venv (pinned dependencies, ~1 min)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements-dev.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$root"
echo "$want" > "$stamp"
echo "setup: done ($venv)" >&2
