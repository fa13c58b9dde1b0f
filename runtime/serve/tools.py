"""Tool calls: the request's tools, how the model learns of them, and its answer as a call.

The embedded model answers a tool request with one compact JSON object,
`{"name": "set_timer", "arguments": {"minutes": 5}}` (unmask.tasks); any model told
about the tools is asked for the same shape. An answer of that shape naming one of the
request's tools becomes an OpenAI `tool_calls` entry (arguments as a JSON string) or an
Ollama `message.tool_calls` entry (arguments as an object).

`tool_choice`: "auto" (default) reads a call when the answer is one, "none" never does,
and naming a function ({"type": "function", "function": {"name": ...}}, or "required"
with exactly one tool) pins the call's frame as template tokens so the model fills only
the arguments (see `structured`); "required" with several tools is refused.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict


def parse_tools(tools: Any) -> list[Tool]:
    """OpenAI/Ollama `tools` -> Tool list; ConfigError on anything else."""
    if not isinstance(tools, list):
        raise ConfigError("tools must be a list of {'type': 'function', 'function': {...}}")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" \
                or not isinstance(tool.get("function"), dict):
            raise ConfigError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}")
        fn = tool["function"]
        name, description, parameters = fn.get("name"), fn.get("description", ""), fn.get("parameters", {})
        if not isinstance(name, str) or not name:
            raise ConfigError(f"tools[{i}].function.name must be a non-empty string")
        if not isinstance(description, str) or not isinstance(parameters, dict):
            raise ConfigError(f"tools[{i}].function: description must be a string and parameters an object")
        out.append(Tool(name, description, parameters))
    if len({t.name for t in out}) != len(out):
        raise ConfigError("tools: two tools share a name")
    return out


def forced_tool(tools: list[Tool], choice: Any) -> Tool | None:
    """The tool whose call the answer must be, or None ("auto"/"none"); ConfigError when unsupported."""
    if choice in (None, "auto", "none"):
        return None
    if choice == "required":
        if len(tools) != 1:
            raise ConfigError("tool_choice 'required' is supported with exactly one tool; name the function "
                              "instead: {'type': 'function', 'function': {'name': ...}}")
        return tools[0]
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        for tool in tools:
            if tool.name == name:
                return tool
        raise ConfigError(f"tool_choice names {name!r}, which is not among the request's tools")
    raise ConfigError("tool_choice must be 'auto', 'none', 'required' or "
                      "{'type': 'function', 'function': {'name': ...}}")


def call_frame(tool: Tool) -> tuple[dict, tuple[str, str]]:
    """A forced call as a schema (its arguments) inside fixed text, in the compact form the
    embedded model writes: {"name":"set_timer","arguments":{...}}."""
    name = json.dumps(tool.name, ensure_ascii=False)
    return tool.parameters or {"type": "object"}, ('{"name":' + name + ',"arguments":', "}")


def system_prompt(tools: list[Tool]) -> str:
    """How a model that was not trained on these tools is told about them."""
    lines = ["You can call these tools. To call one, answer with only a JSON object "
             '{"name": TOOL_NAME, "arguments": {...}}.']
    for tool in tools:
        lines.append(json.dumps({"name": tool.name, "description": tool.description,
                                 "parameters": tool.parameters}, ensure_ascii=False))
    return "\n".join(lines)


def read_call(text: str, tools: list[Tool]) -> ToolCall | None:
    """The answer as a call of one of `tools`, or None when it is not one."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        return None
    if not isinstance(value, dict) or set(value) - {"name", "arguments"}:
        return None
    arguments = value.get("arguments", {})
    if value.get("name") not in {t.name for t in tools} or not isinstance(arguments, dict):
        return None
    return ToolCall("call_" + secrets.token_hex(12), value["name"], arguments)


def could_be_call(text: str) -> bool:
    """While the answer may still turn out to be a call, its text is held back."""
    head = text.lstrip()
    return head == "" or head.startswith("{")


def with_tool_messages(messages: list[dict]) -> list[dict]:
    """Assistant turns that made calls and `tool` results, as plain text turns the template can render."""
    out = []
    for m in messages:
        content = m.get("content")
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            parts = [c.get("function", {}) for c in calls if isinstance(c, dict)]
            content = "\n".join(json.dumps({"name": p.get("name"), "arguments": _arguments(p.get("arguments"))},
                                           separators=(",", ":"), ensure_ascii=False) for p in parts)
        out.append({"role": m.get("role"), "content": "" if content is None else content})
    return out


def _arguments(value: Any) -> Any:
    if isinstance(value, str):  # OpenAI sends arguments as a JSON string, Ollama as an object
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
