"""The embedded model's table in the top-level README: held-out exact match and speed, one run.

    python -m training.eval_default /path/to/checkpoint [--limit 200] [--threads 2]

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

A checkpoint trained with `--data people` (its training_summary.json says so) is exported
with its own families and generation length, and a second table scores fp32 and int8 with
the package defaults of `--defaults PKG` (the shipped embedded model unless told) on each
held-out set of unmask.people (`--set-limit` examples each): split, phrasing, values,
followup (beside the same questions asked alone) and ood.
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
from unmask.evaluate import HELDOUT_SETS, TaskSpec, evaluate, write_task_spec
from unmask.export import export_model
from unmask.manifest import read_manifest

from .ship_default import SOURCE_DEFAULT, trained_tasks

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


def export_all(checkpoint: Path, folder: Path, spec: TaskSpec) -> dict[str, Path]:
    packages = {}
    for precision in sorted({p for p, _, _ in ROWS}):
        out = folder / precision
        export_model(checkpoint, out, precision=precision, target="cpu", quiet=True)
        write_task_spec(spec, out)
        packages[precision] = out
    return packages


def sets_table(models: dict, settings: dict, limit: int) -> list[str]:
    """fp32 and int8 with `settings` on every held-out set: accuracy (followup: and alone) and tok/fwd."""
    header = ["precision", *HELDOUT_SETS, "followup alone", "tok/fwd (split)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for precision in ("fp32", "int8"):
        reports = {name: evaluate(models[precision], limit=limit, heldout=name, **settings) for name in HELDOUT_SETS}
        alone = reports["followup"].alone[-1]
        cells = [precision, *(f"{reports[name].overall.accuracy:.1%}" for name in HELDOUT_SETS),
                 f"{alone.accuracy:.1%}", f"{reports['split'].overall.tokens_per_forward:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, help="HF-layout LLaDA checkpoint trained on unmask.tasks")
    parser.add_argument("--limit", type=int, default=200, help="held-out examples per row (even over families)")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads [device profile's]")
    parser.add_argument("--set-limit", type=int, default=100, help="examples per people held-out set")
    parser.add_argument("--defaults", type=Path, default=SOURCE_DEFAULT,
                        help="package whose generation defaults the people-set rows use [the shipped model]")
    args = parser.parse_args()
    families, gen_length = trained_tasks(args.checkpoint)
    spec = TaskSpec(tuple(families), gen_length)

    started = time.perf_counter()
    header = ["precision", "decoding", "overall", *tasks.FAMILIES, "tok/fwd", "tool_call tok/fwd", "tok/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    with tempfile.TemporaryDirectory(prefix="unmask-eval-") as tmp:
        packages = export_all(args.checkpoint, Path(tmp), spec)
        models = {p: unmask.load(path, device="cpu", threads=args.threads) for p, path in packages.items()}
        for precision, label, settings in ROWS:
            report = evaluate(models[precision], limit=args.limit, **settings)
            cells = [precision, label, f"{report.overall.accuracy:.1%}",
                     *(f"{report.family(f).accuracy:.1%}" for f in tasks.FAMILIES),
                     f"{report.overall.tokens_per_forward:.2f}", f"{report.family('tool_call').tokens_per_forward:.2f}",
                     f"{report.overall.tokens_per_second:.0f}"]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr, flush=True)  # progress; the table goes to stdout
        sets_lines = []
        if "ood" in families:
            defaults = {k: v for k, v in read_manifest(args.defaults).generation.items() if k != "gen_length"}
            sets_lines = sets_table(models, defaults, args.set_limit)
        threads = models["int8"].threads
        size = {p: sum(f.stat().st_size for f in path.iterdir()) for p, path in packages.items()}
    print()
    print(f"Held-out exact match on {args.limit} examples ({args.limit // len(tasks.FAMILIES)} per family), "
          f"gen_length {gen_length} in one block, greedy; {platform.processor() or platform.machine()}, "
          f"{threads} threads, unmask {unmask.__version__}. Package sizes: "
          + ", ".join(f"{p} {b / 1e6:.1f} MB" for p, b in sorted(size.items()))
          + f". Run time {time.perf_counter() - started:.0f} s.")
    print()
    print("\n".join(lines))
    if sets_lines:
        print()
        print(f"Held-out sets, {args.set_limit} examples each, package defaults of {args.defaults} "
              f"({', '.join(f'{k} {v}' for k, v in defaults.items()) or 'none'}):")
        print()
        print("\n".join(sets_lines))


if __name__ == "__main__":
    main()
