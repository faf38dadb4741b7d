"""The response cache's size bound: a write culls nothing (the per-write volume check cost
the trickling model workers half of a write's CPU), and :func:`trim_cache`, run once when a
run starts, evicts the least recently stored entries until the cache is within its bound."""

from __future__ import annotations

import asyncio

from evalkit.engine import cache as response_cache


def _fill(cache_dir, keys, size):
    cache = response_cache.open_cache(cache_dir)
    try:
        for key in keys:
            response_cache.cache_set(cache, key, {"text": key * size})
        return cache.volume()
    finally:
        cache.close()


def test_a_write_past_the_bound_evicts_nothing_and_the_next_run_start_trims_the_oldest(tmp_path, monkeypatch):
    monkeypatch.setattr(response_cache, "SIZE_LIMIT", 1_500_000)  # bytes; 20 entries of ~100 KB pass it (diskcache evicts 10 at a time)
    keys = [f"{i:02d}" for i in range(20)]
    volume = _fill(tmp_path / "cache", keys, 50_000)
    assert volume > response_cache.SIZE_LIMIT
    cache = response_cache.open_cache(tmp_path / "cache")
    try:
        assert all(cache.get(k) == {"text": k * 50_000} for k in keys)  # but every entry is kept
    finally:
        cache.close()

    response_cache.trim_cache(tmp_path / "cache")

    cache = response_cache.open_cache(tmp_path / "cache")
    try:
        assert cache.volume() <= response_cache.SIZE_LIMIT
        kept = [k for k in keys if cache.get(k) is not None]
        assert 0 < len(kept) < len(keys)
        assert kept == keys[-len(kept):]  # the newest survive
    finally:
        cache.close()


def test_trimming_a_cache_within_its_bound_keeps_every_entry(tmp_path):
    keys = [f"{i:02d}" for i in range(5)]
    _fill(tmp_path / "cache", keys, 100)
    response_cache.trim_cache(tmp_path / "cache")
    cache = response_cache.open_cache(tmp_path / "cache")
    try:
        assert [cache.get(k) for k in keys] == [{"text": k * 100} for k in keys]
    finally:
        cache.close()


# ------------------------------------------------------------------------------------------
# a model worker's writes: together, when its results go back
# ------------------------------------------------------------------------------------------
def _stored(cache_dir, key):
    """``key``'s entry as another process would read it (a handle of its own)."""
    cache = response_cache.open_cache(cache_dir)
    try:
        return cache.get(key)
    finally:
        cache.close()


def test_write_behind_reads_its_own_pending_entries_and_stores_them_in_one_flush(tmp_path):
    cache = response_cache.WriteBehind(response_cache.open_cache(tmp_path / "c"))
    try:
        for key in ("a", "b", "c"):
            response_cache.cache_set(cache, key, {"text": key, "usage": {"completion_tokens": 1}})  # no event loop: written at once
        assert not cache.pending and _stored(tmp_path / "c", "b") == {"text": "b", "usage": {"completion_tokens": 1}}

        async def in_a_loop():
            response_cache.cache_set(cache, "d", {"text": "d", "usage": {"completion_tokens": 1}})
            response_cache.cache_set(cache, "e", {"text": "e", "usage": {}})
            unseen = _stored(tmp_path / "c", "d")
            seen = response_cache.cache_get(cache, "d")
            seen.usage["completion_tokens"] = 99  # the caller's own copy
            again = response_cache.cache_get(cache, "d")
            cache.flush()
            return unseen, seen.text, again.usage

        unseen, text, usage = asyncio.run(in_a_loop())
        assert unseen is None and text == "d" and usage == {"completion_tokens": 1}
        assert not cache.pending and _stored(tmp_path / "c", "e") == {"text": "e", "usage": {}}
    finally:
        cache.close()


def test_write_behind_stores_its_entries_within_its_delay_without_a_flush(tmp_path):
    cache = response_cache.WriteBehind(response_cache.open_cache(tmp_path / "c"), delay_s=0.05)

    async def scenario():
        response_cache.cache_set(cache, "k", {"text": "late"})
        before = _stored(tmp_path / "c", "k")
        await asyncio.sleep(0.2)
        return before, _stored(tmp_path / "c", "k")

    try:
        assert asyncio.run(scenario()) == (None, {"text": "late"})
    finally:
        cache.close()


def test_a_worker_stores_the_answers_it_sends_back_within_the_write_behind_delay(tmp_path):
    """Each unit a model worker answers: its answer is in the response cache, read through
    another handle (as a re-run's workers would), once the write-behind delay after it
    has passed (the loop's timers run in deadline order: no wall-clock bound)."""
    from evalkit.benchmarks.base import Generate
    from evalkit.engine.executor import ModelWorker
    from evalkit.engine.work import WorkItem
    from evalkit.models.factory import Agents
    from evalkit.types import Completion, Request, Sample

    class Model:
        model_id = "m@test"

        async def generate(self, request):
            await asyncio.sleep(0.01 * int(request.sample_id[1:]))
            return Completion(text=f"answer {request.sample_id}", finish_reason="stop", usage={"completion_tokens": 2})

    units = [WorkItem(Sample(f"s{i}", "x"), Request(f"s{i}", "x", messages=[{"role": "user", "content": str(i)}])) for i in range(6)]
    keys = {u.key: u.request.request_hash(Model.model_id) for u in units}

    async def scenario():
        from evalkit.engine.cache import WRITE_BEHIND_S

        worker = ModelWorker(lambda: Agents(Model()), str(tmp_path / "c"))
        holder = [asyncio.ensure_future(asyncio.sleep(0, result=(Generate(), {}, {}, None)))]
        await asyncio.gather(*(worker.solve("job", holder, None, u) for u in units))
        await asyncio.sleep(WRITE_BEHIND_S * 2)
        return [(u.key, (_stored(tmp_path / "c", keys[u.key]) or {}).get("text")) for u in units]

    seen = asyncio.run(scenario())
    assert sorted(seen) == sorted((u.key, f"answer {u.sample.id}") for u in units)


def test_write_behind_used_from_a_second_event_loop_still_stores_within_its_delay(tmp_path):
    """A loop that ends with entries pending leaves a timer that never fires (a sweep's next
    job, a test's next ``asyncio.run``): the next loop's entries must still be stored within
    the delay, and an entry set with no loop running at once — the old ones with it."""
    cache = response_cache.WriteBehind(response_cache.open_cache(tmp_path / "c"), delay_s=0.05)

    async def first():
        response_cache.cache_set(cache, "a", {"text": "a"})  # the loop ends before its flush

    async def second():
        response_cache.cache_set(cache, "b", {"text": "b"})
        await asyncio.sleep(0.3)
        return _stored(tmp_path / "c", "a"), _stored(tmp_path / "c", "b")

    try:
        asyncio.run(first())
        assert asyncio.run(second()) == ({"text": "a"}, {"text": "b"})
        asyncio.run(first())
        response_cache.cache_set(cache, "c", {"text": "c"})  # no event loop: written at once
        assert not cache.pending and _stored(tmp_path / "c", "c") == {"text": "c"}
    finally:
        cache.close()


def test_an_entry_that_cannot_be_stored_costs_only_itself_not_the_others_of_its_flush(tmp_path, caplog):
    """One transaction holds every pending entry: an entry diskcache cannot store (here one
    that does not pickle) is a warning of its own, and the others — a large one written to a
    file of its own before it — are stored, not rolled back with it (as when each entry was
    written on its own)."""
    cache = response_cache.WriteBehind(response_cache.open_cache(tmp_path / "c"))

    async def scenario():
        response_cache.cache_set(cache, "big", {"text": "y" * 200_000})  # over diskcache's 32 KB: a file
        response_cache.cache_set(cache, "bad", {"text": lambda: 0})
        response_cache.cache_set(cache, "after", {"text": "after"})
        cache.flush()

    try:
        asyncio.run(scenario())
        assert _stored(tmp_path / "c", "big") == {"text": "y" * 200_000}
        assert _stored(tmp_path / "c", "after") == {"text": "after"}
        assert _stored(tmp_path / "c", "bad") is None
        assert "cannot store bad" in caplog.text
    finally:
        cache.close()
