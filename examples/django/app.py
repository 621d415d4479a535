"""Django + polylimit: every request is decided by the shared rules file (settings.POLYLIMIT), served
as ASGI by uvicorn (async views; the middleware awaits the core)."""

import asyncio
import json
import os
from pathlib import Path

import django
import uvicorn
from django.conf import settings

RULES = os.environ.get("POLYLIMIT_RULES", str(Path(__file__).parent.parent / "polylimit.yaml"))

settings.configure(
    ROOT_URLCONF=__name__,
    ALLOWED_HOSTS=["*"],
    SECRET_KEY="polylimit-demo",
    MIDDLEWARE=["polylimit.django.PolylimitMiddleware"],
    POLYLIMIT={"rules_file": RULES, "user": lambda request: request.headers.get("x-user")},  # stands in for your auth
)
django.setup()

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

from polylimit.django import settings_limiter  # noqa: E402


async def hello(request, name):
    return JsonResponse({"hello": name})


async def pay(request, payment_id):
    if request.method != "POST":
        return await hello(request, f"payments/{payment_id}")
    return JsonResponse({"paid": payment_id})


# An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
# the view; the view reports the actual cost (here read from X-Actual-Cost, in a real app the
# model's token usage) and the middleware reconciles after the response.
async def llm(request):
    if request.method != "POST":
        return await hello(request, "llm")
    actual = request.headers.get("x-actual-cost")
    if actual is not None:
        request.polylimit_cost = int(actual)
    return JsonResponse({"answered": True})


# The demo's one account password; a real app checks its user store.
DEMO_PASSWORD = "open-sesame"


async def login(request):
    # The rules file's `login` rule keys by IP and this header and counts only failures.
    user = request.headers.get("x-login-user", "")
    try:
        password = json.loads(request.body or b"{}").get("password", "")
    except ValueError:
        password = ""
    if request.method != "POST" or not user or password != DEMO_PASSWORD:
        return JsonResponse({"detail": "wrong user or password"}, status=401)
    return JsonResponse({"logged_in": user})


# A slow report under the rules file's `reports` rule: held `ms` milliseconds (default 300); `fail=1`
# then raises (a 500). `stats` counts the requests inside the view.
stats = {"in_flight": 0, "max_in_flight": 0, "started": 0}


async def report(request, report_id):
    stats["in_flight"] += 1
    stats["started"] += 1
    stats["max_in_flight"] = max(stats["max_in_flight"], stats["in_flight"])
    try:
        await asyncio.sleep(min(max(int(request.GET.get("ms", 300)), 0), 30_000) / 1000)
    finally:
        stats["in_flight"] -= 1
    if request.GET.get("fail") in ("1", "true"):
        raise RuntimeError(f"report {report_id} failed")
    return JsonResponse({"report": report_id})


async def get_stats(request):
    if request.method == "DELETE":
        stats.update(max_in_flight=stats["in_flight"], started=0)
    return JsonResponse(stats)


async def metrics(request):
    return HttpResponse(settings_limiter()[0].metrics_text(), content_type="text/plain; charset=utf-8")


urlpatterns = [
    path("api/payments/<str:payment_id>", pay),
    path("api/llm", llm),
    path("api/<str:name>", hello),
    path("login", login),
    path("reports/<str:report_id>", report),
    path("stats", get_stats),
    path("metrics", metrics),
]

application = get_asgi_application()

if __name__ == "__main__":
    # proxy_headers=False: polylimit finds the client behind trusted_proxies itself.
    uvicorn.run(application, host="127.0.0.1", port=int(os.environ.get("PORT", "8000")), proxy_headers=False,
                lifespan="off", log_level="warning")
