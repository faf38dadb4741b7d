"""ACEBench checkers: the §4.1 edge-case table, §4.3 special rules and pitfalls 6-11, 14, 25, 34."""

from __future__ import annotations

from typing import Any

import pytest

from evalkit.benchmarks.acebench.checker import check_special, norm, score_normal
from evalkit.types import Sample


def schema(ptype: str, extra: dict[str, Any] | None = None, required: list[str] | None = None, name: str = "f") -> list[dict]:
    """A one-function list whose parameter ``p`` has schema type ``ptype``."""
    prop = {"type": ptype, "description": "p"}
    prop.update(extra or {})
    return [{"name": name, "description": "d", "parameters": {"type": "object", "properties": {"p": prop, "q": {"type": "string"}}, "required": required if required is not None else ["p"]}}]


def passes(functions: list[dict], text: str, ground_truth: Any) -> bool:
    return score_normal(functions, text, ground_truth)[0].passed


# spec §4.1 "Edge cases to pin with tests": (schema type, extra schema, model value source, expected, verdict)
EDGE_TABLE = [
    ("boolean", None, "False", True, True),
    ("boolean", None, "'true'", False, True),
    ("boolean", None, "'True'", False, False),
    ("integer", None, "7", 5, True),
    ("integer", None, "6.0", 5, False),
    ("integer", None, "True", 1, True),
    ("integer", None, "'5'", 5, False),
    ("number", None, "2.5", 5, False),
    ("number", None, "5.5", 2.5, True),
    ("number", None, "5", 2.5, True),
    ("string", None, "'Athens, Greece'", "athens", True),
    ("string", None, "'2023/08/01'", "2023-08-01", True),
    ("string", None, "'20230801'", "2023-08-01", True),
    ("string", None, "'2023-08-01T10:00'", "2023-08-01 10:00", False),
    ("string", None, "'X（Y）'", "X(Y)", False),
    ("string", None, "7", 5, True),
    ("string", None, "'true'", "true", False),
    ("string", None, "'false'", "anything", False),
    ("string", None, "'false'", False, True),
    ("array", {"items": {"type": "string"}}, "['b', 'a']", ["a", "b"], False),
    ("array", {"items": {"type": "string"}}, "['A-B', 'c d']", ["ab", "CD"], True),
    ("array", {"items": {"type": "string"}}, "['a']", [], False),
    ("object", None, "{'x': 'ab', 'y': 15}", {"x": "a", "y": 5}, True),
    ("object", None, "{}", {}, False),
    ("array", None, "['a']", ["a"], False),
    ("array", None, "[{'a': 1}]", [{"a": 1}], True),
]


@pytest.mark.parametrize(("ptype", "extra", "source", "expected", "verdict"), EDGE_TABLE)
def test_edge_case_table(ptype, extra, source, expected, verdict):
    assert passes(schema(ptype, extra), f"[f(p={source})]", {"f": {"p": expected}}) is verdict


def test_edge_object_missing_optional_key_fails():
    functions = [{"name": "f", "parameters": {"type": "object", "properties": {"p": {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}, "required": ["x"]}}, "required": ["p"]}}]
    assert passes(functions, "[f(p={'x': 'a', 'y': 'b'})]", {"f": {"p": {"x": "a", "y": "b"}}})
    assert not passes(functions, "[f(p={'x': 'a'})]", {"f": {"p": {"x": "a", "y": "b"}}})


def test_edge_extra_parameter_known_to_schema_fails():
    assert not passes(schema("string"), "[f(p='a', q='b')]", {"f": {"p": "a"}})


def test_pitfall_06_strict_decoding_is_wrong_output_format():
    functions, gt = schema("string"), {"f": {"p": "b"}}
    for text in ["f(p='b')", "Sure! [f(p='b')]", "```\n[f(p='b')]\n```", '{"name": "f", "arguments": {"p": "b"}}']:
        verdict, calls = score_normal(functions, text, gt)
        assert calls is None and not verdict.passed and verdict.detail.startswith("wrong_output_format")
    verdict, calls = score_normal(functions, "[Api()]", gt)
    assert calls == [{"Api": {}}] and not verdict.passed


def test_pitfall_07_optional_omitted_passes_required_omitted_fails():
    functions = schema("string")
    gt = {"f": {"p": "a", "q": "b"}}
    assert passes(functions, "[f(p='a')]", gt)  # q is optional
    assert not passes(functions, "[f(q='b')]", gt)  # p is required
    assert not passes(functions, "[f(p='a', q='b')]", {"f": {"p": "a"}})  # q not in expected args


def test_pitfall_08_expected_type_disagreeing_with_schema_skips_value():
    assert passes(schema("string"), "[f(p=7)]", {"f": {"p": 5}})
    assert not passes(schema("string"), "[f(p='7')]", {"f": {"p": "5"}})


def test_pitfall_09_booleans_and_numbers_are_only_type_checked():
    gt = {"f": {"p": True}}
    assert passes(schema("boolean"), "[f(p=False)]", gt)
    assert not passes(schema("boolean"), "[f(p=3)]", gt)
    assert passes(schema("boolean"), "[f(p='true')]", gt)
    assert not passes(schema("boolean"), "[f(p='True')]", gt)
    assert passes(schema("integer"), "[f(p=999)]", {"f": {"p": 1}})


def test_pitfall_10_strings_normalised_substring_lists_exact_order():
    assert passes(schema("string"), "[f(p='Athens, Greece')]", {"f": {"p": "athens"}})
    assert not passes(schema("string"), "[f(p='Athens')]", {"f": {"p": "Athens, Greece"}})
    arr = schema("array", {"items": {"type": "string"}})
    assert passes(arr, "[f(p=['x', 'y'])]", {"f": {"p": ["x", "y"]}})
    assert not passes(arr, "[f(p=['y', 'x'])]", {"f": {"p": ["x", "y"]}})
    assert norm("A-B_c.d/e*f^g, H'") == 'abcdefgh"'


def test_pitfall_11_parallel_calls_any_order_exact_count():
    functions = schema("string", name="book")
    gt = {"book": {"p": "a"}, "book_1": {"p": "b"}}
    assert passes(functions, "[book(p='a'), book(p='b')]", gt)
    assert passes(functions, "[book(p='b'), book(p='a')]", gt)
    assert not passes(functions, "[book(p='a'), book(p='b'), book(p='c')]", gt)
    assert not passes(functions, "[book(p='a')]", gt)
    assert not passes(functions, "[book(p='a'), book(p='c')]", gt)


def test_pitfall_25_whitespace_deleted_inside_object_lists():
    functions = schema("object")
    gt = {"f": {"p": {"tags": ["New York"]}}}
    assert not passes(functions, "[f(p={'tags': ['New York']})]", gt)
    assert passes(functions, "[f(p={'tags': ['New\\x20York']})]", gt)


def test_schema_key_lookup_is_substring_of_raw_key():
    # the key's suffix is stripped for the name, but the schema is the FIRST function whose
    # name is contained in the raw key (zh normal_similar_api_2/_22 are unsatisfiable this way)
    g = {"name": "g", "parameters": {"type": "object", "properties": {"p": {"type": "integer"}}, "required": ["p"]}}
    g_2 = {"name": "g_2", "parameters": {"type": "object", "properties": {"p": {"type": "integer"}}, "required": ["p"]}}
    gt = {"g_2": {"p": 1}}
    assert passes([g, g_2], "[g(p=5)]", gt)
    verdict, _ = score_normal([g_2, g], "[g(p=5)]", gt)
    assert not verdict.passed and "wrong function name" in verdict.detail
    assert not passes([g_2, g], "[g_2(p=5)]", gt)


def test_unknown_schema_type_fails_with_detail_instead_of_crashing():
    verdict, _ = score_normal(schema("datetime"), "[f(p='x')]", {"f": {"p": "x"}})
    assert not verdict.passed and "upstream scorer would crash" in verdict.detail


def test_think_block_is_dropped_before_decoding():
    assert passes(schema("string"), "<think>[f(p='zzz')]</think>\n[f(p='a')]", {"f": {"p": "a"}})
    assert check_special("special_irrelevant", "<think>the limitations of the function</think>no", "x").passed is False


def test_multiple_candidates_any_passes():
    gt = [{"f": {"p": "a"}}, {"f": {"p": "b"}}]
    assert passes(schema("string"), "[f(p='b')]", gt)
    assert not passes(schema("string"), "[f(p='c')]", gt)


# ---- special ---------------------------------------------------------------------------------


def test_special_rules():
    gt = {"Api": ["a ", "b"]}
    assert check_special("special_incomplete", "Missing necessary parameters (a , b) for the api (Api)", gt).passed
    assert not check_special("special_incomplete", "missing necessary parameters (a , b) for the api (Api)", gt).passed
    assert not check_special("special_incomplete", "Missing necessary parameters (a , b)", gt).passed
    err = {"date": ["12-Feb"]}
    assert check_special("special_error_param", "[f()] There is incorrect value (12-Feb)", err).passed
    assert not check_special("special_error_param", "There is incorrect value (12-feb)", err).passed
    assert check_special("special_irrelevant", "Due to the limitations of the function, no.", "x").passed
    assert not check_special("special_irrelevant", "Due to The limitations of the function", "x").passed


def _sample(loaded, rid: str) -> Sample:
    return loaded.by_id[rid]


def test_pitfall_14_zh_special_answers_need_english_phrases(acebench_zh):
    bench = acebench_zh.bench
    sample = _sample(acebench_zh, "zh/special_incomplete_3")
    reference = bench.reference_output(sample)
    assert bench.score(sample, reference).scores["accuracy"] == 1.0
    chinese = reference.replace("Missing necessary parameters", "缺少必要参数")
    assert bench.score(sample, chinese).scores["accuracy"] == 0.0
    irr = _sample(acebench_zh, "zh/special_irrelevant_0")
    assert bench.score(irr, "由于功能限制，我无法解决这个问题。").scores["accuracy"] == 0.0
    assert bench.score(irr, bench.reference_output(irr)).scores["accuracy"] == 1.0


def test_pitfall_34_incomplete_names_matched_verbatim_with_stray_spaces(acebench_en):
    bench = acebench_en.bench
    sample = _sample(acebench_en, "en/special_incomplete_0")
    names = sample.data["answer"]["ground_truth"]["RealEstateManager_manageProperty"]
    assert names == ["propertyDetails ", " rentalManagement ", " maintenanceScheduling"]
    verbatim = f"Missing necessary parameters ({','.join(names)}) for the api (RealEstateManager_manageProperty)"
    trimmed = "Missing necessary parameters (propertyDetails, rentalManagement, maintenanceScheduling) for the api (RealEstateManager_manageProperty)"
    assert bench.score(sample, verbatim).scores["accuracy"] == 1.0
    assert bench.score(sample, trimmed).scores["accuracy"] == 0.0


def test_score_statuses_and_parsed(acebench_en):
    bench = acebench_en.bench
    sample = _sample(acebench_en, "en/normal_atom_bool_0")
    bad = bench.score(sample, "I would call the API.")
    assert (bad.status, bad.parsed, bad.scores) == ("format_error", None, {"accuracy": 0.0})
    assert bad.detail.startswith("wrong_output_format")
    good = bench.score(sample, bench.reference_output(sample))
    assert good.status == "ok" and good.scores == {"accuracy": 1.0} and good.detail is None
    assert isinstance(good.parsed, list) and isinstance(good.parsed[0], dict)
    odd = bench.score(sample, "[f(a=(1, 2), b={1: b'x'}, **k, c=1j, d={1}|{2})]")
    assert odd.status == "ok" and odd.parsed == [{"f": {"a": [1, 2], "b": {"1": "b'x'"}, "None": "k", "c": "1j", "d": [1, 2]}}]


@pytest.mark.parametrize(
    "text",
    ["", " ", "\x00", "[" * 5000, "[f(a=2**10**10)]", "[f(a='a'*10**12)]", "[f(a=1)]" * 3, "</think>", "[f(**{'a': 1})]", "{[f()]: 1}", "\ud800"],
)
def test_score_never_raises(acebench_en, text):
    for rid in ["en/normal_atom_object_deep_0", "en/normal_single_turn_parallel_function_3", "en/special_error_param_0", "en/special_incomplete_0"]:
        result = acebench_en.bench.score(acebench_en.by_id[rid], text)
        assert result.scores["accuracy"] == 0.0
