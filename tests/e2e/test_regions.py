"""Multi-region quotas across languages: two redis-servers as the regions eu
and us, FastAPI and Go apps in eu, Express in us, one global limit of 30 per
user. Whatever the regions ask, together they admit at most 30 (exactly 30
when demand exceeds it), borrowing a region's spare share when their own is
spent; with us's Redis killed, eu keeps admitting its own share."""

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import RedisServer, running

LIMIT = 30
EU_SHARE = 15
EU_APPS = ["fastapi", "go"]
US_APPS = ["express"]


@pytest.fixture(scope="module")
def regions():
    eu, us = RedisServer(), RedisServer()
    rules = str(Path(__file__).parent / "regions.yaml")
    env = {"REDIS_EU": eu.url, "REDIS_US": us.url, "POLYLIMIT_RULES": rules}
    with running(EU_APPS, dict(env, POLYLIMIT_REGION="eu")) as eu_apps, running(
        US_APPS, dict(env, POLYLIMIT_REGION="us")
    ) as us_apps:
        yield {"eu": eu_apps, "us": us_apps, "eu_redis": eu, "us_redis": us}
    eu.kill()
    us.kill()


def borrows(apps, result):
    """polylimit_region_borrows_total{result=...} summed over `apps`."""
    total = 0
    for app in apps:
        text = app.request("/metrics").body.decode()
        total += sum(int(n) for n in re.findall(r'polylimit_region_borrows_total\{region="\w+",result="%s"\} (\d+)' % result, text))
    return total


def pay(requests):
    """Sends (app, n) payments by one new user at once; the statuses by region index."""
    user = {"X-User": f"user-{uuid.uuid4().hex}"}

    def one(item):
        i, app = item
        return app, app.request(f"/api/payments/{i}", method="POST", headers=user).status

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, enumerate(requests)))


def test_demand_under_the_limit_is_all_admitted(regions):
    apps = regions["eu"] + regions["us"]
    answers = pay([apps[i % len(apps)] for i in range(24)])
    assert [s for _, s in answers] == [200] * 24


def test_regions_together_admit_the_global_limit_and_borrow_spare_shares(regions):
    eu, us = regions["eu"], regions["us"]
    before = borrows(eu + us, "granted")
    # eu asks 150 (ten times its share), us 5 (a third of its own).
    answers = pay([eu[i % len(eu)] for i in range(150)] + [us[0]] * 5)
    statuses = sorted(s for _, s in answers)
    admitted = statuses.count(200)
    granted = borrows(eu + us, "granted") - before
    refused = borrows(eu + us, "refused")
    print(f"\nregions: 155 requests (eu 150, us 5), admitted {admitted} of the global {LIMIT}; "
          f"borrowed {granted}, {refused} borrow calls refused so far")
    assert statuses == [200] * LIMIT + [429] * (155 - LIMIT), "exactly the global limit, never more"
    # At most 15 + 5 admitted from the regions' own shares: the rest was lent by us.
    assert granted >= LIMIT - EU_SHARE - 5, granted


def test_a_region_down_leaves_the_other_its_share(regions):
    eu, us = regions["eu"], regions["us"]
    regions["us_redis"].kill()
    started = time.monotonic()
    answers = pay([eu[i % len(eu)] for i in range(60)])
    elapsed = time.monotonic() - started
    statuses = sorted(s for _, s in answers)
    print(f"\nus's Redis killed: eu admitted {statuses.count(200)} of 60 in {elapsed:.2f} s")
    assert statuses == [200] * EU_SHARE + [429] * (60 - EU_SHARE)
    assert borrows(eu, "unavailable") > 0
    # us's own decisions fall back to its on_store_error (local: its share in memory): no error.
    assert {s for _, s in pay([us[0]] * 20)} <= {200, 429}
