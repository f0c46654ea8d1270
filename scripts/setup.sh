#!/usr/bin/env bash
# Create or refresh the course's virtual environment in .venv.
# Idempotent and quick when nothing changed: it reinstalls only when
# pyproject.toml or constraints.txt differ from what the venv was made from.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup: Python 3.10 or newer is needed (3.11 recommended); set PYTHON=/path/to/python3.11." >&2
  exit 1
fi

scripts/system-packages.sh

# JupyterHub's proxy for `make hub`, from npm, into .venv/proxy (5.x needs Node 20; 4.6 runs on Debian's 18).
if [ ! -x .venv/proxy/node_modules/.bin/configurable-http-proxy ]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  chp=configurable-http-proxy@5
  [ "$node_major" -ge 20 ] || chp=configurable-http-proxy@4.6
  echo "setup: installing $chp into .venv/proxy"
  mkdir -p .venv/proxy
  npm install --silent --no-fund --no-audit --prefix .venv/proxy "$chp" >/dev/null
fi

stamp=.venv/.course-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x .venv/bin/python ]; then
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
# pip's and setuptools' chatter (index locations, build warnings) goes to a log a user reads only if
# a step fails: a new user takes screens of warnings for errors.
log=.venv/setup.log
step() {
  local what=$1; shift
  echo "setup: $what"
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: failed while $what; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
}
: > "$log"
step "updating pip" .venv/bin/python -m pip install --quiet --upgrade pip
# torch through pip: pip takes a build that lies on this machine's disk (its configuration says where), which
# uv does not look for (it would download torch's several-GB CUDA build). Bytecode comes last, for all at once.
step "installing torch into .venv" .venv/bin/python -m pip install --quiet --no-compile torch -c constraints.txt
# Everything else through uv where it installs and reaches its index (parallel downloads and unpacking: about a
# quarter of pip's time), else through pip, as before.
echo "setup: installing the course and its tools into .venv (a minute or two the first time)"
if ! { .venv/bin/python -m pip install --quiet uv &&
       env VIRTUAL_ENV="$PWD/.venv" .venv/bin/uv pip install --quiet -e '.[dev]' -c constraints.txt; } >>"$log" 2>&1
then
  step "installing them with pip instead of uv" \
    .venv/bin/python -m pip install --quiet --no-compile -e '.[dev]' -c constraints.txt
fi
# Every module's bytecode, on every core: the grading sandbox sees .venv read-only, so a module without its .pyc
# there would be compiled again at every sandbox's start. A file of a newer Python's syntax (torch ships test
# files for 3.12) is skipped, as pip's own compile skips it.
step "compiling .venv's Python files" .venv/bin/python -c \
  'import compileall, sysconfig; compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=2, workers=0)'
echo "$want" > "$stamp"
echo "setup: done"
