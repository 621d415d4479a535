"""One process of the sync measurement (tests/e2e/sync_run.py): checks one
key at full speed through the Python binding and prints what it admitted.

Usage: driver.py <store url> <policy JSON> <key> <seconds>. Prints "ready"
once connected, waits for a line on stdin, runs, prints one JSON line.
"""

import json
import sys
import time

import polylimit


def main() -> None:
    url, policy, key, seconds = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    # A timeout a loaded machine does not reach: a call that timed out would be
    # decided by the local fallback, outside the shared limit.
    limiter = polylimit.Limiter(policy=policy, store=url, timeout=5)
    limiter.check_sync("warm-up:" + key)  # connected, the library loaded
    print("ready", flush=True)
    sys.stdin.readline()
    admitted = decisions = 0
    started = time.monotonic()
    end = started + seconds
    check = limiter.check_sync
    while True:
        for _ in range(64):
            decisions += 1
            if check(key).allowed:
                admitted += 1
        if time.monotonic() >= end:
            break
    elapsed = time.monotonic() - started
    print(json.dumps({"lang": "python", "admitted": admitted, "decisions": decisions, "seconds": elapsed}), flush=True)


if __name__ == "__main__":
    main()
