"""Prompt templates (read at run time from ``prompts.json``) and message assembly (spec §2).

The template texts are never part of evalkit's code: ``prompts.json`` maps
``<upstream path>::<symbol>`` to the text. Each template used is verified against the spec's
§2.2 digest (length + first 16 hex of SHA-256) before use.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from evalkit.errors import DataError
from evalkit.untrusted import read_json

#: the largest ``prompts.json`` read (bytes; the official one is under 100 KiB)
MAX_PROMPTS_BYTES = 16 * 2**20

_EN = "model_inference/prompt_en.py::"
_ZH = "model_inference/prompt_zh.py::"
_MS = "model_inference/multi_step/APIModel_agent.py::"
_MT = "model_inference/multi_turn/APIModel_agent.py::"
_US = "model_inference/multi_turn/APIModel_user.py::"

#: spec §2.2: key -> (length in characters, first 16 hex of SHA-256 of the UTF-8 text)
TEMPLATE_DIGESTS: dict[str, tuple[int, str]] = {
    _EN + "SYSTEM_PROMPT_FOR_NORMAL_DATA_EN": (1476, "c142194cbe23c7f7"),
    _ZH + "SYSTEM_PROMPT_FOR_NORMAL_DATA_ZH": (604, "a90208488db66521"),
    _EN + "SYSTEM_PROMPT_FOR_PREFERENCE_DATA_EN": (1521, "bc070531e2cb568b"),
    _ZH + "SYSTEM_PROMPT_FOR_PREFERENCE_DATA_ZH": (629, "3ddd17adc41f39df"),
    _EN + "SYSTEM_PROMPT_FOR_SPECIAL_DATA_EN": (2569, "7313cee594b6cabf"),
    _ZH + "SYSTEM_PROMPT_FOR_SPECIAL_DATA_ZH": (1041, "3a34bb6e77bc7afd"),
    _EN + "USER_PROMPT_EN": (37, "4a8681d9f87c02cc"),
    _ZH + "USER_PROMPT_ZH": (20, "ea7488fbe4728cd8"),
    _EN + "TRAVEL_PROMPT_EN": (5313, "684546ddf9ed98c0"),
    _ZH + "TRAVEL_PROMPT_ZH": (1544, "5b7e2e8940eb299a"),
    _EN + "BASE_PROMPT_EN": (2952, "be5cdb5572ab4ab2"),
    _ZH + "BASE_PROMPT_ZH": (908, "153e877f61316cdd"),
    _MS + "MULTI_TURN_AGENT_PROMPT_SYSTEM_EN": (1921, "c6d52166e4945564"),
    _MS + "MULTI_TURN_AGENT_PROMPT_SYSTEM_ZH": (788, "639da606b6f7aeaf"),
    _MS + "MULTI_TURN_AGENT_PROMPT_USER_EN": (102, "b14b658496992ac7"),
    _MS + "MULTI_TURN_AGENT_PROMPT_USER_ZH": (50, "c021aebef5731743"),
    _MT + "MULTI_TURN_AGENT_PROMPT_SYSTEM_EN": (1496, "c403b5036b9f723e"),
    _MT + "MULTI_TURN_AGENT_PROMPT_SYSTEM_ZH": (523, "6eaa5c8fc22dc3ae"),
    _MT + "MULTI_TURN_AGENT_PROMPT_USER_EN": (89, "a2f9ff2c37df3c7e"),
    _MT + "MULTI_TURN_AGENT_PROMPT_USER_ZH": (48, "573f496d9901bfb1"),
    _US + "SYSTEM_PROMPT_BASE_EN": (1278, "73e97abba93c6f2d"),
    _US + "SYSTEM_PROMPT_BASE_ZH": (455, "2130de80ec084075"),
    _US + "SYSTEM_PROMPT_TRAVEL_EN": (1115, "077eba50f4ab6155"),
    _US + "SYSTEM_PROMPT_TRAVEL_ZH": (364, "711377c2a3bc5009"),
}


def system_template_key(category: str, language: str) -> str:
    """The ``prompts.json`` key of the system template of a normal/special category (§2.1)."""
    prefix = _EN if language == "en" else _ZH
    if category.startswith("special_"):
        kind = "SPECIAL"
    elif category == "normal_preference":
        kind = "PREFERENCE"
    elif category.startswith("normal_"):
        kind = "NORMAL"
    else:
        raise ValueError(f"no single-turn prompt for category {category!r}")
    return f"{prefix}SYSTEM_PROMPT_FOR_{kind}_DATA_{language.upper()}"


def user_template_key(language: str) -> str:
    return (_EN if language == "en" else _ZH) + f"USER_PROMPT_{language.upper()}"


def template_digest(text: str) -> tuple[int, str]:
    """``(len, first 16 hex of sha256)`` as in spec §2.2."""
    return len(text), hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class PromptTemplates:
    """The templates of one ``prompts.json``; ``get`` verifies a template on first use."""

    def __init__(self, path: Path):
        self.path = Path(path)
        doc = read_json(self.path, MAX_PROMPTS_BYTES, what="an ACEBench prompts file")
        prompts = doc.get("prompts") if isinstance(doc, dict) else None
        if not isinstance(prompts, dict):
            raise DataError(f"{self.path}: no 'prompts' object")
        self._prompts: dict[str, Any] = prompts
        self._verified: set[str] = set()

    def get(self, key: str) -> str:
        """The template text; DataError if missing or if it fails its §2.2 digest."""
        if key not in self._verified:
            text = self._prompts.get(key)
            if not isinstance(text, str):
                raise DataError(f"{self.path}: template {key!r} missing")
            expected = TEMPLATE_DIGESTS.get(key)
            if expected is not None and template_digest(text) != expected:
                got = template_digest(text)
                raise DataError(
                    f"{self.path}: template {key!r} fails its digest check "
                    f"(len/sha256[:16] {got[0]}/{got[1]}, expected {expected[0]}/{expected[1]})"
                )
            self._verified.add(key)
        return self._prompts[key]

    def fingerprint(self, keys: list[str]) -> str:
        """SHA-256 over ``key\\0text\\0`` of the given templates, in sorted key order."""
        h = hashlib.sha256()
        for key in sorted(set(keys)):
            h.update(key.encode("utf-8") + b"\0" + self.get(key).encode("utf-8") + b"\0")
        return h.hexdigest()


def render_messages(
    templates: PromptTemplates, category: str, language: str, record: dict[str, Any]
) -> list[dict[str, str]]:
    """The two chat messages (system, user) of a normal/special record (spec §2.1).

    ``{function}`` is Python's ``str()`` of the function list as loaded from JSON,
    ``{time}`` the record's ``time`` (``""`` when absent), ``{profile}`` the preference
    record's profile string; the question goes verbatim into the user template.
    """
    system = templates.get(system_template_key(category, language)).format(
        time=record.get("time", ""),
        function=str(record["function"]),
        profile=record.get("profile", ""),
    )
    user = templates.get(user_template_key(language)).format(question=record["question"])
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---- agent categories (spec §2.1) -----------------------------------------------------------
#: prompts.json keys of the user simulator's fixed opening line (APIUSER.get_init_prompt)
FIRST_USER_TURN_KEY = _US + "APIUSER.get_init_prompt.first_user_turn.{lang}"


def agent_template_keys(category: str, language: str, prompt_language: str = "matched") -> dict[str, str]:
    """The ``prompts.json`` keys an agent rollout of ``category`` uses, by role.

    ``prompt_language="upstream_api"`` reproduces the upstream API runner, which prompted
    the multi-step agent with the zh templates whatever the language (§2.3).
    """
    lang = language.upper()
    if category == "agent_multi_step":
        ms_lang = "ZH" if prompt_language == "upstream_api" else lang
        return {
            "agent_system": _MS + f"MULTI_TURN_AGENT_PROMPT_SYSTEM_{ms_lang}",
            "agent_user": _MS + f"MULTI_TURN_AGENT_PROMPT_USER_{ms_lang}",
        }
    if category == "agent_multi_turn":
        prefix = _EN if language == "en" else _ZH
        return {
            "agent_system": _MT + f"MULTI_TURN_AGENT_PROMPT_SYSTEM_{lang}",
            "agent_user": _MT + f"MULTI_TURN_AGENT_PROMPT_USER_{lang}",
            "travel_policy": prefix + f"TRAVEL_PROMPT_{lang}",
            "base_policy": prefix + f"BASE_PROMPT_{lang}",
            "sim_base": _US + f"SYSTEM_PROMPT_BASE_{lang}",
            "sim_travel": _US + f"SYSTEM_PROMPT_TRAVEL_{lang}",
            "sim_opening": FIRST_USER_TURN_KEY.format(lang=language),
        }
    raise ValueError(f"{category!r} is not an agent category")
