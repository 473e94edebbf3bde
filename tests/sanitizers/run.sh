#!/usr/bin/env bash
# Builds the shared-memory, ring, control-plane and compute-thread-pool tests
# under ThreadSanitizer and under AddressSanitizer + UndefinedBehaviorSanitizer (each in its own
# build tree, only those targets) and runs them. Any sanitizer report fails
# the run: halt_on_error turns a report into a non-zero exit.
#
#   bash tests/sanitizers/run.sh [tsan|asan ...]   (default: tsan asan)
set -euo pipefail
cd "$(dirname "$0")/../.."

kinds=("$@")
((${#kinds[@]})) || kinds=(tsan asan)
targets=(common_shm_test common_ring_test common_control_test kernels_thread_pool_test)
jobs=$(nproc 2>/dev/null || echo 2)

for kind in "${kinds[@]}"; do
  case "$kind" in
    tsan) flags=(-DTANDEM_TSAN=ON) ;;
    asan) flags=(-DTANDEM_SANITIZE=ON) ;;
    *) echo "run.sh: unknown sanitizer '$kind' (tsan or asan)" >&2; exit 2 ;;
  esac
  dir=build-$kind
  echo "== $kind: building ${targets[*]} in $dir"
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DTANDEM_CUDA=OFF "${flags[@]}" > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" -j "$jobs" --target "${targets[@]}"
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/sanitizers/tsan.supp"
  export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1"
  export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
  for t in "${targets[@]}"; do
    echo "== $kind: $t"
    "$dir/tests/$t" --gtest_brief=1
  done
done
echo "sanitizers: ${kinds[*]} clean"
