#!/usr/bin/env python3
"""How long a stream stalls when a process of the graph is killed under it.

Streams one greedy completion from a running `tandem serve`, SIGKILLs the
process whose pid is in PID_FILE (e.g. RUN/gpu-0.ready) once KILL_AT chunks
have arrived, and prints the median gap between chunks and how long after
the kill the next chunk came.

  tools/stream_kill_gap.py PORT PID_FILE [KILL_AT] [MAX_TOKENS]

Example (the gpu worker; RUN from `tandem ps`):
  build/bin/tandem serve --expert-workers 2 --port 18251 &
  tools/stream_kill_gap.py 18251 /dev/shm/tandem-$UID/run-.../gpu-0.ready 400 600
"""
import http.client
import json
import os
import signal
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    port, pid_file = int(sys.argv[1]), sys.argv[2]
    kill_at = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 600
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    times, killed_at = [], None
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        times.append(time.monotonic())
        if len(times) == kill_at:
            with open(pid_file) as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
            killed_at = time.monotonic()
    if killed_at is None:
        sys.exit(f"the stream ended after {len(times)} chunks, before the kill at {kill_at}")
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    after = [t for t in times if t > killed_at]
    if not after:
        sys.exit("no chunk came after the kill")
    print(f"chunks {len(times)}; median gap {gaps[len(gaps) // 2] * 1000:.1f} ms; "
          f"first chunk after the kill {(after[0] - killed_at) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
