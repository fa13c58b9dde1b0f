"""The `unmask chat` loop: read a line, answer it or run a slash command, repeat.

Interactive (a terminal on stdin): a prompt with readline line editing and
history; Ctrl-C cancels the answer being generated (the turn is dropped, the
session goes on) or, at the prompt, clears the line and says how to leave; a
second Ctrl-C in a row, Ctrl-D or /exit leaves. A message of several lines goes
between lines starting and ending with \"\"\" (interactive or piped).
Piped stdin: one turn per line, answers only, no prompt. Errors a user can fix
(a bad /set value, a prompt longer than the model's context) are printed and the
session continues.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, TextIO

from .. import __version__
from ..config import GenerationConfig
from ..errors import ConfigError, UnmaskError
from ..examples import examples_text, package_skills
from ..manifest import write_text_atomic
from .options import describe, ineffective, parse_setting
from .render import BlockView, CanvasView

if TYPE_CHECKING:  # unmask.model loads onnxruntime
    from ..model import ChatSession, Model

PROMPT = ">>> "
CONTINUATION = "... "  # inside a """ multi-line message
FENCE = '"""'
LEAVE_HINT = "(Ctrl-C again, Ctrl-D or /exit leaves)"
HELP = """commands:
  /reset              forget the conversation (the system prompt stays)
  /examples           what the model can do, with ways to ask (models that list them)
  /stats              cost of the last answer: NFE, tokens per forward, tokens/s, time to first block
  /set KEY VALUE      change a generation setting (e.g. /set steps 8, /set threshold none); /set alone lists them
  /system TEXT        set the system prompt (/system alone clears it)
  /save FILE          write the conversation as JSON
  /exit               leave (Ctrl-D or Ctrl-C twice at the prompt work too); Ctrl-C cancels a running answer
  \"\"\"                 start a message of several lines; a line ending with \"\"\" sends it"""


class ChatLoop:
    """One chat session driven by lines of text."""

    def __init__(self, model: Model, session: ChatSession, overrides: dict[str, Any], *,
                 view: BlockView | CanvasView, out: TextIO, err: TextIO, model_path: str | None = None):
        self.model = model
        self.session = session  # holds the resolved settings every turn runs with
        self.overrides = dict(overrides)  # the user's settings so far (flags, then /set): for /set and /save
        self.view = view
        self.out = out
        self.err = err
        self.model_path = model_path
        self.last = None  # Result of the last finished answer
        self.pending: list[str] | None = None  # lines of an open """ message

    @property
    def prompt(self) -> str:
        return PROMPT if self.pending is None else CONTINUATION

    @property
    def config(self) -> GenerationConfig:
        return self.session.config

    # ------------------------------------------------------------------ driving
    def run(self, lines: Iterable[str]) -> None:
        for line in lines:
            if not self.handle(line):
                return
        if self.pending is not None:  # input ended inside a """ message: send what was typed
            self.send("\n".join(self.pending))

    def handle(self, line: str) -> bool:
        """One input line; False when the user asked to leave."""
        if self.pending is not None:
            return self.collect(line)
        text = line.strip()
        if not text:
            return True
        if text.startswith(FENCE):
            self.pending = []
            return self.collect(text[len(FENCE):])
        if text.startswith("/"):
            return self.command(text)
        return self.send(text)

    def collect(self, line: str) -> bool:
        """One line of an open FENCE message, kept as typed (indentation matters in code); a closing FENCE sends it."""
        closing = line.rstrip().endswith(FENCE)
        piece = line.rstrip()[: -len(FENCE)] if closing else line
        if piece or self.pending:
            self.pending.append(piece)
        if not closing:
            return True
        text, self.pending = "\n".join(self.pending), None
        return self.send(text)

    def send(self, text: str) -> bool:
        if not text.strip():
            return True
        try:
            self.answer(text)
        except UnmaskError as exc:
            self.say(f"error: {exc}")
        return True

    def answer(self, text: str) -> None:
        events = self.session.stream(text)
        view = self.view
        view.start(self.config)
        result = None
        try:
            for event in events:
                view.event(event)
                result = event.result or result
        except KeyboardInterrupt:
            events.close()
            view.cancel()
            self.say("[answer cancelled; the turn was not added to the conversation]")
            return
        view.finish(result.text)
        self.last = result

    # ------------------------------------------------------------------ slash commands
    def command(self, text: str) -> bool:
        name, _, rest = text.partition(" ")
        rest = rest.strip()
        handler: Callable[[str], bool | None] | None = {
            "/exit": lambda _: False,
            "/quit": lambda _: False,
            "/help": lambda _: self.say(HELP),
            "/examples": lambda _: self.say(examples_text(package_skills(self.model.package.folder))),
            "/reset": self.reset,
            "/stats": self.stats,
            "/set": self.set,
            "/system": self.system,
            "/save": self.save,
        }.get(name.lower())
        if handler is None:
            self.say(f"unknown command {name}; try /reset, /stats, /set, /system, /save, /examples, /exit or /help")
            return True
        try:
            return handler(rest) is not False
        except UnmaskError as exc:
            self.say(f"error: {exc}")
            return True

    def reset(self, _: str) -> None:
        self.session.reset()
        self.last = None
        self.say("conversation cleared")

    def stats(self, _: str) -> None:
        if self.last is None:
            self.say("no answer yet")
            return
        s = self.last.stats
        first = "-" if s.first_block_seconds is None else f"{s.first_block_seconds * 1e3:.0f} ms"
        self.say(
            f"NFE {s.nfe}, tokens per forward {s.tokens_per_forward:.2f}, "
            f"{s.tokens_per_second:.1f} tokens/s, time to first block {first}, "
            f"total {s.total_seconds:.2f} s, cache {s.cache}"
        )

    def set(self, rest: str) -> None:
        if not rest:
            self.say(describe(self.config, self.model.manifest.generation, self.overrides, self.model.facts))
            return
        key, _, value = rest.partition(" ")
        if not value.strip():
            raise ConfigError(f"usage: /set KEY VALUE (e.g. /set {key} ...)")
        name, parsed = parse_setting(key, value)
        overrides = {**self.overrides, name: parsed}
        self.session.config = self.model.resolve_config(**overrides)  # raises before anything changes
        self.overrides = overrides
        shown = "none" if parsed is None else parsed
        self.say(f"{name} = {shown}")
        for note in ineffective(self.config, [name], architecture=self.model.manifest.architecture,
                                cache_reuse=self.model.cache_reuse):
            self.say(f"note: {note}")

    def system(self, rest: str) -> None:
        self.session.system = rest or None
        self.say("system prompt set" if rest else "system prompt cleared")

    def save(self, rest: str) -> None:
        if not rest:
            raise ConfigError("usage: /save FILE")
        path = Path(os.path.expanduser(shlex.split(rest)[0] if rest[0] in "'\"" else rest))
        doc = {
            "format": "unmask.chat/1",
            "unmask_version": __version__,
            "model": self.model_path,
            "system": self.session.system,
            "messages": [dict(m) for m in self.session.history],
            "settings": {k: getattr(self.config, k) for k in self.overrides},
        }
        write_atomic(path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        turns = len(self.session.history) // 2
        self.say(f"saved {turns} turn{'s' if turns != 1 else ''} to {path}")

    def say(self, message: str) -> None:
        self.err.write(message + "\n")
        self.err.flush()


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename over it (no half-written file)."""
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({exc.strerror or exc})") from exc


# ---------------------------------------------------------------------- input sources


def terminal_lines(prompt: Callable[[], str] = lambda: PROMPT) -> Iterator[str]:
    """Lines typed at a terminal, with readline editing and history.

    Ctrl-C clears the line and says how to leave; a second one in a row ends the input,
    as Ctrl-D does.
    """
    try:
        import readline  # noqa: F401  (importing it is what turns on editing/history for input())
    except ImportError:  # Windows without pyreadline: plain input()
        pass
    interrupted = False
    while True:
        try:
            line = input(prompt())
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            if interrupted:
                return
            sys.stderr.write(LEAVE_HINT + "\n")
            interrupted = True
            continue
        except EOFError:
            sys.stdout.write("\n")
            return
        interrupted = False
        yield line


def piped_lines(stream: TextIO) -> Iterator[str]:
    """One turn per line of piped input."""
    for line in stream:
        yield line.rstrip("\n")
