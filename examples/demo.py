"""`make demo`: the example apps and polylimit-server, one limit, the classic burst.

Without REDIS_URL each app, and the server's /check (as a proxy asks it),
runs on the embedded memory store and gets its own 15 requests (burst 10).
With REDIS_URL they share that Redis, and one client's 15 requests go round
the apps and the server: they drain one key together, edge and apps alike.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List, Union

from servers import APPS, App, Gateway, Response, gateway, running

REQUESTS = 15


def cells(r: Response) -> List[str]:
    return [str(r.status), r.header("X-RateLimit-Remaining") or "-", r.header("Retry-After") or "-"]


def table(title: str, header: List[str], rows: List[List[str]]) -> None:
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    numeric = [all(row[i].isdigit() or row[i] == "-" for row in rows) for i in range(len(header))]

    def line(row: List[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()

    print(f"\n{title}\n{line(header)}\n{'  '.join('-' * w for w in widths)}")
    for row in rows:
        print(line(row))


def each_on_its_own(apps: List[Union[App, Gateway]]) -> None:
    for app in apps:
        rows = [[str(i)] + cells(app.request("/api/hello")) for i in range(1, REQUESTS + 1)]
        table(f"{app.label} on the memory store: GET /api/hello x {REQUESTS}",
              ["#", "status", "X-RateLimit-Remaining", "Retry-After"], rows)
    print(f"\nEach app, and the server, allowed its burst of 10 and refused the rest with 429. The refusal body:\n"
          f"  {apps[-1].request('/api/hello').body.decode()}")


def one_key_through_all(apps: List[Union[App, Gateway]], redis_url: str) -> None:
    # 127.0.0.1 is a trusted proxy in polylimit.yaml, so the client is the
    # address it forwards: a fresh one per run, so a rerun starts full.
    client = f"203.0.113.{random.randint(1, 254)}"
    rows = []
    for i in range(REQUESTS):
        app = apps[i % len(apps)]
        rows.append([str(i + 1), app.label] + cells(app.request("/api/hello", headers={"X-Forwarded-For": client})))
    table(f"One client ({client}) through every app, one Redis ({redis_url}): GET /api/hello x {REQUESTS}",
          ["#", "served by", "status", "X-RateLimit-Remaining", "Retry-After"], rows)
    print("\nThe apps and the server share one bucket: 10 allowed in all, whichever language or the edge"
          " decided them.")


def in_flight(apps: List[App]) -> None:
    # The `reports` rule: at most 10 requests in flight per client; each app counts the
    # requests inside its handler (GET /stats).
    client = {"X-Forwarded-For": f"198.51.100.{random.randint(1, 254)}"}
    rows = []
    for app in apps:
        app.request("/stats", method="DELETE")
        with ThreadPoolExecutor(max_workers=20) as pool:
            got = [r.status for r in pool.map(lambda i: app.request(f"/reports/{i}?ms=500", headers=client), range(20))]
        inside = json.loads(app.request("/stats").body)["max_in_flight"]
        rows.append([app.label, str(got.count(200)), str(got.count(429)), str(inside)])
    table("20 slow reports at once, one after the other per app: GET /reports/{id}?ms=500, at most 10 in flight",
          ["app", "served", "refused (429)", "max in flight"], rows)
    print("\nEach slot is released after its response, so the next 20 get 10 slots again.")


def llm_cost(apps: List[App]) -> None:
    # The `llm` rule: each POST /api/llm reserves its X-Reserve (1000 tokens of 10 000 an
    # hour) before the handler; the handler reports what it used (X-Actual-Cost: 3000) and
    # the middleware charges the difference after the response (docs/features/cost.md).
    rows = []
    for app in apps:
        client = {"X-Forwarded-For": f"192.0.2.{random.randint(1, 254)}", "X-Reserve": "1000", "X-Actual-Cost": "3000"}
        row = [app.label]
        for _ in range(5):
            r = app.request("/api/llm", method="POST", headers=client)
            row.append(f"{r.status}/{r.header('X-RateLimit-Remaining') or '-'}")
            time.sleep(0.05)  # the charge after the response lands before the next call
        rows.append(row)
    table("POST /api/llm x 5 per app, reserving 1000 tokens, using 3000 (status/remaining)",
          ["app", "1", "2", "3", "4", "5"], rows)
    print("\nEach call is admitted on its reservation and charged what it used: 3 x 3000 + 1000 reserved"
          " leaves 0, the 4th's 3000 puts the key 2000 in debt, and the 5th waits it off (429).")


def main() -> int:
    redis_url = os.environ.get("REDIS_URL")
    with running(list(APPS)) as apps, gateway() as server:
        print("polylimit demo: " + ", ".join(f"{a.label} on :{a.port}" for a in apps + [server])
              + " (rules: examples/polylimit.yaml)")
        # The server decides for a proxy (nginx auth_request, Traefik, Caddy, Envoy):
        # its /check answers 200 or the app's 429, headers and body (docs/server.md).
        if redis_url:
            one_key_through_all(apps + [server], redis_url)
        else:
            each_on_its_own(apps + [server])
            print("\nREDIS_URL=redis://127.0.0.1:6379 make demo runs them on one Redis, enforcing one limit together.")
        in_flight(apps)
        if not redis_url:
            llm_cost(apps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
