"""The committed left-to-right prefix of a generation, as text that never has to be taken back.

A diffusion model commits tokens anywhere in its region, but a committed token never
changes. The run of committed tokens from the region's start is therefore final, and
its text can be sent the moment a step extends it. Three things can still change the
text at the prefix's end, so they are held back until more is known:

- the last token, and what its arrival changed before it: some tokenizers clean up spaces
  depending on the next token ("x ," decodes as "x,");
- a trailing U+FFFD: an incomplete UTF-8 sequence that the next byte token completes;
- a suffix that could be the start of a stop string.

    prefix = CommittedPrefix(decode, length=32, stop_ids=(eos,), stops=["\\n\\n"], limit=20)
    prefix.commit(step.positions, step.tokens)
    delta = prefix.delta()           # new final text since the last call ("" when none)
    prefix.finish_reason             # None while running; "stop" or "length" once the answer is over
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

_UNSET = -1


class CommittedPrefix:
    """The generated region as far as it is known, and the answer text read off its left end."""

    def __init__(self, decode: Callable[[Sequence[int]], str], *, length: int, stop_ids: Sequence[int] = (),
                 stops: Sequence[str] = (), limit: int | None = None):
        self.decode = decode
        self.canvas = np.full(length, _UNSET, dtype=np.int64)  # generated region; _UNSET = still masked
        self.stop_ids = set(int(i) for i in stop_ids)
        self.stops = [s for s in stops if s]
        self.limit = length if limit is None else min(limit, length)  # max_tokens
        self.frontier = 0  # canvas[:frontier] is committed
        self.end: int | None = None  # answer tokens = canvas[:end] once known
        self.finish_reason: str | None = None
        self.text = ""  # the final answer text, once finish_reason is set
        self.sent = ""  # text handed out by delta() so far
        self._stop_checked = 0  # prefixes up to this length hold no stop string

    # ------------------------------------------------------------------ state
    def commit(self, positions: np.ndarray, tokens: np.ndarray) -> None:
        """Record one step's commits (positions relative to the region) and advance the frontier."""
        self.canvas[np.asarray(positions, dtype=np.int64)] = np.asarray(tokens, dtype=np.int64)
        canvas, frontier = self.canvas, self.frontier
        while frontier < len(canvas) and canvas[frontier] != _UNSET:
            if int(canvas[frontier]) in self.stop_ids and self.finish_reason is None:
                self._finish(frontier, "stop")
            frontier += 1
        self.frontier = frontier
        if self.finish_reason is None:
            self._check_stop_strings()
        if self.finish_reason is None and self.frontier >= self.limit:
            self._finish(self.limit, "length")

    def close(self) -> None:
        """The generation ended (its last step ran): whatever is committed is the answer."""
        if self.finish_reason is None:
            self._finish(self.frontier, "length")

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def answer_ids(self) -> np.ndarray:
        end = self.frontier if self.end is None else self.end
        return self.canvas[:end]

    def _finish(self, end: int, reason: str) -> None:
        self.end, self.finish_reason = end, reason
        text = self.decode(self.canvas[:end].tolist())
        self.text = self._cut_at_stop(text)

    def _cut_at_stop(self, text: str) -> str:
        hits = [text.find(s) for s in self.stops if s in text]
        return text[:min(hits)] if hits else text

    def _check_stop_strings(self) -> None:
        """End at the first prefix whose text holds a stop string (its tokens count as generated)."""
        if not self.stops:
            return
        for n in range(self._stop_checked + 1, self.frontier + 1):
            text = self.decode(self.canvas[:n].tolist())
            if any(s in text for s in self.stops):
                self.end, self.finish_reason, self.text = n, "stop", self._cut_at_stop(text)
                return
        self._stop_checked = self.frontier

    # ------------------------------------------------------------------ text out
    def stable_text(self) -> str:
        """The longest text that no later step can change."""
        if self.finish_reason is not None:
            return self.text
        ids = self.canvas[:self.frontier].tolist()
        # Hold back the last token, and whatever its arrival changed before it (a respacing
        # tokenizer turns "x ," into "x,"): only text both decodes agree on is final.
        text = _common_prefix(self.decode(ids[:-1]), self.decode(ids)) if ids else ""
        text = text.rstrip("\ufffd")
        return text[:len(text) - self._stop_overlap(text)]

    def _stop_overlap(self, text: str) -> int:
        """Length of the longest suffix of text that begins some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def delta(self) -> str:
        """Text that became final since the last call."""
        text = self.stable_text()
        if not text.startswith(self.sent):  # a decode that rewrote earlier characters: wait for the end
            if self.finish_reason is None:
                return ""
        new = text[len(self.sent):]  # what was sent stays sent; only characters past it follow
        self.sent += new
        return new


def _common_prefix(a: str, b: str) -> str:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return a[:i]
    return a[:n]


class TemplatePrefix(CommittedPrefix):
    """The same for a fixed-token template (`structured.Layout`): text grows segment by segment,
    a hole's value being final once all its positions are committed."""

    def __init__(self, decode: Callable[[Sequence[int]], str], layout, template: np.ndarray, mask_id: int):
        super().__init__(decode, length=len(template))
        self.layout = layout
        self.canvas = np.where(template == mask_id, _UNSET, template).astype(np.int64)
        self._rendered, _ = layout.render(self.canvas, decode, _UNSET)

    def commit(self, positions: np.ndarray, tokens: np.ndarray) -> None:
        self.canvas[np.asarray(positions, dtype=np.int64)] = np.asarray(tokens, dtype=np.int64)
        self._rendered, complete = self.layout.render(self.canvas, self.decode, _UNSET)
        if complete and self.finish_reason is None:
            self.end, self.finish_reason, self.text = self.layout.length, "stop", self._rendered

    def close(self) -> None:
        if self.finish_reason is None:  # cannot happen once the last step ran: every hole is committed
            self.end, self.finish_reason, self.text = self.layout.length, "length", self._rendered

    def stable_text(self) -> str:
        return self.text if self.finish_reason is not None else self._rendered

    @property
    def answer_ids(self) -> np.ndarray:
        ids = self.canvas[:self.layout.length]
        return ids[ids != self.layout.vocab.filler]
