"""What `unmask bench` writes: the terminal table, bench.json, bench.md and bench.svg.

Every writer takes the bench.json document (bench.report(), plus "profile" when
`--profile` ran), so a saved bench.json can be drawn again. The chart is plain SVG text
written here (no plotting library): time per step and tokens committed per step, one
labelled line per case on the bench's first prompt.
"""

from __future__ import annotations

import json
import math
import os
from html import escape
from pathlib import Path
from typing import Any, Mapping

from .manifest import write_text_atomic

# terminal / Markdown table: (header, row -> cell)
_COLUMNS = (
    ("setting", lambda r: r["name"]),
    ("prompt", lambda r: f"{r['prompt'] + 1}"),
    ("NFE", lambda r: f"{r['nfe']}"),
    ("tokens", lambda r: f"{r['tokens']}"),
    ("tokens/forward", lambda r: f"{r['tokens_per_forward']:.2f}"),
    ("tokens/s", lambda r: f"{r['tokens_per_second']:.1f}"),
    ("speedup", lambda r: _ratio(r.get("speedup"))),
    ("first block ms", lambda r: f"{r['time_to_first_block'] * 1e3:.1f}"),
    ("forward ms/step", lambda r: f"{r['forward_seconds_per_step'] * 1e3:.2f}"),
    ("host ms/step", lambda r: f"{r['host_seconds_per_step'] * 1e3:.2f}"),
)
_PROFILE_COLUMNS = ("operator", "kind", "calls", "ms", "ms/step", "share of step time")


def write_all(doc: Mapping[str, Any], out_dir: str | os.PathLike) -> dict[str, Path]:
    """bench.json, bench.md and bench.svg in `out_dir` (which must exist); returns the paths."""
    out = Path(out_dir)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md", "chart": out / "bench.svg"}
    write_text_atomic(paths["json"], json.dumps(doc, indent=2) + "\n")
    write_text_atomic(paths["markdown"], markdown(doc))
    write_text_atomic(paths["chart"], svg_chart(doc))
    return paths


def summary(doc: Mapping[str, Any]) -> str:
    """The rows (and the operator profile, when there is one) as aligned plain-text tables."""
    prompts = [f"prompt {i + 1}: {text}" for i, text in _prompts(doc)]
    cells = [[cell(row) for _, cell in _COLUMNS] for row in doc["rows"]]
    parts = [*prompts, _aligned([h for h, _ in _COLUMNS], cells)]
    if doc.get("profile"):
        parts += ["", _profile_caption(doc["profile"]), _aligned(list(_PROFILE_COLUMNS), _profile_cells(doc))]
    return "\n".join(parts)


def markdown(doc: Mapping[str, Any]) -> str:
    model, device, settings = doc["model"], doc["device"], doc["settings"]
    head = [
        f"# unmask bench: {model.get('name') or model.get('path', 'model')}",
        "",
        f"- model: {model.get('architecture', '?')}, {model.get('precision', '?')}, "
        f"{_mib(model.get('size_bytes', 0)):.1f} MiB",
        f"- device: {device.get('provider', '?')}, {device.get('threads', '?')} threads, "
        f"{device.get('processor', '')} ({device.get('logical_cores', '?')} logical cores)",
        f"- one row per prompt and setting: NFE and tokens of the median run, times are medians over "
        f"{settings['runs']} runs after {settings['warmup']} warm-up run(s); unmask {doc.get('unmask_version', '?')}",
        *(f"- prompt {i + 1}: {text}" for i, text in _prompts(doc)),
        "",
    ]
    lines = _md_table([h for h, _ in _COLUMNS], [[cell(row) for _, cell in _COLUMNS] for row in doc["rows"]])
    if doc.get("profile"):
        lines += ["", _profile_caption(doc["profile"]), ""] + _md_table(list(_PROFILE_COLUMNS), _profile_cells(doc))
    return "\n".join(head + lines) + "\n"


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows)]


def _aligned(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in column) for column in zip(header, *rows)]

    def line(cells: list[str]) -> str:  # the first column (names) left-aligned, numbers right-aligned
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join(line(r) for r in [header, *rows])


def _prompts(doc: Mapping[str, Any]) -> list[tuple[int, str]]:
    return sorted({(r["prompt"], r.get("prompt_text", "")) for r in doc["rows"]})


def _profile_caption(profile: Mapping[str, Any]) -> str:
    step = profile["step_seconds"]
    inside = profile["kernel_seconds"] / step if step > 0 else 0.0
    return (f"ONNX Runtime operators over the measured runs: {profile['forwards']} forward passes, "
            f"{step * 1e3:.1f} ms of step time, {inside * 100:.1f}% of it in ORT kernels "
            f"(the rest: the decoder, inputs, ORT's own overhead); trace: {profile['trace']}"
            + (f"; note: {profile['note']}" if profile.get("note") else ""))


def _profile_cells(doc: Mapping[str, Any]) -> list[list[str]]:
    profile = doc["profile"]
    steps = max(profile["forwards"], 1)
    return [[op["op_type"], op["kind"], str(op["calls"]), f"{op['seconds'] * 1e3:.2f}",
             f"{op['seconds'] * 1e3 / steps:.3f}", f"{op['share'] * 100:.1f}%"] for op in profile["operators"]]


# ---------------------------------------------------------------------- chart


_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _series(doc: Mapping[str, Any]) -> list[tuple[str, list[float], list[float]]]:
    """(setting, ms per step, tokens per step) for each setting, on the first prompt."""
    first = min((r["prompt"] for r in doc["rows"]), default=0)
    out = []
    for row in doc["rows"]:
        if row["prompt"] != first:
            continue
        steps = row.get("steps") or {}
        fwd, host = steps.get("forward_seconds", []), steps.get("host_seconds", [])
        ms = [(f + (host[i] if i < len(host) else 0.0)) * 1e3 for i, f in enumerate(fwd)]
        out.append((row["name"], ms, [float(t) for t in steps.get("tokens", [])]))
    return out


def svg_chart(doc: Mapping[str, Any], width: int = 760, panel_height: int = 220) -> str:
    """Two stacked panels (ms per step, tokens committed per step), one labelled polyline per setting."""
    series = _series(doc)
    left, right, top_pad, gap = 60, 20, 56, 50
    height = top_pad + 2 * panel_height + gap + 40 + 18 * len(series) + 10
    plot_w = width - left - right
    max_steps = max((len(ms) for _, ms, _ in series), default=1) or 1
    model = doc["model"].get("name") or doc["model"].get("path", "")
    prompt = next((r.get("prompt_text", "") for r in doc["rows"] if r["prompt"] == 0), "")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(f"unmask bench: {model}")}</text>',
        f'<text x="{width / 2}" y="38" text-anchor="middle" fill="#555">'
        f'{escape(f"prompt 1: {prompt}; the median run of each setting")}</text>',
    ]
    for index, label in enumerate(("time per step (ms)", "tokens committed per step")):
        y0 = top_pad + index * (panel_height + gap)
        parts += _panel(series, index + 1, label, left, y0, plot_w, panel_height, max_steps)
    axis_y = top_pad + 2 * panel_height + gap
    for tick in range(5):
        x = left + plot_w * tick / 4
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 14}" text-anchor="middle">{max_steps * tick / 4:g}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{axis_y + 30}" text-anchor="middle">step (forward pass)</text>')
    for n, (name, _, _) in enumerate(series):
        y = axis_y + 48 + 18 * n
        parts.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 24}" y2="{y - 4}" stroke="{_color(n)}" '
                     f'stroke-width="3"/>')
        parts.append(f'<text x="{left + 30}" y="{y}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(series, column: int, label: str, left: float, y0: float, plot_w: float, height: float,
           max_steps: int) -> list[str]:
    """One panel: frame, y ticks, y label, and a polyline (titled with its setting) per series."""
    y_max = _nice_max(max((v for s in series for v in s[column]), default=1.0))
    parts = [f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{height}" fill="none" stroke="#999"/>']
    for tick in range(5):
        y = y0 + height - height * tick / 4
        parts.append(f'<line x1="{left - 4}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{y_max * tick / 4:g}</text>')
    parts.append(f'<text x="14" y="{y0 + height / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {y0 + height / 2})">{escape(label)}</text>')
    for n, s in enumerate(series):
        if not s[column]:
            continue
        points = " ".join(f"{left + plot_w * (i + 0.5) / max_steps:.1f},{y0 + height * (1 - v / y_max):.1f}"
                          for i, v in enumerate(s[column]))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{_color(n)}" stroke-width="1.5">'
                     f'<title>{escape(s[0])}</title></polyline>')
    return parts


def _color(n: int) -> str:
    return _PALETTE[n % len(_PALETTE)]


def _nice_max(value: float) -> float:
    """Round an axis maximum up to 1, 2 or 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for mult in (1, 2, 5, 10):
        if value <= mult * power:
            return mult * power
    return 10 * power


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _mib(n: float) -> float:
    return (n or 0) / (1 << 20)


__all__ = ["write_all", "summary", "markdown", "svg_chart"]
