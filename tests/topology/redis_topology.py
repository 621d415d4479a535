#!/usr/bin/env python3
"""Real Redis topologies for the test suites of every language, started on
free loopback ports from the Debian `redis-server` and `redis-cli`.

    python3 tests/topology/redis_topology.py cluster

starts a Redis Cluster of 6 nodes (3 primaries, 3 replicas, a 1 s
`cluster-node-timeout` so failovers are quick), waits until every node
reports `cluster_state:ok`, and prints one JSON line on stdout:

    {"url": "redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...",
     "nodes": [{"port": p1, "pid": 123, "role": "primary"}, ...]}

    python3 tests/topology/redis_topology.py sentinel

starts a primary, its replica and 3 sentinels watching them as the service
`polylimit` (quorum 2, a primary is down after 1 s), waits until every
sentinel knows the primary and its replica, and prints
`{"url": "redis+sentinel://127.0.0.1:s1,…/polylimit", "nodes": […]}`.

With `--password PW` every data node requires that password and the URL
carries it (`redis+cluster://:PW@…`, `redis+sentinel://:PW@…`).

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


# `--password PW`: every data node requires it (and replicas use it with
# their primary); sentinels are asked without one.
PASSWORD = None


def auth_args(auth=True):
    return ["-a", PASSWORD, "--no-auth-warning"] if PASSWORD and auth else []


def cli(port, *args, timeout=5, auth=True):
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *auth_args(auth), *args],
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
        password = ["--requirepass", PASSWORD, "--masterauth", PASSWORD] if PASSWORD else []
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--dir", self.dir, *password, *extra],
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
            ["redis-cli", *auth_args(), "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if create.returncode != 0:
            raise SystemExit(f"redis_topology: cluster create failed: {create.stdout}{create.stderr}")

        def ready():
            # Every node sees every slot served and 3 replicas, and every
            # replica has synced: a primary's failure is then covered.
            for port in ports:
                info = cli(port, "CLUSTER", "INFO")
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
                roles = [line.split()[2] for line in cli(port, "CLUSTER", "NODES").splitlines() if line.strip()]
                if sum("slave" in r.split(",") for r in roles) != 3:
                    return False
                replication = cli(port, "INFO", "replication")
                if "role:slave" in replication and "master_link_status:up" not in replication:
                    return False
            return True

        wait_until("the cluster reaching cluster_state:ok with every replica synced", ready)
        for node in nodes:
            role = cli(node["port"], "ROLE").splitlines()
            node["role"] = "primary" if role and role[0] == "master" else "replica"
        return {"url": f"redis+cluster://{userinfo()}" + ",".join(f"127.0.0.1:{p}" for p in ports), "nodes": nodes}


SERVICE = "polylimit"


def sentinel(topology):
    primary, replica, *sentinels = free_ports(5)
    nodes = [
        {"port": primary, "pid": topology.server(primary).pid, "role": "primary"},
        {"port": replica, "pid": topology.server(replica, "--replicaof", "127.0.0.1", str(primary)).pid,
         "role": "replica"},
    ]
    wait_until("the replica syncing", lambda: "master_link_status:up" in cli(replica, "INFO", "replication"))
    for port in sentinels:
        conf = os.path.join(topology.dir, f"sentinel-{port}.conf")
        with open(conf, "w") as f:
            f.write(
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {topology.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
                + (f"sentinel auth-pass {SERVICE} {PASSWORD}\n" if PASSWORD else "")
            )
        process = subprocess.Popen(
            ["redis-server", conf, "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        topology.processes.append(process)
        nodes.append({"port": port, "pid": process.pid, "role": "sentinel"})

    def known():
        for port in sentinels:
            if cli(port, "SENTINEL", "get-master-addr-by-name", SERVICE, auth=False).split() != ["127.0.0.1", str(primary)]:
                return False
            if "slaves=1,sentinels=3" not in cli(port, "INFO", "sentinel", auth=False):
                return False
        return True

    wait_until("the sentinels knowing the primary, its replica and each other", known)
    return {"url": f"redis+sentinel://{userinfo()}" + ",".join(f"127.0.0.1:{p}" for p in sentinels) + f"/{SERVICE}",
            "nodes": nodes}


def userinfo():
    return f":{PASSWORD}@" if PASSWORD else ""


def main():
    global PASSWORD
    args = sys.argv[1:]
    if len(args) == 3 and args[1] == "--password":
        PASSWORD = args[2]
        args = args[:1]
    if len(args) != 1 or args[0] not in ("cluster", "sentinel"):
        raise SystemExit("usage: redis_topology.py cluster|sentinel [--password PW]")
    topology = Topology()

    def stop(*_):
        topology.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        described = topology.cluster() if args[0] == "cluster" else sentinel(topology)
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
