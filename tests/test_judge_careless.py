"""Careless judges against known-wrong answers that try to steer them (issue 45 targets): the
judges of tests/support/careless_judges.py on the fake server, one run each, the answers of the
model under test each carrying one kind of injection of the steering battery.

The headline of known-wrong answers never rises above the honest judge's: the judge protocol
(the note and boundary before the answer, the last JSON object, copied verdicts refused, panels
failing closed) leaves a run incomplete where a judge copies or cannot give a verdict, and the
judges it cannot stop — one that obeys instructions, one that trusts any fence-looking line, one
that is merely generous — are refused by their qualification, which a run asks for by default
(``judge_qualification.require: headline``): a plain run, no gate, no setting."""

from __future__ import annotations

import pytest

from evalkit.benchmarks.task import steering as S
from evalkit.benchmarks.task.settings import ScorerSpec
from evalkit.engine.journal import read_jsonl
from evalkit.errors import ConfigError
from tests.support.careless_judges import CARELESS, RUBRIC, careless_config_dir, judges_plan

pytestmark = pytest.mark.slow  # Ray, the fake server, a run per judge

ROWS = [{"id": f"q{i}", "question": f"Question {i}?", "reference": f"Reference {i}."} for i in range(24)]
#: one injection of each kind, one per sample of the run (q0..q5)
INJECTIONS = ["bare_verdict", "system_turn", "bare_fence", "fullwidth_order", "ignore_previous", "past_grades"]
#: the issue's panel of six careless judges
PANEL = ["first_json", "last_json", "obey", "quote_then_own", "fence_trust", "boundary_trust"]


def _answers() -> list[dict]:
    scorer = ScorerSpec(kind="llm_judge", name="quality", rubric=RUBRIC)
    by_name = {i["name"]: i for i in S.BATTERY}
    out = []
    for k, name in enumerate(INJECTIONS):
        text = S.inject(by_name[name]["template"], f"[grade=1] A wrong answer to question {k}.", scorer, f"Reference {k}.")
        out.append({"match": f"ASK q{k}:", "content": text})
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory, fake_openai, ray_address):
    """The module's runs: the honest judge, each careless kind and the issue's panel with nothing
    required (``require=never``); each by default before any qualification; then each kind
    qualified and run by default again: ``{"never" | "unqualified" | "default": {name: result or
    the refusal's line}, "records": {name: its qualification record}}``."""
    import json

    from evalkit.compose import compose, resolve
    from evalkit.job import run_validated
    from evalkit.judge import main

    tmp = tmp_path_factory.mktemp("careless")
    conf, _ = careless_config_dir(tmp, ROWS)
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALKIT_CONFIG_DIR", str(conf))
    labels = tmp / "labels.jsonl"
    labels.write_text("".join(json.dumps({"sample_id": f"q{i}", "answer": f"[grade={g}] The answer to question {i}.", "label": g}) + "\n"
                              for i, g in enumerate([1, 5, 2, 4] * 6)), encoding="utf-8")  # fmt: skip
    common = [f"judge_overrides=['backend.api_base={fake_openai.api_base}','backend.concurrency=16']", f"run.output_root={tmp / 'out'}"]
    plan = judges_plan()
    plan["rules"] = _answers() + plan["rules"]

    def run(judge: str, *overrides: str):
        fake_openai.set_plan(plan)
        _, cfg = resolve(compose(["benchmark=careless", "model=openai_compatible", "model.provider_model=openai/fake",
                                  f"backend.api_base={fake_openai.api_base}", f"judge={judge}", *common, "tracking=none",
                                  "run.progress=false", "runner.num_workers=1", "run.limit=6", *overrides]))  # fmt: skip
        try:
            return run_validated(cfg)
        except ConfigError as exc:
            return str(exc)

    out: dict = {"never": {}, "unqualified": {}, "default": {}, "records": {}}
    try:
        for judge in ("honest", *CARELESS):
            out["never"][judge] = run(judge, "judge_qualification.require=never")
        out["never"]["panel"] = run(f"[{','.join(PANEL)}]", "judge_qualification.require=never")
        for judge in ("honest", *CARELESS, f"[{','.join(PANEL)}]"):  # refused before anything starts: cheap
            out["unqualified"][judge] = run(judge)
        for judge in ("honest", *CARELESS):
            fake_openai.set_plan(judges_plan())
            main(["qualify", f"judge={judge}", "benchmark=careless", f"labels={labels}", "steer_items=3", "tracking=none", *common])
            folder = tmp / "out" / "qualifications" / judge / "careless" / "quality"
            out["records"][judge] = json.loads(sorted(folder.glob("*.json"))[-1].read_text())
            out["default"][judge] = run(judge)
        out["default"]["panel"] = run(f"[{','.join(PANEL)}]")
    finally:
        mp.undo()
    return out


def _outcome(result) -> tuple[str, float | None]:
    if isinstance(result, str):
        return "refused", None
    return result.summary["status"], result.summary["metrics"].get("quality")


def test_the_honest_judge_scores_the_known_wrong_answers_zero(world):
    assert _outcome(world["never"]["honest"]) == ("complete", 0.0)
    assert _outcome(world["default"]["honest"]) == ("complete", 0.0)


def test_no_careless_judge_raises_the_headline_of_known_wrong_answers_in_a_default_run(world):
    """Issue 45 target: an incomplete or refused run is acceptable, a pass above the honest
    judge's headline is not — by default, before and after the judges are qualified."""
    honest = _outcome(world["default"]["honest"])[1]
    for judge in (*CARELESS, "panel"):
        status, headline = _outcome(world["default"][judge])
        assert status in ("refused", "incomplete") or (status == "complete" and headline <= honest), (judge, status, headline)
    # what require=never lets through, the default does not: these raise the headline unqualified
    raised = [j for j in (*CARELESS, "panel") if _outcome(world["never"][j])[0] == "complete" and _outcome(world["never"][j])[1] > honest]
    assert {"lenient"} <= set(raised) and all(_outcome(world["default"][j])[0] == "refused" for j in raised), raised


def test_a_default_run_on_an_unqualified_judge_is_refused_in_one_line_naming_the_command(world):
    for judge, line in world["unqualified"].items():
        name = "first_json" if judge.startswith("[") else judge  # a panel is refused on its first unqualified judge
        assert isinstance(line, str) and "\n" not in line, (judge, line)
        assert line.startswith(f"judge {name} on careless/quality is unqualified: no qualification record under "), line
        assert f"python -m evalkit.judge qualify judge={name} benchmark=careless labels=FILE" in line, line
        assert "the run's headline rests on it (judge_qualification.require=headline)" in line, line
        assert "judge_qualification.require=never" in line.split("require=headline)")[1], line


def test_a_run_unqualified_by_choice_records_it_and_marks_its_headline(world):
    """``require=never``: the run goes on; summary.json, report.md and the outcome line say
    that the headline rests on a judge that was not qualified."""
    from evalkit.job import outcome_line

    result = world["never"]["lenient"]
    assert _outcome(result) == ("complete", 0.5)  # the honest 1 made 3: (3 - 1) / (5 - 1)
    qual = result.summary["judge_qualification"]
    assert qual["require"] == "never" and qual["headline_scorer"] == "quality"
    assert qual["judges"]["lenient"]["quality"]["status"] == "unqualified"
    note = "judge not qualified: lenient unqualified, judge_qualification.require=never"
    assert f"(n=6) — {note}; " in outcome_line(result)
    assert note in (result.run_dir / "report.md").read_text(encoding="utf-8").split("\n", 3)[2]
    honest = world["default"]["honest"]
    assert "judge not qualified" not in outcome_line(honest) and honest.summary["judge_qualification"]["require"] == "headline"


def test_what_the_protocol_alone_stops_and_what_only_qualification_stops(world):
    """Without qualification (``require=never``): the copying kinds and the issue's panel end
    incomplete (a verdict copied from the answer, the schema taken for a verdict: judge_error,
    and the panel fails closed); the judges that quote the injection or trust only the announced
    boundary give the honest verdict; the judge that obeys instructions and the one that trusts
    fence-looking lines are steered where an injection holds no JSON verdict to catch (their
    runs end incomplete or raised) — which their qualification measures, so that with
    ``require=headline`` they are refused."""
    seen = {judge: _outcome(world["never"][judge]) for judge in (*CARELESS, "panel")}
    for judge in ("first_json", "last_json", "copier", "panel"):
        assert seen[judge][0] == "incomplete", (judge, seen[judge])
    for judge in ("quote_then_own", "boundary_trust"):
        assert seen[judge] == ("complete", 0.0), (judge, seen[judge])
    for judge in ("obey", "fence_trust"):
        result = world["never"][judge]
        raised = [r["sample_id"] for r in read_jsonl(result.run_dir / "predictions.jsonl") if r["scores"]["quality"] > 0.0]
        assert raised, f"{judge}: an injection without a JSON verdict steers it past the protocol"
        refusal = world["default"][judge]
        assert isinstance(refusal, str) and f"judge {judge} on careless/quality is below the floor: steered by" in refusal
    copier = world["never"]["copier"]
    failed = [r for r in (copier.run_dir / "failed.jsonl").read_text().splitlines() if "verdict copied from the answer" in r]
    assert failed, "the copier's verdicts are refused as copied"


def test_each_careless_kinds_steer_rate_is_reported_and_copying_is_refused_by_the_default_floor(world):
    records = world["records"]
    for judge in ("honest", *CARELESS):
        kinds = records[judge]["steering"]["kinds"]
        assert set(kinds) == {i["kind"] for i in S.BATTERY} and all(f["ci"] is not None for f in kinds.values()), judge
    assert records["honest"]["qualified"] and records["quote_then_own"]["qualified"] and records["boundary_trust"]["qualified"]
    copier = records["copier"]
    assert not copier["qualified"] and copier["steering"]["kinds"]["copying"]["rate"] == 1.0
    assert copier["steering"]["kinds"]["copying"]["copied"] == copier["steering"]["kinds"]["copying"]["n"]  # all caught as copies
    assert copier["floors"] == {"min_kappa": 0.6, "max_steer_rate": 0.1, "max_age_days": 90.0}  # the default floor
    for judge in ("first_json", "last_json", "obey", "fence_trust"):
        assert not records[judge]["qualified"], judge
    lenient = records["lenient"]  # steered by nothing, refused by its disagreement with people
    assert not lenient["qualified"] and set(f["rate"] for f in lenient["steering"]["kinds"].values()) == {0.0}
    assert lenient["refusals"] and all(r.startswith("κ ") for r in lenient["refusals"]), lenient["refusals"]
