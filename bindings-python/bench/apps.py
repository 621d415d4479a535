"""The FastAPI apps of the HTTP benchmark; `BENCH_APP` picks one (`polylimit`, `slowapi`, or `none`:
the same route unlimited, the baseline), `REDIS_URL` the store. The limited ones limit one route per
client IP with a fixed window high enough never to refuse."""

from __future__ import annotations

import os

from fastapi import FastAPI, Request

REDIS_URL = os.environ["REDIS_URL"]
app = FastAPI()

if os.environ["BENCH_APP"] == "polylimit":
    import polylimit

    limiter = polylimit.Limiter(
        policy={"algorithm": "fixed_window", "rate": "100000000/min"}, store=REDIS_URL, prefix="bench-http"
    )

    @app.get("/hello")
    @limiter.limit(key="ip")
    async def hello():
        return {"hello": "world"}

elif os.environ["BENCH_APP"] == "none":

    @app.get("/hello")
    async def hello():
        return {"hello": "world"}

else:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address, storage_uri=REDIS_URL, strategy="fixed-window")
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/hello")
    @limiter.limit("100000000/minute")
    async def hello(request: Request):
        return {"hello": "world"}
