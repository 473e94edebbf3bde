#!/usr/bin/env bash
# Configures and builds Tandem into build/ (binaries in build/bin, tests in build/tests).
# Extra arguments go to cmake's configure step, e.g. -DTANDEM_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja "$@"
cmake --build build -j "$jobs"
