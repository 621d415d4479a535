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
    python3 tests/topology/redis_topology.py single    (one server: for --tls and --password)

starts a primary, its replica and 3 sentinels watching them as the service
`polylimit` (quorum 2, a primary is down after 1 s), waits until every
sentinel knows the primary and its replica, and prints
`{"url": "redis+sentinel://127.0.0.1:s1,…/polylimit", "nodes": […]}`.

`POLYLIMIT_SERVER` names another server binary than `redis-server` (a path
or a command on PATH) for every node, sentinels included: `make valkey-test`
starts Valkey's this way. `redis-cli` stays the client that builds the
cluster and watches it (Valkey speaks the same protocol and the same
CLUSTER commands).

With `--tls` every node serves TLS only, the URL is `rediss+…` and the
output names the CA (`"ca": path`). With `--password PW` every data node requires that password and the URL
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
SERVER = os.environ.get("POLYLIMIT_SERVER") or "redis-server"


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
# `--tls`: every node (sentinels too) serves TLS only, with a certificate for
# 127.0.0.1 from a CA made for the run (its path is in the output as "ca").
TLS = None


def auth_args(auth=True):
    password = ["-a", PASSWORD, "--no-auth-warning"] if PASSWORD and auth else []
    return password + (["--tls", "--cacert", TLS["ca"]] if TLS else [])


def make_certificates(directory):
    """A CA and a certificate for 127.0.0.1 signed by it (openssl)."""
    ca, ca_key = os.path.join(directory, "ca.crt"), os.path.join(directory, "ca.key")
    cert, key = os.path.join(directory, "server.crt"), os.path.join(directory, "server.key")
    csr, ext = os.path.join(directory, "server.csr"), os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n")
    quiet = {"check": True, "capture_output": True}
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=polylimit test CA", "-keyout", ca_key, "-out", ca], **quiet)
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                    "-keyout", key, "-out", csr], **quiet)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                    "-days", "2", "-out", cert, "-extfile", ext], **quiet)
    return {"ca": ca, "cert": cert, "key": key}


def tls_args():
    if not TLS:
        return []
    return ["--tls-cert-file", TLS["cert"], "--tls-key-file", TLS["key"], "--tls-ca-cert-file", TLS["ca"],
            "--tls-auth-clients", "no", "--tls-replication", "yes", "--tls-cluster", "yes"]


def cli(port, *args, timeout=5, auth=True):
    out = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *auth_args(auth), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return out.stdout.strip()


class NotReady(Exception):
    """A topology that did not come up: it is stopped and started again on other ports."""


def wait_until(what, predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (subprocess.SubprocessError, OSError):
            pass
        time.sleep(0.05)
    raise NotReady(f"redis_topology: {what} did not happen within {seconds} s")


class Topology:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="polylimit-topology-")
        self.processes = []

    def server(self, port, *extra, binary=SERVER):
        password = ["--requirepass", PASSWORD, "--masterauth", PASSWORD] if PASSWORD else []
        ports = ["--port", "0", "--tls-port", str(port), *tls_args()] if TLS else ["--port", str(port)]
        process = subprocess.Popen(
            [binary, *ports, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--dir", self.dir, *password, *extra],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        self.processes.append(process)
        # Our own server: another process may have taken the port since it was free.
        wait_until(f"{binary} on port {port} answering", lambda: f"process_id:{process.pid}" in cli(port, "INFO", "server"))
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
        return {"url": f"{scheme()}+cluster://{userinfo()}" + ",".join(f"127.0.0.1:{p}" for p in ports), "nodes": nodes}


SERVICE = "polylimit"


def single(topology):
    (port,) = free_ports(1)
    process = topology.server(port)
    return {"url": f"{scheme()}://{userinfo()}127.0.0.1:{port}", "nodes": [{"port": port, "pid": process.pid,
                                                                          "role": "primary"}]}


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
            tls = (f"port 0\ntls-port {port}\ntls-cert-file {TLS['cert']}\ntls-key-file {TLS['key']}\n"
                   f"tls-ca-cert-file {TLS['ca']}\ntls-auth-clients no\ntls-replication yes\n") if TLS else f"port {port}\n"
            f.write(
                f"{tls}bind 127.0.0.1\nprotected-mode no\ndir {topology.dir}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 5000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
                + (f"sentinel auth-pass {SERVICE} {PASSWORD}\n" if PASSWORD else "")
            )
        process = subprocess.Popen(
            [SERVER, conf, "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        topology.processes.append(process)
        nodes.append({"port": port, "pid": process.pid, "role": "sentinel"})
        wait_until(f"the sentinel on port {port} answering",
                   lambda p=port, pid=process.pid: f"process_id:{pid}" in cli(p, "INFO", "server", auth=False))

    def known():
        for port in sentinels:
            if cli(port, "SENTINEL", "get-master-addr-by-name", SERVICE, auth=False).split() != ["127.0.0.1", str(primary)]:
                return False
            if "slaves=1,sentinels=3" not in cli(port, "INFO", "sentinel", auth=False):
                return False
        return True

    wait_until("the sentinels knowing the primary, its replica and each other", known)
    return {"url": f"{scheme()}+sentinel://{userinfo()}" + ",".join(f"127.0.0.1:{p}" for p in sentinels) + f"/{SERVICE}",
            "nodes": nodes}


def userinfo():
    return f":{PASSWORD}@" if PASSWORD else ""


def scheme():
    return "rediss" if TLS else "redis"


def main():
    global PASSWORD, TLS
    args = sys.argv[1:]
    if "--tls" in args:
        args.remove("--tls")
        TLS = True
    if len(args) == 3 and args[1] == "--password":
        PASSWORD = args[2]
        args = args[:1]
    if len(args) != 1 or args[0] not in ("single", "cluster", "sentinel"):
        raise SystemExit("usage: redis_topology.py single|cluster|sentinel [--password PW] [--tls]")
    start = {"single": single, "cluster": Topology.cluster, "sentinel": sentinel}[args[0]]
    tls = TLS
    current = []

    def stop(*_):
        for topology in current:
            topology.stop()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A loaded machine, or a port taken between choosing and binding it, can
    # keep a topology from coming up: up to three tries, each on new ports.
    for attempt in range(3):
        topology = Topology()
        current[:] = [topology]
        try:
            if tls:
                TLS = make_certificates(topology.dir)
            described = start(topology)
            if TLS:
                described["ca"] = TLS["ca"]
            break
        except NotReady as e:
            topology.stop()
            print(f"{e}; starting again ({attempt + 1} of 3)", file=sys.stderr, flush=True)
        except BaseException:
            topology.stop()
            raise
    else:
        raise SystemExit("redis_topology: the topology did not come up in three tries")
    print(json.dumps(described), flush=True)
    # Until the test process closes our stdin (or ends, which closes it).
    try:
        while sys.stdin.read(4096):
            pass
    finally:
        stop()


if __name__ == "__main__":
    main()
