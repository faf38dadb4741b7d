"""Loading the official ACEBench data layout (spec §1).

Layout: ``data_all/data_<lang>/data_<category>.json`` (JSON Lines despite the suffix) and
``data_all/data_<lang>/possible_answer/data_<category>.json``; prompt line *i* pairs with
answer line *i* and both carry the same ``id``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from evalkit.benchmarks.acebench.categories import ALL_CATEGORIES
from evalkit.errors import DataError
from evalkit.untrusted import MAX_JSONL_BYTES, read_objects, sha256_file


def resolve_layout(data_dir: Path) -> tuple[Path, Path]:
    """``(data_all, prompts_json)`` for a directory holding ``data_all/`` or being it.

    ``prompts.json`` is looked up in ``data_dir`` and then in its parent.
    Raises DataError when either is missing.
    """
    data_dir = Path(data_dir).expanduser()
    if (data_dir / "data_all").is_dir():
        data_all = data_dir / "data_all"
    elif (data_dir / "data_en").is_dir() or (data_dir / "data_zh").is_dir():
        data_all = data_dir
    else:
        raise DataError(f"ACEBench data not found: {data_dir} holds neither data_all/ nor data_en/ / data_zh/")
    for candidate in (data_dir / "prompts.json", data_dir.parent / "prompts.json", data_all.parent / "prompts.json"):
        if candidate.is_file():
            return data_all, candidate
    raise DataError(f"ACEBench prompts.json not found in {data_dir} or its parent")


def category_files(data_all: Path, language: str, category: str) -> tuple[Path, Path]:
    """Paths of the prompt file and the answer file of one category."""
    lang_dir = data_all / f"data_{language}"
    name = f"data_{category}.json"
    return lang_dir / name, lang_dir / "possible_answer" / name


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line_number, record)`` for every non-blank line; DataError naming file and line."""
    if not Path(path).is_file():
        raise DataError(f"ACEBench data file missing: {path}")
    return read_objects(path)


def load_category(data_all: Path, language: str, category: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(prompt_record, answer_record)`` pairs of one category in file order.

    Pairs by position and checks that ids match (spec §1.1); DataError otherwise.
    """
    prompt_path, answer_path = category_files(data_all, language, category)
    prompts = read_jsonl(prompt_path)
    answers = read_jsonl(answer_path)
    if not prompts:
        raise DataError(f"{prompt_path} holds no records (category {category} is empty)")
    if len(prompts) != len(answers):
        raise DataError(
            f"{prompt_path} has {len(prompts)} records but {answer_path} has {len(answers)}"
        )
    pairs = []
    for (p_line, prompt), (a_line, answer) in zip(prompts, answers):
        for key in ("id", "question", "function"):
            if key not in prompt:
                raise DataError(f"{prompt_path} line {p_line}: record lacks {key!r}")
        if not isinstance(prompt["id"], str) or not isinstance(prompt["question"], str):
            raise DataError(f"{prompt_path} line {p_line}: 'id' and 'question' must be strings")
        if not isinstance(prompt["function"], list) or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) for f in prompt["function"]
        ):
            raise DataError(f"{prompt_path} line {p_line}: 'function' must be a list of specs with a string 'name'")
        if category.startswith("agent_") and not _agent_fields_ok(prompt):
            raise DataError(
                f"{prompt_path} line {p_line}: 'involved_classes' must be a list of class names and 'initial_config' an object"
            )
        for key in ("id", "ground_truth"):
            if key not in answer:
                raise DataError(f"{answer_path} line {a_line}: record lacks {key!r}")
        if not _ground_truth_ok(category, answer["ground_truth"]):
            raise DataError(f"{answer_path} line {a_line}: 'ground_truth' has the wrong shape for {category}")
        if prompt["id"] != answer["id"]:
            raise DataError(
                f"{answer_path} line {a_line}: id {answer['id']!r} does not match "
                f"{prompt['id']!r} at {prompt_path} line {p_line}"
            )
        pairs.append((prompt, answer))
    return pairs


def _agent_fields_ok(prompt: dict[str, Any]) -> bool:
    """An agent record's environment fields (spec §5): ``involved_classes`` a list of
    strings, ``initial_config`` an object (each may be absent or null)."""
    classes, config = prompt.get("involved_classes"), prompt.get("initial_config")
    classes_ok = classes is None or (isinstance(classes, list) and all(isinstance(c, str) for c in classes))
    return classes_ok and (config is None or isinstance(config, dict))


def _ground_truth_ok(category: str, gt: Any) -> bool:
    """Shape of ``ground_truth`` per category family (spec §1.4)."""
    if category == "special_irrelevant":
        return isinstance(gt, str)
    if category.startswith("special_"):
        return isinstance(gt, dict) and bool(gt)
    if category.startswith("agent_"):
        return isinstance(gt, list) and all(isinstance(x, dict) for x in gt)
    if isinstance(gt, list):
        return bool(gt) and all(isinstance(x, dict) and x for x in gt)
    return isinstance(gt, dict) and bool(gt)


def language_fingerprint(data_all: Path, language: str) -> str:
    """The per-language data fingerprint of spec §1.7 (SHA-256 hex).

    For every category in §1.2 order: the prompt file then the answer file, each as the
    line ``<path relative to data_all>\\t<sha256 of the bytes>\\n``; the concatenation is hashed.
    """
    lines = []
    for category in ALL_CATEGORIES:
        for path in category_files(data_all, language, category):
            digest = sha256_file(path, MAX_JSONL_BYTES, root=data_all, what="an ACEBench data file")
            lines.append(f"{path.relative_to(data_all).as_posix()}\t{digest}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()
