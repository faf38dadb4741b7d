"""Data in Markdown: the one escaping rule of ``report.md`` and ``sweep_report.md``.

Text that comes from data (sample ids, subset, category and breakdown names, model names,
error text) is written so that a Markdown renderer (MLflow's artifact view, GitHub) starts
nothing inside it — no heading, link, image (nothing is fetched), HTML, code span or table
cell — and no control character (ESC, CR, newline) reaches the file raw. Ordinary text (ids
such as ``en/normal_atom_bool_0``, intervals ``0.5 [0.4, 0.6]``) is written as it is.
"""

from __future__ import annotations

import re
from typing import Any

from evalkit.errors import printable

#: what starts Markdown or HTML syntax inside a line (a line start never comes from data:
#: newlines are escaped): a backslash, a code span, a table cell, an HTML tag or autolink,
#: an image ``![``, a link's ``](`` or ``][``
_SPECIAL = re.compile(r"[\\`|<]|!(?=\[)|\](?=[(\[])")


def md_text(value: Any) -> str:
    """``value`` (``str()`` of anything else) as literal Markdown text for a paragraph or a
    table cell: non-printable characters escaped as Python does
    (:func:`evalkit.errors.printable`: ``\\x1b``, ``\\x0d``, ``\\x0a``), then each
    :data:`_SPECIAL` character preceded by a backslash (CommonMark shows ``\\[`` as ``[``).
    Linear in the length of the text."""
    return _SPECIAL.sub(lambda m: "\\" + m.group(), printable(value))


def md_code(value: Any, in_table: bool = False) -> str:
    """``value`` as one Markdown code span: fenced by one more backtick than its longest run
    of backticks (so that it cannot close early), non-printable characters escaped; in a
    table cell (``in_table``) ``|`` is written ``\\|`` (GitHub's table rule)."""
    text = printable(value)
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def md_cells(rows: list[list[Any]]) -> list[list[Any]]:
    """A table's rows with every string cell through :func:`md_text` (numbers kept, so
    that a table's number format still applies)."""
    return [[md_text(c) if isinstance(c, str) else c for c in row] for row in rows]
