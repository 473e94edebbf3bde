#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test: the unit and fixture
# tests through ctest, then each fuzz target briefly (FUZZ_SECONDS each,
# default 20; 0 skips fuzzing), then the sanitizer builds of the shared-memory
# tests (SANITIZERS=0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bash deploy/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j "$jobs"
fuzz_seconds=${FUZZ_SECONDS:-20}
if [[ "$fuzz_seconds" != 0 && -x tests/fuzz/run.sh ]]; then
  bash tests/fuzz/run.sh "$fuzz_seconds"
fi
# The shared-memory, ring, control-plane and thread-pool tests again under ThreadSanitizer
# and AddressSanitizer + UBSan (their own build trees, those targets only).
if [[ "${SANITIZERS:-1}" != 0 ]]; then
  bash tests/sanitizers/run.sh
fi
