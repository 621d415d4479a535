#!/usr/bin/env python3
"""Real Redis topologies for the test suites of every language, started on
free loopback ports from the Debian `redis-server` and `redis-cli`.

    python3 tests/topology/redis_topology.py cluster

starts a Redis Cluster of 6 nodes (3 primaries, 3 replicas, a 1 s
`cluster-node-timeout` so failovers are quick), waits until every node
reports `cluster_state:ok`, and prints one JSON line on stdout:

    {"url": "redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...",
     "nodes": [{"port": p1, "pid": 123, "role": "primary"}, ...]}

Then it stays in the foreground and stops every server it started (by pid)
when its stdin closes (the test process ended, however it ended) or when it
gets SIGTERM or SIGINT. A suite starts it once and shares the topology.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NODE_TIMEOUT_MS = 1000


def free_ports(count, bus_offset=0):
    """`count` distinct free ports (each with `port + bus_offset` free too, for the cluster bus)."""
    ports = []
    held = []
    while len(ports) < count:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        held.append(s)
        if bus_offset:
            if port + bus_offset > 65535:
                continue
            try:
                b = socket.socket()
                b.bind(("127.0.0.1", port + bus_offset))
                held.append(b)
            except OSError:
                continue
        ports.append(port)
    for s in held:
        s.close()
    return ports


def cli(port, *args, timeout=5):
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return out.stdout.strip()


def wait_until(what, predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (subprocess.SubprocessError, OSError):
            pass
        time.sleep(0.05)
    raise SystemExit(f"redis_topology: {what} did not happen within {seconds} s")


class Topology:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="polylimit-topology-")
        self.processes = []

    def server(self, port, *extra, binary="redis-server"):
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--dir", self.dir, *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        self.processes.append(process)
        wait_until(f"{binary} on port {port} answering PING", lambda: cli(port, "PING") == "PONG")
        return process

    def stop(self):
        for process in self.processes:
            try:
                os.kill(process.pid, signal.SIGCONT)  # a paused server must die too
                process.kill()
            except ProcessLookupError:
                pass
        for process in self.processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def cluster(self):
        ports = free_ports(6, bus_offset=10000)
        nodes = []
        for port in ports:
            process = self.server(
                port,
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            )
            nodes.append({"port": port, "pid": process.pid})
        create = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise SystemExit(f"redis_topology: cluster create failed: {create.stdout}{create.stderr}")

        def ready():
            for port in ports:
                info = cli(port, "CLUSTER", "INFO")
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
            return True

        wait_until("the cluster reaching cluster_state:ok", ready)
        for node in nodes:
            role = cli(node["port"], "ROLE").splitlines()
            node["role"] = "primary" if role and role[0] == "master" else "replica"
        return {"url": "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports), "nodes": nodes}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("cluster",):
        raise SystemExit("usage: redis_topology.py cluster")
    topology = Topology()

    def stop(*_):
        topology.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        described = topology.cluster()
    except BaseException:
        topology.stop()
        raise
    print(json.dumps(described), flush=True)
    # Until the test process closes our stdin (or ends, which closes it).
    try:
        while sys.stdin.read(4096):
            pass
    finally:
        stop()


if __name__ == "__main__":
    main()
