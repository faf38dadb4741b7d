"""Fetching the pinned ACEBench archive and deriving ``prompts.json`` from it.

The archive (GitHub tarball of ACEBench/ACEBench) is downloaded with httpx into the cache
directory; ``data_all/`` and ``LICENSE.md`` are extracted, and ``prompts.json`` is built by
*parsing* the prompt modules with :mod:`ast` (they are never imported or executed).
Everything is assembled in a temporary directory that is renamed into place at the end.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from evalkit.errors import DataError

#: modules whose top-level string constants are the prompt templates (spec §2.1)
PROMPT_MODULES: tuple[str, ...] = (
    "model_inference/prompt_en.py",
    "model_inference/prompt_zh.py",
    "model_inference/multi_step/APIModel_agent.py",
    "model_inference/multi_turn/APIModel_agent.py",
    "model_inference/multi_turn/APIModel_user.py",
)
#: the user simulator's opening line lives inside this method (spec §2.1)
USER_SIM_MODULE = "model_inference/multi_turn/APIModel_user.py"
USER_SIM_CLASS, USER_SIM_METHOD = "APIUSER", "get_init_prompt"

PROMPTS_NOTE = "String constants read (not executed) from the official prompt modules at that commit, keyed path::SYMBOL."


def cache_entry(cache_dir: Path, source_url: str) -> Path:
    """The cache directory of one source URL."""
    return Path(cache_dir).expanduser() / hashlib.sha256(source_url.encode("utf-8")).hexdigest()[:16]


def ensure_downloaded(cache_dir: Path, source_url: str, timeout_s: float = 120.0) -> Path:
    """A directory holding ``data_all/`` and ``prompts.json`` (downloaded on first use).

    Raises DataError (one line, suggesting ``benchmark.data_dir``) when the archive cannot
    be fetched or does not have the expected shape.
    """
    target = cache_entry(cache_dir, source_url)
    if (target / "data_all").is_dir() and (target / "prompts.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    archive = _fetch(source_url, timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        build_from_archive(archive, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "prompts.json").is_file():  # not a concurrent winner: a real error
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fetch(url: str, timeout_s: float) -> bytes:
    try:
        import httpx
    except ImportError:  # pragma: no cover - httpx is a declared dependency
        raise DataError("httpx is needed to download ACEBench; pass benchmark.data_dir=<local copy> instead") from None
    try:
        response = httpx.get(url, follow_redirects=True, timeout=timeout_s)
        response.raise_for_status()
        return response.content
    except httpx.HTTPError as exc:
        raise DataError(
            f"cannot download ACEBench from {url} ({type(exc).__name__}: {exc}); "
            "pass benchmark.data_dir=<dir holding data_all/ and prompts.json> to use a local copy"
        ) from None


def build_from_archive(archive: bytes, dest: Path) -> None:
    """Extract ``data_all/`` + ``LICENSE.md`` of a GitHub tarball and write ``prompts.json`` to ``dest``."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(archive), mode="r:*")
    except (tarfile.TarError, OSError) as exc:
        raise DataError(f"ACEBench archive is not a readable tar file: {exc}") from None
    sources: dict[str, str] = {}
    top: str | None = None
    n_data = 0
    with tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if len(parts) < 2 or not member.isfile() or any(p in ("..", "") for p in parts):
                continue
            top = top or parts[0]
            rel = PurePosixPath(*parts[1:])
            rel_text = rel.as_posix()
            if rel.parts[0] == "data_all" or rel_text == "LICENSE.md" or rel_text in PROMPT_MODULES:
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                content = handle.read()
                if rel_text in PROMPT_MODULES:
                    sources[rel_text] = content.decode("utf-8")
                    continue
                out = dest.joinpath(*rel.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(content)
                n_data += rel.parts[0] == "data_all"
    if n_data == 0:
        raise DataError("ACEBench archive holds no data_all/ directory")
    missing = [m for m in PROMPT_MODULES if m not in sources]
    if missing:
        raise DataError(f"ACEBench archive lacks the prompt modules {missing}")
    commit = top.rsplit("-", 1)[-1] if top and "-" in top else (top or "")
    doc = {
        "source": "ACEBench/ACEBench",
        "commit": commit,
        "license": "MIT (see LICENSE.md)",
        "note": PROMPTS_NOTE,
        "prompts": extract_prompts(sources),
    }
    (dest / "prompts.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def extract_prompts(sources: dict[str, str]) -> dict[str, str]:
    """``{path::SYMBOL: text}`` from module sources, by parsing them (never executing).

    Takes every top-level ``NAME = "<string constant>"`` of each module, plus the user
    simulator's opening lines (``APIUSER.get_init_prompt``: the ``content`` of the ``user``
    message in the branch of each ``self.language == "<lang>"`` test) under
    ``<path>::APIUSER.get_init_prompt.first_user_turn.<lang>``.
    """
    prompts: dict[str, str] = {}
    for path in PROMPT_MODULES:
        try:
            tree = ast.parse(sources[path])
        except SyntaxError as exc:
            raise DataError(f"ACEBench prompt module {path} does not parse: {exc.msg}") from None
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                prompts[f"{path}::{node.targets[0].id}"] = node.value.value
        if path == USER_SIM_MODULE:
            for lang, text in _opening_lines(tree).items():
                prompts[f"{path}::{USER_SIM_CLASS}.{USER_SIM_METHOD}.first_user_turn.{lang}"] = text
    return prompts


def _opening_lines(tree: ast.Module) -> dict[str, str]:
    method = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == USER_SIM_CLASS:
            method = next(
                (n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == USER_SIM_METHOD), None
            )
    if method is None:
        raise DataError(f"{USER_SIM_MODULE}: {USER_SIM_CLASS}.{USER_SIM_METHOD} not found")
    found: dict[str, str] = {}
    for node in ast.walk(method):
        if not isinstance(node, ast.If):
            continue
        lang = _language_of_test(node.test)
        if lang is None:
            continue
        for inner in node.body:
            for sub in ast.walk(inner):
                text = _user_message_content(sub)
                if text is not None and lang not in found:
                    found[lang] = text
    if not found:
        raise DataError(f"{USER_SIM_MODULE}: no opening user line found in {USER_SIM_CLASS}.{USER_SIM_METHOD}")
    return found


def _language_of_test(test: ast.AST) -> str | None:
    """``"zh"`` for a test ``<something>.language == "zh"``; else None."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "language"
        and isinstance(test.comparators[0], ast.Constant)
        and isinstance(test.comparators[0].value, str)
    ):
        return test.comparators[0].value
    return None


def _user_message_content(node: ast.AST) -> str | None:
    """The ``content`` string of a dict display ``{"role": "user", "content": "<text>"}``."""
    if not isinstance(node, ast.Dict):
        return None
    items: dict[Any, Any] = {}
    for k, v in zip(node.keys, node.values):
        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
            items[k.value] = v.value
    if items.get("role") == "user" and isinstance(items.get("content"), str):
        return items["content"]
    return None
