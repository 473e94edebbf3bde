#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS_PER_TARGET (default 30; 0 only
# builds), one after the other, on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<target>).
# Configures and builds build-fuzz (clang, TANDEM_FUZZ=ON) first if needed.
# Exits non-zero if any target reports a finding (crash, sanitizer report,
# leak, timeout, out-of-memory); reproducers are kept in fuzz-findings/.
#
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET]
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_TARGETS (space-separated
# subset), FUZZ_ARGS (extra libFuzzer flags), FUZZ_KEEP_CORPUS=1 (keep the
# grown scratch corpus and say where it is).
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-30}
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET]" >&2
  exit 2
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
read -r -a targets <<< "${FUZZ_TARGETS:-fuzz_gguf fuzz_safetensors_header fuzz_tokenizer_json}"
read -r -a extra <<< "${FUZZ_ARGS:-}"
jobs=$(nproc 2>/dev/null || echo 2)

if ! command -v clang++ > /dev/null; then
  echo "run.sh: clang++ not found; libFuzzer needs clang (apt-get install clang)" >&2
  exit 2
fi
if [[ ! -f "$build/build.ninja" ]] || ! grep -q '^TANDEM_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DTANDEM_FUZZ=ON -DTANDEM_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}"
if [[ "$seconds" == 0 ]]; then
  echo "run.sh: built ${targets[*]} in $build/bin (0 s: not running them)"
  exit 0
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/tandem-fuzz.XXXXXX")
if [[ "${FUZZ_KEEP_CORPUS:-0}" == 1 ]]; then
  echo "run.sh: scratch corpora kept in $scratch"
else
  trap 'rm -rf "$scratch"' EXIT
fi
findings=fuzz-findings
mkdir -p "$findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

failed=()
for t in "${targets[@]}"; do
  corpus="$scratch/$t"
  mkdir -p "$corpus"
  if [[ -d "tests/fuzz/corpus/$t" ]]; then cp -r "tests/fuzz/corpus/$t/." "$corpus/"; fi
  echo "=== $t: ${seconds}s, corpus $(ls "$corpus" | wc -l) seeds"
  log="$scratch/$t.log"
  set +e
  "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/$t-" ${extra[@]+"${extra[@]}"} "$corpus" > "$log" 2>&1
  rc=$?
  set -e
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+[[:space:]]+DONE)' "$log" || true
  if [[ $rc -ne 0 ]]; then
    echo "!!! $t: finding (exit $rc); log tail:"
    tail -n 40 "$log"
    cp "$log" "$findings/$t.log"
    failed+=("$t")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run.sh: findings in: ${failed[*]} (reproducers and logs in $findings/)" >&2
  exit 1
fi
echo "run.sh: no findings (${#targets[@]} targets, ${seconds}s each)"
