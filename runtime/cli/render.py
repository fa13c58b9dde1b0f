"""How an answer reaches the terminal while it is being denoised.

Three views of the same event stream (`Model.stream` / a chat session's `stream`):
- BlockView: text appears block by block, as each block is finished (the default);
- CanvasView: the whole generation region is redrawn in place after every step,
  masked positions shown as a placeholder glyph (llama.cpp's --diffusion-visual);
- FinalView: nothing until the answer is complete (--no-stream).
A CanvasView needs a terminal; `make_view` falls back to BlockView elsewhere.
"""

from __future__ import annotations

import shutil
from typing import Any, Callable, TextIO

MASK_GLYPH = "░"
_CLEAR_BELOW = "\x1b[J"
_HIDE_CURSOR, _SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


class BlockView:
    """Print the text of each finished block as soon as the decoder finishes it."""

    def __init__(self, out: TextIO):
        self.out = out
        self.shown = ""

    def start(self, config: Any) -> None:
        self.shown = ""

    def event(self, ev: Any) -> None:
        if ev.text:
            self._show(ev.text)

    def finish(self, text: str) -> None:
        # The final text can differ from the sum of block texts (EOS trimming, detokenization
        # across a block boundary): print only what is missing, else trust what is shown.
        if text.startswith(self.shown):
            self._show(text[len(self.shown):])
        self.out.write("\n")
        self.out.flush()

    def cancel(self) -> None:
        self.out.write("\n")
        self.out.flush()

    def _show(self, piece: str) -> None:
        self.out.write(piece)
        self.out.flush()
        self.shown += piece


class FinalView(BlockView):
    """Print the answer once, when it is complete."""

    def event(self, ev: Any) -> None:
        pass


class CanvasView:
    """Redraw the whole generation region after every step; masked positions as MASK_GLYPH."""

    def __init__(self, out: TextIO, decode: Callable[[list[int]], str], *, glyph: str = MASK_GLYPH):
        self.out = out
        self.decode = decode
        self.glyph = glyph
        self.lines = 0

    def start(self, config: Any) -> None:
        self.length = int(config.gen_length)
        self.steps = int(config.resolved_steps)
        self.canvas: list[int | None] = [None] * self.length
        self.step = 0
        self.lines = 0
        self.out.write(_HIDE_CURSOR)
        self._draw()

    def event(self, ev: Any) -> None:
        for position, token in zip(ev.positions, ev.tokens):
            index = int(position) - int(ev.gen_start)  # positions are absolute; the canvas is the generation
            if 0 <= index < self.length:
                self.canvas[index] = int(token)
        self.step = int(ev.step) + 1
        self._draw()

    def finish(self, text: str) -> None:
        self._erase()
        self.out.write(text + "\n" + _SHOW_CURSOR)
        self.out.flush()

    def cancel(self) -> None:
        self.out.write("\n" + _SHOW_CURSOR)
        self.out.flush()

    def render(self) -> str:
        """The canvas as text: runs of committed tokens decoded together, one glyph per mask."""
        parts, run = [], []
        for token in self.canvas:
            if token is None:
                if run:
                    parts.append(self.decode(run))
                    run = []
                parts.append(self.glyph)
            else:
                run.append(token)
        if run:
            parts.append(self.decode(run))
        done = sum(t is not None for t in self.canvas)
        header = f"step {self.step}/{self.steps}  {done}/{self.length} tokens unmasked"
        return header + "\n" + "".join(parts)

    def _draw(self) -> None:
        self._erase()
        text = self.render()
        self.out.write(text)
        self.out.flush()
        width = max(shutil.get_terminal_size().columns, 1)
        # lines the cursor moved down: wrapped rows of every line but the last
        self.lines = sum(max(len(line) - 1, 0) // width + 1 for line in text.split("\n")) - 1

    def _erase(self) -> None:
        if self.lines:
            self.out.write(f"\x1b[{self.lines}F")  # to the start of the first line drawn
        else:
            self.out.write("\r")
        self.out.write(_CLEAR_BELOW)
        self.lines = 0


def make_view(out: TextIO, *, stream: bool, visual: bool, decode: Callable[[list[int]], str] | None,
              warn: Callable[[str], None]) -> BlockView | CanvasView:
    """The view the flags ask for, degraded to plain streaming where no terminal can redraw."""
    if visual:
        if not _is_tty(out):
            warn("note: --visual needs a terminal; streaming finished blocks instead")
            return BlockView(out)
        if decode is None:
            warn("note: --visual is not available for this model; streaming finished blocks instead")
            return BlockView(out)
        return CanvasView(out, decode)
    return BlockView(out) if stream else FinalView(out)


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False
