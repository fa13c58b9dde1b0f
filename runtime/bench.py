"""Latency profile of one model package on this device (the logic behind `unmask bench`).

A bench is a list of cases (GenerationConfig overrides) run over a few prompts:
a baseline that commits one token per forward pass (steps = gen_length, cache
none) and the parallel-decoding / key-value-cache variants the user asked for,
so each speedup reads as a ratio against the baseline of the same gen_length.
Every case is measured `runs` times per prompt after `warmup` unmeasured runs;
the report keeps medians, plus the per-step series of the median run for the
chart (time per step, tokens committed per step).

Writers: bench.json (the schema below, SCHEMA), a Markdown table, and a chart —
PNG through matplotlib when it is installed, otherwise a self-contained SVG drawn
here. No click in this module: the CLI only maps flags onto `plan()` and `run()`.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from .config import GenerationConfig
from .errors import ConfigError
from .manifest import replacing, write_text_atomic
from .stats import TokenRates

if TYPE_CHECKING:  # unmask.model loads onnxruntime
    from .model import Model

SCHEMA = "unmask.bench/1"
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
    """Baseline + every (cache, threshold) pair, for each gen_length; each case validated here."""
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
    for case in cases:
        try:
            base.replace(**case.overrides).validate()
        except ConfigError as exc:
            raise ConfigError(f"bench case {case.name!r}: {exc}") from None
    return cases


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
    """Medians of one case over every prompt and run."""

    name: str
    baseline: bool
    config: dict[str, Any]
    runs: int
    nfe: float
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


def aggregate(case: Case, config: GenerationConfig, records: Sequence[RunRecord]) -> Row:
    if not records:
        raise ValueError(f"no measured runs for {case.name}")
    median = statistics.median
    ordered = sorted(records, key=lambda r: r.total_seconds)
    typical = ordered[(len(ordered) - 1) // 2]
    return Row(
        name=case.name,
        baseline=case.baseline,
        config={k: getattr(config, k) for k in ROW_FIELDS},
        runs=len(records),
        nfe=median(r.nfe for r in records),
        tokens_per_forward=median(r.tokens_per_forward for r in records),
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
    """Fill speedup / nfe_reduction against the baseline row of the same gen_length."""
    baselines = {r.config["gen_length"]: r for r in rows if r.baseline}
    for row in rows:
        base = baselines.get(row.config["gen_length"])
        if base is None:
            continue
        row.speedup = row.tokens_per_second / base.tokens_per_second if base.tokens_per_second else None
        row.nfe_reduction = base.nfe / row.nfe if row.nfe else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# ---------------------------------------------------------------------- run


Progress = Callable[[str, int, int], None]  # (case name, runs done, runs total)


def run(model: Any, cases: Sequence[Case], prompts: Sequence[Any], *, base: GenerationConfig,
        runs: int = 3, warmup: int = 1, measure: Measure | None = None,
        on_progress: Progress | None = None) -> list[Row]:
    """Measure every case: `warmup` unmeasured + `runs` measured generations per prompt."""
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
        records = []
        for prompt in prompts:
            for i in range(warmup + runs):
                record = measure(prompt, config)
                if i >= warmup:
                    records.append(record)
                done += 1
                if on_progress:
                    on_progress(case.name, done, total)
        rows.append(aggregate(case, config, records))
    add_ratios(rows)
    return rows


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


# ---------------------------------------------------------------------- writers


def write_all(doc: Mapping[str, Any], out_dir: str | os.PathLike) -> dict[str, Path]:
    """bench.json, bench.md and bench.png|svg in `out_dir` (created); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
    write_text_atomic(paths["json"], json.dumps(doc, indent=2) + "\n")
    write_text_atomic(paths["markdown"], markdown(doc))
    paths["chart"] = write_chart(doc, out)
    return paths


def markdown(doc: Mapping[str, Any]) -> str:
    model, device = doc["model"], doc["device"]
    head = [
        f"# unmask bench: {model.get('name') or model.get('path', 'model')}",
        "",
        f"- model: {model.get('architecture', '?')}, {model.get('precision', '?')}, "
        f"{_mib(model.get('size_bytes', 0)):.1f} MiB",
        f"- device: {device.get('provider', '?')}, {device.get('threads', '?')} threads, "
        f"{device.get('processor', '')} ({device.get('logical_cores', '?')} logical cores)",
        f"- medians over {doc['settings']['runs']} runs x {doc['settings']['prompts']} prompts "
        f"after {doc['settings']['warmup']} warm-up run(s); unmask {doc.get('unmask_version', '?')}",
        "",
    ]
    columns = ["config", "NFE", "tokens/forward", "tokens/s", "speedup", "NFE ratio",
               "first block ms", "forward ms/step", "host ms/step", "peak RSS MiB"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in doc["rows"]:
        cells = [
            row["name"],
            f"{row['nfe']:g}",
            f"{row['tokens_per_forward']:.2f}",
            f"{row['tokens_per_second']:.1f}",
            _ratio(row.get("speedup")),
            _ratio(row.get("nfe_reduction")),
            f"{row['time_to_first_block'] * 1e3:.1f}",
            f"{row['forward_seconds_per_step'] * 1e3:.2f}",
            f"{row['host_seconds_per_step'] * 1e3:.2f}",
            f"{_mib(row['peak_rss']):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(head + lines) + "\n"


def write_chart(doc: Mapping[str, Any], out_dir: Path) -> Path:
    """bench.png with matplotlib, else bench.svg from our own drawing code."""
    try:
        import matplotlib  # noqa: F401  (optional)
    except ImportError:
        path = out_dir / "bench.svg"
        write_text_atomic(path, svg_chart(doc))
        return path
    path = out_dir / "bench.png"
    _png_chart(doc, path)
    return path


def _series(doc: Mapping[str, Any]) -> list[tuple[str, list[float], list[float]]]:
    """(name, ms per step, tokens per step) for each row."""
    out = []
    for row in doc["rows"]:
        steps = row.get("steps") or {}
        fwd, host = steps.get("forward_seconds", []), steps.get("host_seconds", [])
        ms = [(f + (host[i] if i < len(host) else 0.0)) * 1e3 for i, f in enumerate(fwd)]
        out.append((row["name"], ms, [float(t) for t in steps.get("tokens", [])]))
    return out


def _png_chart(doc: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for name, ms, tokens in _series(doc):
        top.plot(range(1, len(ms) + 1), ms, label=name, linewidth=1.2)
        bottom.step(range(1, len(tokens) + 1), tokens, where="mid", label=name, linewidth=1.2)
    top.set_ylabel("time per step (ms)")
    bottom.set_ylabel("tokens committed per step")
    bottom.set_xlabel("step (forward pass)")
    top.legend(fontsize="small")
    top.set_title(f"unmask bench: {doc['model'].get('name') or doc['model'].get('path', '')}")
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def svg_chart(doc: Mapping[str, Any], width: int = 760, panel_height: int = 220) -> str:
    """Two stacked line panels (ms per step, tokens per step), one polyline per row, plus a legend."""
    series = _series(doc)
    left, right, top_pad, gap = 60, 20, 40, 50
    legend_h = 18 * len(series) + 10
    height = top_pad + 2 * panel_height + gap + 40 + legend_h
    plot_w = width - left - right
    max_steps = max((len(ms) for _, ms, _ in series), default=1) or 1
    title = escape(f"unmask bench: {doc['model'].get('name') or doc['model'].get('path', '')}")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
    ]
    panels = [("time per step (ms)", 1), ("tokens committed per step", 2)]
    for index, (label, column) in enumerate(panels):
        y0 = top_pad + index * (panel_height + gap)
        values = [v for s in series for v in s[column]]
        y_max = _nice_max(max(values, default=1.0))
        parts.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel_height}" '
                     f'fill="none" stroke="#999"/>')
        for tick in range(5):
            value = y_max * tick / 4
            y = y0 + panel_height - panel_height * tick / 4
            parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" '
                         f'stroke="#eee"/>')
            parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
        parts.append(f'<text x="14" y="{y0 + panel_height / 2}" text-anchor="middle" '
                     f'transform="rotate(-90 14 {y0 + panel_height / 2})">{escape(label)}</text>')
        for n, s in enumerate(series):
            ys = s[column]
            if not ys:
                continue
            points = " ".join(
                f"{left + plot_w * (i + 0.5) / max_steps:.1f},{y0 + panel_height * (1 - v / y_max):.1f}"
                for i, v in enumerate(ys)
            )
            parts.append(f'<polyline points="{points}" fill="none" stroke="{_PALETTE[n % len(_PALETTE)]}" '
                         f'stroke-width="1.5"/>')
    axis_y = top_pad + 2 * panel_height + gap
    for tick in range(5):
        step = max_steps * tick / 4
        x = left + plot_w * tick / 4
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{step:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{axis_y + 30}" text-anchor="middle">step (forward pass)</text>')
    for n, (name, _, _) in enumerate(series):
        y = axis_y + 48 + 18 * n
        color = _PALETTE[n % len(_PALETTE)]
        parts.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 24}" y2="{y - 4}" stroke="{color}" '
                     f'stroke-width="3"/>')
        parts.append(f'<text x="{left + 30}" y="{y}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _nice_max(value: float) -> float:
    """Round an axis maximum up to 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    import math

    power = 10 ** math.floor(math.log10(value))
    for mult in (1, 2, 5, 10):
        if value <= mult * power:
            return mult * power
    return 10 * power


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _mib(n: float) -> float:
    return (n or 0) / (1 << 20)


def parse_list(text: str | None, convert: Callable[[str], Any]) -> list[Any]:
    """'none,prefix,dual' -> ['none', 'prefix', 'dual']; an empty or missing list -> [None]."""
    if text is None or not text.strip():
        return [None]
    return [convert(item.strip()) for item in text.split(",") if item.strip()] or [None]


def summary(rows: Iterable[Row]) -> str:
    """A short plain-text table for the terminal."""
    out = [f"{'config':<44} {'NFE':>6} {'tok/fwd':>8} {'tok/s':>9} {'speedup':>8}"]
    for r in rows:
        out.append(f"{r.name:<44} {r.nfe:>6g} {r.tokens_per_forward:>8.2f} {r.tokens_per_second:>9.1f} "
                   f"{_ratio(r.speedup):>8}")
    return "\n".join(out)
