"""Flask + polylimit: every request is decided by the shared rules file (app.config["POLYLIMIT"]),
served by Werkzeug's threaded server."""

import os
import threading
import time
from pathlib import Path

from flask import Flask, Response, g, jsonify, request
from werkzeug.serving import run_simple

from polylimit.flask import Polylimit

RULES = os.environ.get("POLYLIMIT_RULES", str(Path(__file__).parent.parent / "polylimit.yaml"))

app = Flask(__name__)
app.config["POLYLIMIT"] = {"rules_file": RULES, "user": lambda req: req.headers.get("x-user")}  # stands in for your auth
polylimit = Polylimit(app)


@app.get("/api/<name>")
def hello(name):
    return {"hello": name}


@app.post("/api/payments/<payment_id>")
def pay(payment_id):
    return {"paid": payment_id}


# An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
# the view; the view reports the actual cost (here read from X-Actual-Cost, in a real app the
# model's token usage) and the extension reconciles after the response.
@app.post("/api/llm")
def llm():
    actual = request.headers.get("x-actual-cost")
    if actual is not None:
        g.polylimit_cost = int(actual)
    return {"answered": True}


# The demo's one account password; a real app checks its user store.
DEMO_PASSWORD = "open-sesame"


@app.post("/login")
def login():
    # The rules file's `login` rule keys by IP and this header and counts only failures.
    user = request.headers.get("x-login-user", "")
    password = (request.get_json(silent=True) or {}).get("password", "")
    if not user or password != DEMO_PASSWORD:
        return {"detail": "wrong user or password"}, 401
    return {"logged_in": user}


# A slow report under the rules file's `reports` rule: held `ms` milliseconds (default 300); `fail=1`
# then raises (a 500). `stats` counts the requests inside the view.
stats = {"in_flight": 0, "max_in_flight": 0, "started": 0}
lock = threading.Lock()


@app.get("/reports/<report_id>")
def report(report_id):
    with lock:
        stats["in_flight"] += 1
        stats["started"] += 1
        stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    try:
        time.sleep(min(max(int(request.args.get("ms", 300)), 0), 30_000) / 1000)
    finally:
        with lock:
            stats["in_flight"] -= 1
    if request.args.get("fail") in ("1", "true"):
        raise RuntimeError(f"report {report_id} failed")
    return {"report": report_id}


@app.route("/stats", methods=["GET", "DELETE"])
def get_stats():
    if request.method == "DELETE":
        with lock:
            stats.update(max_in_flight=stats["in_flight"], started=0)
    return jsonify(stats)


@app.get("/metrics")
def metrics():
    return Response(polylimit.limiter.metrics_text(), mimetype="text/plain")


if __name__ == "__main__":
    run_simple("127.0.0.1", int(os.environ.get("PORT", "8000")), app, threaded=True)
