"""JSON-safe copies of decoded values (shared by scoring and the agent trajectories)."""

from __future__ import annotations

import math
from typing import Any


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy of a decoded value (tuples/sets -> lists, odd keys/values -> str)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        try:
            repr(value)  # json.dumps fails beyond sys.get_int_max_str_digits()
        except ValueError:
            return hex(value)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else repr(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return [json_safe(v) for v in sorted(value, key=repr)]
    return repr(value)
