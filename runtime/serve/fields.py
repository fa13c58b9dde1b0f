"""Request bodies -> one dialect-neutral GenerationRequest, with every field's type checked.

Both dialects accept every GenerationConfig setting under its own name (`threshold`,
`block_length`, `cache`, ...): OpenAI as a top-level body field, Ollama inside
`options`. A field nobody knows is an error (a typo must not be silently ignored).
"""

from __future__ import annotations

import typing
import types
from dataclasses import dataclass, field, fields as dataclass_fields
from functools import cache
from typing import Any

from ..config import GenerationConfig
from .errors import ApiError, FieldError
from .tools import Tool, parse_tools, with_tool_messages

_KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
               dict: "an object"}


@dataclass
class GenerationRequest:
    """One generation, whichever dialect asked for it."""

    messages: list[dict] | None = None  # a conversation, rendered with the chat template
    prompt: str | None = None  # or a plain prompt
    raw: bool = False  # the prompt without the chat template
    overrides: dict = field(default_factory=dict)  # GenerationConfig settings
    max_tokens: int | None = None  # answer tokens at most; None: the package's gen_length
    stops: list[str] = field(default_factory=list)  # the answer ends before the first of these
    tools: list[Tool] = field(default_factory=list)
    tool_choice: Any = None
    response: str = "text"  # text | json_object | json_schema
    schema: dict | None = None  # for json_schema
    stream: bool = False
    canvas: bool = False  # stream the whole canvas per step too (the unmask.canvas extension event)


@cache
def setting_kinds() -> dict[str, tuple[type, bool]]:
    """Every client-settable GenerationConfig field -> (value type, None allowed)."""
    hints = typing.get_type_hints(GenerationConfig)
    out = {}
    for f in dataclass_fields(GenerationConfig):  # model facts (mask id, ...) are not among them
        hint, optional = hints[f.name], False
        if typing.get_origin(hint) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(hint) if a is not type(None)]
            hint, optional = inner[0], True
        out[f.name] = (hint, optional)
    return out


def check(name: str, value: Any, kind: type, optional: bool = False) -> Any:
    """value if it is of `kind` (an int passes as a float, a bool as nothing but a bool)."""
    if value is None and optional:
        return None
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise FieldError(name, f"expected {_KIND_NAMES.get(kind, kind.__name__)}"
                               f"{' or null' if optional else ''}, got {type(value).__name__}")
    return value


class Fields:
    """A JSON object read field by field; what is left over at the end is an error."""

    def __init__(self, body: Any, where: str = "the request body"):
        if not isinstance(body, dict):
            raise ApiError(400, f"{where} must be a JSON object")
        self.values, self.where = dict(body), where

    def take(self, name: str, kind: type, default: Any = None, *, optional: bool = True) -> Any:
        if name not in self.values:
            return default
        value = check(name, self.values.pop(name), kind, optional)
        return default if value is None else value

    def require(self, name: str, kind: type) -> Any:
        if name not in self.values:
            raise FieldError(name, "is required")
        return check(name, self.values.pop(name), kind)

    def ignore(self, *names: str) -> None:
        """Fields a client may send that change nothing here (e.g. `user`, `keep_alive`)."""
        for name in names:
            self.values.pop(name, None)

    def neutral(self, name: str, allowed: tuple) -> None:
        """A known option unmask does not implement: accepted only at its no-op value."""
        if name in self.values and self.values.pop(name) not in allowed:
            raise ApiError(400, f"{name} is not supported by unmask serve (only {allowed[0]!r})", param=name,
                           code="unsupported_option")

    def settings(self) -> dict[str, Any]:
        """Every GenerationConfig setting present, type-checked. null clears an optional setting
        (`"threshold": null`) and leaves any other at the model's default (`"seed": null`)."""
        out = {}
        for name, (kind, optional) in setting_kinds().items():
            if name not in self.values:
                continue
            value = self.values.pop(name)
            if value is not None or optional:
                out[name] = check(name, value, kind, optional)
        return out

    def finish(self) -> None:
        if self.values:
            names = ", ".join(sorted(self.values))
            raise ApiError(400, f"unknown field(s) in {self.where}: {names}", param=sorted(self.values)[0],
                           code="unknown_field")


def stop_list(value: Any, param: str = "stop") -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 16:
        raise FieldError(param, "expected a non-empty string or a list of at most 16 of them")
    return list(stops)


def positive(name: str, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise FieldError(name, f"must be >= 1, got {value}")
    return value


def check_messages(messages: list, param: str = "messages") -> list[dict]:
    """A conversation of {role, content} objects (content may be null on assistant tool-call turns)."""
    if not messages:
        raise FieldError(param, "must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise FieldError(f"{param}[{i}]", "must be an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise FieldError(f"{param}[{i}].content", "only text parts are supported")
        elif content is not None and not isinstance(content, str):
            raise FieldError(f"{param}[{i}].content", "expected a string")
        if m.get("images"):
            raise FieldError(f"{param}[{i}].images", "images are not supported by this model")
    return [dict(m, content=_text_of(m.get("content"))) for m in messages]


def _text_of(content: Any) -> str | None:
    if isinstance(content, list):
        return "".join(p["text"] for p in content)
    return content


def take_conversation(body: Fields) -> tuple[list[dict], list[Tool]]:
    """`messages` (tool-call turns as text) and `tools`, as both dialects send them."""
    messages = with_tool_messages(check_messages(body.require("messages", list)))
    tools = body.take("tools", list)
    return messages, parse_tools(tools) if tools else []
