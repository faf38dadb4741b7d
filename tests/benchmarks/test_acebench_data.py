"""ACEBench settings, data loading, fingerprints (spec §1.7) and prompts (spec §2, pitfalls 4-5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalkit.benchmarks.acebench import AceBench, AceBenchSettings
from evalkit.benchmarks.acebench.categories import ALL_CATEGORIES, DEFAULT_CATEGORIES
from evalkit.benchmarks import get_benchmark_class
from evalkit.errors import DataError
from evalkit.types import sha256_hex

SPEC_FINGERPRINTS = {
    "en": "d879d5c76149e46c2e01966cbcee0f510e04a59dd48cbbe8bfdd39664ce22ede",
    "zh": "21d05958b6fc593d1910ed75702e5c8cef209b0fa3d6edfd0647f01a95bcd598",
}

# spec §2.2 "Fully rendered messages": record -> ((system len, digest), (user len, digest))
RENDERED = {
    ("en", "normal_single_turn_single_function_0"): ((4228, "2d3725524ea01a5e"), (255, "c08386593f56ebd3")),
    ("en", "normal_multi_turn_user_adjust_0_0"): ((3482, "b5b0fd67bc540a9b"), (432, "867381e7e1aa143a")),
    ("en", "normal_preference_0"): ((7235, "e33e778544ba96e6"), (330, "2ffa512151b4391a")),
    ("en", "special_incomplete_0"): ((10122, "fe808c7a29b63ae7"), (156, "9b8a8447f2504792")),
    ("zh", "normal_single_turn_single_function_0"): ((2265, "d92d71c5001fcecb"), (81, "f5e7d5881cf90490")),
    ("zh", "normal_multi_turn_user_adjust_0_0"): ((1838, "92537dff835adbcd"), (398, "ba0ead6624c754eb")),
    ("zh", "normal_preference_0"): ((4136, "f114d7fa33c8fea4"), (91, "130718c649392107")),
    ("zh", "special_incomplete_0"): ((2981, "3c2deccec122f921"), (52, "c7abd0ae1965a3f3")),
}


def test_registered_with_contract_attributes():
    cls = get_benchmark_class("acebench")
    assert cls is AceBench
    assert cls.headline_metric == "overall"
    assert cls.supported_shots == (0,)
    assert len(cls.all_subsets) == 17 and cls.all_subsets[-2:] == ("agent_multi_step", "agent_multi_turn")
    assert cls.default_subsets == DEFAULT_CATEGORIES == ALL_CATEGORIES and len(DEFAULT_CATEGORIES) == 17


def test_settings_reject_unknown_category_listing_valid_names():
    with pytest.raises(ValidationError) as err:
        AceBenchSettings(subsets=["normal_atom_boolean"])
    assert "normal_atom_bool" in str(err.value) and "special_irrelevant" in str(err.value)


def test_settings_accept_agent_categories():
    settings = AceBenchSettings(subsets=["normal_atom_bool", "agent_multi_turn"])
    assert settings.subsets == ["normal_atom_bool", "agent_multi_turn"]
    assert "agent_multi_turn" in AceBench.default_subsets and len(AceBench.default_subsets) == 17


def test_settings_forbid_extra_keys_and_default_language():
    with pytest.raises(ValidationError):
        AceBenchSettings(languages="en")
    settings = AceBenchSettings()
    assert settings.language == "en" and settings.data_dir is None
    assert "e6db74b735ead22c24f27367606a9408573b848f" in settings.source_url


def test_load_counts_order_and_ids(acebench_en, acebench_zh):
    assert len(acebench_en.samples) == 823 + 150
    assert len(acebench_zh.samples) == 817 + 150
    first, last = acebench_en.samples[0], acebench_en.samples[-1]
    assert first.id == "en/normal_single_turn_single_function_0" and first.subset == "normal_single_turn_single_function"
    assert last.id == "en/special_irrelevant_49"
    order = [s.subset for s in acebench_en.samples]
    assert sorted(set(order), key=order.index) == list(DEFAULT_CATEGORIES)[:15]
    adjust = [s for s in acebench_zh.samples if s.subset == "normal_multi_turn_user_adjust"]
    assert len(adjust) == 116
    sample = acebench_en.by_id["en/normal_atom_bool_3"]
    assert sample.data["language"] == "en"
    assert sample.data["prompt"]["id"] == sample.data["answer"]["id"] == "normal_atom_bool_3"


def test_language_all_loads_en_then_zh(acebench_dir):
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language="all", subsets=["special_irrelevant"]))
    ids = [s.id for s in bench.load()]
    assert len(ids) == 100 and ids[0] == "en/special_irrelevant_0" and ids[50] == "zh/special_irrelevant_0"
    assert set(bench.data_fingerprints()) == {"acebench_files/en", "acebench_files/zh"}


def test_data_dir_may_be_data_all_itself(acebench_dir):
    bench = AceBench(AceBenchSettings(data_dir=acebench_dir / "data_all", subsets=["normal_atom_enum"]))
    assert len(bench.load()) == 50


def test_fingerprints_equal_spec_digests(acebench_dir):
    for lang, digest in SPEC_FINGERPRINTS.items():
        bench = AceBench(AceBenchSettings(data_dir=acebench_dir, language=lang))
        assert bench.data_fingerprints() == {f"acebench_files/{lang}": digest}


def _copy_layout(acebench_dir: Path, tmp_path: Path, category: str) -> Path:
    """A minimal data dir (one category, both files) plus prompts.json in tmp_path."""
    root = tmp_path / "ace"
    for rel in (f"data_all/data_en/data_{category}.json", f"data_all/data_en/possible_answer/data_{category}.json"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(acebench_dir / rel, root / rel)
    shutil.copy(acebench_dir / "prompts.json", root / "prompts.json")
    return root


def test_mismatched_ids_raise_data_error_naming_file_and_line(acebench_dir, tmp_path):
    root = _copy_layout(acebench_dir, tmp_path, "normal_atom_bool")
    answers = root / "data_all/data_en/possible_answer/data_normal_atom_bool.json"
    lines = answers.read_text(encoding="utf-8").splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    answers.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bench = AceBench(AceBenchSettings(data_dir=root, subsets=["normal_atom_bool"]))
    with pytest.raises(DataError, match=r"data_normal_atom_bool\.json line 3"):
        bench.load()


def test_malformed_json_raises_data_error_naming_file_and_line(acebench_dir, tmp_path):
    root = _copy_layout(acebench_dir, tmp_path, "normal_atom_enum")
    prompts = root / "data_all/data_en/data_normal_atom_enum.json"
    lines = prompts.read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:-5]
    prompts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bench = AceBench(AceBenchSettings(data_dir=root, subsets=["normal_atom_enum"]))
    with pytest.raises(DataError, match=r"data_normal_atom_enum\.json:5"):
        bench.load()


def test_missing_data_dir_raises_data_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        AceBenchSettings(data_dir=tmp_path / "nowhere")
    empty = tmp_path / "empty"
    empty.mkdir()
    bench = AceBench(AceBenchSettings(data_dir=empty))
    with pytest.raises(DataError):
        bench.load()


def test_tampered_template_fails_digest_check(acebench_dir, tmp_path):
    root = _copy_layout(acebench_dir, tmp_path, "normal_atom_bool")
    doc = json.loads((root / "prompts.json").read_text(encoding="utf-8"))
    key = "model_inference/prompt_en.py::SYSTEM_PROMPT_FOR_NORMAL_DATA_EN"
    doc["prompts"][key] = doc["prompts"][key].rstrip() + "\n"  # e.g. trailing spaces stripped
    (root / "prompts.json").write_text(json.dumps(doc), encoding="utf-8")
    bench = AceBench(AceBenchSettings(data_dir=root, subsets=["normal_atom_bool"]))
    with pytest.raises(DataError, match="SYSTEM_PROMPT_FOR_NORMAL_DATA_EN"):
        bench.load()


@pytest.mark.parametrize(("lang", "record"), sorted(RENDERED))
def test_pitfall_04_rendered_prompts_match_spec_digests(acebench_en, acebench_zh, lang, record):
    loaded = acebench_en if lang == "en" else acebench_zh
    request = loaded.bench.build(loaded.by_id[f"{lang}/{record}"], 0)
    system, user = request.messages
    assert (system["role"], user["role"]) == ("system", "user")
    got = ((len(system["content"]), sha256_hex(system["content"])[:16]), (len(user["content"]), sha256_hex(user["content"])[:16]))
    assert got == RENDERED[(lang, record)]


def test_pitfall_05_no_tool_schemas_and_whole_history_in_one_user_message(acebench_en):
    sample = acebench_en.by_id["en/normal_multi_turn_user_adjust_0_1"]
    request = acebench_en.bench.build(sample, 0)
    assert request.prompt is None and request.params == {}
    assert [m["role"] for m in request.messages] == ["system", "user"]
    assert all(set(m) == {"role", "content"} for m in request.messages)
    assert request.messages[1]["content"].endswith(sample.data["prompt"]["question"])
    assert sample.data["prompt"]["question"].count("user:") >= 2


def test_prompt_fingerprint_depends_on_language(acebench_en, acebench_zh):
    en, zh = acebench_en.bench.prompt_fingerprint(), acebench_zh.bench.prompt_fingerprint()
    assert len(en) == 64 and en != zh
    data_dir = acebench_en.bench.settings.data_dir
    assert en == AceBench(AceBenchSettings(data_dir=data_dir, subsets=acebench_en.bench.settings.subsets)).prompt_fingerprint()
    # the default selection (all 17) also covers the agent templates
    assert en != AceBench(AceBenchSettings(data_dir=data_dir)).prompt_fingerprint()


# spec §2.2 template table (len / first 16 hex of SHA-256), independent of the code's copy
SPEC_TEMPLATES = {
    "SYSTEM_PROMPT_FOR_NORMAL_DATA": ((1476, "c142194cbe23c7f7"), (604, "a90208488db66521")),
    "SYSTEM_PROMPT_FOR_PREFERENCE_DATA": ((1521, "bc070531e2cb568b"), (629, "3ddd17adc41f39df")),
    "SYSTEM_PROMPT_FOR_SPECIAL_DATA": ((2569, "7313cee594b6cabf"), (1041, "3a34bb6e77bc7afd")),
    "USER_PROMPT": ((37, "4a8681d9f87c02cc"), (20, "ea7488fbe4728cd8")),
}


@pytest.mark.parametrize("symbol", sorted(SPEC_TEMPLATES))
def test_shared_templates_match_spec_digests(acebench_dir, symbol):
    prompts = json.loads((acebench_dir / "prompts.json").read_text(encoding="utf-8"))["prompts"]
    for lang, expected in zip(("en", "zh"), SPEC_TEMPLATES[symbol]):
        text = prompts[f"model_inference/prompt_{lang}.py::{symbol}_{lang.upper()}"]
        assert (len(text), sha256_hex(text)[:16]) == expected


def test_every_shared_template_with_a_digest_verifies(acebench_dir):
    from evalkit.benchmarks.acebench.prompts import TEMPLATE_DIGESTS, PromptTemplates

    templates = PromptTemplates(acebench_dir / "prompts.json")
    assert len(TEMPLATE_DIGESTS) == 24
    for key in TEMPLATE_DIGESTS:
        assert templates.get(key)


def test_category_list_is_complete():
    assert len(ALL_CATEGORIES) == 17 and len(set(ALL_CATEGORIES)) == 17
