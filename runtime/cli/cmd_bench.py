"""`unmask bench [MODEL...]`: latency profile of a model on this device (runtime/bench.py does the work)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from .. import bench, op_profile
from ..config import CACHE_MODES
from .options import echo_err, generation_options, open_model, pop_overrides, prepare, provider_of, resolve_model


def _cache_list(text: str | None) -> list[str | None]:
    def one(item: str) -> str:
        if item not in CACHE_MODES:
            raise click.BadParameter(f"{item!r} is not one of {', '.join(CACHE_MODES)}", param_hint="'--cache'")
        return item

    return bench.parse_list(text, one)


def _numbers(flag: str, convert):
    def parse(item: str):
        try:
            return convert(item)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a number", param_hint=f"'{flag}'") from None

    return parse


EXAMPLES = """\b
Examples:
  unmask bench
  unmask bench tiny --profile --out bench-tiny
  unmask bench ./llada-int4 --cache none,prefix,dual --threshold none,0.9 --runs 5
  unmask bench ./llada-int4 --gen-length 64,256 --block-length 32 --out results/
  unmask bench ./a ./b --runs 1 --warmup 0 --json --force > bench.json
"""


@click.command("bench", epilog=EXAMPLES)
@click.argument("models", nargs=-1)
@click.option("--prompts", "prompts_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Prompts, one per line (or .jsonl with {\"prompt\"} / {\"messages\"}); default: two built-in ones.")
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True, help="Measured runs per prompt.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Unmeasured runs per prompt first.")
@click.option("--cache", "caches", metavar="LIST", help="Cache modes to compare, e.g. none,prefix,dual.")
@click.option("--threshold", "thresholds", metavar="LIST",
              help="Confidence thresholds to compare, e.g. 0.9,0.7 ('none' = the fixed step schedule).")
@click.option("--gen-length", "gen_lengths", metavar="LIST", help="Generation lengths to compare, e.g. 64,128.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Folder for bench.json, bench.md and bench.svg [default: ./bench-<model>]; must not exist.")
@click.option("--force", is_flag=True, help="Write into an existing --out folder (its bench files are replaced).")
@click.option("--profile", is_flag=True,
              help="Profile the measured runs with ONNX Runtime: top operators by time, trace in the --out folder.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the bench.json content on stdout (the table goes to stderr).")
@generation_options(exclude=("cache", "threshold", "gen_length"))
def command(models, prompts_file, runs, warmup, caches, thresholds, gen_lengths, out_dir, force, profile, as_json,
            device, threads, verbose, **flags):
    """Profile latency: NFE, tokens per forward, tokens/s, time to first block, time per step.

    Each setting runs `--warmup` + `--runs` times per prompt; the table has one row per
    prompt and setting (NFE and tokens of the median run, median times). A baseline row
    (one token per forward: steps = gen_length, cache none) comes first for each gen
    length, so the speedups of parallel decoding (--threshold; by default the package's
    settings and threshold 0.9 are measured) and key/value reuse (--cache) read as
    ratios. Other generation flags (--steps, --block-length, ...) set the base
    configuration. MODEL is a package folder or a stored name (`unmask list`); without
    it the embedded model is measured; with several, each gets its own folder.
    """
    overrides = pop_overrides(flags)
    cache_list = _cache_list(caches)
    threshold_list = bench.parse_list(thresholds, lambda s: None if s.lower() in ("none", "off")
                                      else _numbers("--threshold", float)(s))
    if thresholds is None:  # the default run shows what parallel decoding gives
        threshold_list = [None, bench.DEFAULT_THRESHOLD]
    length_list = bench.parse_list(gen_lengths, _numbers("--gen-length", int))
    prompts = bench.read_prompts(prompts_file) if prompts_file else list(bench.DEFAULT_PROMPTS)
    paths = list(models) or [None]
    folders = [_folder(out_dir, path, len(paths)) for path in paths]
    fresh = [folder for folder in folders if not folder.exists()]
    for folder in folders:  # every folder checked and created before the first measurement
        bench.prepare_output(folder, force=force)
    try:
        request = _Request(device, threads, overrides, verbose, length_list, cache_list, threshold_list, prompts,
                           runs, warmup, profile, as_json)
        documents = [_bench_one(path, folder, request) for path, folder in zip(paths, folders)]
    except BaseException:
        for folder in fresh:  # a failed run leaves no empty folder that the next try would refuse
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    if as_json:
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))


@dataclass(frozen=True)
class _Request:
    """What the flags asked for, the same for every model of one `unmask bench`."""

    device: str
    threads: int | None
    overrides: dict
    verbose: bool
    gen_lengths: list
    caches: list
    thresholds: list
    prompts: list
    runs: int
    warmup: int
    profile: bool
    as_json: bool


def _bench_one(path: str | None, folder: Path, req: _Request) -> dict:
    """Load one model, measure every case, write its files; returns its bench.json document."""
    # --profile: the one session of the bench records ORT's trace (warm-up passes are left out later)
    profiling = {"profile_prefix": folder / op_profile.PREFIX} if req.profile else {}
    loaded = open_model(path, req.device, req.threads, **profiling)
    # the base is checked with the first compared length (steps/block_length must fit it)
    sized = req.overrides if req.gen_lengths[0] is None else {**req.overrides, "gen_length": req.gen_lengths[0]}
    base = prepare(loaded, sized, verbose=req.verbose)
    cases = bench.plan(base, caches=req.caches, thresholds=req.thresholds, gen_lengths=req.gen_lengths)
    timeline: list[bench.Generation] = []
    rows = _run_with_progress(loaded, cases, req.prompts, base, req.runs, req.warmup, timeline)
    m = loaded.manifest
    doc = bench.report(
        rows,
        model={"path": str(loaded.package.folder), "name": loaded.package.folder.name,
               "architecture": m.architecture, "precision": m.precision, "target": m.target,
               "size_bytes": m.size_bytes},
        device={"requested": req.device, "provider": provider_of(loaded), "threads": loaded.threads},
        runs=req.runs, warmup=req.warmup, prompts=len(req.prompts),
    )
    if req.profile:
        doc["profile"] = op_profile.summarize(op_profile.finish(loaded, folder), timeline)
    written = bench.write_all(doc, folder)
    click.echo(bench.summary(doc), err=req.as_json)  # the table is the result; with --json stdout is JSON
    trace = [folder / op_profile.TRACE_NAME] if req.profile else []
    echo_err(f"wrote {', '.join(str(p) for p in [*written.values(), *trace])}")
    return doc


def _folder(out_dir: Path | None, model: str | None, count: int) -> Path:
    """The output folder of one model: --out, --out/<model> with several, else ./bench-<model>."""
    from ..model import default_package_dir

    name = (resolve_model(model) or default_package_dir()).name
    if out_dir is None:
        return Path(f"bench-{name}")
    return out_dir / name if count > 1 else out_dir


def _run_with_progress(model, cases, prompts, base, runs, warmup, timeline):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("bench", total=len(cases) * len(prompts) * (runs + warmup))

        def update(name: str, done: int, total: int) -> None:
            progress.update(task, completed=done, description=name)

        return bench.run(model, cases, prompts, base=base, runs=runs, warmup=warmup, on_progress=update,
                         timeline=timeline)
