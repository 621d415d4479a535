"""The local-with-sync measurement (issue 19): N processes, Python, Node and Go
mixed, check one key at full speed on one real redis-server, first with a
synced policy, then with the same policy exact. Reports what they admitted
against the exact limit and each process's decisions/s in both modes.

`tests/e2e/test_sync.py` runs it for a few seconds and asserts the bound;
`make bench` (target `sync-bench`) runs it for 10 s and records bench lines:

    python3 tests/e2e/sync_run.py --seconds 10 --bench
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bindings-python" / "tests")]

from redis_server import RedisServer  # noqa: E402

HERE = Path(__file__).resolve().parent / "sync"
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
GO_DRIVER = Path(os.environ.get("POLYLIMIT_SYNC_GO_DRIVER", TARGET / "e2e" / "sync-driver"))
PY = Path(os.environ.get("POLYLIMIT_SYNC_PY", REPO / ".venv" / "bin" / "python"))

LIMIT = 5000  # per 1 s window
SYNCED = {"algorithm": "fixed_window", "rate": f"{LIMIT}/s", "sync": {"interval": "100ms", "share": 100}}
EXACT = {"algorithm": "fixed_window", "rate": f"{LIMIT}/s"}
LANGS = ["python", "node", "go", "python", "node", "go"]


def command(lang: str) -> List[str]:
    return {
        "python": [str(PY), str(HERE / "driver.py")],
        "node": ["node", str(HERE / "driver.js")],
        "go": [str(GO_DRIVER)],
    }[lang]


def redis_ms(redis: RedisServer) -> int:
    """Redis TIME in ms (the clock its windows follow)."""
    import socket

    with socket.create_connection(("127.0.0.1", redis.port), timeout=2) as s:
        s.sendall(b"TIME\r\n")
        reply = b""
        while reply.count(b"\r\n") < 5:
            reply += s.recv(4096)
    parts = reply.decode().split("\r\n")
    return int(parts[2]) * 1000 + int(parts[4]) // 1000


def run(redis: RedisServer, policy: Dict, seconds: float, langs: List[str] = LANGS) -> Dict:
    """One run: every process on one new key. The totals, the exact limit
    (the limit times the windows the run touched) and each process's result."""
    key = f"sync-{uuid.uuid4().hex}"
    procs = [
        subprocess.Popen(
            command(lang) + [redis.url, json.dumps(policy), key, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for lang in langs
    ]
    try:
        for p, lang in zip(procs, langs):
            line = p.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{lang} driver did not start: {line!r}")
        start = redis_ms(redis)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p, lang in zip(procs, langs):
            line = p.stdout.readline()
            if p.wait(timeout=seconds + 30) != 0 or not line:
                raise RuntimeError(f"{lang} driver failed")
            results.append(json.loads(line))
        end = redis_ms(redis)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    windows = end // 1000 - start // 1000 + 1
    return {
        "admitted": sum(r["admitted"] for r in results),
        "exact_limit": LIMIT * windows,
        "windows": windows,
        "processes": results,
    }


def rate(r: Dict) -> float:
    return r["decisions"] / r["seconds"]


def report(synced: Dict, exact: Dict) -> List[Dict]:
    """Printed lines and bench lines: admissions against the limit, then
    decisions/s per process (the mean per language) synced and exact."""
    suite = "sync (issue 19)"
    n = len(synced["processes"])
    lines = [
        {
            "suite": suite,
            "what": f"admitted by {n} processes (py, node, go) at full speed, synced, vs the exact limit",
            "value": synced["admitted"],
            "unit": "requests",
            "detail": f"{synced['admitted']} of {synced['exact_limit']} ({synced['windows']} windows of {LIMIT}): "
            f"{synced['admitted'] / synced['exact_limit']:.3f}; exact mode {exact['admitted']} of {exact['exact_limit']}",
        }
    ]
    for lang in dict.fromkeys(r["lang"] for r in synced["processes"]):
        s = [rate(r) for r in synced["processes"] if r["lang"] == lang]
        e = [rate(r) for r in exact["processes"] if r["lang"] == lang]
        sv, ev = sum(s) / len(s), sum(e) / len(e)
        lines.append(
            {
                "suite": suite,
                "what": f"{lang}: decisions/s per process, one key, {n} processes, synced vs exact",
                "value": sv,
                "unit": "decisions/s",
                "baseline": "exact",
                "baseline_value": ev,
                "ratio": sv / ev,
            }
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--bench", action="store_true", help="append bench lines to $POLYLIMIT_BENCH_OUT")
    args = parser.parse_args()
    redis = RedisServer()
    try:
        synced = run(redis, SYNCED, args.seconds)
        exact = run(redis, EXACT, args.seconds)
    finally:
        redis.kill()
    lines = report(synced, exact)
    for line in lines:
        if "ratio" in line:
            print(f"{line['what']}: {line['value']:,.0f} vs {line['baseline_value']:,.0f} = {line['ratio']:.1f}x")
        else:
            print(f"{line['what']}: {line['detail']}")
    if synced["admitted"] > synced["exact_limit"]:
        sys.exit(f"over-admission: {synced['admitted']} > {synced['exact_limit']}")
    out = os.environ.get("POLYLIMIT_BENCH_OUT")
    if args.bench and out:
        with open(out, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
