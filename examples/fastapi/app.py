"""FastAPI + polylimit: every request is decided by the shared rules file."""

import asyncio
import os
from pathlib import Path

import uvicorn
from fastapi import Body, FastAPI, Header, HTTPException, Request
from fastapi.responses import PlainTextResponse

from polylimit import Limiter
from polylimit.fastapi import PolylimitMiddleware

RULES = os.environ.get("POLYLIMIT_RULES", str(Path(__file__).parent.parent / "polylimit.yaml"))

limiter = Limiter.from_file(RULES)
app = FastAPI()
app.add_middleware(
    PolylimitMiddleware,
    limiter=limiter,
    user=lambda request: request.headers.get("x-user"),  # stands in for your auth
)


@app.get("/api/{name}")
async def hello(name: str):
    return {"hello": name}


@app.post("/api/payments/{payment_id}")
async def pay(payment_id: str):
    return {"paid": payment_id}


# An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
# the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
# the model's token usage) and the middleware reconciles after the response.
@app.post("/api/llm")
async def llm(request: Request):
    actual = request.headers.get("x-actual-cost")
    if actual is not None:
        request.state.polylimit_cost = int(actual)
    return {"answered": True}


# The demo's one account password; a real app checks its user store.
DEMO_PASSWORD = "open-sesame"


@app.post("/login")
async def login(x_login_user: str = Header(""), password: str = Body("", embed=True)):
    # The rules file's `login` rule keys by IP and this header and counts only failures.
    if not x_login_user or password != DEMO_PASSWORD:
        raise HTTPException(status_code=401, detail="wrong user or password")
    return {"logged_in": x_login_user}


# A slow report under the rules file's `reports` rule (at most 10 in flight per client): held
# `ms` milliseconds (default 300); `fail=1` then raises (a 500). `stats` counts the requests
# inside the handler, the app's own measure of what the limit lets in.
stats = {"in_flight": 0, "max_in_flight": 0, "started": 0}


@app.get("/reports/{report_id}")
async def report(report_id: str, ms: int = 300, fail: bool = False):
    stats["in_flight"] += 1
    stats["started"] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    try:
        await asyncio.sleep(min(max(ms, 0), 30_000) / 1000)
    finally:
        stats["in_flight"] -= 1
    if fail:
        raise RuntimeError(f"report {report_id} failed")
    return {"report": report_id}


@app.get("/stats")
async def get_stats():
    return stats


@app.delete("/stats")
async def reset_stats():
    stats.update(max_in_flight=stats["in_flight"], started=0)
    return stats


@app.get("/metrics", response_class=PlainTextResponse)
async def metrics():
    return limiter.metrics_text()


if __name__ == "__main__":
    # proxy_headers=False: polylimit finds the client behind trusted_proxies
    # itself; uvicorn's default would trust X-Forwarded-For from loopback.
    uvicorn.run(app, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")), proxy_headers=False, log_level="warning")
