"""A jinja environment for chat templates that cannot hang or exhaust the machine.

transformers' ImmutableSandboxedEnvironment keeps a template away from Python objects, but
not from the CPU or memory: nested `range(100000)` loops run for hours, `'x' * 10**9` takes a
gigabyte, a doubling loop or a self-calling macro blows up, deep nesting overflows the parser.
A chat template ships inside a package, so every turn it renders is bounded here
(values in unmask.limits):
- source: MAX_TEMPLATE_CHARS long, blocks and brackets nested MAX_TEMPLATE_NESTING deep;
- time: MAX_TEMPLATE_SECONDS per render, checked on every line the compiled template runs;
- size: every string or list the template builds, and the output, stays under
  MAX_TEMPLATE_OUTPUT + 4x the characters of the messages, checked before `*`, `+`, `~`,
  `%`, `replace`, `indent` allocate; numbers given to `**`, filters and methods stay under
  MAX_TEMPLATE_NUMBER.
Breaking a bound raises TemplateLimit; chat.py turns it into ModelFormatError.
"""

from __future__ import annotations

import contextvars
import functools
import operator
import re
import sys
import time
from typing import Any, Iterable

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.runtime
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .limits import MAX_TEMPLATE_CHARS, MAX_TEMPLATE_NESTING, MAX_TEMPLATE_NUMBER, MAX_TEMPLATE_OUTPUT, \
    MAX_TEMPLATE_SECONDS

TEMPLATE_FILE = "<template>"  # the code jinja compiles from a string carries this file name
_OPENING = {"for", "if", "macro", "call", "filter", "block", "with", "autoescape", "raw"}
_BRACKETS = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
# widths and precisions in printf-style ('%-12.3f') and str.format ('{:>12.3}') specs
_WIDTHS = re.compile(r"%[-+ #0]*(\d*)(?:\.(\d+))?|\{[^{}]*:[^{}\d]*(\d*)(?:\.(\d+))?")


class TemplateLimit(jinja2.exceptions.TemplateError):
    """The template went past one of the bounds in the module doc."""


_budget: contextvars.ContextVar[int] = contextvars.ContextVar("template_budget", default=MAX_TEMPLATE_OUTPUT)


def check_source(source: str, env: jinja2.Environment) -> None:
    """TemplateLimit if `source` is too long or nests too deep (measured on jinja's own tokens)."""
    if len(source) > MAX_TEMPLATE_CHARS:
        raise TemplateLimit(f"{len(source)} characters, above the limit of {MAX_TEMPLATE_CHARS}")
    depth = deepest = 0
    tokens = [(kind, value) for _, kind, value in env.lex(source) if kind != "whitespace"]
    for (kind, value), (_, previous) in zip(tokens, [("", "")] + tokens):
        if kind == "operator" and value in _BRACKETS:
            depth += _BRACKETS[value]
        elif kind == "name" and previous in ("{%", "{%-", "{%+"):
            depth += 1 if value in _OPENING else -1 if value.startswith("end") else 0
        deepest = max(deepest, depth)
    if deepest > MAX_TEMPLATE_NESTING:
        raise TemplateLimit(f"nested {deepest} deep, above the limit of {MAX_TEMPLATE_NESTING}")


def render(template: jinja2.Template, message_chars: int, **variables: Any) -> str:
    """template.render(**variables) within the time and size bounds (module doc)."""
    budget = MAX_TEMPLATE_OUTPUT + 4 * message_chars
    token = _budget.set(budget)
    deadline = time.monotonic() + MAX_TEMPLATE_SECONDS
    # A line tracer is the one pure-Python way to stop a loop that calls nothing; it costs ~0.1 ms
    # per message rendered and pauses a debugger's or coverage's tracer for the render.
    previous = sys.gettrace()
    sys.settrace(_tracer(deadline))
    try:
        parts, size = [], 0
        for part in template.generate(**variables):
            size += len(part)
            if size > budget:
                raise TemplateLimit(f"output above {budget} characters")
            parts.append(part)
        return "".join(parts)
    except RecursionError as exc:
        raise TemplateLimit("calls nest too deep (a macro calling itself?)") from exc
    finally:
        sys.settrace(previous)
        _budget.reset(token)


def _tracer(deadline: float):
    """A trace function that follows only the template's own code and stops it at `deadline`."""
    def on_line(frame, event, arg):
        if time.monotonic() > deadline:
            raise TemplateLimit(f"rendering took longer than {MAX_TEMPLATE_SECONDS} s")
        return on_line

    def on_call(frame, event, arg):
        return on_line if frame.f_code.co_filename == TEMPLATE_FILE else None

    return on_call


def _fits(size: int) -> None:
    if size > _budget.get():
        raise TemplateLimit(f"a value of {size} items, above the limit of {_budget.get()}")


def _small(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_NUMBER:
        raise TemplateLimit(f"the number {value} is above the limit of {MAX_TEMPLATE_NUMBER}")


def _small_widths(fmt: str) -> None:
    """A format string whose widths and precisions stay under MAX_TEMPLATE_NUMBER."""
    for match in _WIDTHS.finditer(fmt):
        for number in filter(None, match.groups()):
            _small(int(number))


def _weight(value: Any) -> int:
    """Characters and items a value holds, counting shared items each time (what printing it costs)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return len(value) + sum(map(_weight, value))
    if isinstance(value, dict):
        return len(value) + sum(_weight(k) + _weight(v) for k, v in value.items())
    return 0


def _sized(value: Any) -> Any:
    _fits(_weight(value))
    return value


def _binop(op: str, left: Any, right: Any) -> Any:
    if op == "**":
        _small(right)
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            _fits(right * abs(left).bit_length() // 3)  # about the decimal digits of the result
    elif op == "*":
        count, seq = (right, left) if isinstance(left, (str, list, tuple)) else (left, right)
        if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
            _fits(_weight(seq) * count)
    elif op == "+":
        _fits(_weight(left) + _weight(right))
    elif op == "%" and isinstance(left, str):
        _small_widths(left)  # '%999999999d' would allocate before any check
    return _sized(_OPERATORS[op](left, right))


_OPERATORS = {"*": operator.mul, "**": operator.pow, "+": operator.add, "%": operator.mod}


def _concat(parts: Iterable[Any]) -> str:
    """The `~` operator (jinja's Concat node), with its result size checked first."""
    texts = [str(p) for p in parts]
    _fits(sum(map(len, texts)))
    return "".join(texts)


def _replace_size(text: str, old: str, new: str) -> int:
    return len(text) + text.count(old) * (len(new) - len(old))


def _join_size(items: Any, separator: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 0  # a generator is consumed by join itself; the result is checked afterwards
    return _weight(items) + max(len(items) - 1, 0) * _weight(separator)


def _bounded_filter(name: str, func):
    @functools.wraps(func)  # keeps jinja_pass_arg (pass_context / pass_environment)
    def bounded(*args, **kwargs):
        for value in (*args, *kwargs.values()):
            _small(value)
        # the value and arguments, without what pass_context / pass_eval_context / pass_environment prepend
        values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.nodes.EvalContext,
                                                        jinja2.Environment))]
        if name == "replace" and len(values) >= 3 and all(isinstance(v, str) for v in values[:3]):
            _fits(_replace_size(*values[:3]))
        if name == "join" and values:
            _fits(_join_size(values[0], values[1] if len(values) > 1 else ""))
        if name == "format" and values and isinstance(values[0], str):
            _small_widths(values[0])
        if name == "indent" and values and isinstance(values[0], str) and len(values) > 1:
            width = values[1] if isinstance(values[1], str) else " " * int(values[1] or 0)
            _fits(len(values[0]) + (values[0].count("\n") + 1) * len(width))
        return _sized(func(*args, **kwargs))
    return bounded


class _Codegen(CodeGenerator):
    def visit_Concat(self, node, frame) -> None:
        # The bounded environment never autoescapes, so this is jinja's str_join, with a size check.
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment whose operators, calls and filters check the module's bounds."""

    intercepted_binops = frozenset(_OPERATORS)
    code_generator_class = _Codegen

    def __init__(self, **options: Any):
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols], **options)
        self.bounded_concat = _concat
        self.filters = {name: _bounded_filter(name, f) for name, f in self.filters.items()}

    def set_filter(self, name: str, func) -> None:
        self.filters[name] = _bounded_filter(name, func)

    def call_binop(self, context, op, left, right):
        return _binop(op, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's own signature)
        for value in (*args, *kwargs.values()):
            _small(value)
        # the sandbox wraps str.format in a function; the bound method is its __wrapped__
        method = getattr(__obj, "__wrapped__", __obj)
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if isinstance(owner, str):
            if name == "replace" and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
                _fits(_replace_size(owner, args[0], args[1]))
            elif name == "join" and args:
                _fits(_join_size(args[0], owner))
            elif name in ("format", "format_map"):
                _small_widths(owner)
        return _sized(super().call(__context, __obj, *args, **kwargs))
