"""Local-with-sync on one key from six processes, Python, Node and Go mixed,
at full speed on one real redis-server (issue 19): the synced policy never
admits more than the exact limit, admits most of it, and decides faster
than the exact policy. `make bench` runs the same for 10 s (sync_run.py)."""

from __future__ import annotations

import sync_run


def test_synced_processes_of_every_language_stay_within_the_exact_limit(redis) -> None:
    synced = sync_run.run(redis, sync_run.SYNCED, 3)
    exact = sync_run.run(redis, sync_run.EXACT, 3)
    for line in sync_run.report(synced, exact):
        print(line.get("detail") or f"{line['what']}: {line['value']:,.0f} vs {line['baseline_value']:,.0f}")
    assert {r["lang"] for r in synced["processes"]} == {"python", "node", "go"}
    # The guarantee (docs/features/sync.md): a window admits at most its limit.
    assert synced["admitted"] <= synced["exact_limit"], synced
    # Under-admission is at most a share per process when a window ends: at
    # full speed every whole window (not the first and last) is used up to that.
    share = sync_run.SYNCED["sync"]["share"]
    whole = (synced["windows"] - 2) * (sync_run.LIMIT - len(synced["processes"]) * share)
    assert synced["admitted"] >= whole, synced
    assert exact["admitted"] <= exact["exact_limit"], exact
    # Most decisions are local: each language decides faster synced than exact.
    for lang in ("python", "node", "go"):
        s = sum(sync_run.rate(r) for r in synced["processes"] if r["lang"] == lang)
        e = sum(sync_run.rate(r) for r in exact["processes"] if r["lang"] == lang)
        assert s > e, (lang, s, e)
