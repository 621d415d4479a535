"""The clean room's FastAPI app: polylimit from the wheel, one policy, the decorator."""

import os

import uvicorn
from fastapi import FastAPI

import polylimit

limiter = polylimit.Limiter(policy={"name": "api", "rate": "10/hour"}, store=os.environ.get("REDIS_URL", "memory"),
                             timeout="10s")  # decisions, not latency: a loaded CI host must not fall back
app = FastAPI()


@app.get("/hello")
@limiter.limit(key="ip", per_route=False)  # one limit per client, as the Express and Go apps
async def hello():
    return {"hello": "world"}


@app.get("/version")
async def version():
    return {"version": polylimit.__version__, "module": polylimit.__file__}


uvicorn.run(app, host="127.0.0.1", port=int(os.environ["PORT"]), proxy_headers=False, log_level="warning")
