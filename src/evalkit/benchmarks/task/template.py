"""Jinja2 for tasks, sandboxed and bounded: the prompts and the judges' rubrics are rendered
here. Two entry points:

* :func:`render` — one template in this process, in the bounded sandbox (the hot path: every
  prompt and rubric of every sample). Each value a template builds is checked against the
  bound before it is built (``*``, ``+``, ``~``, ``%``, ``str.format`` with its widths
  resolved — nested ``{:{w}}`` included —, ``replace``, ``join``, ``range``, printing a
  list), and one render may take at most :data:`MAX_STEPS` steps (loop iterations and
  calls together), so a looping template is refused, not run. A ``RecursionError`` or
  ``MemoryError`` is the same one-line :class:`~evalkit.errors.DataError`.
* :func:`check_renders` — many renders in a child process under limits the kernel and the
  parent enforce (``RLIMIT_AS``, ``RLIMIT_CPU``, a wall-clock timeout that kills it), for
  whatever the in-process checks miss. A task checks every prompt of its samples this way
  once, when it loads (:meth:`evalkit.benchmarks.task.benchmark.TaskBenchmark.load`), so a
  template that would exhaust time or memory is one line before any request, and rendering
  per sample stays in process (one child per load, not per sample).
"""

from __future__ import annotations

import contextvars
import functools
import re
from typing import Any

from evalkit.errors import DataError


class TemplateRefused(DataError):
    """A template the bounded renderer refuses: over a bound (size, steps, recursion, the
    child's time or memory) or a construct the sandbox forbids — as opposed to a template
    error on a sample's data (an undefined variable). A reader of another run's directory
    refuses that run on it (exit 2) rather than noting its data as unreadable."""


_ENVS: dict[int, Any] = {}
#: most steps one render may take: each loop iteration and each call is one. A prompt
#: template loops over a sample's choices or demonstrations (tens); 100,000 steps are at
#: most 1.6 s of Jinja here (macro calls, the dearest step, measured), so a nested
#: ``range(50000)`` loop (2.5e9 iterations) or a macro calling itself twice 40 deep is refused
MAX_STEPS = 100_000
#: the steps taken by the render running in this context (a one-item list; unset: none counted)
_STEPS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("evalkit_template_steps", default=None)


def _step(n: int = 1) -> None:
    """Count ``n`` steps of the current render; over :data:`MAX_STEPS` is a SecurityError."""
    steps = _STEPS.get()
    if steps is not None:
        steps[0] += n
        if steps[0] > MAX_STEPS:
            from jinja2.exceptions import SecurityError

            raise SecurityError(f"the template takes over {MAX_STEPS:,} steps (loop iterations and calls); a loop too long")


def text_size_over(value: Any, limit: int) -> bool:
    """True when ``str(value)`` would be longer than ``limit`` characters, estimated without
    building it: a string's length, a container's items' sizes plus 2 each; stops as soon as
    the sum passes ``limit`` (each item costs at least 1, so at most ``limit`` items are
    visited).

    Raises:
        jinja2.exceptions.SecurityError: the value holds something that is not data (a
            method, a loop object): its text is Python's own, often with an address."""
    total, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += len(v)
        elif isinstance(v, dict):
            total += 2 + 4 * len(v)
            if total <= limit:
                stack.extend(v.keys())
                stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            total += 2 + 2 * len(v)
            if total <= limit:
                stack.extend(v)
        elif isinstance(v, (int, float, bool)) or v is None:
            total += 24 if not isinstance(v, int) or abs(v) < 10**24 else len(str(v))
        else:  # a method, a loop, a namespace: its text is Python's, with an address, not the row's
            from jinja2 import Undefined
            from jinja2.exceptions import SecurityError

            if isinstance(v, Undefined):  # StrictUndefined names the missing variable itself
                total += len(str(v))
                continue
            raise SecurityError(f"a template turns a Python object ({type(v).__name__}) into text; a prompt is made of "
                                "the row's values (its text would differ from one process to the next)")  # fmt: skip
        if total > limit:
            return True
    return False
#: a ``%`` conversion's flags, width and precision (``%-08.3f``: ``-08.3``), a ``{...:spec}``'s spec
_PRINTF = re.compile(r"%([-+ #0]*\d*(?:\.\d*)?)")
_FORMAT_SPEC = re.compile(r"\{[^{}:]*:([^{}]*)\}")
_DIGITS = re.compile(r"\d+")
#: Jinja's filters that never turn their value into its text (the others are refused a value
#: whose text would be over the bound before they build it: ``|string``, ``|tojson`` ...)
_NO_TEXT_FILTERS = frozenset({"length", "count", "first", "last", "random", "batch", "slice", "sort", "unique", "select",
                              "reject", "selectattr", "rejectattr", "map", "groupby", "sum", "min", "max", "reverse", "list",
                              "default", "d", "attr", "items", "dictsort", "abs", "int", "float", "round", "bool"})  # fmt: skip
#: the filter every ``{% for %}``'s iterable goes through (not a name a template can write)
LOOP_FILTER = "evalkit_loop_bound"


#: Jinja2's filters and globals whose output is drawn at random
NONDETERMINISTIC = ("random", "shuffle", "lipsum")


def _env(max_chars: int) -> Any:
    """A sandboxed Jinja2 environment whose ``*`` / ``**`` / ``+`` / ``~`` / ``%``, calls and
    filters (their int arguments, and the widths of a format string) cannot build a value past
    ``max_chars`` (the sandbox alone lets ``'ab' * 3000000``, a
    namespace doubled by ``~`` 28 times or ``'x'|center(10**8)`` through); whose
    ``str.format`` checks each field's resolved spec (``'{:^{w}}'.format('x', w='900000000')``,
    issue 35); whose ``replace`` / ``join`` (filters and methods), text conversions
    (``|string``, ``{{ list }}``, ``~``, ``%``) and ``range`` are refused past the bound before
    they are built; whose every ``{% for %}`` and call counts toward :data:`MAX_STEPS`; and
    which refuses ``recursive`` loops. Built once per ``max_chars``."""
    if max_chars in _ENVS:
        return _ENVS[max_chars]

    from functools import update_wrapper

    from jinja2 import StrictUndefined, nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.exceptions import SecurityError
    from jinja2.sandbox import SandboxedEnvironment, SandboxedFormatter

    def over(size: int) -> SecurityError:
        return SecurityError(f"a value of {size} items is over prompt.max_chars={max_chars}")

    def too_long() -> SecurityError:
        return SecurityError(f"a value whose text is over prompt.max_chars={max_chars} characters")

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

    def check_result(name: str, args: tuple[Any, ...]) -> None:
        """A ``replace`` or ``join`` (filter or ``str`` method) whose result would be over the
        bound, refused before it is built: ``replace`` grows by the matches times the growth
        of one; ``join`` is its items' text plus the separators."""
        if name == "replace" and len(args) >= 3 and all(isinstance(a, str) for a in args[:3]):
            text, old, new = args[:3]
            count = args[3] if len(args) > 3 and isinstance(args[3], int) and args[3] >= 0 else None
            matches = (len(text) + 1 if not old else text.count(old))
            matches = min(matches, count) if count is not None else matches
            size = len(text) + matches * (len(new) - len(old))
            if size > max_chars:
                raise over(size)
        elif name == "join" and args:
            items, sep = args[0], (args[1] if len(args) > 1 else "")
            sep_len = len(sep) if isinstance(sep, str) else 0
            if isinstance(items, (list, tuple, set, frozenset, dict, str)) and (
                    text_size_over(items, max_chars) or sep_len * len(items) > max_chars):
                raise too_long()

    def bounded_filter(name: str, fn: Any) -> Any:
        @functools.wraps(fn)  # keeps Jinja's pass_context / pass_environment marks
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check_args((*args, *kwargs.values()))
            plain = [a for a in args if not hasattr(a, "environment")]  # without the context / environment passed
            check_result(name, (*plain, *kwargs.values()))
            if name not in _NO_TEXT_FILTERS and plain and not isinstance(plain[0], str) and text_size_over(plain[0], max_chars):
                raise too_long()  # |string, |tojson, |e ... of a value whose text is over the bound
            return fn(*args, **kwargs)

        return wrapper

    def loop_bound(items: Any) -> Any:
        """Every ``{% for %}``'s iterable: each item taken is a step (:data:`MAX_STEPS`)."""
        for item in items:
            _step()
            yield item

    def bounded_range(*args: Any) -> range:
        r = range(*args)
        if len(r) > max_chars:
            raise SecurityError(f"range of {len(r)} items is over prompt.max_chars={max_chars}")
        return r

    def finalize(value: Any) -> Any:
        """What ``{{ value }}`` prints: a value whose text would be over the bound is refused
        before ``str`` builds it (a list doubled 20 times of long strings)."""
        if not isinstance(value, str) and text_size_over(value, max_chars):
            raise too_long()
        return value

    class BoundedFormatter(SandboxedFormatter):
        """``str.format`` with each field's spec checked once resolved (``{:^{w}}`` with
        ``w='900000000'`` is a width of 900000000)."""

        def format_field(self, value: Any, format_spec: str) -> Any:
            if not isinstance(value, str) and text_size_over(value, max_chars):
                raise too_long()
            if any(int(n) > max_chars for n in _DIGITS.findall(format_spec)):
                raise SecurityError(f"a format width over prompt.max_chars={max_chars}")
            return super().format_field(value, format_spec)

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

        def _parse(self, source: str, name: str | None, filename: str | None) -> Any:
            """The template's tree with every ``{% for %}`` iterating through :func:`loop_bound`
            (its steps counted); a ``recursive`` loop is refused (its inner calls would
            iterate uncounted)."""
            tree = super()._parse(source, name, filename)
            for loop in tree.find_all(nodes.For):
                if loop.recursive:
                    raise SecurityError("recursive loops are not allowed in a task's template")
                loop.iter = nodes.Filter(loop.iter, LOOP_FILTER, [], [], None, None, lineno=loop.lineno)
            return tree

        def bounded_join(self, parts: tuple[Any, ...]) -> str:
            if text_size_over(list(parts), max_chars):
                raise too_long()
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
                if text_size_over(right, max_chars):
                    raise too_long()
            if operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                if len(left) + len(right) > max_chars:
                    raise over(len(left) + len(right))
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - Jinja's signature
            _step()
            check_args((*args, *kwargs.values()))
            name, owner = getattr(__obj, "__name__", None), getattr(__obj, "__self__", None)
            if name in ("replace", "join") and isinstance(owner, str):  # "x".replace(...), ",".join(l)
                check_result(name, (owner, *args) if name == "replace" else (*args, owner))
            return super().call(__context, __obj, *args, **kwargs)

        def wrap_str_format(self, value: Any) -> Any:
            """``"{:>9}".format`` / ``format_map``, got as an attribute: its literal widths
            checked now, and each field's resolved spec when it is formatted
            (:class:`BoundedFormatter`); Jinja's own wrapper otherwise."""
            f_self = getattr(value, "__self__", None)
            if getattr(value, "__name__", None) not in ("format", "format_map") or not isinstance(f_self, str):
                return None
            check_widths(f_self)
            if super().wrap_str_format(value) is None:  # not a method Jinja sandboxes
                return None
            is_map, vformat = value.__name__ == "format_map", BoundedFormatter(self).vformat

            def wrapper(*args: Any, **kwargs: Any) -> str:
                if is_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    args, kwargs = (), args[0]
                check_args((*args, *kwargs.values()))
                return str(vformat(f_self, args, kwargs))

            return update_wrapper(wrapper, value)

    env = Bounded(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=finalize)
    # a prompt is a function of its row: no filter or global that draws at random (its hash,
    # the cache and the journal's identity of a request would change at every render)
    env.filters = {name: bounded_filter(name, fn) for name, fn in env.filters.items() if name not in NONDETERMINISTIC}
    env.filters[LOOP_FILTER] = loop_bound
    for name in NONDETERMINISTIC:
        env.globals.pop(name, None)
    env.globals["range"] = bounded_range
    _ENVS[max_chars] = env
    return env


def render(template: str, data: dict[str, Any], max_chars: int, sample_id: str) -> str:
    """``template`` rendered with ``data`` in the bounded sandbox, streamed and stopped past
    ``max_chars`` characters.

    Raises:
        DataError: a template error or an undefined variable; :class:`TemplateRefused`
            (a DataError): a value, prompt or step count over the bound, or a forbidden
            construct — one line naming the sample.
    """
    from jinja2.exceptions import SecurityError, TemplateError

    token = _STEPS.set([0])
    try:
        parts, size = [], 0
        for chunk in _compiled(max_chars, template).generate(**data):
            size += len(chunk)
            if size > max_chars:
                raise DataError(f"sample {sample_id!r}: the prompt is over prompt.max_chars={max_chars} characters")
            parts.append(chunk)
    except MemoryError:  # the bound that was hit is the caller's to name (check_renders: its memory limit)
        raise
    except (SecurityError, OverflowError, RecursionError) as exc:  # OverflowError: an int too large for C sizes
        raise TemplateRefused(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {_one_line(exc)}") from None
    except TemplateError as exc:
        raise DataError(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {_one_line(exc)}") from None
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - {{ 1 + [] }}, {{ x / 2 }}, {{ 1 // 0 }}: the template's error on this row
        raise DataError(f"sample {sample_id!r}: prompt template: {type(exc).__name__}: {_one_line(exc)}") from None
    finally:
        _STEPS.reset(token)
    return "".join(parts)


def template_variables(template: str, max_chars: int, where: str) -> set[str]:
    """The variables ``template`` reads from its context (``jinja2.meta``), found in the bounded
    environment of ``max_chars``: its compiler folds no intercepted operator, so a constant
    such as ``2 ** 100000`` or ``7 ** 30000000`` is never computed while the template is only
    being read (a plain sandbox folds it: a crash, or minutes of CPU).

    Raises:
        DataError: a syntax error; :class:`TemplateRefused`: a construct the environment
            refuses, or a template too deep or too large to read — one line starting with ``where``.
    """
    from jinja2 import meta
    from jinja2.exceptions import SecurityError, TemplateError

    try:
        return set(meta.find_undeclared_variables(_env(max_chars).parse(template)))
    except SecurityError as exc:
        raise TemplateRefused(f"{where}: {_one_line(exc)}") from None
    except TemplateError as exc:
        raise DataError(f"{where}: not a valid template ({_one_line(exc)})") from None
    except (OverflowError, RecursionError, MemoryError, ValueError) as exc:  # ValueError: an int over str()'s digit limit
        raise TemplateRefused(f"{where}: the template cannot be read within the renderer's bounds "
                              f"({type(exc).__name__}: {_one_line(exc)})") from None  # fmt: skip


@functools.lru_cache(maxsize=256)
def is_constant(template: str, max_chars: int) -> bool:
    """True when ``template`` reads no variable (:func:`template_variables`): the bounded
    environment has no global that draws at random, so it renders the same for every row
    (a fixed system prompt); False for a template that cannot be read (its error is the
    renderer's to name)."""
    try:
        return not template_variables(template, max_chars, "template")
    except DataError:
        return False


@functools.lru_cache(maxsize=256)
def _compiled(max_chars: int, template: str) -> Any:
    """``template`` compiled in the bounded environment of ``max_chars``, kept (a task has a
    handful of templates; compiling one takes about 2 ms, rendering it about 50 µs).

    Raises:
        TemplateError: a syntax error, or a construct the environment refuses."""
    return _env(max_chars).from_string(template)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] if text else "(no message)"


# ---- the bounded child ------------------------------------------------------------------------
#: the wall-clock seconds :func:`check_renders` allows its child: a fixed part (the child's
#: start, about 0.3 s here, 2 s on a host at load 20) plus a part per render; a prompt renders
#: in about 50 µs here, so the per-render part is a 200-fold margin
CHECK_BASE_S = 30.0
CHECK_PER_RENDER_S = 0.01
#: the address space the child may add to its start-up size (MiB; ``RLIMIT_AS``)
CHECK_MEMORY_MB = 1024
#: one render of :func:`check_renders`: (template, variables, max_chars, sample id)
RenderJob = tuple[str, dict[str, Any], int, str]
_CHILD = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_evalkit_template_child', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(mod)\n"
    "mod._child_main(float(sys.argv[2]), int(sys.argv[3]))\n"
)


def check_renders(jobs: list[RenderJob], where: str, timeout_s: float | None = None,
                  memory_mb: int = CHECK_MEMORY_MB) -> None:
    """Render every job with :func:`render` in one child process whose limits are enforced
    outside its interpreter: ``RLIMIT_AS`` (its start-up address space plus ``memory_mb``
    MiB) and ``RLIMIT_CPU`` set before any template is compiled, and a wall-clock
    ``timeout_s`` (default :data:`CHECK_BASE_S` + :data:`CHECK_PER_RENDER_S` per job) after
    which this process kills it. The rendered texts are dropped: this only proves that each
    render finishes within the bounds (rendering is deterministic, so the same render in
    process later finishes too). The child loads this file alone (not the ``evalkit``
    package), so it starts in about 0.3 s.

    Raises:
        DataError: a render fails on a sample's data (its one line: sample, template error);
            :class:`TemplateRefused`: a render over a bound, or the child over its time or
            memory — one line starting with ``where``.
    """
    import os
    import pickle
    import subprocess
    import sys

    if not jobs:
        return
    limit = timeout_s if timeout_s is not None else CHECK_BASE_S + CHECK_PER_RENDER_S * len(jobs)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    argv = [sys.executable, "-c", _CHILD, __file__, str(limit), str(memory_mb)]
    try:
        done = subprocess.run(argv, input=pickle.dumps(jobs), capture_output=True, timeout=limit, env=env, check=False)
    except subprocess.TimeoutExpired:  # subprocess.run has killed the child
        raise TemplateRefused(f"{where}: rendering its templates took over {limit:.0f} s "
                        "(the bounded renderer's limit); a template that loops?") from None  # fmt: skip
    except OSError as exc:
        raise DataError(f"{where}: the bounded renderer could not start ({exc.strerror or type(exc).__name__})") from None
    answer = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode == 0 and answer and answer[-1] == "ok":
        return
    if done.returncode == 0 and answer and answer[-1].startswith("error "):
        raise DataError(f"{where}: {answer[-1][6:]}")
    if done.returncode == 0 and answer and answer[-1].startswith("refused "):
        raise TemplateRefused(f"{where}: {answer[-1][8:]}")
    if done.returncode == 0 and answer and answer[-1].startswith("memory "):
        raise TemplateRefused(f"{where}: sample {answer[-1][7:]}: rendering its prompt template needs over {memory_mb} MiB "
                              "(the bounded renderer's memory limit)")  # fmt: skip
    why = f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()
    raise TemplateRefused(f"{where}: the bounded renderer stopped ({why}: over its time or memory limit; "
                    f"{(tail[-1] if tail else 'no message')[:200]})")  # fmt: skip


def _address_space() -> int:
    """This process's address space in bytes (``VmSize`` of ``/proc/self/status``; 0 elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child_main(timeout_s: float, memory_mb: int) -> None:
    """The child of :func:`check_renders`: limits set on itself first (the kernel enforces
    them), then the jobs read from stdin and rendered; one line on stdout: ``ok``,
    ``error <line>``, ``refused <line>`` (:class:`TemplateRefused`) or ``memory``."""
    import math
    import pickle
    import resource
    import sys

    jobs = pickle.loads(sys.stdin.buffer.read())  # noqa: S301 - written by check_renders, the parent
    import jinja2.sandbox  # noqa: F401 - imported before the limit: its size is not the templates'

    resource.setrlimit(resource.RLIMIT_AS, (_address_space() + memory_mb * 1024 * 1024,) * 2)
    cpu = max(1, math.ceil(timeout_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    try:
        for template, data, max_chars, sample_id in jobs:
            if render(template, data, max_chars, sample_id) != render(template, data, max_chars, sample_id):
                raise TemplateRefused(f"sample {sample_id!r}: the prompt template renders differently each time (an "
                                      "object's address, a time?); a prompt must be a function of its row")  # fmt: skip
    except DataError as exc:
        print(("refused " if isinstance(exc, TemplateRefused) else "error ") + " ".join(str(exc).split()), flush=True)
        return
    except MemoryError:
        print(f"memory {sample_id!r}", flush=True)  # repr: one line whatever the id holds
        return
    print("ok", flush=True)
