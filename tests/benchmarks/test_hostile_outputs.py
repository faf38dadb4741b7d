"""Hostile model outputs: a scorer reads text written by the model under evaluation, which
may be adversarial. Model text never reaches the file system or the network, and scoring
is bounded in time and memory: each class of attack below is scored in a child process
with a 2 GiB address-space limit and a 30 s time limit, and must score 0 (or fail the
check it targets) with a bounded ``detail`` and ``parsed`` (issue 17)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from evalkit.benchmarks.bounds import DETAIL_MAX_CHARS, PARSED_MAX_BYTES
from evalkit.benchmarks.sobhard import SOBHard, SOBHardSettings
from tests.support.bounded import run_bounded

#: the SOBHard schema_gen question whose answer is used as a JSON Schema (#28)
SCHEMA_GEN_ID = "16"


class _CountingServer:
    """An HTTP server on 127.0.0.1 that answers every GET with a permissive schema and
    records the paths asked for."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                hits.append(self.path)
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counting_server():
    server = _CountingServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def schema_question(shared_data_dir: Path):
    bench = SOBHard(SOBHardSettings(data_dir=shared_data_dir / "sobhard"))
    return bench, {s.id: s for s in bench.load()}[SCHEMA_GEN_ID]


def _reference_schema(bench: SOBHard, sample) -> dict:
    """The gold schema of the question (YAML in the reference answer), as a dict."""
    import yaml

    text = bench.reference_output(sample)
    body = text.split("\n", 1)[1].rsplit("```", 1)[0]
    return yaml.safe_load(body)


def _hostile_schemas(gold: dict, url: str, secret: Path) -> dict[str, dict]:
    """Schemas that would validate the document if their external references were
    followed (each points at a permissive ``{}``, a local file or an endless one)."""
    return {
        "file": {**gold, "items": {"$ref": secret.as_uri()}},
        "dev_zero": {**gold, "items": {"$ref": "file:///dev/zero"}},
        "http": {**gold, "items": {"$ref": f"{url}/evil.json"}},
        "relative_to_id": {"$id": f"{url}/root.json", **gold, "items": {"$ref": "item.json"}},
        "nested_id": {**gold, "items": {"$id": f"{url}/sub/", "allOf": [{"$ref": "x.json"}]}},
        "schema_keyword": {"$schema": f"{url}/meta.json", **gold, "items": {"$ref": f"{url}/a.json#/b"}},
        "dynamic_ref": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **gold,
            "items": {"$dynamicRef": f"{url}/dyn.json#meta"},
        },
    }


def test_reference_schema_still_validates(schema_question):
    bench, sample = schema_question
    scored = bench.score(sample, bench.reference_output(sample))
    assert scored.scores["sample_pass"] == 1.0
    assert "schema.validates_source" not in scored.failed_checks


def test_model_schema_never_reads_files_or_the_network(schema_question, counting_server, tmp_path):
    bench, sample = schema_question
    gold = _reference_schema(bench, sample)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"description": "TOPSECRET-7f3a"}), encoding="utf-8")
    for name, schema in _hostile_schemas(gold, counting_server.url, secret).items():
        answer = "```yaml\n" + json.dumps(schema) + "\n```"  # JSON is YAML: the fence tag is right
        scored = bench.score(sample, answer)
        assert "schema.validates_source" in scored.failed_checks, name
        assert scored.scores["sample_pass"] == 0.0, name
        text = json.dumps({"detail": scored.detail, "parsed": scored.parsed})
        assert "TOPSECRET-7f3a" not in text, name
        if name in {"file", "http", "relative_to_id"}:
            assert "unresolvable $ref" in (scored.detail or ""), (name, scored.detail)
    assert counting_server.hits == []


def test_internal_refs_still_resolve(schema_question):
    bench, sample = schema_question
    gold = _reference_schema(bench, sample)
    schema = {**gold, "definitions": {"item": gold["items"]}, "items": {"$ref": "#/definitions/item"}}
    scored = bench.score(sample, "```yaml\n" + json.dumps(schema) + "\n```")
    assert "schema.validates_source" not in scored.failed_checks, scored.detail
    dangling = {**gold, "items": {"$ref": "#/definitions/nothere"}}
    scored = bench.score(sample, "```yaml\n" + json.dumps(dangling) + "\n```")
    assert "schema.validates_source" in scored.failed_checks
    assert "unresolvable $ref" in scored.detail


# ==========================================================================================
# bounded in time and memory (issue 17): every case is scored in a child process limited to
# 2 GiB of address space and 30 s (tests/support/bounded.py)
# ==========================================================================================
ACE_CATEGORY = "normal_single_turn_single_function"
ACE_ID = "en/normal_single_turn_single_function_0"  # NightSkyAnalysis_performEclipseAnalysis(dateRange=..., ...)
ACE_CALL = "NightSkyAnalysis_performEclipseAnalysis"

KE_ID = "code_ke_834b34a9"  # gold step_000, step_004, step_005


def score_cases(benchmark: str, data_dir: str, cases: list[tuple[str, str]]) -> list[dict]:
    """Runs in the child: load ``benchmark`` from ``data_dir`` and score each
    ``(sample_id, text)``; each result is the SampleScore as a dict plus ``record_bytes``,
    the size of its JSON text as the journal writes it."""
    import dataclasses

    data = Path(data_dir)
    if benchmark == "sobhard":
        bench = SOBHard(SOBHardSettings(data_dir=data / "sobhard"))
    elif benchmark == "acebench":
        from evalkit.benchmarks.acebench import AceBench, AceBenchSettings

        bench = AceBench(AceBenchSettings(data_dir=data / "acebench", language="en", subsets=[ACE_CATEGORY]))
    else:
        from evalkit.benchmarks.ke import KE
        from evalkit.benchmarks.ke.settings import KESettings

        bench = KE(KESettings(pilot_path=data / "ke" / "pilot.jsonl", icl_path=data / "ke" / "icl_examples.jsonl"))
    by_id = {s.id: s for s in bench.load()}
    out = []
    for sample_id, text in cases:
        record = dataclasses.asdict(bench.score(by_id[sample_id], text))
        record["record_bytes"] = len(json.dumps(record, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        out.append(record)
    return out


def scored_bounded(shared_data_dir: Path, benchmark: str, cases: list[tuple[str, str]]) -> list[dict]:
    """``score_cases`` in a child under the memory and time budget; checks every result
    against the record bounds of ``evalkit.benchmarks.bounds``."""
    results = run_bounded(score_cases, benchmark, str(shared_data_dir), cases)
    assert len(results) == len(cases)
    for (sample_id, text), r in zip(cases, results):
        where = (sample_id, text[:60])
        assert r["detail"] is None or len(r["detail"]) <= DETAIL_MAX_CHARS, where
        parsed_bytes = len(json.dumps(r["parsed"], ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
        assert parsed_bytes <= PARSED_MAX_BYTES, where
        assert r["record_bytes"] <= PARSED_MAX_BYTES + 4 * DETAIL_MAX_CHARS + 4096, where
        assert not (r["detail"] or "").startswith("internal scoring error"), (where, r["detail"])
    return results


# ---- record bounds and the never-raise guard (in process) ---------------------------------
def test_bound_detail_and_bound_parsed() -> None:
    import hashlib

    from evalkit.benchmarks.bounds import bound_detail, bound_parsed, expanded_size, short_repr

    assert bound_detail("x" * DETAIL_MAX_CHARS) == "x" * DETAIL_MAX_CHARS
    cut = bound_detail("y" * 10**6)
    assert len(cut) == DETAIL_MAX_CHARS and cut.endswith(f"… [+{10**6 - DETAIL_MAX_CHARS} chars]")
    small = {"a": [1, 2.5, None, "ж"]}
    assert bound_parsed(small) is small
    big = ["é" * 1000] * 200  # 200 uses of one string: 400 kB of JSON text
    data = json.dumps(big, ensure_ascii=False).encode()
    assert bound_parsed(big) == {"truncated": True, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    bomb: list = ["x" * 100]
    for _ in range(30):
        bomb = [bomb, bomb]  # 2**30 strings written out, 31 lists in memory
    assert expanded_size(bomb) is None and expanded_size(bomb, 10**12) == 2**30 * 103 - 1
    assert bound_parsed(bomb) == {"truncated": True, "bytes": None, "sha256": None}
    cyclic: list = [1]
    cyclic.append(cyclic)
    assert expanded_size(cyclic, 10**9) is None and bound_parsed(cyclic)["bytes"] is None
    assert len(short_repr([["z" * 500] * 50] * 50)) <= 200


def _address_space() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))


def score_out_of_memory(kind: str, shared: str, extra_mb: int) -> tuple[str, dict, str]:
    """In a child process: load a benchmark, cap the address space ``extra_mb`` MiB above
    what it then uses (as the engine's scoring processes do), and score an answer within
    the parsers' own bounds that needs more than that. Returns ``(status, scores, detail)``."""
    import resource

    shared_dir = Path(shared)
    if kind == "sobhard":
        bench = SOBHard(SOBHardSettings(data_dir=shared_dir / "sobhard"))
        sample = {s.id: s for s in bench.load()}["1"]
        answer = "```json\n[" + ",".join(['{"a": [1, 2, 3, 4, 5, 6, 7, 8]}'] * 8000) + "]\n```"
    else:
        from evalkit.benchmarks.acebench import AceBench, AceBenchSettings

        bench = AceBench(AceBenchSettings(data_dir=shared_dir / "acebench", subsets=["normal_atom_list"]))
        sample = bench.load()[0]
        name = bench.reference_output(sample)[1:].split("(", 1)[0]
        answer = f"[{name}(x=[" + ",".join(["[0,0,0,0,0,0,0,0]"] * 14_000) + "])]"
    bench.score(sample, "warm-up")  # imports and caches loaded before the cap
    cap = _address_space() + extra_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    scored = bench.score(sample, answer)
    return scored.status, scored.scores, scored.detail or ""


@pytest.mark.parametrize("kind, extra_mb", [("sobhard", 2), ("acebench", 16)])
def test_running_out_of_memory_is_a_zero_with_a_limit_status(kind: str, extra_mb: int, shared_data_dir: Path) -> None:
    """A real MemoryError inside scoring (the address space capped just above what the
    loaded benchmark uses) never leaves score(): every score 0, status scorer_limit."""
    status, scores, detail = run_bounded(score_out_of_memory, kind, str(shared_data_dir), extra_mb)
    assert status == "scorer_limit" and set(scores.values()) == {0.0} and "memory" in detail, (status, detail)


# ---- SOBHard: YAML documents and reasoning tags ------------------------------------------
def yaml_answer(body: str) -> str:
    return f"```yaml\n{body}\n```"


def alias_bomb(levels: int, width: int = 9) -> str:
    """"Billion laughs": level 0 is ``width`` strings, each further level ``width`` aliases
    of the one below (9 levels of 9 are 431 bytes and 9**9 = 387 million strings)."""
    lines = ["a0: &a0 [" + ",".join(['"lol"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines)


YAML_IDS = ("15", "7", "16")  # transform (the tester's), diff, schema_gen: all answer in YAML


def test_yaml_cycles_fail_to_parse(shared_data_dir: Path) -> None:
    """A self-referencing alias is a parse failure (it used to loop forever in
    ``compare.scalars`` via ``transform.values_unchanged``)."""
    bodies = ["&a [*a]", "&a {x: *a}", "&a {<<: *a}", "a: &x [1, [2, {k: *x}]]", "- &a\n  - b\n  - *a", "&a [&b [*a, *b]]", "&a {? *a : 1}"]
    cases = [(sid, yaml_answer(b)) for sid in YAML_IDS for b in bodies]
    for (sid, text), r in zip(cases, scored_bounded(shared_data_dir, "sobhard", cases)):
        assert r["scores"]["sample_pass"] == 0.0 and r["status"] == "format_error", text
        assert r["checks"]["syn.parses_target"] is False and r["parsed"] is None, text
        assert "recursive document" in r["detail"], (text, r["detail"])


def test_yaml_alias_expansion_is_bounded(shared_data_dir: Path) -> None:
    """Alias bombs (nested, merge keys, one long string used many times) fail to parse
    before anything is built; the 9-level bomb used to end the run with MemoryError."""
    merge = "a: &a {" + ", ".join(f"k{i}: {i}" for i in range(60)) + "}\n"
    merge += "\n".join(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*{'a' if i == 0 else f'm{i - 1}'}"] * 8) + "]}" for i in range(6))
    long_string = "s: &s " + "x" * 5000 + "\nl: [" + ", ".join(["*s"] * 100) + "]"
    bodies = [alias_bomb(9), alias_bomb(8), alias_bomb(5), alias_bomb(3, 80), merge, long_string]
    assert len(alias_bomb(9)) == 431
    cases = [("15", yaml_answer(b)) for b in bodies] + [("16", yaml_answer(alias_bomb(9)))]
    for (_, text), r in zip(cases, scored_bounded(shared_data_dir, "sobhard", cases)):
        assert r["scores"]["sample_pass"] == 0.0 and r["checks"]["syn.parses_target"] is False, text[:80]
        assert "aliases expand the document beyond 262,144" in r["detail"], r["detail"]


def test_yaml_aliases_within_the_bound_still_load(shared_data_dir: Path) -> None:
    """Anchors are YAML: a document whose expansion stays within the bound parses as
    ``SafeLoader`` reads it (the alias becomes a copy of the anchored value)."""
    cases = [("15", yaml_answer("a: &x {k: [1, 2]}\nb: *x\nc: [*x, *x]")), ("15", yaml_answer(alias_bomb(3)))]
    first, bomb3 = scored_bounded(shared_data_dir, "sobhard", cases)
    assert first["checks"]["syn.parses_target"] is True
    assert first["parsed"] == {"a": {"k": [1, 2]}, "b": {"k": [1, 2]}, "c": [{"k": [1, 2]}, {"k": [1, 2]}]}
    assert bomb3["checks"]["syn.parses_target"] is True and len(bomb3["parsed"]["a2"]) == 9


def test_pathological_yaml_numbers_fail_before_conversion(shared_data_dir: Path) -> None:
    """Huge sexagesimal, binary, hex, octal, decimal ints and floats are refused before
    conversion (1M sexagesimal groups took 271 s of CPU); a body over the size limit is
    refused before parsing."""
    n = 120_000  # 240 kB: within the body limit, far over the number limit
    bodies = {
        "a: " + ":".join(["1"] * n): "a number of 239,999 characters",
        "a: 1:" + ":".join(["59"] * (n // 2)) + ".5": "a number of",
        "- 0b" + "1" * 200_000: "a number of 200,002 characters",
        "- 0x" + "f" * 200_000: "a number of",
        "- 0" + "7" * 200_000: "a number of",
        "- " + "9" * 200_000: "a number of",
        "- 1" + "0" * 200_000 + ".5e+3": "a number of",
        'a: !!int "' + ":".join(["1"] * n) + '"': "a number of",
        "a: " + ":".join(["59"] * 200) + ".5": "int too large to convert to float",  # within the number limit
        "a: " + ":".join(["1"] * 1_000_000): "over the 262,144-character limit",
    }
    cases = [("15", yaml_answer(b)) for b in bodies]
    for reason, r in zip(bodies.values(), scored_bounded(shared_data_dir, "sobhard", cases)):
        assert r["checks"]["syn.parses_target"] is False and r["scores"]["sample_pass"] == 0.0
        assert reason in r["detail"], (reason, r["detail"][:200])
    ok = scored_bounded(shared_data_dir, "sobhard", [("15", yaml_answer("a: 1:30:15\nb: " + "7" * 4000))])[0]
    assert ok["checks"]["syn.parses_target"] is True and ok["parsed"]["a"] == 5415


#: catastrophic patterns (each runs for hours under Python's backtracking re on the
#: gold document's keys and values) in every keyword that matches one


def test_unpaired_reasoning_tags_are_stripped_in_linear_time(shared_data_dir: Path) -> None:
    """§4 step 5 outside fences: 140,000 unpaired ``<think>`` tags (the pairing regex
    searched to the end of the text from each one: minutes) are removed as lone tags, and
    paired blocks still go."""
    fence = yaml_answer("a: 1")
    cases = [("15", "<think>" * 140_000 + "\n" + fence), ("15", "<thinking>x</thinking>" * 50_000 + "<reason>" * 50_000 + "\n" + fence)]
    for r in scored_bounded(shared_data_dir, "sobhard", cases):
        assert r["checks"]["pack.nothing_outside_fence"] is True and r["parsed"] == {"a": 1}, r["detail"]


# ---- SOBHard: schema patterns -------------------------------------------------------------
CATASTROPHIC = "(.|.|.|.)*#"


def _schema_variants(gold: dict) -> dict[str, tuple[dict, bool]]:
    """name -> (schema, does it validate the question's document?) for the pattern
    keywords, the keywords that consult patternProperties, and a dialect switch."""
    P = CATASTROPHIC
    return {
        "pattern": ({**gold, "items": {"additionalProperties": {"type": "string", "pattern": P}}}, False),
        "patternProperties": ({**gold, "items": {"patternProperties": {P: {"type": "null"}}}}, True),
        "additionalProperties": ({**gold, "items": {"patternProperties": {P: {}}, "additionalProperties": False}}, False),
        "unevaluated_2020": ({"$schema": "https://json-schema.org/draft/2020-12/schema", **gold,
                              "items": {"patternProperties": {P: {}}, "unevaluatedProperties": False}}, False),
        "unevaluated_2019": ({"$schema": "https://json-schema.org/draft/2019-09/schema", **gold,
                              "items": {"patternProperties": {P: {}}, "unevaluatedProperties": False}}, False),
        "draft4": ({"$schema": "http://json-schema.org/draft-04/schema#", **gold, "items": {"patternProperties": {P: {}}, "additionalProperties": False}}, False),
        "nested_dialect": ({**gold, "items": {"$schema": "http://json-schema.org/draft-07/schema#", "propertyNames": {"pattern": P}}}, False),
        "ref": ({**gold, "$defs": {"p": {"pattern": P}}, "items": {"additionalProperties": {"$ref": "#/$defs/p"}}}, False),
        "matching": ({**gold, "items": {"propertyNames": {"pattern": "^(a|a|[a-z_])*$"}}}, True),
        "cyrillic_word": ({**gold, "items": {"properties": {"category": {"pattern": "^[\\w &]+$"}}}}, True),
    }  # fmt: skip


def test_schema_patterns_run_in_linear_time(shared_data_dir: Path, schema_question) -> None:
    """``pattern``/``patternProperties`` (and ``additionalProperties``/
    ``unevaluatedProperties``, which consult them, in any dialect, also after a ``$schema``
    switch inside the schema) match in linear time, with Python's verdicts."""
    bench, sample = schema_question
    variants = _schema_variants(_reference_schema(bench, sample))
    cases = [(SCHEMA_GEN_ID, yaml_answer(json.dumps(schema))) for schema, _ in variants.values()]
    for (name, (_, validates)), r in zip(variants.items(), scored_bounded(shared_data_dir, "sobhard", cases)):
        assert r["checks"]["schema.validates_source"] is validates, (name, r["detail"])
        assert r["scores"]["sample_pass"] == 0.0  # pattern keywords are never allowed (schema.no_extra_keywords)


# ---- ACEBench: repetition and failure messages --------------------------------------------
def test_acebench_repetition_is_bounded_before_building(shared_data_dir: Path) -> None:
    """Repetition and other arithmetic in a decoded answer is bounded before its result
    is built: the tester's ``['x'*1048576]*1048576`` (a terabyte written out) and
    ``[[0]*1048576]*1048576`` (grew to the memory cap while the checker wrote its
    failure message) and variants are ``wrong_output_format``."""
    f = ACE_CALL
    texts = [
        f"[{f}(city='New York', dateRange=['x'*1048576]*1048576)]",
        f"[{f}(dateRange=[[0]*1048576]*1048576)]",
        f"[{f}(dateRange=[[[0]*1024]*1024]*1024)]",
        f"[{f}(dateRange='x'*2**20+'y'*2**20)]",
        f"[{f}(dateRange=[0]*600000, location=[0]*600000)]",
        f"[{f}(dateRange={{'startDate': [0]*2**19, 'endDate': [0]*2**19, 'x': [1]*2**19}})]",
        f"[{f}(dateRange='%s%s%s%s'%((['x'*300000],)*4))]",
        f"[{f}(dateRange=[2**65535]*100)]",
        f"[{f}(dateRange=" + "[" * 50 + "0" + "]*2" * 50 + ")]",
        f"[{f}(dateRange=[" + "0," * 150_000 + "])]",
    ]
    results = scored_bounded(shared_data_dir, "acebench", [(ACE_ID, t) for t in texts])
    for text, r in zip(texts, results):
        assert r["scores"] == {"accuracy": 0.0} and r["status"] == "format_error" and r["parsed"] is None, text[:80]
        assert r["detail"].startswith("wrong_output_format"), r["detail"]
        assert "too large" in r["detail"] or "character limit" in r["detail"], (text[:80], r["detail"])
    small = scored_bounded(shared_data_dir, "acebench", [(ACE_ID, f"[{f}(dateRange='ab'*3, location=[[0]*2]*2)]")])[0]
    assert small["status"] == "ok" and small["parsed"] == [{f: {"dateRange": "ababab", "location": [[0, 0], [0, 0]]}}]


def test_acebench_failure_messages_and_parsed_are_bounded(shared_data_dir: Path) -> None:
    """Answers that decode within the bounds but fail with large values: the detail quotes
    them cut (reprlib), and a parsed value over 256 KiB becomes the truncation marker."""
    import hashlib

    f = ACE_CALL
    texts = [
        f"[{f}(dateRange={{'startDate': 'x'*300000, 'endDate': '2028-01-01'}}, location={{'latitude': 37.9838, 'longitude': 23.7275}})]",
        f"[{f}(dateRange={{'startDate': '2023-01-01', 'endDate': '2028-01-01'}}, location={{'latitude': [[0]*1000]*1000, 'longitude': 23.7275}})]",
        f"[{f}(dateRange={{'startDate': '2023-01-01', 'endDate': '2028-01-01'}}, location={{'latitude': 37.9838, 'longitude': 23.7275}}, eclipseType=['y'*1000]*1000)]",
    ]
    results = scored_bounded(shared_data_dir, "acebench", [(ACE_ID, t) for t in texts])
    for text, r in zip(texts, results):
        assert r["scores"] == {"accuracy": 0.0} and r["status"] == "ok", (text[:80], r["detail"])
        assert len(r["detail"]) < 600, r["detail"]
        assert r["parsed"]["truncated"] is True, text[:80]
    assert "wrong value: expected '2023-01-01', got 'xxxxxxxxxxxx" in results[0]["detail"] and "..." in results[0]["detail"]
    assert "wrong value: expected 37.9838, got [[0, 0, 0, 0, 0, 0, 0, 0, ...], [0, " in results[1]["detail"], results[1]["detail"]
    assert "wrong type for parameter 'eclipseType'" in results[2]["detail"]
    expected = [{f: {"dateRange": {"startDate": "x" * 300000, "endDate": "2028-01-01"}, "location": {"latitude": 37.9838, "longitude": 23.7275}}}]
    data = json.dumps(expected, ensure_ascii=False).encode()
    assert results[0]["parsed"] == {"truncated": True, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# ---- KE: step ids ---------------------------------------------------------------------------
def test_ke_distinct_step_ids_are_bounded(shared_data_dir: Path) -> None:
    """An answer naming more than 10,000 distinct step ids scores 0 without building a
    list of all of them (10M ids made a 417 MB record); one id of a million digits keeps
    the record bounded; 10,000 ids exactly are still scored by §6."""
    gold = ["step_000", "step_004", "step_005"]
    over = ", ".join(f"step_{i}" for i in range(1_000_000))
    exactly = ", ".join(gold + [f"step_{i}" for i in range(1000, 1000 + 9_997)])
    long_id = "step_000, step_" + "7" * 1_000_000
    results = scored_bounded(shared_data_dir, "ke", [(KE_ID, over), (KE_ID, exactly), (KE_ID, exactly + ", step_99999"), (KE_ID, long_id)])
    r_over, r_exact, r_one_more, r_long = results
    assert r_over["scores"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "f05": 0.0}
    assert "more than 10,000 distinct step ids" in r_over["detail"] and len(r_over["parsed"]) == 10_000
    assert r_exact["scores"]["recall"] == 1.0 and r_exact["scores"]["precision"] == 3 / 10_000
    assert r_one_more["scores"]["f1"] == 0.0 and "more than 10,000" in r_one_more["detail"]
    assert r_long["scores"]["precision"] == 0.5 and r_long["parsed"]["truncated"] is True
    assert r_long["detail"].startswith("mode=chat TP=1 FP=1 FN=2 unknown_ids=step_777")
