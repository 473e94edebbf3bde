#!/usr/bin/env bash
# `tandem serve` with 2 expert workers on the default model, driven by the
# official openai npm client (tests/npm/openai_client.mjs; it also SIGKILLs
# each expert worker, the gpu worker and the loader in turn under 8
# concurrent streams, which must finish with the undisturbed tokens, then the
# coordinator, after which new requests must succeed); then `tandem ps`
# (every process, states, PSS bound), an expert worker killed and restarted
# while idle, and `tandem stop`, which must stop it cleanly and leave no run
# directory behind.
#   serve_openai_test.sh BUILD_DIR NODE_MODULES
set -euo pipefail
build=$1
modules=$2
work=$(mktemp -d)
base=$work/runs
mkdir -m 700 "$base"
cleanup() { [[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
TANDEM_RUN_BASE=$base "$build/bin/tandem" serve --port 0 --expert-workers 2 --api-key secret-key \
  >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; echo "serve exited early"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$work/serve.log"; echo "serve did not start listening"; exit 1; }
# Without the key: 401.
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models" || true)
[[ "$code" == 401 ]] || { echo "expected 401 without the API key, got $code"; exit 1; }
# The client lives beside its node_modules so that `import "openai"` resolves.
cp "$(dirname "$0")/npm/openai_client.mjs" "$modules/../openai_client.mjs"
# Victims for the fault test, in the order they are killed: both expert
# workers, the gpu worker, the loader; then the coordinator.
pids_of() { TANDEM_RUN_BASE=$base "$build/bin/tandem" ps --json | python3 -c '
import json, sys
procs = json.load(sys.stdin)["runs"][0]["processes"]
print(",".join(str(p["pid"]) for r in sys.argv[1].split(",") for p in procs if p["role"] == r))' "$1"; }
victims=$(pids_of expert,gpu,loader)
coordinator=$(pids_of coordinator)
[[ "$victims" =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ && -n "$coordinator" ]] ||
  { echo "pids from tandem ps: victims '$victims', coordinator '$coordinator'"; exit 1; }
node "$modules/../openai_client.mjs" "http://127.0.0.1:$port/v1" secret-key "$victims" "$coordinator" ||
  { tail -20 "$work/serve.log"; for f in "$base"/run-*/*.log; do echo "== $f"; tail -15 "$f"; done; exit 1; }

# tandem ps: every process of the graph, its state and memory; the summed PSS
# within 1.1 x arena + 50 MiB per process (no request runs: no KV cache).
ps_field() { TANDEM_RUN_BASE=$base "$build/bin/tandem" ps --json | python3 -c "$1"; }
ps_field '
import json, sys
runs = json.load(sys.stdin)["runs"]
assert len(runs) == 1, runs
r = runs[0]
roles = sorted((p["role"], p["index"], p["state"]) for p in r["processes"])
assert roles == [("coordinator", 0, "ready"), ("expert", 0, "ready"), ("expert", 1, "ready"), ("gpu", 0, "ready"),
                 ("launcher", 0, "ready"), ("loader", 0, "ready")], roles
restarted = {p["role"]: p["restarts"] for p in r["processes"]}
assert all(restarted[k] == 1 for k in ("coordinator", "gpu", "loader")), restarted
assert all(p["pss_bytes"] > 0 for p in r["processes"] if p["state"] == "ready"), r
assert r["total_pss_bytes"] <= r["pss_bound_bytes"], (r["total_pss_bytes"], r["pss_bound_bytes"])
print("ps: summed PSS %.1f MiB <= bound %.1f MiB (arena %.1f MiB)" % (r["total_pss_bytes"] / 2**20, r["pss_bound_bytes"] / 2**20, r["arena_bytes"] / 2**20))
'
TANDEM_RUN_BASE=$base "$build/bin/tandem" ps
# An expert worker killed while nothing runs is restarted by the supervisor
# and the next request is answered as before.
expert1() { ps_field 'import json,sys; print(*[(p["pid"], p["state"], p["restarts"]) for p in json.load(sys.stdin)["runs"][0]["processes"] if p["role"] == "expert"][1])'; }
read -r victim _ before <<<"$(expert1)"
first=$(curl -s -H 'Authorization: Bearer secret-key' -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 8, "temperature": 0}' "http://127.0.0.1:$port/v1/completions")
kill -9 "$victim"
state=
for _ in $(seq 1 100); do
  state=$(expert1)
  [[ "$state" == *" ready $((before + 1))" && "$state" != "$victim "* ]] && break
  sleep 0.05
done
[[ "$state" == *" ready $((before + 1))" ]] || { echo "expert 1 not ready again after its kill: $state"; exit 1; }
echo "expert 1 restarted: $state"
again=$(curl -s -H 'Authorization: Bearer secret-key' -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 8, "temperature": 0}' "http://127.0.0.1:$port/v1/completions")
text_of() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["text"])' "$1"; }
[[ "$(text_of "$first")" == "$(text_of "$again")" ]] || { echo "after the restart: $again != $first"; exit 1; }

# tandem scale: 2 -> 3 expert workers while 6 requests run; every request
# finishes (none fails), ps shows the new workers, the old arena is gone.
clients=()
for i in 1 2 3 4 5 6; do
  curl -s -m 120 -H 'Authorization: Bearer secret-key' -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Scale $i\", \"max_tokens\": 96, \"temperature\": 0}" \
    "http://127.0.0.1:$port/v1/completions" >"$work/scale-$i.json" &
  clients+=($!)
done
sleep 0.2
TANDEM_RUN_BASE=$base "$build/bin/tandem" scale expert-workers=3 || { echo "tandem scale failed"; exit 1; }
wait "${clients[@]}" || true
for i in 1 2 3 4 5 6; do
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["choices"][0]["finish_reason"] == "length", j' \
    "$work/scale-$i.json" || { echo "request $i during scale: $(cat "$work/scale-$i.json")"; exit 1; }
done
ps_field '
import json, os, sys
r = json.load(sys.stdin)["runs"][0]
experts = [p for p in r["processes"] if p["role"] == "expert"]
assert [p["state"] for p in experts] == ["ready"] * 3, experts
assert r["arena"].endswith("arena.1") and not os.path.exists(r["run_dir"] + "/arena"), r["arena"]
print("scaled to 3 expert workers during 6 requests; arena", r["arena"])
'
grep -h "replaying\|sending the step again" "$base"/run-*/coordinator-0.log | tail -2 || true
# The gpu worker restarted under the 8 streams took its predecessor's
# sequences over from their KV files (no replay).
grep -h "took over" "$base"/run-*/gpu-0.log | head -1 || { echo "the restarted gpu worker adopted nothing"; exit 1; }

# tandem stop: the launcher stops cleanly (exit 0) and takes its run with it
# (keeping the logs of a run whose processes died).
TANDEM_RUN_BASE=$base "$build/bin/tandem" stop --timeout 20 || { echo "tandem stop failed"; exit 1; }
if kill -0 "$pid" 2>/dev/null; then echo "serve still runs after tandem stop"; exit 1; fi
wait "$pid" || { echo "serve exited with $?"; tail -20 "$work/serve.log"; exit 1; }
if TANDEM_RUN_BASE=$base "$build/bin/tandem" stop >/dev/null; then echo "stop with nothing running succeeded"; exit 1; fi
pid=
# Nothing of the run is left but, since processes died in it, its logs.
left=$(find "$base" -mindepth 1 -not -path "$base/logs*" | head -5)
[[ -z "$left" ]] || { echo "left behind: $left"; exit 1; }
for f in coordinator-0 gpu-0 loader-0 expert-0 expert-1; do
  ls "$base"/logs/run-*/"$f.log" >/dev/null 2>&1 || { echo "$f.log was not kept: $(ls -R "$base/logs")"; exit 1; }
done
[[ "$(stat -c %a "$base/logs")" == 700 ]] || { echo "logs directory is not private"; exit 1; }
grep -q "their logs are kept in" "$work/serve.log" || { echo "the kept logs were not announced"; exit 1; }
grep -q "expert worker(s) serving" "$work/serve.log" || { echo "no expert workers in the log"; exit 1; }
echo "serve_openai_test: ok"
