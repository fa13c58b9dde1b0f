"""The embedded model's table in the top-level README: held-out exact match and speed, one run.

    python training/eval_default.py /path/to/checkpoint [--limit 200] [--threads 2]

Exports the checkpoint to fp32, int8 and int4 packages in a temporary folder (the
standard export, plus the tasks.json the embedded model ships with), then evaluates
each row below on the same held-out examples (unmask.evaluate):

    fp32  low_confidence, steps = gen_length, cache none     (one token per forward)
    int8  the same
    int4  the same
    int8  threshold 0.9, cache dual                          (Fast-dLLM parallel decoding + reuse)
    int8  threshold 0.7, cache dual
    int8  threshold 0.5, cache dual
    int8  low_confidence, steps = gen_length, cache none, questions typed loosely
          (`unmask eval --loose`: no final punctuation, lowercase first letter)

and prints one markdown table: accuracy overall and per family, tokens per forward
(overall and on tool_call) and tokens per second.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import unmask
from unmask import tasks
from unmask.evaluate import TaskSpec, evaluate, write_task_spec
from unmask.export import export_model

BASELINE = dict(algorithm="low_confidence", steps=None, threshold=None, cache="none")  # steps None = gen_length
ROWS = (
    ("fp32", "low_confidence, steps = gen_length, cache none", BASELINE),
    ("int8", "low_confidence, steps = gen_length, cache none", BASELINE),
    ("int4", "low_confidence, steps = gen_length, cache none", BASELINE),
    ("int8", "threshold 0.9, cache dual", dict(BASELINE, threshold=0.9, cache="dual")),
    ("int8", "threshold 0.7, cache dual", dict(BASELINE, threshold=0.7, cache="dual")),
    ("int8", "threshold 0.5, cache dual", dict(BASELINE, threshold=0.5, cache="dual")),
    ("int8", "low_confidence, steps = gen_length, cache none, typed loosely", dict(BASELINE, loose=True)),
)


def export_all(checkpoint: Path, folder: Path) -> dict[str, Path]:
    packages = {}
    for precision in sorted({p for p, _, _ in ROWS}):
        out = folder / precision
        export_model(checkpoint, out, precision=precision, target="cpu", quiet=True)
        write_task_spec(TaskSpec(tasks.FAMILIES, tasks.GEN_LENGTH), out)
        packages[precision] = out
    return packages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, help="HF-layout LLaDA checkpoint trained on unmask.tasks")
    parser.add_argument("--limit", type=int, default=200, help="held-out examples per row (even over families)")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads [device profile's]")
    args = parser.parse_args()

    started = time.perf_counter()
    header = ["precision", "decoding", "overall", *tasks.FAMILIES, "tok/fwd", "tool_call tok/fwd", "tok/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    with tempfile.TemporaryDirectory(prefix="unmask-eval-") as tmp:
        packages = export_all(args.checkpoint, Path(tmp))
        models = {p: unmask.load(path, device="cpu", threads=args.threads) for p, path in packages.items()}
        for precision, label, settings in ROWS:
            report = evaluate(models[precision], limit=args.limit, **settings)
            cells = [precision, label, f"{report.overall.accuracy:.1%}",
                     *(f"{report.family(f).accuracy:.1%}" for f in tasks.FAMILIES),
                     f"{report.overall.tokens_per_forward:.2f}", f"{report.family('tool_call').tokens_per_forward:.2f}",
                     f"{report.overall.tokens_per_second:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr, flush=True)  # progress; the table goes to stdout
        threads = models["int8"].threads
        size = {p: sum(f.stat().st_size for f in path.iterdir()) for p, path in packages.items()}
    print()
    print(f"Held-out exact match on {args.limit} examples ({args.limit // len(tasks.FAMILIES)} per family), "
          f"gen_length {tasks.GEN_LENGTH} in one block, greedy; {platform.processor() or platform.machine()}, "
          f"{threads} threads, unmask {unmask.__version__}. Package sizes: "
          + ", ".join(f"{p} {b / 1e6:.1f} MB" for p, b in sorted(size.items()))
          + f". Run time {time.perf_counter() - started:.0f} s.")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
