"""`unmask bench [MODEL...]`: latency profile of a model on this device (runtime/bench.py does the work)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .. import bench
from ..config import CACHE_MODES
from .options import echo_err, generation_options, open_model, pop_overrides, prepare, provider_of


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
  unmask bench ./llada-int4 --cache none,prefix,dual --threshold none,0.9 --runs 5
  unmask bench ./llada-int4 --gen-length 64,256 --block-length 32 --out results/
  unmask bench ./a ./b --runs 1 --warmup 0 --json > bench.json
"""


@click.command("bench", epilog=EXAMPLES)
@click.argument("models", nargs=-1, type=click.Path(path_type=Path))
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
              help="Folder for bench.json, bench.md and the chart [default: ./bench-<model>].")
@click.option("--json", "as_json", is_flag=True, help="Also print the bench.json content on stdout.")
@generation_options(exclude=("cache", "threshold", "gen_length"))
def command(models, prompts_file, runs, warmup, caches, thresholds, gen_lengths, out_dir, as_json,
            device, threads, verbose, **flags):
    """Profile latency: NFE, tokens per forward, tokens/s, time to first block, time per step.

    Each configuration runs `--warmup` + `--runs` times per prompt; the report keeps
    medians. A baseline row (one token per forward: steps = gen_length, cache none)
    comes first for each gen length, so the speedups of parallel decoding
    (--threshold) and key/value reuse (--cache) read as ratios. Other generation
    flags (--steps, --block-length, --algorithm, ...) set the base configuration.
    Without MODEL the embedded model is measured; with several, each gets its own folder.
    """
    overrides = pop_overrides(flags)
    cache_list = _cache_list(caches)
    threshold_list = bench.parse_list(thresholds, lambda s: None if s.lower() in ("none", "off")
                                      else _numbers("--threshold", float)(s))
    length_list = bench.parse_list(gen_lengths, _numbers("--gen-length", int))
    prompts = bench.read_prompts(prompts_file) if prompts_file else list(bench.DEFAULT_PROMPTS)
    documents = []
    for path in models or (None,):
        loaded = open_model(path, device, threads)
        # the base is checked with the first compared length (steps/block_length must fit it)
        sized = overrides if length_list[0] is None else {**overrides, "gen_length": length_list[0]}
        base = prepare(loaded, sized, verbose=verbose)
        cases = bench.plan(base, caches=cache_list, thresholds=threshold_list, gen_lengths=length_list)
        rows = _run_with_progress(loaded, cases, prompts, base, runs, warmup)
        m = loaded.manifest
        doc = bench.report(
            rows,
            model={"path": str(loaded.package.folder), "name": loaded.package.folder.name,
                   "architecture": m.architecture, "precision": m.precision, "target": m.target,
                   "size_bytes": m.size_bytes},
            device={"requested": device, "provider": provider_of(loaded), "threads": loaded.threads},
            runs=runs, warmup=warmup, prompts=len(prompts),
        )
        folder = out_dir or Path(f"bench-{loaded.package.folder.name}")
        if out_dir is not None and len(models) > 1:
            folder = out_dir / loaded.package.folder.name
        paths = bench.write_all(doc, folder)
        echo_err(bench.summary(rows))
        echo_err(f"wrote {paths['json']}, {paths['markdown']}, {paths['chart']}")
        documents.append(doc)
    if as_json:
        click.echo(json.dumps(documents[0] if len(documents) == 1 else documents, indent=2))


def _run_with_progress(model, cases, prompts, base, runs, warmup):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description:<40}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("bench", total=len(cases) * len(prompts) * (runs + warmup))

        def update(name: str, done: int, total: int) -> None:
            progress.update(task, completed=done, description=name)

        return bench.run(model, cases, prompts, base=base, runs=runs, warmup=warmup, on_progress=update)
