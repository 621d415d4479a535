"""A real nginx (Debian's package) with auth_request to polylimit-server's
/check, in front of the Go example app, answers exactly as the app's own
middleware does on the same rules file (examples/polylimit.yaml): status,
rate-limit headers and body: allowed, refused (429), and refused by a
fail_closed policy whose Redis is not there (503).

The site is tests/nginx/site.conf as docs/server.md shows it; only its
addresses are rewritten to free ports. Two Go apps run: one limiting by
itself (the reference, asked directly) and one behind nginx that limits
nothing (so nginx's decision is the only one). nginx runs as this user from
a temporary prefix, in the foreground, stopped by pid like everything else.

    POLYLIMIT_SERVER_BIN=target/debug/polylimit-server python3 tests/nginx/nginx_test.py
"""

from __future__ import annotations

import http.client
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))

from servers import App, Gateway, free_port  # noqa: E402

SITE = Path(__file__).resolve().parent / "site.conf"
RULES = REPO / "examples" / "polylimit.yaml"
RATE_LIMIT_HEADERS = {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy",
                      "ratelimit", "retry-after"}


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def stop(proc: Optional[subprocess.Popen]) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def request(port: int, method: str, path: str, headers: Dict[str, str]) -> Tuple[int, List[Tuple[str, str]], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers)
        res = conn.getresponse()
        return res.status, res.getheaders(), res.read()
    finally:
        conn.close()


def essential(answer: Tuple[int, List[Tuple[str, str]], bytes]) -> dict:
    """Status, rate-limit headers (names in lower case, sorted: Go writes them
    sorted, nginx in its config's order) and body, plus the Content-Type of a refusal."""
    status, headers, body = answer
    kept = sorted((k.lower(), v) for k, v in headers if k.lower() in RATE_LIMIT_HEADERS)
    if status >= 400:
        kept += [(k.lower(), v) for k, v in headers if k.lower() == "content-type"]
    return {"status": status, "headers": kept, "body": body.decode()}


def nginx_conf(prefix: Path, port: int, server_http: str, app_port: int) -> str:
    site = SITE.read_text()
    for old, new in [("127.0.0.1:8080", server_http), ("127.0.0.1:8000", f"127.0.0.1:{app_port}"),
                     ("listen 80;", f"listen 127.0.0.1:{port};")]:
        assert old in site, f"{SITE} lost {old!r}"
        site = site.replace(old, new)
    (prefix / "site.conf").write_text(site)
    temp = prefix / "tmp"
    temp.mkdir()
    paths = "\n".join(f"    {kind}_temp_path {temp}/{kind};" for kind in
                      ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"])
    return f"""daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
{paths}
    include {prefix}/site.conf;
}}
"""


def rule_of(path: str) -> str:
    """The rule of examples/polylimit.yaml a path of the plan falls under."""
    return "payments" if path.startswith("/api/payments/") else "api" if path.startswith("/api/") else "none"


def compare(title: str, env: Dict[str, str], plan: List[Tuple[str, str, Dict[str, str]]], want: set) -> bool:
    """Plays `plan` against the reference app and through nginx, pair by pair;
    `want`: the (rule, status) pairs the reference must answer."""
    nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
    prefix = Path(tempfile.mkdtemp(prefix="polylimit-nginx-"))
    nginx: Optional[subprocess.Popen] = None
    apps: List[App] = []
    gateways: List[Gateway] = []
    try:
        server = Gateway(env=dict(env, POLYLIMIT_RULES=str(RULES))).start()
        gateways.append(server)

        reference = App("go", env=env).start()
        apps.append(reference)
        nolimit = prefix / "nolimit.yaml"
        nolimit.write_text("store: memory\npolicies: { none: { rate: 1/s } }\nrules: []\n")
        backend = App("go", env={"POLYLIMIT_RULES": str(nolimit)}).start()
        apps.append(backend)
        for app in apps:
            app.wait_ready()

        port = free_port()
        (prefix / "nginx.conf").write_text(nginx_conf(prefix, port, f"127.0.0.1:{server.port}", backend.port))
        nginx = subprocess.Popen([nginx_bin, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", "stderr"])
        wait_port(port, nginx, "nginx")

        seen = set()
        failures = []
        # The app and nginx decide each pair a few ms apart, on the real clock: X-RateLimit-Reset
        # (a Unix second) is the same for both unless a key's first request falls at the turn of a
        # second. Start 100-300 ms into one; each key's requests then take well under a second.
        while not 0.1 <= time.time() % 1 <= 0.3:
            time.sleep(0.01)
        for i, (method, path, headers) in enumerate(plan):
            direct = essential(request(reference.port, method, path, headers))
            edge = essential(request(port, method, path, headers))
            seen.add((rule_of(path), direct["status"]))
            if edge != direct:
                failures.append(f"#{i} {method} {path}:\n  app:   {direct}\n  nginx: {edge}")
        if failures:
            print(f"{title}: nginx → /check differs from the app's own middleware:\n" + "\n".join(failures))
            return False
        if seen != want:
            print(f"{title}: the plan should see {sorted(want)}, saw {sorted(seen)}")
            return False
        print(f"{title}: {len(plan)} requests through nginx auth_request → polylimit-server /check answered "
              "as the Go app's own middleware does (status, rate-limit headers, body)")
        return True
    finally:
        stop(nginx)
        for app in apps + gateways:
            app.stop()
        shutil.rmtree(prefix, ignore_errors=True)


def main() -> int:
    # A fresh client per run: 127.0.0.1 (the test, nginx) is a trusted proxy, so the rules
    # key by the X-Forwarded-For client, which nginx passes on to /check and to the app.
    one, other = random.sample(range(1, 255), 2)
    hello = [("GET", "/api/hello", {"X-Forwarded-For": f"203.0.113.{one}"}) for _ in range(12)]
    # A client naming another URI in /check's own header: nginx does not pass it on.
    hello.insert(2, ("GET", "/api/hello", {"X-Forwarded-For": f"203.0.113.{one}", "X-Forwarded-Uri": "/free"}))
    # HEAD, and a percent-escaped path: the same rule and key as GET /api/hello.
    hello.insert(4, ("HEAD", "/api/hello", {"X-Forwarded-For": f"203.0.113.{one}"}))
    hello.insert(6, ("GET", "/api/h%65llo", {"X-Forwarded-For": f"203.0.113.{one}"}))
    payments = [("POST", f"/api/payments/{i}", {"X-Forwarded-For": f"203.0.113.{other}", "X-User": "alice"})
                for i in range(8)]
    # The api rule (token bucket, burst 10) for one client, then the payments rule (GCRA,
    # burst 5, per user and route, under the api rule) for another, then no rule.
    ok = compare("memory store", {}, hello + payments + [("GET", "/stats", {})],
                 {("api", 200), ("api", 429), ("payments", 200), ("payments", 429), ("none", 200)})
    # A Redis that is not there: the api policy falls back to its local limit; payments is
    # fail_closed, so the app answers 503 and nginx must too (the 503 body and Retry-After).
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        down = {"REDIS_URL": f"redis://127.0.0.1:{closed.getsockname()[1]}"}
        ok = compare("Redis down", down, hello[:3] + payments[:3], {("api", 200), ("payments", 503)}) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
