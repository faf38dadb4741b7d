"""Strict reading of JSON Lines inputs (benchmark data, replay files, past runs).

For files whose every line must be a JSON object: a problem is one error naming the file
and line. (The run journal, which must tolerate torn lines, is read by
:mod:`evalkit.engine.journal` instead.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalkit.errors import DataError, EvalkitError


def read_objects(path: Path, error: type[EvalkitError] = DataError) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line of ``path``.

    Raises:
        ``error`` (default DataError): the file is unreadable or not UTF-8, or a line is
            not JSON, is nested too deeply, or is not an object — naming file and line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file does not exist") from None
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    rows: list[tuple[int, dict[str, Any]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise error(f"{path}:{lineno}: JSON nested too deeply") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        rows.append((lineno, obj))
    return rows
