"""Installs the release artifacts of dist/ the way a user would, with no Rust on PATH.

For each language, in a fresh directory outside the checkout:
  Python: a new venv, `pip install dist/polylimit-*.whl fastapi uvicorn`, a FastAPI app (@limiter.limit);
          the extras django, flask and grpc from the same wheel, their adapters imported
  Node:   `npm install` of the main and platform tarballs and express, an Express app (rateLimit),
          and the adapters' subpaths with koa and @grpc/grpc-js: a Koa app deciding 3 requests
  Go:     a new module, `go get` through the dist/ module proxy (no replace), a net/http app, and the
          same app built again from `go mod vendor`; a gin app on the ginlimit module released beside it,
          and the echolimit and grpclimit modules each deciding 3 requests
  JVM:    a Java program compiled against dist/polylimit-*.jar alone, run with that jar and its runtime
          dependencies (JNA, the Kotlin standard library: the class path `make jvm-dist` resolved with
          Maven), 15 checks on memory -> 10 allowed
Each app alone on the memory store answers 15 requests with 10 x 200 then 429; the three together on
one real redis-server answer 30 requests for one client with exactly 10 x 200. Only the standard
library: this runs before and without any venv of the checkout.
"""

import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from servers import free_port  # noqa: E402  (a port no other suite's sockets take meanwhile)
APPS = Path(__file__).resolve().parent / "apps"
DIST = Path(os.environ.get("DIST", ROOT / "dist"))
GO_MODULE = "github.com/polylimit/polylimit/bindings-go"
BURST = 10


def workspace_version() -> str:
    match = re.search(r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    assert match, "no version in the workspace Cargo.toml"
    return match.group(1)


VERSION = os.environ.get("POLYLIMIT_VERSION") or workspace_version()


def one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    if len(found) != 1:
        sys.exit(f"cleanroom: expected one dist/{pattern}, found {[p.name for p in found]} (run `make dist`)")
    return found[0]


def readme_install_lines() -> dict:
    """The install lines for a local build (docs/install.md), which this test runs word for word."""
    text = (ROOT / "docs" / "install.md").read_text()
    block = text[text.index("**A local build**"):]
    block = block[block.index("```sh\n") + 6:]
    block = block[:block.index("```")]
    lines = {}
    for line in block.strip().splitlines():
        words = line.split()
        assignments = [w for w in words if re.fullmatch(r"[A-Z_]+=\S+", w)]
        command = words[len(assignments):]
        tool = {"pip": "python", "npm": "node", "go": "go"}[command[0]]
        env = dict(a.split("=", 1) for a in assignments)
        lines[tool] = ({k: v.replace("$PWD/dist", str(DIST)) for k, v in env.items()},
                       [re.sub(r"^dist/", str(DIST) + "/", w) for w in command])
    assert set(lines) == {"python", "node", "go"}, f"docs/install.md's local-build block has {sorted(lines)}"
    return lines


INSTALL = readme_install_lines()


def clean_env() -> dict:
    """The user's environment without Rust: no cargo/rustc on PATH, no Rust or checkout variables.
    HOME stays: it holds the registry settings a user has (~/.npmrc, pip's), and no import path."""
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any(os.access(os.path.join(d, tool), os.X_OK) for tool in ("cargo", "rustc"))]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARGO", "RUSTUP", "RUSTC", "RUSTFLAGS", "PYTHON", "VIRTUAL_ENV", "NODE_",
                                "npm_", "GO", "POLYLIMIT", "MAKE", "MFLAGS", "CGO_"))}
    env["PATH"] = os.pathsep.join(path)
    for tool in ("cargo", "rustc", "maturin"):
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} is still on the clean room's PATH"
    return env


def run(cmd, cwd: Path, env: dict, what: str) -> str:
    print(f"  $ {' '.join(str(c) for c in cmd)}", flush=True)
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"cleanroom: {what} failed ({done.returncode}):\n{done.stdout[-4000:]}")
    return done.stdout


def get(port: int, path: str):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


class Server:
    """One app process on a free loopback port, stopped by pid."""

    def __init__(self, name: str, cmd, cwd: Path, env: dict, log: Path):
        self.name, self.port = name, free_port()
        self.log = log
        self.proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env={**env, "PORT": str(self.port)},
                                     stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"cleanroom: the {name} app exited ({self.proc.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        sys.exit(f"cleanroom: the {name} app did not listen within 60 s:\n{log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def check_version(server: Server, outside: Path) -> None:
    status, body = get(server.port, "/version")
    reported = json.loads(body)
    assert status == 200 and reported["version"] == VERSION, f"{server.name} reports {reported}, not {VERSION}"
    module = reported.get("module")
    if module:  # the package must come from the clean room, not from the checkout
        assert Path(module).resolve().is_relative_to(outside), f"{server.name} loaded polylimit from {module}"
    if server.name == LANGUAGES["go"]:  # the client package ships in the module and links the same core
        assert reported.get("client_retry_after_ms") == 7000, f"the Go client package read 'Retry-After: 7' as {reported}"
    print(f"  {server.name}: polylimit {reported['version']}", flush=True)


def burst(servers, count: int):
    statuses = []
    for i in range(count):
        status, _ = get(servers[i % len(servers)].port, "/hello")
        statuses.append(status)
    return statuses


def expect_classic(server: Server) -> None:
    statuses = burst([server], 15)
    want = [200] * BURST + [429] * (15 - BURST)
    assert statuses == want, f"{server.name} on memory answered {statuses}, want {want}"
    print(f"  {server.name} on memory: 15 requests -> {BURST} x 200 then 429", flush=True)


def install_python(room: Path, env: dict):
    wheel = one(f"polylimit-{VERSION}-cp39-abi3-manylinux*_{platform.machine()}.whl")
    venv = room / "venv"
    run([sys.executable, "-m", "venv", venv], room, env, "python -m venv")
    py = venv / "bin" / "python"
    _, command = INSTALL["python"]
    assert str(wheel) in command, f"docs/install.md installs {command[2:]}, `make dist` wrote {wheel.name}"
    run([venv / "bin" / "pip", *command[1:]], room, env, "pip install")
    # The framework extras (issue 37) install from the same wheel, and their adapters import.
    run([venv / "bin" / "pip", "install", "-q", f"{wheel}[django,flask,grpc]"], room, env, "pip install extras")
    run([py, "-I", "-c", "import polylimit.django, polylimit.flask, polylimit.grpc, polylimit.grpc.aio"], room, env,
        "import the framework adapters")
    shutil.copy(APPS / "fastapi_app.py", room / "app.py")
    return [[py, "-I", room / "app.py"]]


def install_node(room: Path, env: dict):
    main, platform = one(f"polylimit-{VERSION}.tgz"), one(f"polylimit-linux-x64-gnu-{VERSION}.tgz")
    (room / "package.json").write_text('{ "name": "cleanroom", "private": true }\n')
    _, command = INSTALL["node"]
    assert {str(main), str(platform)} <= set(command), f"docs/install.md installs {command[2:]}, not {main.name} and {platform.name}"
    run(command, room, env, "npm install")
    shutil.copy(APPS / "express_app.js", room / "app.js")
    # The framework adapters' subpaths, with the frameworks a user adds (optional peer dependencies).
    run(["npm", "install", "--no-audit", "--no-fund", "koa@3", "@grpc/grpc-js@1"], room, env, "npm install koa, grpc-js")
    shutil.copy(APPS / "node_adapters.js", room / "adapters.js")
    out = run(["node", room / "adapters.js"], room, env, "node adapters.js")
    assert out.strip().splitlines()[-1] == "koa 200 200 429", f"the Koa app answered {out!r}"
    print("  koa: 200 200 429; the hono, nestjs and grpc subpaths load", flush=True)
    return [["node", room / "app.js"]]


def install_go(room: Path, env: dict):
    proxy = DIST / "goproxy"
    assert (proxy / GO_MODULE / "@v" / f"v{VERSION}.zip").is_file(), "no Go module zip in dist/goproxy (make dist)"
    readme_env, command = INSTALL["go"]
    assert readme_env.get("GOPROXY") == f"file://{proxy}", f"docs/install.md's GOPROXY is {readme_env.get('GOPROXY')}"
    assert command[-1] == f"{GO_MODULE}@v{VERSION}", f"docs/install.md gets {command[-1]}"
    env.update(readme_env, GOPATH=str(room / "gopath"), GOMODCACHE=str(room / "gopath" / "pkg" / "mod"),
               GOTOOLCHAIN="local")
    if os.environ.get("GOCACHE"):
        env["GOCACHE"] = os.environ["GOCACHE"]
    else:  # the build cache keys on content; sharing it only saves compiling the standard library again
        env["GOCACHE"] = subprocess.run(["go", "env", "GOCACHE"], text=True, capture_output=True).stdout.strip()
    run(["go", "mod", "init", "example.com/cleanroom"], room, env, "go mod init")
    shutil.copy(APPS / "nethttp_app.go", room / "main.go")
    run(command, room, env, "go get")
    run(["go", "build", "-o", room / "app", "."], room, env, "go build")
    # Vendoring must keep the static library and the header (they sit in package directories).
    vendored = room.parent / "nethttp-vendored"
    vendored.mkdir()
    for name in ("go.mod", "go.sum", "main.go"):
        shutil.copy(room / name, vendored / name)
    run(["go", "mod", "vendor"], vendored, env, "go mod vendor")
    run(["go", "build", "-mod=vendor", "-o", room / "app-vendored", "."], vendored, {**env, "GOFLAGS": ""},
        "go build -mod=vendor")
    # The gin adapter, a module of its own released beside it; gin itself from the user's usual proxy.
    gin = room.parent / "gin"
    gin.mkdir()
    usual = subprocess.run(["go", "env", "GOPROXY"], env=clean_env(), text=True, capture_output=True).stdout.strip()
    gin_env = {**env, "GOPROXY": f"{env['GOPROXY']},{usual}"}
    run(["go", "mod", "init", "example.com/cleanroom-gin"], gin, gin_env, "go mod init (gin)")
    shutil.copy(APPS / "gin_app.go", gin / "main.go")
    run(["go", "get", f"{GO_MODULE}/ginlimit@v{VERSION}"], gin, gin_env, "go get ginlimit")
    run(["go", "build", "-o", room / "app-gin", "."], gin, gin_env, "go build (gin)")
    # The echo and gRPC adapters: built the same way, run once (a program, not a server).
    adapters = room.parent / "adapters"
    adapters.mkdir()
    run(["go", "mod", "init", "example.com/cleanroom-adapters"], adapters, gin_env, "go mod init (adapters)")
    shutil.copy(APPS / "adapters_app.go", adapters / "main.go")
    run(["go", "get", f"{GO_MODULE}/echolimit@v{VERSION}", f"{GO_MODULE}/grpclimit@v{VERSION}"], adapters, gin_env,
        "go get echolimit grpclimit")
    out = run(["go", "run", "."], adapters, gin_env, "go run (echo and gRPC adapters)")
    answered = out.strip().splitlines()[-2:]  # after what go itself printed
    assert answered == ["echo 200 200 429", "grpc OK OK ResourceExhausted"], f"the adapters answered {out!r}"
    print("  echo: 200 200 429; grpc-go: OK OK ResourceExhausted", flush=True)
    return [[room / "app"], [room / "app-vendored"], [room / "app-gin"]]


def check_jvm(room: Path, env: dict) -> None:
    """The dist jar, copied into the room, from a plain Java program: compiled against the jar alone,
    run with the jar and its runtime dependencies from the local Maven repository."""
    jar = room / one(f"polylimit-{VERSION}.jar").name
    shutil.copy(one(f"polylimit-{VERSION}.jar"), jar)
    assert one(f"polylimit-{VERSION}.pom")
    for framework in ("spring", "webflux", "ktor", "grpc", "otel"):  # the framework modules' jars and poms (issue 37, 38)
        assert one(f"polylimit-{framework}-{VERSION}.jar") and one(f"polylimit-{framework}-{VERSION}.pom")
    staged = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "jvm-dist" / "classpath.txt"
    deps = [d for d in staged.read_text().strip().split(os.pathsep) if d]
    assert deps and not any(Path(d).resolve().is_relative_to(ROOT) for d in deps), f"dependencies {deps}"
    shutil.copy(APPS / "JvmCheck.java", room / "JvmCheck.java")
    run(["javac", "-cp", jar, "-d", room, room / "JvmCheck.java"], room, env, "javac against the jar")
    out = run(["java", "-cp", os.pathsep.join([str(room), str(jar), *deps]), "JvmCheck"], room, env, "java")
    reported = json.loads(out.strip().splitlines()[-1])
    assert reported["version"] == VERSION, f"the JVM jar reports {reported}, not {VERSION}"
    assert Path(reported["module"]).resolve() == jar.resolve(), f"Limiter loaded from {reported['module']}"
    want = [True] * BURST + [False] * (15 - BURST)
    assert reported["allowed"] == want, f"the JVM on memory answered {reported['allowed']}, want {want}"
    print(f"  JVM: polylimit {reported['version']} from {jar.name}: 15 checks on memory -> {BURST} allowed",
          flush=True)


INSTALLERS = {"python": install_python, "node": install_node, "go": install_go}
LANGUAGES = {"python": "FastAPI", "node": "Express", "go": "net/http"}


def start_redis(stack: ExitStack, room: Path) -> str:
    server = shutil.which("redis-server")
    if not server:
        sys.exit("cleanroom: redis-server is not installed (make redis-server)")
    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(room)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    stack.callback(lambda: (proc.terminate(), proc.wait()))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    sys.exit("cleanroom: redis-server did not answer PING")


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="polylimit-cleanroom-") as tmp, ExitStack() as stack:
        outside = Path(tmp).resolve()
        assert not outside.is_relative_to(ROOT), "the clean room must be outside the checkout"
        env = clean_env()
        apps = {}
        chosen = sys.argv[1:] or [*INSTALLERS, "jvm"]  # e.g. `cleanroom.py python node` while trying one package
        if "jvm" in chosen:
            print(f"JVM: polylimit {VERSION} from {DIST} (no cargo or rustc on PATH)", flush=True)
            (outside / "jvm").mkdir()
            check_jvm(outside / "jvm", dict(env))
        for name, install in ((name, INSTALLERS[lang]) for lang in chosen if lang != "jvm"
                              for name in [LANGUAGES[lang]]):
            print(f"{name}: installing polylimit {VERSION} from {DIST} (no cargo or rustc on PATH)", flush=True)
            room = outside / name.replace("/", "")
            room.mkdir()
            apps[name] = (room, install(room, dict(env)))

        def serve(name: str, command, store_env: dict) -> Server:
            room = apps[name][0]
            log = room / f"server-{free_port()}.log"
            server = Server(name, command, room, dict(env, **store_env), log)
            stack.callback(server.stop)
            return server

        for name, (room, commands) in apps.items():
            for command in commands:
                server = serve(name, command, {})
                check_version(server, outside)
                expect_classic(server)
                server.stop()

        if apps:  # `cleanroom.py jvm` alone has no app
            redis_url = start_redis(stack, outside)
            together = [serve(name, commands[0], {"REDIS_URL": redis_url}) for name, (room, commands) in apps.items()]
            names = " + ".join(apps)
            statuses = burst(together, len(together) * BURST)
            allowed = statuses.count(200)
            assert allowed == BURST and statuses.count(429) == len(statuses) - BURST, \
                f"{len(statuses)} requests over {names} on one Redis: {allowed} allowed, want {BURST}: {statuses}"
            print(f"{names} on one Redis: {len(statuses)} requests for one client -> {allowed} x 200, "
                  f"{statuses.count(429)} x 429", flush=True)
    print(f"clean room passed in {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
