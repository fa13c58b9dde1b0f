"""`unmask bench --profile`: ONNX Runtime's per-operator profile of the bench's measured runs.

The bench loads the package with ORT's profiler on (`load(..., profile_prefix=...)`:
SessionOptions.enable_profiling on the placement's own options, so provider and threads
are what `load()` would choose anyway). ORT writes one trace for the whole session; each
forward pass is a `model_run` event and each kernel a `*_kernel_time` event inside one.
The bench's timeline says which forward passes belonged to warm-up runs, so only kernels
inside measured passes are summed: per operator type, total time and share of the
measured runs' step time (forward + host), so the shares add up to at most 100% and the
rest is time outside ORT's kernels (the decoder, input copies).
Times are with the profiler on, which adds a few percent to every kernel.
"""

from __future__ import annotations

import bisect
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from .errors import ModelFormatError

TRACE_NAME = "ort_profile.json"
PREFIX = "ort_profile"  # ORT appends _<date>_<time>.json; finish() renames the file to TRACE_NAME
TOP = 12  # operator types listed; the rest are summed into one "other" line

# operator type -> what it does, so the summary reads as attention / matmul / moe / ...
KINDS = {
    "matmul": ("MatMul", "MatMulNBits", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "Gemm",
               "FusedMatMul", "QGemm"),
    "attention": ("GroupQueryAttention", "MultiHeadAttention", "Attention", "Softmax", "PackedAttention"),
    "moe": ("MoE", "QMoE", "SparseMixerMoE"),
    "rope": ("RotaryEmbedding",),
    "norm": ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "RMSNormalization",
             "LayerNormalization", "SkipLayerNormalization"),
    "activation": ("QuickGelu", "Sigmoid", "Gelu", "FastGelu", "BiasGelu", "Silu"),
    "embedding": ("Gather", "GatherElements", "GatherND"),
}
_KIND_OF = {op: kind for kind, ops in KINDS.items() for op in ops}


def finish(model: Any, folder: Path) -> Path:
    """Stop the profiler and move its trace to folder/TRACE_NAME."""
    written = Path(model.engine.session.end_profiling())
    trace = folder / TRACE_NAME
    os.replace(written, trace)
    return trace


def summarize(trace: Path, timeline: Sequence[Any]) -> dict[str, Any]:
    """Top operator types of the measured forward passes: calls, seconds and share of step time.

    `timeline` is bench.run's list of Generation (measured, nfe, step_seconds), in run order.
    """
    events = _read(trace)
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session"
                  and e.get("name") == "model_run")
    measured_runs, note = _measured(runs, timeline)
    starts = [start for start, _ in measured_runs]
    seconds: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i < 0 or e["ts"] > measured_runs[i][1]:
            continue  # a warm-up pass
        op = (e.get("args") or {}).get("op_name", "?")
        seconds[op] += e["dur"] * 1e-6
        calls[op] += 1
    step_seconds = sum(g.step_seconds for g in timeline if g.measured)
    ranked = sorted(seconds, key=seconds.get, reverse=True)
    operators = [_line(op, calls[op], seconds[op], step_seconds) for op in ranked[:TOP]]
    if len(ranked) > TOP:
        rest = ranked[TOP:]
        operators.append(_line(f"other ({len(rest)} types)", sum(calls[o] for o in rest),
                               sum(seconds[o] for o in rest), step_seconds, kind="other"))
    return {"trace": trace.name, "forwards": len(measured_runs), "step_seconds": step_seconds,
            "kernel_seconds": sum(seconds.values()), "operators": operators, "note": note}


def _line(op: str, calls: int, seconds: float, step_seconds: float, kind: str | None = None) -> dict[str, Any]:
    return {"op_type": op, "kind": kind or _KIND_OF.get(op, "other"), "calls": calls, "seconds": seconds,
            "share": seconds / step_seconds if step_seconds > 0 else 0.0}


Interval = tuple[float, float]  # (start, end) of one model_run in the trace, microseconds


def _measured(runs: list[Interval], timeline: Sequence[Any]) -> tuple[list[Interval], str]:
    """The model_run intervals of measured generations (the trace's runs, in order, matched to the
    timeline), and a note when they cannot be matched (then every run counts)."""
    expected = sum(g.nfe for g in timeline)
    if len(runs) != expected:
        return runs, (f"the trace has {len(runs)} forward passes where the bench counted {expected}, "
                      "so warm-up passes could not be left out")
    chosen, index = [], 0
    for generation in timeline:
        if generation.measured:
            chosen += runs[index:index + generation.nfe]
        index += generation.nfe
    return chosen, ""


def _read(trace: Path) -> list[dict[str, Any]]:
    try:
        events = json.loads(trace.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{trace}: cannot read the ONNX Runtime profile ({exc})") from None
    if isinstance(events, dict):  # newer ORT builds may wrap the list
        events = events.get("traceEvents", [])
    return [e for e in events if isinstance(e, dict) and "ts" in e and "dur" in e]
