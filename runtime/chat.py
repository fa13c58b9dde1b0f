"""Chat templates: render a conversation with the package's jinja template, encode it safely.

Rendering follows transformers' `apply_chat_template`: a sandboxed jinja environment
(ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, the loopcontrols
extension; here also bounded in time and size, see unmask.sandbox), variables `messages`,
`add_generation_prompt`, `bos_token`, `eos_token`, and the helpers `raise_exception`,
`strftime_now` and a `tojson` filter that does not HTML-escape.

Encoding keeps user text out of the control channel. Before rendering, every special
token string inside a message is swapped for a digit-only placeholder; after rendering,
the special tokens still present can only have come from the template itself, so they
are encoded by id, and everything between them (placeholders restored to the user's
characters) is encoded as ordinary text with special-token matching off.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import datetime
from typing import Any, Mapping, Sequence

import jinja2

from .errors import ConfigError, ModelFormatError
from .sandbox import BoundedEnvironment, TemplateLimit, check_source, render
from .tokenizer import Tokenizer

ROLES = ("system", "user", "assistant")
PROBE_CONVERSATION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello! How can I help?"},
    {"role": "user", "content": "What is 12 + 30?"},
]


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # jinja's own tojson HTML-escapes (<, >, &), which would corrupt prompts.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> BoundedEnvironment:
    env = BoundedEnvironment()
    env.set_filter("tojson", _tojson)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def check_messages(messages: Any) -> list[dict[str, str]]:
    """A conversation as a list of {role, content} dicts of strings; ConfigError otherwise."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ConfigError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise ConfigError(f"message {i} must be a dict with string 'role' and 'content', got {message!r}")
        checked.append({"role": message["role"], "content": message["content"]})
    return checked


class ChatTemplate:
    """One package's chat template, compiled once."""

    def __init__(self, source: str, *, bos_token: str | None = None, eos_token: str | None = None):
        env = _environment()
        try:
            check_source(source, env)
            self._template = env.from_string(source)
        except TemplateLimit as exc:
            raise ModelFormatError(f"the package's chat template is refused: {exc}") from exc
        except (jinja2.exceptions.TemplateSyntaxError, SyntaxError, RecursionError, MemoryError) as exc:
            raise ModelFormatError(f"the package's chat template does not compile: {exc}") from exc
        self.source = source
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        self._probe()

    def _probe(self) -> None:
        """Render a typical conversation once, so a template that breaks a limit is refused at load,
        not on the first turn. A template that rejects this conversation (raise_exception) is fine."""
        try:
            self._render(PROBE_CONVERSATION, True)
        except ConfigError:
            pass

    def render(self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The prompt text, exactly as transformers' apply_chat_template(tokenize=False) gives it."""
        return self._render(check_messages(messages), add_generation_prompt)

    def encode(self, messages: Sequence[Mapping[str, str]], tokenizer: Tokenizer, *,
               add_generation_prompt: bool = True) -> list[int]:
        """Prompt ids in which only the template's own special tokens are control tokens."""
        messages = check_messages(messages)
        specials = sorted(tokenizer.special_tokens, key=len, reverse=True)
        if not specials:
            return tokenizer.encode(self._render(messages, add_generation_prompt))
        special_pattern = re.compile("|".join(re.escape(s) for s in specials))
        substitutions: dict[str, str] = {}
        sanitized = [
            {"role": _neutralize(m["role"], special_pattern, substitutions),
             "content": _neutralize(m["content"], special_pattern, substitutions)}
            for m in messages
        ]
        rendered = self._render(sanitized, add_generation_prompt)
        ids: list[int] = []
        last = 0
        for match in special_pattern.finditer(rendered):
            ids += _encode_text(rendered[last:match.start()], substitutions, tokenizer)
            ids.append(tokenizer.special_id(match.group(0)))
            last = match.end()
        ids += _encode_text(rendered[last:], substitutions, tokenizer)
        return ids

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        chars = sum(len(m["role"]) + len(m["content"]) for m in messages)
        try:
            return render(self._template, chars, messages=messages, add_generation_prompt=add_generation_prompt,
                          bos_token=self.bos_token, eos_token=self.eos_token)
        except TemplateLimit as exc:
            raise ModelFormatError(f"the package's chat template went past a limit: {exc}") from exc
        except jinja2.exceptions.SecurityError as exc:
            raise ModelFormatError(f"the package's chat template tried an unsafe operation: {exc}") from exc
        except jinja2.exceptions.TemplateError as exc:
            # raise_exception() in the template: the conversation breaks one of its rules
            raise ConfigError(f"the chat template rejected this conversation: {exc}") from exc
        except Exception as exc:  # the template's own bug (1 / 0, a huge int printed, ...): never a bare error
            raise ModelFormatError(f"the package's chat template failed: {type(exc).__name__}: {exc}") from exc


def _neutralize(text: str, special_pattern: re.Pattern, substitutions: dict[str, str]) -> str:
    """Replace each special-token string typed in `text` with a fresh digit placeholder.

    Digits survive template filters (trim, upper, tojson) unchanged, and cannot form or
    complete a special token with the template text around them.
    """
    def placeholder(match: re.Match) -> str:
        key = f"{secrets.randbits(96):029d}"
        substitutions[key] = match.group(0)
        return key

    # Re-scan until clean: a substitution can never splice a new token, but be certain.
    while special_pattern.search(text):
        text = special_pattern.sub(placeholder, text)
    return text


def _encode_text(text: str, substitutions: dict[str, str], tokenizer: Tokenizer) -> list[int]:
    if not text:
        return []
    for key, original in substitutions.items():
        text = text.replace(key, original)
    return tokenizer.encode(text)
