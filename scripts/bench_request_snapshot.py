#!/usr/bin/env python3
"""Latency of snapd_trainer request appends (the training loop's hot path).

Usage: python3 scripts/bench_request_snapshot.py [CALLS] [DIR]

Appends CALLS (default 100000) requests through one RequestLog into a
temporary WAL directory (or DIR/wal) and prints p50/p99/p99.9/max of one
append in microseconds. Target: p99 <= 50 us.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snapd_trainer  # noqa: E402


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    with tempfile.TemporaryDirectory() as tmp:
        state = sys.argv[2] if len(sys.argv) > 2 else tmp
        log = snapd_trainer.RequestLog(os.path.join(state, "wal"), requester="bench:%d" % os.getpid())
        src = os.path.join(state, "gens", "gen-000001.safetensors")
        lat = [0] * calls
        clock = time.perf_counter_ns
        for i in range(calls):
            t0 = clock()
            snapd_trainer.request_snapshot(i + 1, src, log=log)  # generations start at 1
            lat[i] = clock() - t0
        log.close()
        lat.sort()

        def pct(q):
            return lat[min(len(lat) - 1, max(0, int(q * len(lat) + 0.5) - 1))] / 1000.0

        print(
            "request_snapshot append over %d calls: p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us"
            % (calls, pct(0.50), pct(0.99), pct(0.999), lat[-1] / 1000.0)
        )


if __name__ == "__main__":
    main()
