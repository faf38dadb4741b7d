"""What a live object holds, for the memory tests (issue 23 item 2, issue 46 item 3)."""

from __future__ import annotations

import gc
import types


def held(root: object, kind: type) -> int:
    """The ``kind`` objects reachable from ``root`` (through containers and instances; not
    through classes, modules or functions, which hold no per-sample state)."""
    seen, stack, found = set(), [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        found += isinstance(obj, kind)
        stack.extend(gc.get_referents(obj))
    return found
