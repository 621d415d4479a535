"""The Retry-After client helpers of every language against every example app
on one real Redis: a client whose budget is spent gets a 429, waits the
app's Retry-After (1 s: `classic` refills a token a second) and then gets
through; a Retry-After longer than the client's cap comes back at once.
Here the wall clock is what is tested, so the tests really wait (about 1 s).

Python drives `polylimit.client.RetryTransport` (httpx); Node and Go run
their helpers (`polylimit/client`, `bindings-go/client`) in a child process
that prints one JSON line: the final status and how many attempts were sent.
"""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import REPO, statuses
from polylimit.client import RetryTransport

NODE_CLIENT = REPO / "bindings-node" / "client.js"
GO_MODULE = REPO / "bindings-go"

NODE_SCRIPT = """
const { retryFetch } = require(process.env.CLIENT);
let attempts = 0;
const counting = (input, init) => { attempts += 1; return fetch(input, init); };
const send = retryFetch(counting, { maxRetries: 3, maxWaitMs: 5000, budgetMs: 10000 });
send(process.env.URL, { headers: JSON.parse(process.env.HEADERS), method: process.env.METHOD })
  .then((res) => console.log(JSON.stringify({ status: res.status, attempts })))
  .catch((e) => { console.error(e); process.exit(1); });
"""

GO_PROGRAM = """package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/polylimit/polylimit/bindings-go/client"
)

type counting struct{ n int }

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return http.DefaultTransport.RoundTrip(r)
}

func main() {
	base := &counting{}
	hc := &http.Client{Transport: &client.RetryTransport{Base: base, MaxRetries: 3, MaxWait: 5 * time.Second, Budget: 10 * time.Second}}
	req, _ := http.NewRequest(os.Getenv("METHOD"), os.Getenv("URL"), nil)
	var headers map[string]string
	if err := json.Unmarshal([]byte(os.Getenv("HEADERS")), &headers); err != nil {
		panic(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := hc.Do(req)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	fmt.Printf("{\\"status\\": %d, \\"attempts\\": %d}\\n", res.StatusCode, base.n)
}
"""


@pytest.fixture(scope="module")
def go_client(tmp_path_factory) -> Path:
    """The Go program above, built once against the checkout's client package."""
    directory = tmp_path_factory.mktemp("goclient")
    (directory / "main.go").write_text(GO_PROGRAM)
    (directory / "go.mod").write_text(
        "module goclient\n\ngo 1.23\n\nrequire github.com/polylimit/polylimit/bindings-go v0.0.0\n\n"
        f"replace github.com/polylimit/polylimit/bindings-go => {GO_MODULE}\n"
    )
    binary = directory / "goclient"
    # cgo: the client asks the core (the static library `make go-capi` built) for each wait.
    env = dict(os.environ, CGO_ENABLED="1", GOFLAGS="-mod=mod")
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=directory, env=env, check=True, timeout=300)
    return binary


def drain(app, run):
    """Spends the run's `classic` burst (10) on this app."""
    got = statuses(app.request("/api/classic", headers={"X-Run": run}) for _ in range(10))
    assert got == [200] * 10


def python_client(url, headers, method="GET"):
    attempts = []
    inner = httpx.HTTPTransport()

    class Counting(httpx.BaseTransport):
        def handle_request(self, request):
            attempts.append(request)
            return inner.handle_request(request)

    transport = RetryTransport(Counting(), max_retries=3, max_wait=5, budget=10)
    with httpx.Client(transport=transport, timeout=10) as client:
        res = client.request(method, url, headers=headers)
    return {"status": res.status_code, "attempts": len(attempts)}


def node_client(url, headers, method="GET"):
    env = dict(os.environ, CLIENT=str(NODE_CLIENT), URL=url, HEADERS=json.dumps(headers), METHOD=method)
    out = subprocess.run(["node", "-e", NODE_SCRIPT], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


CLIENTS = ["python", "node", "go"]


def send(client, go_client, url, headers, method="GET"):
    if client == "python":
        return python_client(url, headers, method)
    if client == "node":
        return node_client(url, headers, method)
    env = dict(os.environ, URL=url, HEADERS=json.dumps(headers), METHOD=method)
    out = subprocess.run([str(go_client)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_limited_client_waits_retry_after_then_gets_through(app, client, go_client):
    run = uuid.uuid4().hex
    drain(app, run)
    refused = app.request("/api/classic", headers={"X-Run": run})
    assert refused.status == 429 and refused.header("Retry-After") == "1"
    # Spend the token that refills meanwhile, so the client surely meets a 429 first.
    time.sleep(1.05)
    assert app.request("/api/classic", headers={"X-Run": run}).status == 200
    started = time.monotonic()
    got = send(client, go_client, f"http://127.0.0.1:{app.port}/api/classic", {"X-Run": run})
    elapsed = time.monotonic() - started
    assert got == {"status": 200, "attempts": 2}, got
    assert elapsed >= 0.9, elapsed  # it waited the app's Retry-After, not less


@pytest.mark.parametrize("client", CLIENTS)
def test_a_retry_after_past_the_cap_comes_back_at_once(app, client, go_client):
    user = f"user-{uuid.uuid4().hex}"
    headers = {"X-Login-User": user, "Content-Type": "application/json"}
    for _ in range(5):
        assert app.request("/login", method="POST", headers=headers, body=b'{"password":"guess"}').status == 401
    started = time.monotonic()
    got = send(client, go_client, f"http://127.0.0.1:{app.port}/login", headers, method="POST")
    elapsed = time.monotonic() - started
    # Locked for up to 15 minutes: longer than the 5 s cap, so no wait and no retry.
    assert got == {"status": 429, "attempts": 1}, got
    assert elapsed < 5, elapsed  # short of the 5 s cap: it did not wait
