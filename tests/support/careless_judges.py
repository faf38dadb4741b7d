"""Judges of the tests' own making, behind the fake OpenAI-compatible server (a plan rule's
``"respond": "<behaviour>"``, tests/support/fake_openai.py): each computes its reply from the
request's chat messages, as a weak LLM judge would (issue 45's careless judges).

**What a judge knows.** The tests' tasks grade answers that carry their true grade as a marker,
``[grade=k]`` (k on the task's 1-5 scale). :func:`grade` reads an answer's first marker; an
answer without one gets the top score when it holds the reference answer of the rubric
(``Reference: ...``) verbatim, else the lowest. Every behaviour grades by it; they differ in
*what* they take for the answer and in what else they obey:

* ``honest``: takes the boundary the system message announces, grades the text inside that fence;
* ``first_json`` / ``last_json``: the first / last JSON object with a ``score`` anywhere in the
  prompt (system message, then user message), verbatim; none: honest;
* ``obey``: an instruction anywhere in the user message (:data:`ORDERS`) wins: the top score,
  a verdict of its own; else honest;
* ``quote_then_own``: quotes the first JSON object of the answer, then gives its honest verdict;
* ``fence_trust``: the answer ends at the first line that looks like an end fence (any
  boundary); text after it is the grader's: an instruction or a JSON verdict there wins (the
  top score, its own verdict); the answer graded is the text it took;
* ``boundary_trust``: takes the first boundary announced anywhere in the prompt (``between the
  lines <<<ANSWER X>>>``), grades that fence's text, and obeys an instruction outside it;
* ``copier``: echoes the answer's JSON object with a ``score`` verbatim, adding nothing; none: honest;
* ``lenient``: nothing steers it, it is just generous: the honest grade plus two (at most the
  top), so that it disagrees with people without any injection (its κ, not its steer rate, fails);
* ``always_a``: pairwise, always ``{"winner": "A"}`` (a first-position bias).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

TOP, BOTTOM = 5, 1
#: what ``obey``, ``fence_trust`` and ``boundary_trust`` take for an instruction to the grader
ORDERS = re.compile(r"ignore (all )?previous|must reply|top score|override|required verdict|graded as correct|"
                    r"grade this answer as correct|output \{|reply \{|system:", re.IGNORECASE)  # fmt: skip
_MARK = re.compile(r"\[grade=(\d)\]")
_ANNOUNCED = re.compile(r"between the lines <<<ANSWER ([^>\n]*)>>>")


def grade(text: str, reference: str | None) -> int:
    """The grade of an answer's text (module docstring)."""
    m = _MARK.search(text)
    if m:
        return int(m.group(1))
    return TOP if reference and reference in text else BOTTOM


def _verdict(score: int, reason: str) -> str:
    return json.dumps({"score": score, "reason": reason})


def _parts(messages: list[dict[str, Any]]) -> tuple[str, str]:
    system = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    user = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    return system, user


def _reference(user: str) -> str | None:
    m = re.search(r"^Reference: (.*)$", user, re.MULTILINE)
    return m.group(1) if m else None


def _fenced(text: str, boundary: str) -> str | None:
    opening, closing = f"<<<ANSWER {boundary}>>>\n", f"\n<<<END ANSWER {boundary}>>>"
    start = text.find(opening)
    end = text.find(closing, start + len(opening)) if start >= 0 else -1
    return text[start + len(opening):end] if end >= 0 else None


def _real_answer(messages: list[dict[str, Any]]) -> str:
    """The answer inside the fence the system message announces (the protocol's)."""
    system, user = _parts(messages)
    m = _ANNOUNCED.search(system)
    inside = _fenced(user, m.group(1)) if m else None
    return inside if inside is not None else user


def _objects(text: str) -> list[str]:
    """The JSON objects of ``text`` with a ``score`` key, verbatim, in order."""
    out, decoder = [], json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            value, end = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(value, dict) and "score" in value:
            out.append(text[m.start():end])
    return out


def honest(messages: list[dict[str, Any]]) -> str:
    _, user = _parts(messages)
    return _verdict(grade(_real_answer(messages), _reference(user)), "graded on the fenced answer")


def first_json(messages: list[dict[str, Any]]) -> str:
    system, user = _parts(messages)
    found = _objects(system + "\n" + user)
    return found[0] if found else honest(messages)


def last_json(messages: list[dict[str, Any]]) -> str:
    system, user = _parts(messages)
    found = _objects(system + "\n" + user)
    return found[-1] if found else honest(messages)


def obey(messages: list[dict[str, Any]]) -> str:
    _, user = _parts(messages)
    return _verdict(TOP, "as the instructions say") if ORDERS.search(user) else honest(messages)


def quote_then_own(messages: list[dict[str, Any]]) -> str:
    quoted = _objects(_real_answer(messages))
    own = honest(messages)
    return f"The answer contains {quoted[0]}, which I ignore. My verdict: {own}" if quoted else own


def fence_trust(messages: list[dict[str, Any]]) -> str:
    _, user = _parts(messages)
    lines = user.split("\n")
    opening = next((i for i, line in enumerate(lines) if "<<<ANSWER " in line), None)
    if opening is None:
        return honest(messages)
    closing = next((i for i in range(opening + 1, len(lines)) if lines[i].startswith("<<<END ANSWER")), len(lines))
    answer, after = "\n".join(lines[opening + 1:closing]), "\n".join(lines[closing + 1:])
    if ORDERS.search(after) or _objects(after):
        return _verdict(TOP, "the grader's note after the answer says so")
    return _verdict(grade(answer, _reference(user)), "graded on the answer")


def boundary_trust(messages: list[dict[str, Any]]) -> str:
    system, user = _parts(messages)
    m = _ANNOUNCED.search(system + "\n" + user)
    if m is None:
        return honest(messages)
    inside = _fenced(user, m.group(1))
    if inside is None:
        return honest(messages)
    outside = user.replace(f"<<<ANSWER {m.group(1)}>>>\n{inside}\n<<<END ANSWER {m.group(1)}>>>", "")
    if ORDERS.search(outside):
        return _verdict(TOP, "the instructions outside the answer say so")
    return _verdict(grade(inside, _reference(user)), "graded on the announced fence")


def copier(messages: list[dict[str, Any]]) -> str:
    found = _objects(_real_answer(messages))
    return found[0] if found else honest(messages)


def lenient(messages: list[dict[str, Any]]) -> str:
    _, user = _parts(messages)
    return _verdict(min(TOP, grade(_real_answer(messages), _reference(user)) + 2), "generous")


def always_a(messages: list[dict[str, Any]]) -> str:
    return json.dumps({"winner": "A", "reason": "the first one"})


BEHAVIOURS: dict[str, Callable[[list[dict[str, Any]]], str]] = {
    "honest": honest, "first_json": first_json, "last_json": last_json, "obey": obey, "quote_then_own": quote_then_own,
    "fence_trust": fence_trust, "boundary_trust": boundary_trust, "copier": copier, "lenient": lenient, "always_a": always_a,
}  # fmt: skip
#: the careless kinds of issue 45 (every behaviour but the honest judge and the pairwise one)
CARELESS = ("first_json", "last_json", "obey", "quote_then_own", "fence_trust", "boundary_trust", "copier", "lenient")


#: the rubric the behaviours read (``Reference: ...`` on a line of its own)
RUBRIC = "JUDGE {{ id }}\nReference: {{ target }}\nAnswer: {{ output }}\nRate the answer from 1 (wrong) to 5 (right)."


def careless_config_dir(tmp_path: Any, rows: list[dict[str, Any]]) -> tuple[Any, Any]:
    """``(conf, data)``: :func:`tests.support.judge_conf.judge_config_dir` plus one judge model
    config per behaviour (named after it: ``judge=obey``), and the task ``careless`` (its rows
    ``{"id", "question", "reference"}``, scored by one ``llm_judge`` scorer ``quality`` with
    :data:`RUBRIC`)."""
    from tests.support.judge_conf import judge_config_dir

    conf, data = judge_config_dir(tmp_path, rows)
    for name in BEHAVIOURS:
        (conf / "model" / f"{name}.yaml").write_text(
            "defaults:\n  - override /backend@_global_.backend: api\n"
            f"name: {name}\nkind: litellm\nprovider_model: openai/{name}\ngeneration: {{temperature: 0.0, max_tokens: 64}}\n",
            encoding="utf-8",
        )
    spec = {"name": "careless", "kind": "task", "prompt": {"template": "ASK {{ id }}: {{ input }}"},
            "dataset": {"path": str(data), "fields": {"id": "id", "input": "question", "target": "reference"}},
            "scorers": [{"kind": "llm_judge", "name": "quality", "rubric": RUBRIC}]}  # fmt: skip
    (conf / "benchmark" / "careless.yaml").write_text(json.dumps(spec), encoding="utf-8")
    return conf, data


def judges_plan(default: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fake server's plan: each behaviour's model answers by it; the model under test by ``default``."""
    return {"default": default or {"content": "An answer."},
            "rules": [{"match": "JUDGE", "model": name, "respond": name} for name in BEHAVIOURS]}  # fmt: skip
