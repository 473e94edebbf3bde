#!/usr/bin/env bash
# `tandem logits` through the process graph (loader, 2 expert workers and a
# tandem-gpu-worker process; the tandem process is their coordinator) against
# every role in one process (--single-process --expert-workers 2: the same
# arena slices and order of additions): logits within 1e-4 and the same
# greedy tokens, on every fixture model (each GGUF variant and each HF folder).
#   logits_graph_test.sh BUILD_DIR FIXTURES_DIR
set -euo pipefail
build=$1
fixtures=$2
if [[ ! -f "$fixtures/README.md" ]]; then
  echo "SKIP: fixtures not found at $fixtures"; exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TANDEM_RUN_BASE=$work/runs
mkdir -m 700 "$TANDEM_RUN_BASE"
tokens="1 17 300 42 9 77 5 123"
models=$(cd "$fixtures" && ls -d */model-*.gguf */hf | sort)
[[ $(echo "$models" | wc -l) -ge 10 ]] || { echo "expected the fixture models, found: $models"; exit 1; }
for m in $models; do
  model=$fixtures/$m
  "$build/bin/tandem" logits --model "$model" --tokens "$tokens" --greedy 4 --expert-workers 2 \
    >"$work/graph.json" 2>"$work/graph.log" || { tail -20 "$work/graph.log"; echo "$m: graph failed"; exit 1; }
  grep -q "gpu worker\|gpu/0" "$work/graph.log" || { tail "$work/graph.log"; echo "$m: no gpu worker process"; exit 1; }
  "$build/bin/tandem" logits --model "$model" --tokens "$tokens" --greedy 4 --single-process --expert-workers 2 \
    >"$work/single.json" 2>"$work/single.log" || { tail -20 "$work/single.log"; echo "$m: single failed"; exit 1; }
  python3 - "$m" "$work/graph.json" "$work/single.json" <<'PY'
import json, sys
name, a, b = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert a["greedy"] == b["greedy"], (name, a["greedy"], b["greedy"])
rows_a = a["logits"] + a["greedy_logits"]
rows_b = b["logits"] + b["greedy_logits"]
assert len(rows_a) == len(rows_b) and all(len(x) == len(y) for x, y in zip(rows_a, rows_b)), name
d = max(abs(x - y) for ra, rb in zip(rows_a, rows_b) for x, y in zip(ra, rb))
assert d <= 1e-4, (name, d)
print(f"{name}: {len(rows_a)} rows, max |graph - single-process| = {d:.2e}, greedy {a['greedy']}")
PY
done
left=$(find "$TANDEM_RUN_BASE" -mindepth 1 | head -5)
[[ -z "$left" ]] || { echo "left behind: $left"; exit 1; }
echo "logits_graph_test: ok"
