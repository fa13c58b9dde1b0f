"""Progress over the tensors of an export: a rich bar on stderr, or nothing (quiet)."""

from __future__ import annotations

import sys


class Progress:
    """`with Progress(total, quiet) as p: p.advance(name)` — one tick per checkpoint tensor."""

    def __init__(self, total: int, description: str, *, quiet: bool = False):
        self.total, self.description, self.quiet = total, description, quiet
        self._bar = self._task = None

    def __enter__(self) -> "Progress":
        if not self.quiet:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TextColumn("{task.fields[tensor]}"),
                                     console=Console(file=sys.stderr), transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.description, total=self.total, tensor="")
        return self

    def advance(self, tensor: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, tensor=tensor[-48:])

    def note(self, text: str) -> None:
        """A line above the bar (stderr), e.g. the validation table."""
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False)
        elif not self.quiet:
            print(text, file=sys.stderr)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
