"""Runs the example apps (FastAPI, Django, Flask, Express, Fastify, Koa, Hono,
NestJS, Go net/http, gin, echo, Spring Boot, Spring WebFlux, Ktor) and the
gRPC demo servers on free loopback ports, and talks to them. `make demo` and
tests/e2e both use it.

The apps must be built first: `make examples-build` (the Python module in
.venv, the Node addon, examples/node_modules, target/examples/{go,gin,echo}-example,
target/examples/spring-example.jar).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
LOGS = REPO / "target" / "examples"
# pytest-xdist runs the e2e files in several processes, each with its own apps: a log each.
LOG_SUFFIX = f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""

# name → (label, working directory, command)
APPS: Dict[str, Tuple[str, str, List[str]]] = {
    "fastapi": ("FastAPI", "fastapi", [sys.executable, "app.py"]),
    "django": ("Django", "django", [sys.executable, "app.py"]),
    "flask": ("Flask", "flask", [sys.executable, "app.py"]),
    "express": ("Express", "express", ["node", "app.js"]),
    "fastify": ("Fastify", "fastify", ["node", "app.js"]),
    "koa": ("Koa", "koa", ["node", "app.js"]),
    "hono": ("Hono", "hono", ["node", "app.js"]),
    "nestjs": ("NestJS", "nestjs", ["node", "app.mjs"]),
    "go": ("Go net/http", "go", [str(LOGS / "go-example")]),
    "gin": ("Go gin", "gin", [str(LOGS / "gin-example")]),
    "echo": ("Go echo", "echo", [str(LOGS / "echo-example")]),
    # C1 only: the JVM's optimizing compiler threads slow the start 3-4x on a busy
    # machine (4 s against 16 s measured here), and an example app needs no peak speed.
    "spring": ("Spring Boot", "spring", ["java", "-XX:TieredStopAtLevel=1", "-jar", str(LOGS / "spring-example.jar")]),
    "webflux": ("Spring WebFlux", "webflux", ["java", "-XX:TieredStopAtLevel=1", "-jar", str(LOGS / "webflux-example.jar")]),
    "ktor": ("Ktor", "ktor", ["java", "-XX:TieredStopAtLevel=1", "-jar", str(LOGS / "ktor-example.jar")]),
}


# The gRPC demo servers (examples/grpc/greeter.proto), name → (label, working directory, command)
# as in APPS; each listens on PORT. tests/e2e/test_grpc.py and test_grpc_cost.py (the Llm service)
# call every one with grpcio.
GRPC_APPS: Dict[str, Tuple[str, str, List[str]]] = {
    "grpc-python": ("Python grpcio (aio)", "grpc-python", [sys.executable, "server.py"]),
    "grpc-python-sync": ("Python grpcio (sync)", "grpc-python", [sys.executable, "server.py", "--sync"]),
    "grpc-node": ("Node @grpc/grpc-js", "grpc-node", ["node", "server.js"]),
    "grpc-go": ("grpc-go", "grpc-go", [str(LOGS / "grpc-go-example")]),
    "grpc-java": ("grpc-java", "grpc-java", ["java", "-XX:TieredStopAtLevel=1", "-jar", str(LOGS / "grpc-java-example.jar")]),
}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


# An app binds its port seconds after it is chosen (Spring takes 3). A port
# from the kernel's ephemeral range (what bind(0) and every outgoing
# connection take, thousands during the suites) could be taken by then, so
# the apps' ports come from below it, each process from a random start.
_APP_PORTS_LOW = 10000
_next_port = [0]


def free_port() -> int:
    high = _ephemeral_low()
    if high - _APP_PORTS_LOW < 1000:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    span = high - _APP_PORTS_LOW
    if not _next_port[0]:
        _next_port[0] = random.randrange(span)
    for _ in range(span):
        port = _APP_PORTS_LOW + _next_port[0] % span
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_APP_PORTS_LOW}-{high - 1}")


@dataclass
class Response:
    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class App:
    """One example app as a child process on its own port."""

    def __init__(self, name: str, env: Optional[Dict[str, str]] = None) -> None:
        self.name = name
        self.label, self.directory, self.command = APPS[name] if name in APPS else GRPC_APPS[name]
        self.port = free_port()
        self.env = dict(os.environ, PORT=str(self.port), **(env or {}))
        self.env.setdefault("POLYLIMIT_RULES", str(EXAMPLES / "polylimit.yaml"))
        self.log = LOGS / f"{name}{LOG_SUFFIX}.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "App":
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.command, cwd=EXAMPLES / self.directory, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} example exited at start:\n{self.log.read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.label} example did not listen on port {self.port}:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def request(
        self,
        path: str,
        method: str = "GET",
        headers: Optional[Dict[str, str]] = None,
        timeout: float = 10,
        body: Optional[bytes] = None,
    ) -> Response:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            res = conn.getresponse()
            return Response(res.status, res.getheaders(), res.read())
        finally:
            conn.close()


@contextlib.contextmanager
def running(names: Sequence[str], env: Optional[Dict[str, str]] = None) -> Iterator[List[App]]:
    """Starts the named apps together and stops them all on the way out."""
    apps = [App(name, env) for name in names]
    try:
        for app in apps:
            app.start()
        for app in apps:
            app.wait_ready()
        yield apps
    finally:
        for app in apps:
            app.stop()


class Gateway:
    """polylimit-server (target/debug/polylimit-server, `make rust-build`) on
    the same rules file, asked as a proxy asks it: /check with the original
    method and URI in headers (nginx's auth_request, Traefik's ForwardAuth)."""

    label = "polylimit-server /check"

    def __init__(self, env: Optional[Dict[str, str]] = None) -> None:
        self.binary = os.environ.get("POLYLIMIT_SERVER_BIN", str(REPO / "target" / "debug" / "polylimit-server"))
        self.env = dict(os.environ, **(env or {}))
        self.env.setdefault("POLYLIMIT_RULES", str(EXAMPLES / "polylimit.yaml"))
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        self.log = LOGS / "polylimit-server.log"

    def start(self, timeout: float = 30) -> "Gateway":
        LOGS.mkdir(parents=True, exist_ok=True)
        # A log of its own (several may run at once), removed after a clean exit.
        self.log = log = LOGS / f"polylimit-server-{os.getpid()}-{id(self)}.log"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([self.binary, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT)
        # The server's first line, once both ports are bound:
        # {"level":"info","msg":"listening","grpc":"127.0.0.1:…","http":"127.0.0.1:…"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            first = log.read_text().partition("\n")
            if first[1]:
                if '"listening"' not in first[0]:
                    self.stop()
                    raise RuntimeError(f"polylimit-server did not start:\n{log.read_text()}")
                self.port = int(first[0].rsplit('"http":"127.0.0.1:', 1)[1].split('"', 1)[0])
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"polylimit-server exited at start:\n{log.read_text()}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"polylimit-server did not listen within {timeout} s:\n{log.read_text()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode == 0:
            self.log.unlink(missing_ok=True)

    def request(self, path: str, method: str = "GET", headers: Optional[Dict[str, str]] = None,
                timeout: float = 10) -> Response:
        forwarded = dict(headers or {}, **{"X-Original-Method": method, "X-Original-URI": path})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", "/check", headers=forwarded)
            res = conn.getresponse()
            return Response(res.status, res.getheaders(), res.read())
        finally:
            conn.close()


@contextlib.contextmanager
def gateway(env: Optional[Dict[str, str]] = None) -> Iterator[Gateway]:
    """polylimit-server started, and stopped on the way out."""
    server = Gateway(env).start()
    try:
        yield server
    finally:
        server.stop()
