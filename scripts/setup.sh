#!/usr/bin/env bash
# Set up (or refresh) a checkout on Debian 12: system packages, the .venv with cohort installed editable
# (the train and test extras included), and the Solana programs built. Idempotent, quick when nothing changed.
# Run as root on a fresh machine (or with sudo available) so it can apt-get install the C compiler.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "setup: need root to run: $*" >&2; exit 1
  fi
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. C compiler for BPF: clang-19 gives Solana's 4 KiB stack frames; clang-14 (512 B frames) only as fallback.
if ! command -v clang-19 >/dev/null && ! command -v "${COHORT_CLANG:-clang-19}" >/dev/null; then
  say "installing clang-19"
  apt_install clang-19 || { say "clang-19 unavailable, falling back to clang-14"; apt_install clang-14; }
fi
if ! command -v cc >/dev/null; then say "installing a host C compiler"; apt_install gcc libc6-dev; fi
# A real browser for the explorer's page tests: Debian's chromium, driven by playwright (which never
# downloads a browser of its own here). Without it that one test is skipped, and says so.
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; then
    say "installing chromium (the explorer's browser test)"
    apt_install chromium fonts-dejavu-core || say "chromium unavailable: the explorer's browser test will be SKIPPED"
  else
    say "no root to install chromium: the explorer's browser test will be SKIPPED"
  fi
fi
# node and npm for the test that reads our on-chain IDL with @coral-xyz/anchor (fetched from npm by the test).
if ! command -v npm >/dev/null; then
  if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null; then
    say "installing node and npm (the Anchor interop test)"
    apt_install nodejs npm || say "npm unavailable: the Anchor interop test will be SKIPPED"
  else
    say "no root to install npm: the Anchor interop test will be SKIPPED"
  fi
fi

# 2. Python 3.11+ with venv.
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' 2>/dev/null \
  || { echo "setup: cohort needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1))" >&2; exit 1; }
if ! "$PYTHON" -c 'import venv, ensurepip' 2>/dev/null; then say "installing python3-venv"; apt_install python3-venv; fi

# 3. The virtual environment; reinstalled only when the packaging files change.
stamp=.venv/.cohort-install
want="$(cat pyproject.toml setup.py | sha256sum | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ]; then say "creating .venv"; "$PYTHON" -m venv .venv; fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing cohort and its dependencies into .venv (torch is the CPU build unless a GPU build is already there)"
  log=.venv/install.log
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e '.[train,test]'; } >"$log" 2>&1; then
    tail -n 40 "$log" >&2; echo "setup: pip install failed (full log: $log)" >&2; exit 1
  fi
  echo "$want" > "$stamp"
fi

# 4. The Solana programs (rebuilds only what changed).
.venv/bin/python -m cohort.sbf.build
say "ready"
