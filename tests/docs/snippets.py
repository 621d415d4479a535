#!/usr/bin/env python3
"""Runs the code examples of README.md and docs/**/*.md (part of `make test`).

Every fenced block with a language carries a marker on the line before it
(blank lines and a content tab's `=== "Python"` line may stand between):

    <!-- run -->                 run it (python, js, go) or, for yaml, build
                                 a limiter's configuration from it
    <!-- run: env NAME=value --> the same, with these environment variables
    <!-- run: redis -->          the same, with REDIS_URL naming a real
                                 redis-server this runner starts (flushed
                                 before each such snippet, stopped by pid)
    <!-- not run: <reason> -->   a fragment or a program that needs more
                                 than the memory store; counted, never silent
    <!-- output -->              (on a ```text block) the exact output every
                                 snippet run since the last heading or output
                                 block must print

A marker before the first tab of a group of content tabs holds for every
tab of the group. A block with a language and no marker is an error, so nothing is skipped
silently. Python runs with $POLYLIMIT_DOCS_PYTHON (default: the checkout's
.venv, where `make python-build` installs the wheel); Node resolves
`polylimit` to bindings-node (`make node-build`); Go runs each snippet as a
module whose `replace` points at bindings-go (`make go-capi`). Every snippet
runs in a fresh directory holding examples/polylimit.yaml, with REDIS_URL
unset (the memory store) unless it asks for Redis.

    python3 tests/docs/snippets.py            # run everything
    python3 tests/docs/snippets.py --list     # markers only, nothing run
"""

import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNNABLE = {"python", "js", "go", "yaml"}
GO_ADAPTERS = ["ginlimit", "echolimit", "grpclimit", "otellimit"]  # bindings-go/<name>, each a module
TEXT = {"", "text"}
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
MARKER = re.compile(r"^\s*<!-- (run(?::\s*(?P<args>.*?))?|not run: (?P<reason>.+?)|output) -->\s*$")
TAB = re.compile(r'^\s*=== "')
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$')


@dataclass
class Snippet:
    path: pathlib.Path
    line: int
    lang: str
    code: str
    marker: str  # run, not run, output, or "" (none)
    reason: str = ""
    env: dict = field(default_factory=dict)
    redis: bool = False
    heading: int = 0  # index of the section it is in

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def pages():
    yield ROOT / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


def extract(path: pathlib.Path):
    lines = path.read_text(encoding="utf-8").split("\n")
    section, i, previous = 0, 0, None
    while i < len(lines):
        if lines[i].startswith("#"):
            section += 1
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != indent + "```":
            end += 1
        body = [line[len(indent):] for line in lines[i + 1:end]]
        # `--8<-- "path"` (pymdownx.snippets) shows a repository file: run the file
        body = [
            (ROOT / m.group(1)).read_text(encoding="utf-8").rstrip("\n") if (m := INCLUDE.match(line)) else line
            for line in body
        ]
        back, tabbed = i - 1, False
        while back >= 0 and (not lines[back].strip() or TAB.match(lines[back])):
            tabbed = tabbed or bool(TAB.match(lines[back]))
            back -= 1
        marker, reason, env, redis = "", "", {}, False
        mm = MARKER.match(lines[back]) if back >= 0 else None
        if not mm and tabbed and previous and FENCE.match(lines[back]):
            # the next tab of a group: the marker before the group's first tab holds
            marker, reason, env, redis = previous.marker, previous.reason, previous.env, previous.redis
        if mm:
            marker = "output" if mm.group(1) == "output" else ("not run" if mm.group("reason") else "run")
            reason = mm.group("reason") or ""
            args = (mm.group("args") or "").split()
            if args and args[0] == "env":
                env = dict(a.split("=", 1) for a in args[1:])
            redis = args == ["redis"]
        previous = Snippet(path, i + 1, lang, "\n".join(body) + "\n", marker, reason, env, redis, section)
        yield previous
        i = end + 1


class Runner:
    def __init__(self):
        self.python = os.environ.get("POLYLIMIT_DOCS_PYTHON") or str(ROOT / ".venv" / "bin" / "python")
        self.node_pkg = pathlib.Path(os.environ.get("POLYLIMIT_DOCS_NODE_PKG") or ROOT / "bindings-node")
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="polylimit-docs-"))
        self.redis = None  # (process, port) once a snippet asks for Redis

    def redis_url(self) -> str:
        """A real redis-server on a free loopback port, emptied for each snippet."""
        if self.redis is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            server = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
            self.redis = (server, port)
            for _ in range(100):
                if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                    break
                time.sleep(0.05)  # waiting for the server to listen, not for a limit
        port = self.redis[1]
        subprocess.run(["redis-cli", "-p", str(port), "flushall"], check=True, capture_output=True)
        return f"redis://127.0.0.1:{port}"

    def close(self):
        if self.redis:
            self.redis[0].terminate()
            self.redis[0].wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def workdir(self, name: str) -> pathlib.Path:
        d = self.tmp / name
        d.mkdir()
        shutil.copy(ROOT / "examples" / "polylimit.yaml", d / "polylimit.yaml")
        return d

    def env(self, extra: dict) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        env.update(extra)
        return env

    def run(self, snippet: Snippet, n: int) -> subprocess.CompletedProcess:
        d = self.workdir(f"s{n}")
        env = self.env(snippet.env)
        if snippet.redis:
            env["REDIS_URL"] = self.redis_url()
        if snippet.lang == "python":
            (d / "snippet.py").write_text(snippet.code)
            cmd = [self.python, "snippet.py"]
        elif snippet.lang == "js":
            (d / "node_modules").mkdir()
            (d / "node_modules" / "polylimit").symlink_to(self.node_pkg)
            # express, fastify and the like: the binding's own dev dependencies
            env["NODE_PATH"] = str(self.node_pkg / "node_modules")
            (d / "snippet.js").write_text(snippet.code)
            cmd = ["node", "snippet.js"]
        elif snippet.lang == "go":
            # bindings-go, and the framework adapters (modules of their own) the snippet imports;
            # `go mod tidy` then brings the frameworks.
            module = "github.com/polylimit/polylimit/bindings-go"
            dirs = ["bindings-go"] + [f"bindings-go/{a}" for a in GO_ADAPTERS if f'"{module}/{a}"' in snippet.code]
            (d / "go.mod").write_text(
                "module example\n\ngo 1.23\n\n"
                + "".join(f"require github.com/polylimit/polylimit/{m} v0.0.0\n" for m in dirs)
                + "".join(f"replace github.com/polylimit/polylimit/{m} => {ROOT / m}\n" for m in dirs)
            )
            (d / "main.go").write_text(snippet.code)
            cmd = ["go", "run", "."] if len(dirs) == 1 else ["sh", "-c", "go mod tidy && go run ."]
        elif snippet.lang == "yaml":
            (d / "rules.yaml").write_text(snippet.code)
            cmd = [self.python, "-c",
                   "import json, polylimit; print(json.dumps(polylimit.effective_config(rules_file='rules.yaml')))"]
        else:
            raise AssertionError(snippet.lang)
        return subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=300)


def check(snippets, runner):
    """Runs (or, without a runner, only counts) every snippet; returns the errors and the counts."""
    errors, counts = [], Counter()
    pending = []  # (snippet, stdout) of runs awaiting an output block
    for n, s in enumerate(snippets):
        if pending and (pending[0][0].path != s.path or pending[0][0].heading != s.heading):
            pending = []
        if s.lang in TEXT:
            if s.marker == "output":
                counts["output checks"] += 1
                if not pending and runner:
                    errors.append(f"{s.where()}: an output block with no snippet run before it")
                for ran, out in pending:
                    if out != s.code.strip("\n"):
                        errors.append(f"{s.where()}: {ran.where()} ({ran.lang}) printed\n{out}\n--- the page shows\n{s.code}")
                pending = []
            continue
        if s.marker not in ("run", "not run"):
            errors.append(f"{s.where()}: a ```{s.lang} block without <!-- run --> or <!-- not run: reason -->")
            continue
        if s.marker == "not run":
            counts[f"{s.lang} not run"] += 1
            continue
        if s.lang not in RUNNABLE:
            errors.append(f"{s.where()}: ```{s.lang} blocks cannot be run here (mark it not run, with the reason)")
            continue
        counts[f"{s.lang} run" + (" on Redis" if s.redis else "")] += 1
        if not runner:
            continue
        print(f"run {s.where()} ({s.lang})", flush=True)
        try:
            done = runner.run(s, n)
        except subprocess.TimeoutExpired:
            errors.append(f"{s.where()}: timed out")
            continue
        if done.returncode != 0:
            errors.append(f"{s.where()}: exit {done.returncode}\n{done.stdout}{done.stderr}")
            continue
        if s.lang != "yaml":
            pending.append((s, done.stdout.strip("\n")))
    return errors, counts


def main() -> int:
    snippets = [s for p in pages() for s in extract(p)]
    runner = None if "--list" in sys.argv else Runner()
    try:
        errors, counts = check(snippets, runner)
    finally:
        if runner:
            runner.close()
    for key in sorted(counts):
        print(f"{counts[key]:4d} {key}")
    for e in errors:
        print(f"FAIL {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
