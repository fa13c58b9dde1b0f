"""Generation statistics: what one generate() call cost, step by step.

Every Result carries a GenerationStats. `forward_seconds[i]` is the time inside
session.run for step i, `host_seconds[i]` everything else that step did (Decoder
scoring and selection, input building, cache gathering), so the share of time
outside the graph is visible per step and per kind of pass.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import psutil

# none-mode pass, block-start refresh, cached window; cache block: prompt prefill, block step, block store
STEP_KINDS = ("full", "refresh", "window", "prefill", "denoise", "store")


class TokenRates:
    """tokens_per_forward and tokens_per_second of a record with tokens, nfe and total_seconds
    (one generation's stats, a bench run, an evaluation score)."""

    tokens: int
    nfe: int
    total_seconds: float

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.nfe if self.nfe else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.total_seconds if self.total_seconds > 0 else 0.0


@dataclass
class GenerationStats(TokenRates):
    nfe: int = 0  # forward passes (function evaluations)
    tokens: int = 0  # positions committed by the steps (early-stop fill not counted)
    total_seconds: float = 0.0  # wall time of the generation, setup included
    first_block_seconds: float | None = None  # time to the first finished block
    forward_seconds: list[float] = field(default_factory=list)  # per step, inside session.run
    host_seconds: list[float] = field(default_factory=list)  # per step, outside session.run
    step_kinds: list[str] = field(default_factory=list)  # per step, one of STEP_KINDS
    window_lengths: list[int] = field(default_factory=list)  # per step, positions recomputed
    past_lengths: list[int] = field(default_factory=list)  # per step, cached positions attended to
    logits_rows: list[int] = field(default_factory=list)  # per step, rows the LM head computed
    cache: str = "none"  # cache mode used
    peak_rss_bytes: int = 0  # process peak resident memory after the generation

    @property
    def host_share(self) -> float:
        """Fraction of step time spent outside session.run."""
        busy = sum(self.forward_seconds) + sum(self.host_seconds)
        return sum(self.host_seconds) / busy if busy > 0 else 0.0

    def record_step(self, kind: str, window: int, past: int, rows: int, forward: float, host: float,
                    committed: int) -> None:
        self.nfe += 1
        self.tokens += committed
        self.step_kinds.append(kind)
        self.window_lengths.append(window)
        self.past_lengths.append(past)
        self.logits_rows.append(rows)
        self.forward_seconds.append(forward)
        self.host_seconds.append(host)

    def to_dict(self, per_step: bool = True) -> dict:
        """Summary for JSON output; the per-step lists only with `per_step`."""
        summary = {
            "nfe": self.nfe,
            "tokens": self.tokens,
            "tokens_per_forward": self.tokens_per_forward,
            "tokens_per_second": self.tokens_per_second,
            "total_seconds": self.total_seconds,
            "first_block_seconds": self.first_block_seconds,
            "host_share": self.host_share,
            "cache": self.cache,
            "peak_rss_bytes": self.peak_rss_bytes,
        }
        if not per_step:
            return summary
        return summary | {
            "forward_seconds": list(self.forward_seconds),
            "host_seconds": list(self.host_seconds),
            "step_kinds": list(self.step_kinds),
            "window_lengths": list(self.window_lengths),
            "past_lengths": list(self.past_lengths),
            "logits_rows": list(self.logits_rows),
        }


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (current RSS where no peak is kept)."""
    info = psutil.Process().memory_info()
    peak = getattr(info, "peak_wset", None)  # Windows
    if peak:
        return int(peak)
    if sys.platform != "win32":
        import resource  # POSIX only

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(maxrss if sys.platform == "darwin" else maxrss * 1024)  # bytes on macOS, KiB on Linux
    return int(info.rss)
