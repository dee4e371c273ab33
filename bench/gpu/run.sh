#!/usr/bin/env bash
# The GPU run, ready to go: one script, under 8 minutes on one GPU, one JSON line (bench/gpu/run.py says what).
#   bench/gpu/run.sh             # on a CUDA machine, from the repository's root, after `make setup`
#   bench/gpu/run.sh --dry-run --api-base URL --served-model NAME --model DIR   # the CPU, tiny: the tests' check
set -euo pipefail
cd "$(dirname "$0")/../.."
exec "${PYTHON:-.venv/bin/python}" bench/gpu/run.py "$@"
