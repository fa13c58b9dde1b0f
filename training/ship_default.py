"""Ship a trained checkpoint as the embedded default model (runtime/models/default/).

    python -m training.ship_default /work/devenv/default-model-ckpt
    python -m training.ship_default CKPT --out some/folder      # anywhere else

The checkpoint goes through the standard export (int8, CPU, validated against fp32); the
package's generation defaults become the tasks' generation length in one block (what the
model was trained on), a tasks.json records the task families for `unmask eval`, and the
result must fit the size budget and answer at least MIN_ACCURACY of CHECK_EXAMPLES held-out
examples exactly (its default settings, as `unmask eval` runs it). Everything is staged beside
the destination and renamed into place, so an interrupted run leaves the previous model untouched.

The decoding defaults are measured, not assumed (`choose_decoding`): the lowest confidence
threshold of THRESHOLDS whose accuracy stays within TOLERANCE of one token per step on each
held-out set of DECODING_SETS, then the fastest cache mode that keeps it there; what was
measured is kept in the manifest's provenance (`decoding_check`). `--decoding-only` measures
them again for a package already shipped:

    python -m training.ship_default runtime/models/default --decoding-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from unmask import load, people, tasks
from unmask.config import GenerationConfig
from unmask.errors import ModelFormatError, UnmaskError
from unmask.evaluate import TaskSpec, evaluate, read_task_spec, total, write_task_spec
from unmask.export import export_model
from unmask.manifest import generation_defaults, read_manifest, write_manifest

MAX_BYTES = 10 * 1000 * 1000  # the wheel carries the model: at most 10 MB for the whole folder
PRECISION = "int8"
CHECK_EXAMPLES = 50  # held-out examples the shipped package must answer (0: skip the check)
MIN_ACCURACY = 0.9  # what tests/test_eval.py asserts on the embedded model
THRESHOLDS = (0.9, 0.8, 0.7)  # candidate default thresholds, most careful first (lower commits more per forward)
CACHES = ("dual", "prefix", "none")  # cache modes timed for the chosen decoding, the preferred first
CLEARLY_FASTER = 0.03  # a mode later in CACHES wins only when this much faster (one block: dual = prefix)
TOLERANCE = 0.01  # a default may lose at most this share of accuracy against one token per step (issue 32)
DECODING_SETS = ("split", "phrasing")  # held-out sets the choice is measured on (people's wordings too)
DECODING_EXAMPLES = 200  # examples per set for the choice (0: keep one token per step, no measuring); one point
# is then two answers of a set
# What `unmask info` names as the origin of the embedded model (the checkpoint folder is scratch).
SHIPPED_SOURCE = "unmask training/train.py"
SOURCE_DEFAULT = Path("runtime", "models", "default")  # relative to the checkout's root (unmask/models/default)


def trained_tasks(checkpoint: str | os.PathLike) -> tuple[tuple[str, ...], int]:
    """(families, gen_length) the checkpoint was trained on, from its training_summary.json: a
    `--data people` run adds the ood family and its longer generation length; a checkpoint without
    a summary gets the tasks' defaults."""
    path = Path(checkpoint) / "training_summary.json"
    if not path.is_file():
        return tasks.FAMILIES, tasks.GEN_LENGTH
    summary = json.loads(path.read_text(encoding="utf-8"))
    families = people.FAMILIES if summary.get("train_config", {}).get("data") == "people" else tasks.FAMILIES
    return families, int(summary.get("gen_length", tasks.GEN_LENGTH))


def measure(model, examples: int, sets: tuple[str, ...], **settings) -> dict:
    """Accuracy and tokens per forward / per second of a loaded `model` over `examples` of each held-out set."""
    reports = [evaluate(model, limit=examples, heldout=name, **settings) for name in sets]
    overall = total("overall", [answer for report in reports for answer in report.answers])
    return {**settings, "accuracy": round(overall.accuracy, 4),
            "sets": {name: round(report.overall.accuracy, 4) for name, report in zip(sets, reports)},
            "tokens_per_forward": round(overall.tokens_per_forward, 2),
            "tokens_per_second": round(overall.tokens_per_second, 1)}


def choose_decoding(model, *, examples: int = DECODING_EXAMPLES,
                    sets: tuple[str, ...] = DECODING_SETS, thresholds: tuple[float, ...] = THRESHOLDS,
                    caches: tuple[str, ...] = CACHES, tolerance: float = TOLERANCE, measure=measure,
                    log=lambda line: None) -> tuple[dict, dict]:
    """(defaults, record): the decoding defaults of a loaded `model` and what they were chosen on.

    Baseline: one token per step (no threshold, steps = gen_length, cache none: the exact
    decoding). Then the thresholds in order, also without a cache, while accuracy stays within
    `tolerance` of the baseline on each set (each lower threshold commits more tokens per
    forward); then, for the decoding kept, every cache mode, and the fastest still within
    `tolerance` wins (by more than CLEARLY_FASTER over the ones before it in `caches`)."""
    baseline = measure(model, examples, sets, threshold=None, cache="none")  # steps default to gen_length
    log(f"one token per step: {baseline}")

    def keeps_accuracy(run: dict) -> bool:  # set by set: an average would hide a loss on one of them
        return all(run["sets"][name] >= baseline["sets"][name] - tolerance - 1e-9 for name in sets)

    chosen: dict = {"threshold": None}
    runs = [baseline]
    for threshold in thresholds:
        run = measure(model, examples, sets, threshold=threshold, cache="none")
        runs.append(run)
        log(f"threshold {threshold}: {run}")
        if not keeps_accuracy(run):
            break
        chosen = {"threshold": threshold}
    timed = []
    for cache in caches:
        timed.append(measure(model, examples, sets, cache=cache, **chosen))
        log(f"cache {cache}: {timed[-1]}")
    runs += timed
    fastest = None
    for run in filter(keeps_accuracy, timed):  # a later mode must be clearly faster: timings carry noise
        if fastest is None or run["tokens_per_second"] > fastest["tokens_per_second"] * (1 + CLEARLY_FASTER):
            fastest = run
    fastest = fastest or baseline
    defaults = {**chosen, "cache": fastest["cache"]}
    return defaults, {"examples_per_set": examples, "sets": list(sets), "tolerance": tolerance,
                      "chosen": defaults, "runs": runs}


def set_decoding(package: Path, examples: int = DECODING_EXAMPLES, *, quiet: bool = False) -> dict:
    """Measure and write the decoding defaults of a package with a tasks.json (choose_decoding);
    returns them. The manifest is replaced atomically; nothing else changes."""
    log = (lambda line: None) if quiet else (lambda line: print(line, file=sys.stderr))
    spec = read_task_spec(package)
    model = load(package, threads=1)  # one thread: the rate the embedded model runs at (devices/threads.py)
    defaults, record = choose_decoding(model, examples=examples, log=log)
    manifest = read_manifest(package)
    manifest.generation = generation_defaults(GenerationConfig(gen_length=spec.gen_length, **defaults))
    manifest.provenance = {**manifest.provenance, "decoding_check": record}
    write_manifest(manifest, package)
    return defaults


def package_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def ship(checkpoint: str | os.PathLike, out: str | os.PathLike, *,
         families: tuple[str, ...] = tasks.FAMILIES, gen_length: int = tasks.GEN_LENGTH,
         precision: str = PRECISION, max_bytes: int = MAX_BYTES, check: int = CHECK_EXAMPLES,
         min_accuracy: float = MIN_ACCURACY, decoding_examples: int = DECODING_EXAMPLES,
         quiet: bool = False) -> Path:
    """Export `checkpoint` into `out` (replacing it atomically); returns `out`."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = out.parent / f".{out.name}.ship-{os.getpid()}"
    if staged.exists():
        shutil.rmtree(staged)
    try:
        export_model(checkpoint, staged, precision=precision, target="cpu", quiet=quiet)
        manifest = read_manifest(staged)
        # Trained as one gen_length region per answer: that is also how chat should run it.
        manifest.generation = generation_defaults(GenerationConfig(gen_length=gen_length))
        manifest.provenance = {**manifest.provenance, "source": SHIPPED_SOURCE, "shipped_as": "default"}
        write_manifest(manifest, staged)
        write_task_spec(TaskSpec(tuple(families), gen_length), staged)
        if decoding_examples:
            set_decoding(staged, decoding_examples, quiet=quiet)
        size = package_bytes(staged)
        if size > max_bytes:
            raise ModelFormatError(f"the {precision} package is {size:,} bytes, over the {max_bytes:,}-byte budget "
                                   f"of the embedded model; train a smaller model or use int4")
        if check:
            report = evaluate(staged, limit=check)
            if report.overall.accuracy < min_accuracy:
                raise ModelFormatError(f"{checkpoint} answers {report.overall.accuracy:.0%} of {check} held-out "
                                       f"examples exactly, under the {min_accuracy:.0%} the embedded model needs")
        replace_folder(staged, out)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if not quiet:  # export_model has printed the validation report
        print(f"shipped {checkpoint} -> {out} ({precision}, {size:,} bytes)", file=sys.stderr)
    return out


def replace_folder(staged: Path, out: Path) -> None:
    """Rename `staged` to `out`; an existing `out` is moved aside first and removed after."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    try:
        os.replace(staged, out)
    except OSError:
        if old.exists():
            os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.ship_default", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="HF-layout LLaDA checkpoint folder trained on unmask.tasks")
    parser.add_argument("--out", type=Path, default=SOURCE_DEFAULT,
                        help=f"destination package folder [default: {SOURCE_DEFAULT}, from the checkout's root]")
    parser.add_argument("--precision", default=PRECISION, choices=("fp32", "int8", "int4"))
    parser.add_argument("--check", type=int, default=CHECK_EXAMPLES, metavar="N",
                        help=f"held-out examples that must be >= {MIN_ACCURACY * 100:.0f}%% right (0: no check)")
    parser.add_argument("--decoding-examples", type=int, default=DECODING_EXAMPLES, metavar="N",
                        help="held-out examples per set that choose the threshold and cache defaults "
                             "(0: one token per step)")
    parser.add_argument("--decoding-only", action="store_true",
                        help="CHECKPOINT is a package already shipped: only measure and rewrite its decoding defaults")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.out == SOURCE_DEFAULT and not args.decoding_only and not Path("runtime", "manifest.py").is_file():
        # --decoding-only rewrites CHECKPOINT (a package) in place and writes nothing to --out
        parser.error(f"{Path.cwd()} is not an unmask checkout (no runtime/manifest.py); "
                     "run from its root or pass --out")
    try:
        if args.decoding_only:
            defaults = set_decoding(Path(args.checkpoint), args.decoding_examples or DECODING_EXAMPLES,
                                    quiet=args.quiet)
            print(f"{args.checkpoint}: decoding defaults {defaults}", file=sys.stderr)
            return 0
        families, gen_length = trained_tasks(args.checkpoint)
        ship(args.checkpoint, args.out, families=families, gen_length=gen_length, precision=args.precision,
             check=args.check, decoding_examples=args.decoding_examples, quiet=args.quiet)
    except UnmaskError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
