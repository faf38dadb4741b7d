"""Jinja2 for tasks, sandboxed and bounded: the prompts and the judges' rubrics are rendered
here (:func:`render`)."""

from __future__ import annotations

import re
from typing import Any

from evalkit.errors import DataError

_ENVS: dict[int, Any] = {}
#: a ``%`` conversion's flags, width and precision (``%-08.3f``: ``-08.3``), a ``{...:spec}``'s spec
_PRINTF = re.compile(r"%([-+ #0]*\d*(?:\.\d*)?)")
_FORMAT_SPEC = re.compile(r"\{[^{}:]*:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")


def _env(max_chars: int) -> Any:
    """A sandboxed Jinja2 environment whose ``*`` / ``**`` / ``+`` / ``~`` / ``%``, calls and
    filters (their int arguments, and the widths of a format string) cannot build a value past
    ``max_chars`` (the sandbox alone lets ``'ab' * 3000000``, a
    namespace doubled by ``~`` 28 times or ``'x'|center(10**8)`` through)."""
    if max_chars in _ENVS:
        return _ENVS[max_chars]
    import functools

    from jinja2 import StrictUndefined
    from jinja2.compiler import CodeGenerator
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import SandboxedEnvironment

    def over(size: int) -> SecurityError:
        return SecurityError(f"a value of {size} items is over prompt.max_chars={max_chars}")

    def check_args(args: tuple[Any, ...]) -> None:
        if any(isinstance(a, int) and not isinstance(a, bool) and a > max_chars for a in args):
            raise SecurityError(f"an argument over prompt.max_chars={max_chars}")
        for a in args:
            if isinstance(a, str) and ("%" in a or "{" in a):
                check_widths(a)

    def check_widths(fmt: str) -> None:
        """A width or precision of a ``%`` or ``str.format`` format string over the bound."""
        specs = [m.group(1) for m in _PRINTF.finditer(fmt)] + [m.group(1) for m in _FORMAT_SPEC.finditer(fmt)]
        if any(int(n) > max_chars for spec in specs for n in _DIGITS.findall(spec)):
            raise SecurityError(f"a format width over prompt.max_chars={max_chars}")

    def bounded_filter(fn: Any) -> Any:
        @functools.wraps(fn)  # keeps Jinja's pass_context / pass_environment marks
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check_args((*args, *kwargs.values()))
            return fn(*args, **kwargs)

        return wrapper

    class BoundedConcat(CodeGenerator):
        """``a ~ b`` compiled as the environment's bounded join (Jinja's own is ``"".join``)."""

        def visit_Concat(self, node: Any, frame: Any) -> None:  # noqa: N802 - Jinja's visitor name
            self.write("environment.bounded_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class Bounded(SandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+", "%"})
        code_generator_class = BoundedConcat

        def bounded_join(self, parts: tuple[Any, ...]) -> str:
            texts = [str(p) for p in parts]
            size = sum(map(len, texts))
            if size > max_chars:
                raise over(size)
            return "".join(texts)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, (int, float)) and abs(right) > 64:
                raise SecurityError(f"exponent {right} is over the bound")
            if operator == "*":
                for a, b in ((left, right), (right, left)):
                    if isinstance(a, (str, list, tuple)) and isinstance(b, int) and len(a) * b > max_chars:
                        raise over(len(a) * b)
            if operator == "%" and isinstance(left, str):
                check_args((left, *(right if isinstance(right, tuple) else (right,))))
            if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                if len(left) + len(right) > max_chars:
                    raise over(len(left) + len(right))
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
            check_args((*args, *kwargs.values()))
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value: Any) -> Any:  # "{:>9}".format, got as an attribute: its string's widths
            if getattr(value, "__name__", None) in ("format", "format_map") and isinstance(getattr(value, "__self__", None), str):
                check_widths(value.__self__)
            return super().wrap_str_format(value)

    env = Bounded(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.filters = {name: bounded_filter(fn) for name, fn in env.filters.items()}
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
    except (TemplateError, OverflowError) as exc:  # OverflowError: an int too large for Python's C sizes
        raise DataError(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {str(exc)[:200]}") from None
    return "".join(parts)
