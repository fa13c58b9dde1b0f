"""Server metrics in the Prometheus text format: queue, outcomes, tokens/s, time to first delta."""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

_WINDOW = 100  # recent generations the averages are taken over


class Metrics:
    """Counters and recent timings, safe to update from the worker and read from the loop."""

    def __init__(self, queue_depth: Callable[[], int], running: Callable[[], int]):
        self._lock = threading.Lock()
        self.queue_depth, self.running = queue_depth, running
        self.counts = {"requests": 0, "rejected": 0, "completed": 0, "cancelled": 0, "failed": 0}
        self.totals = {"forward_passes": 0, "completion_tokens": 0, "prompt_tokens": 0}
        self.rates: deque[float] = deque(maxlen=_WINDOW)  # completion tokens / generation seconds
        self.first_deltas: deque[float] = deque(maxlen=_WINDOW)

    def count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def record(self, outcome) -> None:
        """One finished (or cancelled) generation's figures."""
        with self._lock:
            self.counts["cancelled" if outcome.finish_reason == "cancelled" else "completed"] += 1
            self.totals["forward_passes"] += outcome.forward_passes
            self.totals["completion_tokens"] += outcome.completion_tokens
            self.totals["prompt_tokens"] += outcome.prompt_tokens
            if outcome.seconds > 0 and outcome.finish_reason != "cancelled":
                self.rates.append(outcome.completion_tokens / outcome.seconds)
            if outcome.first_delta_seconds is not None:
                self.first_deltas.append(outcome.first_delta_seconds)

    def render(self) -> str:
        with self._lock:
            lines = [
                "# TYPE unmask_queue_depth gauge", f"unmask_queue_depth {self.queue_depth()}",
                "# TYPE unmask_running gauge", f"unmask_running {self.running()}",
            ]
            for name, value in self.counts.items():
                lines += [f"# TYPE unmask_{name}_total counter", f"unmask_{name}_total {value}"]
            for name, value in self.totals.items():
                lines += [f"# TYPE unmask_{name}_total counter", f"unmask_{name}_total {value}"]
            lines += ["# TYPE unmask_tokens_per_second gauge", f"unmask_tokens_per_second {_mean(self.rates):.3f}",
                      "# TYPE unmask_time_to_first_delta_seconds gauge",
                      f"unmask_time_to_first_delta_seconds {_mean(self.first_deltas):.6f}"]
        return "\n".join(lines) + "\n"


def _mean(values) -> float:
    return sum(values) / len(values) if values else 0.0


def parse(text: str) -> dict[str, float]:
    """The metrics page back as {name: value} (for tests and scripts)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
