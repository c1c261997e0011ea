#!/usr/bin/env bash
# Install everything teiresias needs on a fresh Debian 12 with only Python:
# a virtualenv in .venv with the project (editable), its test tools and the
# CPU build of torch 2.13.0; the C compiler for the profiler if it is missing.
# Slurm's own packages are installed by `teiresias cluster up` when it needs them.
# Idempotent and quick when nothing is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${TEIRESIAS_VENV:-.venv}

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then need_apt+=(python3-venv); fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing ${need_apt[*]}; run as root or install them with apt-get" >&2; exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
stamp="$VENV/.teiresias-installed"
# Reinstall when the project's dependencies or the profiler's C source change.
want=$(cat pyproject.toml $(ls setup.py profiler/src/*.c profiler/src/*.h 2>/dev/null) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  # torch==2.13.0 resolves to the CPU wheel on local disk (see README).
  "$VENV/bin/python" -m pip install -q -e ".[test,torch]"
  echo "$want" > "$stamp"
fi
