"""Answer normalisation and code-fence extraction (spec §4, §4.1).

Nothing is "repaired": the only edits are BOM, line endings, reasoning blocks outside
fences and surrounding whitespace. Packaging is part of what SOBHard measures.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

#: a fence line: indentation, 3+ backticks or 3+ tildes, optional tag, nothing else (§4.1)
FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+\-]*)[ \t]*$")
_NAMES = "think|thinking|reason|reasoning|thought|scratchpad"
#: the opening tag of a reasoning block (§4 step 5)
_OPEN_RE = re.compile(rf"<({_NAMES})\s*>", re.IGNORECASE)
_LONE_RE = re.compile(rf"</?(?:{_NAMES})\s*>", re.IGNORECASE)


@dataclass
class Fence:
    """One fence line: its line index, marker character, marker length and tag."""

    line: int
    char: str
    length: int
    tag: str


@dataclass
class Extraction:
    """Result of block extraction (§4.1).

    ``blocks``: ``(tag, body)`` of every complete block in order; ``outside``: the trimmed
    text of all lines outside blocks (an unclosed opener's own line is covered, the lines
    after it are outside); ``unclosed``: an opening fence without a closing one;
    ``regions``: ``(first, last)`` line spans that count as fenced for normalisation (an
    unclosed opener's span runs to the end).
    """

    blocks: list[tuple[str, str]] = field(default_factory=list)
    outside: str = ""
    unclosed: bool = False
    regions: list[tuple[int, int]] = field(default_factory=list)


def _fences(lines: list[str]) -> list[Fence]:
    out = []
    for i, line in enumerate(lines):
        if "`" not in line and "~" not in line:
            continue
        m = FENCE_RE.match(line)
        if m:
            out.append(Fence(i, m.group(1)[0], len(m.group(1)), m.group(2)))
    return out


def _pair(fences: list[Fence], pairing: str) -> tuple[list[tuple[Fence, Fence]], Fence | None]:
    """Pair fence lines: ``sequential`` = 1st with 2nd, 3rd with 4th [O]; ``commonmark`` =
    a closer is the next bare fence of the same character at least as long [P]."""
    pairs: list[tuple[Fence, Fence]] = []
    if pairing == "sequential":
        for k in range(0, len(fences) - 1, 2):
            pairs.append((fences[k], fences[k + 1]))
        return pairs, (fences[-1] if len(fences) % 2 else None)
    k = 0
    while k < len(fences):
        opener = fences[k]
        close = next(
            (j for j in range(k + 1, len(fences))
             if fences[j].char == opener.char and fences[j].length >= opener.length and not fences[j].tag),
            None,
        )  # fmt: skip
        if close is None:
            return pairs, opener
        pairs.append((opener, fences[close]))
        k = close + 1
    return pairs, None


def extract_blocks(text: str, pairing: str = "sequential") -> Extraction:
    """Split ``text`` (already normalised line endings) into fenced blocks and outside text.

    Returns an :class:`Extraction`. Never raises.
    """
    lines = text.split("\n")
    pairs, unclosed = _pair(_fences(lines), pairing)
    covered = [False] * len(lines)
    ex = Extraction(unclosed=unclosed is not None)
    for a, b in pairs:
        ex.blocks.append((a.tag, "\n".join(lines[a.line + 1 : b.line])))
        ex.regions.append((a.line, b.line))
        for i in range(a.line, b.line + 1):
            covered[i] = True
    if unclosed is not None:
        covered[unclosed.line] = True
        ex.regions.append((unclosed.line, len(lines) - 1))
    ex.outside = "\n".join(line for i, line in enumerate(lines) if not covered[i]).strip()
    return ex


@functools.cache
def _closing_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"</{re.escape(name)}\s*>", re.IGNORECASE)


def _strip_paired(text: str) -> str:
    """Remove every paired reasoning block, left to right: an opening tag, the text up to
    the first closing tag of the same name (any case; ``<think>…</thinking>`` is not a
    pair, §13.16) and that tag. The same as ``re.sub(r"<(names)\\s*>.*?</\\1\\s*>", "",
    text, flags=re.I | re.S)``, in linear time: that regex searches to the end of the text
    for every unpaired opening tag (quadratic: 140,000 ``<think>`` ran for minutes).
    Once a name has no closing tag after some point, none of its later tags has one."""
    out: list[str] = []
    pos = 0
    unpaired: set[str] = set()
    for m in _OPEN_RE.finditer(text):
        name = m.group(1).lower()
        if m.start() < pos or name in unpaired:
            continue
        close = _closing_re(name).search(text, m.end())
        if close is None:
            unpaired.add(name)
            continue
        out.append(text[pos : m.start()])
        pos = close.end()
    out.append(text[pos:])
    return "".join(out)


def strip_reasoning(text: str) -> str:
    """Remove paired reasoning blocks, then lone reasoning tags (§4 step 5)."""
    if "<" not in text:
        return text
    return _LONE_RE.sub("", _strip_paired(text))


def normalize_answer(raw: str | None, pairing: str = "sequential") -> str:
    """The normalised answer text (§4 steps 1–6).

    ``None`` → ``""``; a leading U+FEFF removed; ``\\r\\n`` and lone ``\\r`` → ``\\n``;
    reasoning blocks ``<think>…</think>`` (and thinking, reason, reasoning, thought,
    scratchpad; case-insensitive) removed only outside fenced regions; result trimmed.
    """
    text = "" if raw is None else str(raw)
    if text.startswith("\ufeff"):
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "<" not in text:
        return text.strip()
    lines = text.split("\n")
    regions = sorted(extract_blocks(text, pairing).regions)
    parts: list[str] = []
    pos = 0
    for first, last in regions:
        if first > pos:
            parts.append(strip_reasoning("\n".join(lines[pos:first])))
        parts.append("\n".join(lines[first : last + 1]))
        pos = last + 1
    if pos < len(lines):
        parts.append(strip_reasoning("\n".join(lines[pos:])))
    return "\n".join(parts).strip()


def select_body(ex: Extraction, expected_tag: str, whole: str) -> str:
    """The text that gets parsed (§4.1): the only block; with several, the last block
    tagged ``expected_tag``, else the last block; with none, the whole normalised answer."""
    if not ex.blocks:
        return whole
    if len(ex.blocks) == 1:
        return ex.blocks[0][1]
    tagged = [body for tag, body in ex.blocks if tag == expected_tag]
    return tagged[-1] if tagged else ex.blocks[-1][1]
