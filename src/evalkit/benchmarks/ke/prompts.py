"""Plain-KE prompt rendering (KE spec §3).

The benchmark's prompt text lives in exactly one file, ``prompt_plain.txt``: the spec's §3.1
template copied byte for byte (its digest is tested against the spec). At run time the file
is split into its literal pieces (the text around ``{code_traj.user_task}``, the per-step
block, the closing tail); the document's annotation line ``... (共 … 步 …)`` is recognised
and dropped, as §3.1 says it is not prompt text. Sample text is substituted literally —
never through a format engine, because tasks contain ``{}`` and ``%`` (§3.2).

3-shot (§3.4) is evalkit's stand-in layout, built only from pieces of the same template:
each example is its own ``Task:`` / ``Trajectory Steps:`` / blocks section followed by
``The critical steps are: step_a, step_b`` (its gold ids), inserted after the "Output only
the list…" paragraph. It is *not* comparable to historical 3-shot prompts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from evalkit.types import sha256_hex

TEMPLATE_FILE = Path(__file__).with_name("prompt_plain.txt")

#: the completion-mode answer prefix: the prompt's own last line (§3.3)
ANSWER_PREFIX = "The critical steps are:\n- step_"

_TASK_PH = "{code_traj.user_task}"
_STEP_PH = re.compile(r"\{code_traj\.trajectory_steps\[(\d+)\]\.(\w+)\}")
_ANNOTATION = re.compile(r"\n\n\.\.\. \(共 \{len\(code_traj\.trajectory_steps\)\} 步[^\n]*\)\n\n")
_STEP_FIELDS = ("step_id", "thought", "obs_type", "observation")


class TemplateError(ValueError):
    """``prompt_plain.txt`` does not have the shape of the spec's §3.1 template."""


@dataclass(frozen=True)
class Truncation:
    """Per-field character limits (Python code points, no marker, no stripping; §3.2).

    ``thought``/``obs``: the graded task; ``icl_thought``/``icl_obs``: the 3-shot examples.
    """

    obs: int = 800
    thought: int = 400
    icl_obs: int = 300
    icl_thought: int = 200

    def as_dict(self) -> dict[str, int]:
        return {"obs": self.obs, "thought": self.thought, "icl_obs": self.icl_obs, "icl_thought": self.icl_thought}


@dataclass(frozen=True)
class PlainTemplate:
    """The literal pieces of the Plain-KE template.

    ``intro``: from "You are an information triage module…" up to (not including) ``Task: ``.
    ``task_label``: ``"Task: "``. ``after_task``: ``"\\n\\nTrajectory Steps:\\n\\n"``.
    ``block``: alternating literals and step field names of one step block.
    ``step_sep``: the text between two blocks (``"\\n\\n"``). ``tail``: ``"\\n\\nNow identify…- step_"``.
    ``text``: the whole file; ``sha256``: its UTF-8 digest.
    """

    intro: str
    task_label: str
    after_task: str
    block: tuple[str, ...]
    step_sep: str
    tail: str
    text: str
    sha256: str

    @property
    def answer_label(self) -> str:
        """``"The critical steps are:"``, the template's answer line without ``- step_``."""
        return ANSWER_PREFIX.split("\n", 1)[0]


def parse_template(text: str) -> PlainTemplate:
    """Split the §3.1 template text into its literal pieces.

    Raises:
        TemplateError: the text does not contain exactly one task placeholder, two step
            blocks that differ only in their index, the annotation line, and a tail ending
            in :data:`ANSWER_PREFIX`.
    """
    if text.count(_TASK_PH) != 1:
        raise TemplateError(f"{TEMPLATE_FILE.name}: expected one {_TASK_PH} placeholder")
    before_task, after = text.split(_TASK_PH)
    task_label = "Task: "
    if not before_task.endswith(task_label):
        raise TemplateError(f"{TEMPLATE_FILE.name}: {_TASK_PH} is not preceded by {task_label!r}")
    intro = before_task[: -len(task_label)]
    first = _STEP_PH.search(after)
    if first is None:
        raise TemplateError(f"{TEMPLATE_FILE.name}: no step placeholders")
    block_start = after.rfind("[", 0, first.start() + 1)
    after_task = after[:block_start]
    ann = _ANNOTATION.search(after)
    if ann is None:
        raise TemplateError(f"{TEMPLATE_FILE.name}: the document's '... (共 … 步 …)' annotation line is missing")
    blocks_text = after[block_start : ann.start()]
    tail = "\n\n" + after[ann.end() :]
    if not tail.endswith(ANSWER_PREFIX):
        raise TemplateError(f"{TEMPLATE_FILE.name}: the template must end with {ANSWER_PREFIX!r}")

    # two example blocks, [0] and [1], separated by step_sep
    idx1 = blocks_text.find("[{code_traj.trajectory_steps[1].step_id}]")
    if idx1 < 0:
        raise TemplateError(f"{TEMPLATE_FILE.name}: the second step block is missing")
    block0 = blocks_text[:idx1]
    block1 = blocks_text[idx1:]
    step_sep = block0[len(block0.rstrip("\n")) :]
    block0 = block0.rstrip("\n")
    if block1 != block0.replace("[0]", "[1]"):
        raise TemplateError(f"{TEMPLATE_FILE.name}: the two step blocks differ beyond their index")
    pieces: list[str] = []
    pos = 0
    for m in _STEP_PH.finditer(block0):
        if m.group(2) not in _STEP_FIELDS:
            raise TemplateError(f"{TEMPLATE_FILE.name}: unknown step field {m.group(2)!r}")
        pieces += [block0[pos : m.start()], m.group(2)]
        pos = m.end()
    pieces.append(block0[pos:])
    if [pieces[i] for i in range(1, len(pieces), 2)] != list(_STEP_FIELDS):
        raise TemplateError(f"{TEMPLATE_FILE.name}: step block fields must be {_STEP_FIELDS}")
    return PlainTemplate(
        intro=intro, task_label=task_label, after_task=after_task, block=tuple(pieces),
        step_sep=step_sep, tail=tail, text=text, sha256=sha256_hex(text),
    )  # fmt: skip


@lru_cache(maxsize=1)
def load_template() -> PlainTemplate:
    """The parsed ``prompt_plain.txt`` (read once per process)."""
    return parse_template(resources.files(__package__).joinpath(TEMPLATE_FILE.name).read_text(encoding="utf-8"))


def render_block(tpl: PlainTemplate, step: dict[str, Any], thought_limit: int, obs_limit: int) -> str:
    """One step block: ``[id]\\n  Thought: T(x)\\n  Observation Type: t\\n  Observation: O(x)`` (§3.2)."""
    values = {
        "step_id": step["step_id"],
        "thought": step["thought"][:thought_limit],
        "obs_type": step["obs_type"],
        "observation": step["observation"][:obs_limit],
    }
    return "".join(values[p] if i % 2 else p for i, p in enumerate(tpl.block))


def render_body(tpl: PlainTemplate, steps: Sequence[dict[str, Any]], thought_limit: int, obs_limit: int) -> str:
    """All step blocks of a trajectory, in order, joined by the template's separator."""
    return tpl.step_sep.join(render_block(tpl, s, thought_limit, obs_limit) for s in steps)


def render_icl_block(tpl: PlainTemplate, examples: Sequence[dict[str, Any]], trunc: Truncation) -> str:
    """The 3-shot example sections (§3.4 stand-in); ``""`` for no examples.

    Each example: ``Task: <task>\\n\\nTrajectory Steps:\\n\\n<blocks>\\n\\nThe critical steps
    are: step_a, step_b\\n\\n`` with ICL truncation (``icl_thought``/``icl_obs``).
    """
    parts = []
    for ex in examples:
        parts.append(
            tpl.task_label + ex["user_task"] + tpl.after_task
            + render_body(tpl, ex["trajectory_steps"], trunc.icl_thought, trunc.icl_obs)
            + "\n\n" + tpl.answer_label + " " + ", ".join(ex["gold_step_ids"]) + "\n\n"
        )  # fmt: skip
    return "".join(parts)


def render_prompt(
    sample: dict[str, Any], examples: Sequence[dict[str, Any]] = (), trunc: Truncation = Truncation(),
    tpl: PlainTemplate | None = None,
) -> str:
    """The Plain-KE prompt ``HEAD + BODY + TAIL`` of §3.2 (0-shot when ``examples`` is empty).

    ``sample``: a validated sample dict (``user_task``, ``trajectory_steps``). The user task
    is inserted verbatim; labels, gold ids, stats and final output never appear.
    """
    tpl = tpl or load_template()
    return (
        tpl.intro + render_icl_block(tpl, examples, trunc)
        + tpl.task_label + sample["user_task"] + tpl.after_task
        + render_body(tpl, sample["trajectory_steps"], trunc.thought, trunc.obs)
        + tpl.tail
    )  # fmt: skip
