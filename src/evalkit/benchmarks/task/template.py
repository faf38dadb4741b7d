"""Jinja2 for tasks, sandboxed and bounded: the prompts and the judges' rubrics are rendered
here (:func:`render`)."""

from __future__ import annotations

from typing import Any

from evalkit.errors import DataError

_ENVS: dict[int, Any] = {}


def _env(max_chars: int) -> Any:
    """A sandboxed Jinja2 environment whose ``*`` / ``**`` and calls cannot build a value
    past ``max_chars`` (the sandbox alone lets ``'ab' * 3000000`` through)."""
    if max_chars in _ENVS:
        return _ENVS[max_chars]
    from jinja2 import StrictUndefined
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import SandboxedEnvironment

    class Bounded(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise SecurityError(f"exponent {right} is over the bound")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and len(a) * b > max_chars:
                        raise SecurityError(f"a value of {len(a) * b} items is over prompt.max_chars={max_chars}")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
            if any(isinstance(a, int) and not isinstance(a, bool) and a > max_chars for a in (*args, *kwargs.values())):
                raise SecurityError(f"an argument over prompt.max_chars={max_chars}")
            return super().call(__context, __obj, *args, **kwargs)

    env = Bounded(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    _ENVS[max_chars] = env
    return env


def render(template: str, data: dict[str, Any], max_chars: int, sample_id: str) -> str:
    """``template`` rendered with ``data`` in the bounded sandbox, streamed and stopped past
    ``max_chars`` characters.

    Raises:
        DataError: a template error, an undefined variable, or a prompt over the bound —
            one line naming the sample.
    """
    from jinja2.exceptions import TemplateError

    try:
        parts, size = [], 0
        for chunk in _env(max_chars).from_string(template).generate(**data):
            size += len(chunk)
            if size > max_chars:
                raise DataError(f"sample {sample_id!r}: the prompt is over prompt.max_chars={max_chars} characters")
            parts.append(chunk)
    except TemplateError as exc:
        raise DataError(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {str(exc)[:200]}") from None
    return "".join(parts)
