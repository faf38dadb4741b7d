"""The dry run's time estimate (issue 48 item 5): it counted 1,023 requests (about 8.5 hours
on the embedded model) and said nothing of time. The time now comes from the rate the
model's config states or the rate an earlier run of the model measured, and the line says
which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalkit.compose import compose, resolve
from evalkit.engine.estimate import duration
from evalkit.job import dry_run

API = ["benchmark=arith_mini", "model=openai_compatible", "backend.api_base=http://127.0.0.1:9/v1", "run.dry_run=true",
       "tracking=none"]  # fmt: skip
MODEL_ID = "openai/smollm2@http://127.0.0.1:9/v1"
DAY = 1_796_428_800  # 2026-12-05 00:00 UTC


def _dry(root: Path, *overrides: str):
    return dry_run(resolve(compose([*API, f"run.output_root={root}", *overrides]))[1])


def _earlier_run(root: Path, stamp: str, model_id: str, rows: list[dict], concurrency: int = 4) -> Path:
    """A finished run of openai_compatible under ``root``: its summary's ``model_id`` and
    engine concurrency, and its journal's ``rows``."""
    run_dir = root / "runs" / "arith_mini" / "openai_compatible" / stamp
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"model_id": model_id, "engine": {"concurrency": concurrency}}))
    (run_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def _row(prompt: int, completion: int, latency: float, cached: bool = False, ended_at: float = DAY + 3600) -> dict:
    return {"sample_id": "s", "usage": {"prompt_tokens": prompt, "completion_tokens": completion}, "latency_s": latency,
            "cached": cached, "ended_at": ended_at}  # fmt: skip


def test_the_stated_rate_gives_a_range_from_the_prompts_alone_to_every_answer_at_max_tokens(tmp_path):
    dry = _dry(tmp_path, "model.provider_model=openai/smollm2", "+model.tokens_per_second=2", "backend.concurrency=2",
               "benchmark.generation.max_tokens=50")  # fmt: skip
    least, most = dry.prompt_tokens / 2 / 2, (dry.prompt_tokens + 50 * 10) / 2 / 2
    assert dry.requests == 10 and dry.lines[1] == (
        f"evalkit: dry run: time {duration(least)} (prompt tokens only) to {duration(most)} (every answer at "
        "max_tokens=50) at 2 tok/s per request (model.tokens_per_second), 2 requests at a time")  # fmt: skip
    assert not tmp_path.exists() or list(tmp_path.iterdir()) == []  # nothing written


def test_the_newest_earlier_run_of_the_same_model_gives_its_measured_rate(tmp_path):
    """The measured rate is Σ tokens / Σ latency over the answers that were sent (a cached one
    is not a measure), and each new answer is expected to be as long as theirs."""
    _earlier_run(tmp_path, "20261201-000000-1", MODEL_ID, [_row(1000, 1000, 1.0)])  # older: not used
    _earlier_run(tmp_path, "20261209-000000-1", "openai/other@http://127.0.0.1:9/v1", [_row(10, 10, 1.0)])  # other weights
    rows = [_row(900, 100, 8.0), _row(1900, 100, 12.0), _row(5, 5, 0.001, cached=True)]
    _earlier_run(tmp_path, "20261205-000000-1", f"{MODEL_ID}|user={MODEL_ID}", rows)  # with a user simulator: the same server
    dry = _dry(tmp_path, "model.provider_model=openai/smollm2", "backend.concurrency=1")
    expected = (dry.prompt_tokens + 100 * dry.requests) / 150.0  # 3,000 tokens over 20 s; 100 completion tokens each
    assert dry.lines[1] == (f"evalkit: dry run: time ≈ {duration(expected)} at 150.0 tok/s per request measured on 2026-12-05 "
                            "(2 answers of arith_mini/openai_compatible/20261205-000000-1, backend.concurrency=4), "
                            "1 request at a time")  # fmt: skip


def test_without_a_rate_the_time_is_unknown_and_the_line_says_how_to_give_one(tmp_path):
    _earlier_run(tmp_path, "20261205-000000-1", MODEL_ID, [_row(900, 100, 8.0, cached=True)])  # only cache hits
    dry = _dry(tmp_path, "model.provider_model=openai/smollm2")
    assert dry.lines[1] == ("evalkit: dry run: time unknown (no throughput: set +model.tokens_per_second=N, or run a few samples "
                            "of the model first and its measured rate is used)")  # fmt: skip


@pytest.mark.parametrize(("seconds", "shown"), [(42.4, "42 s"), (210, "3.5 min"), (30_600, "8.5 h"), (181_440, "2.1 days")])
def test_durations_read_in_the_unit_a_person_would_use(seconds, shown):
    assert duration(seconds) == shown


def test_a_stated_rate_is_refused_unless_positive_and_its_key_is_named_when_set_without_plus():
    from evalkit.errors import ConfigError

    with pytest.raises(ConfigError, match="^model.tokens_per_second: "):
        resolve(compose([*API, "+model.tokens_per_second=0"]))
    with pytest.raises(ConfigError) as info:  # once "unknown key; did you mean model.tokens_per_second?"
        compose([*API, "model.tokens_per_second=3"])
    assert str(info.value) == "model.tokens_per_second: not set by this config's YAML; add it with +model.tokens_per_second=..."


def test_requests_beyond_the_concurrency_take_whole_rounds(tmp_path):
    """10 requests 8 at a time are two rounds, not 10/8 of one (a review found the upper end
    37 % low)."""
    dry = _dry(tmp_path, "model.provider_model=openai/smollm2", "+model.tokens_per_second=2", "backend.concurrency=8",
               "benchmark.generation.max_tokens=50")  # fmt: skip
    least, most = dry.prompt_tokens / 10 / 2 * 2, (dry.prompt_tokens + 50 * 10) / 10 / 2 * 2
    assert dry.requests == 10 and dry.lines[1].startswith(
        f"evalkit: dry run: time {duration(least)} (prompt tokens only) to {duration(most)} (every answer at max_tokens=50) ")


@pytest.mark.parametrize(("value", "why"), [("true", "not true/false"), ("inf", "finite number"),
                                            ("1e308", "less than or equal to 1000000"), ("5e-324", "greater than or equal to 0.001")])  # fmt: skip
def test_a_rate_that_is_not_a_rate_is_refused_in_one_line(tmp_path, value, why):
    from evalkit.errors import EvalkitError

    with pytest.raises(EvalkitError) as refused:
        _dry(tmp_path, "model.provider_model=openai/smollm2", f"+model.tokens_per_second={value}")
    assert str(refused.value).startswith("model.tokens_per_second: ") and why in str(refused.value), str(refused.value)
