"""CPU session settings side by side: 1 vs 2 intra-op threads, spinning on vs off.

    python benchmarks/bench_threads.py                      # 58m preset, fp32 and int8, cache dual
    python benchmarks/bench_threads.py --precision int8 --cache none,dual --runs 3

The model is bench_cache.py's 58.5 M-parameter LLaDA-shaped random checkpoint
(prompt 128, gen_length 256, block 32, one token per forward). Every row is the
median tokens/s over --runs generations, measured in this one run; the ratio
column compares each row with "1 thread, spinning off". The device profile's
other session options are kept; only threads and spinning change.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench_cache import BLOCK, GEN, PRESETS, PROMPT, build  # same folder: run as a script

from unmask.devices import select
from unmask.model import Model
from unmask.package import open_package


def load_with(package_dir: Path, threads: int, spinning: bool) -> Model:
    """A CPU Model whose session uses `threads` intra-op threads and the given spinning policy."""
    package = open_package(package_dir)
    placement = select(package.manifest, "cpu", threads=threads)
    session_settings = dataclasses.replace(placement.profile.session, allow_spinning=spinning)
    placement = dataclasses.replace(placement, profile=dataclasses.replace(placement.profile, session=session_settings))
    session = placement.create_session(package.graph_path)
    return Model(package, session, threads=threads, device="cpu", placement=placement)


def tokens_per_second(model: Model, prompt: np.ndarray, cache: str, runs: int) -> float:
    def once() -> float:
        result = model.generate(prompt_ids=prompt, gen_length=GEN, block_length=BLOCK, steps=GEN, cache=cache,
                                early_stop=False, temperature=0.0)
        return result.stats.tokens_per_second

    once()  # warm-up: first-run allocations and kernel selection
    return statistics.median(once() for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="58m")
    parser.add_argument("--precision", default="fp32,int8", help="comma-separated: fp32,int8")
    parser.add_argument("--cache", default="dual", help="comma-separated: none,prefix,dual")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None, help="keep checkpoints/packages here (reused)")
    args = parser.parse_args()

    prompt = np.random.default_rng(0).integers(0, 256, PROMPT).astype(np.int64)
    settings = [(1, False), (1, True), (2, False), (2, True)]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(f"preset {args.preset}, prompt {PROMPT}, gen {GEN}, block {BLOCK}, steps {GEN}, median of {args.runs}")
        print()
        print("| precision | cache | threads | spinning | tok/s | vs 1 thread, no spin |")
        print("|---|---|---|---|---|---|")
        for precision in args.precision.split(","):
            package_dir = build(args.preset, precision, root)
            for cache in args.cache.split(","):
                base = None
                for threads, spinning in settings:
                    rate = tokens_per_second(load_with(package_dir, threads, spinning), prompt, cache, args.runs)
                    base = base or rate
                    print(f"| {precision} | {cache} | {threads} | {'on' if spinning else 'off'} | {rate:.2f} "
                          f"| {rate / base:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
