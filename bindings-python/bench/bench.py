"""`make bench` for the Python binding: decisions/s of `await limiter.check()`
with 64 concurrent tasks on a real Redis next to the `limits` library's async
Redis moving-window limiter on the same server in the same run; the latency of
one decision at 1, 32 and 256 concurrent tasks, beside `limits`; `check_sync`
in a tight loop; FastAPI + polylimit vs FastAPI + slowapi vs FastAPI alone,
req/s under the same load (servers in their own processes, a raw keep-alive
HTTP/1.1 load generator). Rounds alternate the contenders; medians are
reported and each line is recorded for bench/report.py."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redis_server import RedisServer, free_port  # noqa: E402

import polylimit  # noqa: E402

TASKS = 64
SECONDS = float(os.environ.get("BENCH_SECONDS", "2"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def version(package: str) -> str:
    from importlib.metadata import version as installed

    return installed(package)


PEERS = {name: version(name) for name in ("limits", "slowapi", "fastapi")}


def record(**line) -> None:
    """Appends one result line to $POLYLIMIT_BENCH_OUT (read by bench/report.py)."""
    path = os.environ.get("POLYLIMIT_BENCH_OUT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"suite": "python", **line}, ensure_ascii=False) + "\n")


async def latencies(check, tasks: int, per_task: int) -> list:
    """Seconds each check took, `tasks` running at once."""
    out: list = []

    async def worker(i: int) -> None:
        key = f"lat:{tasks}:{i}"
        for _ in range(per_task):
            t = time.perf_counter()
            await check(key)
            out.append(time.perf_counter() - t)

    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return out


def percentiles(samples: list) -> tuple:
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000  # noqa: E731
    return pick(0.5), pick(0.99), pick(0.999)


async def run_tasks(check, tasks: int = TASKS, seconds: float = SECONDS) -> float:
    stop = time.perf_counter() + seconds
    counts = [0] * tasks

    async def worker(i: int) -> None:
        key = f"user:{i}"
        n = 0
        while time.perf_counter() < stop:
            await check(key)
            n += 1
        counts[i] = n

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    return sum(counts) / (time.perf_counter() - start)


def polylimit_check(url: str):
    limiter = polylimit.Limiter(policy={"algorithm": "sliding_window_log", "rate": "100000/min"}, store=url)
    return limiter.check


def limits_check(url: str):
    from limits import parse
    from limits.aio.storage import RedisStorage
    from limits.aio.strategies import MovingWindowRateLimiter

    storage = RedisStorage(url.replace("redis://", "async+redis://"))
    limiter = MovingWindowRateLimiter(storage)
    item = parse("100000/minute")

    async def check(key: str) -> bool:
        return await limiter.hit(item, key)

    return check


async def throughput(make_check, url: str) -> float:
    check = make_check(url)
    await run_tasks(check, seconds=0.5)  # warm-up: connection, script load
    return await run_tasks(check)


async def latency(make_check, url: str, tasks: int) -> tuple:
    check = make_check(url)
    await latencies(check, min(tasks, 8), 20)  # warm-up
    return percentiles(await latencies(check, tasks, max(20, 4000 // tasks)))


def bench_sync(store: str, seconds: float = 2.0) -> float:
    limiter = polylimit.Limiter(policy={"algorithm": "gcra", "rate": "100000000/min"}, store=store, prefix="bench-s")
    check = limiter.check_sync
    n = 0
    stop = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < stop:
        for _ in range(100):
            check("k")
        n += 100
    return n / (time.perf_counter() - start)


REQUEST = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def http_load(port: int, connections: int = TASKS, seconds: float = SECONDS) -> tuple:
    """Requests/s over `connections` keep-alive connections; counts non-200 answers."""
    stop = time.perf_counter() + seconds
    done = [0]
    bad = [0]

    async def conn() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                writer.write(REQUEST)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                if not head.startswith(b"HTTP/1.1 200"):
                    bad[0] += 1
                done[0] += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(conn() for _ in range(connections)))
    return done[0] / (time.perf_counter() - start), bad[0]


def serve(app: str, url: str) -> tuple:
    port = free_port()
    env = dict(os.environ, BENCH_APP=app, REDIS_URL=url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "apps:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--no-access-log"],
        cwd=HERE, env=env,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            asyncio.run(http_load(port, 1, 0.0))
            return proc, port
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)


def bench_http(app: str, url: str) -> float:
    proc, port = serve(app, url)
    try:
        asyncio.run(http_load(port, seconds=0.5))
        rate, bad = asyncio.run(http_load(port))
        assert bad == 0, f"{app}: {bad} non-200 answers"
        return rate
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    redis = RedisServer()
    median = statistics.median
    try:
        url = redis.url
        peers = ", ".join(f"{k} {v}" for k, v in PEERS.items())
        print(f"polylimit Python benchmark ({os.cpu_count()} cores, {TASKS} concurrent tasks, "
              f"median of {ROUNDS} alternating x {SECONDS:g} s; {peers})")
        ours, theirs = [], []
        for _ in range(ROUNDS):
            redis.command("FLUSHALL")  # every run starts from empty logs
            ours.append(asyncio.run(throughput(polylimit_check, url)))
            redis.command("FLUSHALL")
            theirs.append(asyncio.run(throughput(limits_check, url)))
        ours, theirs = median(ours), median(theirs)
        print(f"  await limiter.check()  redis, sliding_window_log : {ours:>10,.0f} decisions/s")
        print(f"  limits MovingWindow    redis (async)              : {theirs:>10,.0f} decisions/s")
        print(f"  ratio polylimit / limits                          : {ours / theirs:>10.2f}x  (target >= 4x)")
        record(what=f"await check(), {TASKS} tasks, Redis, sliding log", value=ours, unit="decisions/s",
               baseline="limits MovingWindow (async Redis)", baseline_value=theirs, ratio=ours / theirs,
               target=4, peers={"limits": PEERS["limits"]})
        for tasks in (1, 32, 256):
            redis.command("FLUSHALL")
            p = asyncio.run(latency(polylimit_check, url, tasks))
            redis.command("FLUSHALL")
            q = asyncio.run(latency(limits_check, url, tasks))
            print(f"  latency, {tasks:>3} tasks: polylimit p50/p99/p99.9 {p[0]:.2f}/{p[1]:.2f}/{p[2]:.2f} ms"
                  f"   limits {q[0]:.2f}/{q[1]:.2f}/{q[2]:.2f} ms")
            record(what=f"latency of one check on Redis, {tasks} concurrent: p50/p99/p99.9", value=p[1], unit="ms",
                   baseline="limits p99", baseline_value=q[1], p50=p[0], p99=p[1], p999=p[2],
                   peer_p50=q[0], peer_p99=q[1], peer_p999=q[2],
                   detail=f"{p[0]:.2f} / {p[1]:.2f} / {p[2]:.2f} ms; limits {q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f} ms")
        sync_redis, sync_memory = bench_sync(url), bench_sync("memory")
        print(f"  check_sync loop        redis                      : {sync_redis:>10,.0f} decisions/s")
        print(f"  check_sync loop        memory                     : {sync_memory:>10,.0f} decisions/s")
        record(what="check_sync loop, Redis", value=sync_redis, unit="decisions/s")
        record(what="check_sync loop, memory", value=sync_memory, unit="decisions/s")
        runs = {"polylimit": [], "slowapi": [], "none": []}
        for _ in range(ROUNDS):
            for app in runs:
                runs[app].append(bench_http(app, url))
        ours_http, slow_http, bare = (median(runs[a]) for a in ("polylimit", "slowapi", "none"))
        print(f"  FastAPI + polylimit    redis                      : {ours_http:>10,.0f} req/s ({ours_http / bare:.2f} of unlimited)")
        print(f"  FastAPI + slowapi      redis                      : {slow_http:>10,.0f} req/s ({slow_http / bare:.2f} of unlimited)")
        print(f"  FastAPI, no limiter                               : {bare:>10,.0f} req/s")
        print(f"  ratio polylimit / slowapi                         : {ours_http / slow_http:>10.2f}x  (target >= 1.5x)")
        record(what="FastAPI + polylimit, Redis", value=ours_http, unit="req/s", baseline="FastAPI + slowapi",
               baseline_value=slow_http, ratio=ours_http / slow_http, target=1.5,
               peers={"slowapi": PEERS["slowapi"], "fastapi": PEERS["fastapi"]})
        record(what="FastAPI + polylimit, Redis, vs no limiter", value=ours_http, unit="req/s",
               baseline="FastAPI alone", baseline_value=bare, ratio=ours_http / bare)
        record(what="FastAPI + slowapi, Redis, vs no limiter", value=slow_http, unit="req/s",
               baseline="FastAPI alone", baseline_value=bare, ratio=slow_http / bare)
    finally:
        redis.kill()


if __name__ == "__main__":
    main()
