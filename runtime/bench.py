"""Latency profile of one model package on this device (the logic behind `unmask bench`).

A bench is a list of cases (GenerationConfig overrides) run over a few prompts:
a baseline that commits one token per forward pass (steps = gen_length, cache
none) and the parallel-decoding / key-value-cache variants the user asked for
(by default also a confidence threshold, DEFAULT_THRESHOLD), so each speedup reads
as a ratio against the baseline of the same gen_length and prompt. A case whose
settings equal an earlier one's is dropped, so no row is measured twice.
Every case is measured `runs` times per prompt after `warmup` unmeasured runs;
the report has one row per prompt and case: NFE, tokens and the per-step series
of that prompt's median run (so NFE x tokens per forward = tokens in every row),
medians over the runs for the times.

Writers: bench.json (the schema below, SCHEMA), a Markdown table, and bench.svg,
drawn here as plain text (time per step and tokens committed per step, one
labelled line per case). No click in this module: the CLI only maps flags onto
`plan()` and `run()`.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from .config import GenerationConfig
from .errors import ConfigError
from .stats import TokenRates

if TYPE_CHECKING:  # unmask.model loads onnxruntime
    from .model import Model

SCHEMA = "unmask.bench/1"
DEFAULT_THRESHOLD = 0.9  # the default run's parallel-decoding row (Fast-dLLM's usual setting)
DEFAULT_PROMPTS = (
    "What is 12 + 30?",
    "Write one sentence about the sea.",
)
# The config fields a row shows: what distinguishes the cases.
ROW_FIELDS = ("gen_length", "steps", "block_length", "algorithm", "threshold", "factor", "cache")


# ---------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Case:
    """One configuration to measure: the model's defaults with `overrides` applied."""

    name: str
    overrides: dict[str, Any]
    baseline: bool = False


def plan(base: GenerationConfig, *, caches: Sequence[str | None] = (None,),
         thresholds: Sequence[float | None] = (None,),
         gen_lengths: Sequence[int | None] = (None,)) -> list[Case]:
    """Baseline + every (cache, threshold) pair, for each gen_length; each case validated here.

    A case with the same settings as an earlier one (e.g. `--cache none` with steps = gen_length,
    which is the baseline) is left out: it would only measure the same thing twice.
    """
    cases = []
    for gen_length in gen_lengths:
        length = base.gen_length if gen_length is None else gen_length
        sized = {} if gen_length is None else {"gen_length": gen_length}
        baseline = {**sized, "steps": length, "cache": "none", "threshold": None, "factor": None}
        cases.append(Case(f"baseline (1 token/forward) L={length}", baseline, baseline=True))
        for cache, threshold in itertools.product(caches, thresholds):
            overrides = dict(sized)
            if cache is not None:
                overrides["cache"] = cache
            if threshold is not None:
                overrides["threshold"] = threshold
                overrides["factor"] = None
            cfg = base.replace(**overrides)
            label = [f"cache={cfg.cache or 'auto'}"]
            label.append(f"threshold={cfg.threshold}" if cfg.threshold is not None
                         else f"factor={cfg.factor}" if cfg.factor is not None
                         else f"steps={cfg.resolved_steps}")
            label.append(f"L={length}")
            cases.append(Case(" ".join(label), overrides))
    distinct, seen = [], set()
    for case in cases:
        try:
            settings = base.replace(**case.overrides).validate().to_dict()
        except ConfigError as exc:
            raise ConfigError(f"bench case {case.name!r}: {exc}") from None
        key = json.dumps(settings, sort_keys=True)
        if key not in seen:
            seen.add(key)
            distinct.append(case)
    return distinct


# ---------------------------------------------------------------------- one measured run


@dataclass
class RunRecord(TokenRates):
    """What one generation cost; every time in seconds."""

    nfe: int
    tokens: int  # generated positions committed (gen_length, or fewer counted before an early stop)
    total_seconds: float
    time_to_first_block: float
    forward_seconds: list[float]  # per forward pass
    host_seconds: list[float]  # per step: everything between forward passes
    tokens_per_step: list[int]  # positions committed by each step
    peak_rss: int  # bytes


Measure = Callable[[Any, GenerationConfig], RunRecord]


def measure_model(model: "Model", prompt: Any, config: GenerationConfig) -> RunRecord:
    """Run one generation through `model.stream()` and time it (the default `measure`)."""
    tokens_per_step: list[int] = []
    result = None
    for event in model.stream(**_prompt_kwargs(prompt), config=config):  # the finished config, as is
        tokens_per_step.append(len(event.positions))
        result = event.result or result
    stats = result.stats
    return RunRecord(
        nfe=stats.nfe,
        tokens=stats.tokens,
        total_seconds=stats.total_seconds,
        time_to_first_block=stats.first_block_seconds or 0.0,
        forward_seconds=list(stats.forward_seconds),
        host_seconds=list(stats.host_seconds),
        tokens_per_step=tokens_per_step,
        peak_rss=stats.peak_rss_bytes,
    )


def _prompt_kwargs(prompt: Any) -> dict[str, Any]:
    if isinstance(prompt, str):
        return {"prompt": prompt}
    return {"messages": list(prompt)}


# ---------------------------------------------------------------------- aggregate


@dataclass
class Row:
    """One case on one prompt: NFE, tokens and steps of the median run, medians of the times."""

    name: str
    baseline: bool
    prompt: int  # index into the bench's prompts (0-based)
    prompt_text: str  # the prompt, shortened for tables
    config: dict[str, Any]
    runs: int
    nfe: int
    tokens: int
    tokens_per_forward: float
    tokens_per_second: float
    time_to_first_block: float
    total_seconds: float
    forward_seconds_per_step: float
    host_seconds_per_step: float
    peak_rss: int
    speedup: float | None = None  # tokens/s relative to the baseline of the same gen_length
    nfe_reduction: float | None = None  # baseline NFE / this NFE
    steps: dict[str, list[float]] = field(default_factory=dict)  # series of the median run


def aggregate(case: Case, config: GenerationConfig, records: Sequence[RunRecord], *, prompt: int = 0,
              prompt_text: str = "") -> Row:
    """One row from the measured runs of one case on one prompt.

    NFE, tokens and tokens per forward come from one run (the median by total time), so they
    always agree (NFE x tokens/forward = tokens); the times are medians over the runs.
    """
    if not records:
        raise ValueError(f"no measured runs for {case.name}")
    median = statistics.median
    ordered = sorted(records, key=lambda r: r.total_seconds)
    typical = ordered[(len(ordered) - 1) // 2]
    return Row(
        name=case.name,
        baseline=case.baseline,
        prompt=prompt,
        prompt_text=prompt_text,
        config={k: getattr(config, k) for k in ROW_FIELDS},
        runs=len(records),
        nfe=typical.nfe,
        tokens=typical.tokens,
        tokens_per_forward=typical.tokens_per_forward,
        tokens_per_second=median(r.tokens_per_second for r in records),
        time_to_first_block=median(r.time_to_first_block for r in records),
        total_seconds=median(r.total_seconds for r in records),
        forward_seconds_per_step=median(_mean(r.forward_seconds) for r in records),
        host_seconds_per_step=median(_mean(r.host_seconds) for r in records),
        peak_rss=max(r.peak_rss for r in records),
        steps={
            "forward_seconds": list(typical.forward_seconds),
            "host_seconds": list(typical.host_seconds),
            "tokens": list(typical.tokens_per_step),
        },
    )


def add_ratios(rows: Sequence[Row]) -> None:
    """Fill speedup / nfe_reduction against the baseline row of the same gen_length and prompt."""
    baselines = {(r.config["gen_length"], r.prompt): r for r in rows if r.baseline}
    for row in rows:
        base = baselines.get((row.config["gen_length"], row.prompt))
        if base is None:
            continue
        row.speedup = row.tokens_per_second / base.tokens_per_second if base.tokens_per_second else None
        row.nfe_reduction = base.nfe / row.nfe if row.nfe else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ---------------------------------------------------------------------- run


Progress = Callable[[str, int, int], None]  # (case name, runs done, runs total)


@dataclass(frozen=True)
class Generation:
    """One generation of the bench, in the order they ran (what a profiler trace is matched against)."""

    measured: bool  # False for warm-up runs
    nfe: int  # forward passes it made
    step_seconds: float  # forward + host time of its steps


def run(model: Any, cases: Sequence[Case], prompts: Sequence[Any], *, base: GenerationConfig,
        runs: int = 3, warmup: int = 1, measure: Measure | None = None,
        on_progress: Progress | None = None, timeline: list[Generation] | None = None) -> list[Row]:
    """Measure every case: `warmup` unmeasured + `runs` measured generations per prompt.

    One row per case and prompt, in plan order; `timeline`, when given, receives every
    generation (warm-up ones included) as it runs.
    """
    if runs < 1 or warmup < 0:
        raise ConfigError(f"runs must be >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    if not prompts:
        raise ConfigError("no prompts to run")
    measure = measure or (lambda prompt, config: measure_model(model, prompt, config))
    total = len(cases) * len(prompts) * (runs + warmup)
    done = 0
    rows = []
    for case in cases:
        config = base.replace(**case.overrides).validate()
        for index, prompt in enumerate(prompts):
            records = []
            for i in range(warmup + runs):
                record = measure(prompt, config)
                if i >= warmup:
                    records.append(record)
                if timeline is not None:
                    seconds = sum(record.forward_seconds) + sum(record.host_seconds)
                    timeline.append(Generation(i >= warmup, record.nfe, seconds))
                done += 1
                if on_progress:
                    on_progress(case.name, done, total)
            rows.append(aggregate(case, config, records, prompt=index, prompt_text=prompt_label(prompt)))
    add_ratios(rows)
    return rows


def prompt_label(prompt: Any, width: int = 32) -> str:
    """A prompt (text or chat messages) as one short line for tables."""
    text = prompt if isinstance(prompt, str) else " / ".join(str(m.get("content", "")) for m in prompt)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def report(rows: Sequence[Row], *, model: Mapping[str, Any], device: Mapping[str, Any],
           runs: int, warmup: int, prompts: int) -> dict[str, Any]:
    """The bench.json document."""
    from . import __version__

    return {
        "schema": SCHEMA,
        "unmask_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": dict(model),
        "device": {**dict(device), **host_info()},
        "settings": {"runs": runs, "warmup": warmup, "prompts": prompts, "statistic": "median"},
        "rows": [asdict(r) for r in rows],
    }


def host_info() -> dict[str, Any]:
    import psutil

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "memory_bytes": psutil.virtual_memory().total,
    }


def read_prompts(path: str | os.PathLike) -> list[Any]:
    """One prompt per line; a .jsonl file may hold {"prompt": ...} or {"messages": [...]} objects."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read prompts ({exc})") from exc
    prompts: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if file.suffix == ".jsonl":
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{file}:{number}: not JSON ({exc.msg})") from None
            if isinstance(item, dict) and isinstance(item.get("prompt"), str):
                prompts.append(item["prompt"])
            elif isinstance(item, dict) and isinstance(item.get("messages"), list):
                prompts.append(item["messages"])
            else:
                raise ConfigError(f"{file}:{number}: expected {{\"prompt\": str}} or {{\"messages\": [...]}}")
        else:
            prompts.append(line.rstrip("\n"))
    if not prompts:
        raise ConfigError(f"{file}: no prompts (one per line)")
    return prompts


# ---------------------------------------------------------------------- output folder


def prepare_output(folder: str | os.PathLike, *, force: bool = False) -> Path:
    """Create the output folder before any measuring: an existing one is refused without `force`,
    one that cannot be created or written to is a one-line ConfigError."""
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a folder; choose another --out")
    if out.exists() and not force:
        raise ConfigError(f"{out} already exists; pass --force to overwrite its bench files, or choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".unmask-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(f"cannot write bench results to {out} ({reason}); choose another --out") from None
    return out


def parse_list(text: str | None, convert: Callable[[str], Any]) -> list[Any]:
    """'none,prefix,dual' -> ['none', 'prefix', 'dual']; an empty or missing list -> [None]."""
    if text is None or not text.strip():
        return [None]
    return [convert(item.strip()) for item in text.split(",") if item.strip()] or [None]


# the writers live in bench_report.py; re-exported so `bench.write_all(doc, folder)` stays one import
from .bench_report import markdown, summary, svg_chart, write_all  # noqa: E402
