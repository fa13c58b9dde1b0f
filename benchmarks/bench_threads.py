"""CPU session settings side by side: 1 vs 2 intra-op threads, three spinning policies.

    python benchmarks/bench_threads.py                      # 58m preset, fp32 and int8, cache dual
    python benchmarks/bench_threads.py --precision int8 --cache none,dual --runs 3

The model is bench_cache.py's 58.5 M-parameter LLaDA-shaped random checkpoint
(prompt 128, gen_length 256, block 32, one token per forward). Spinning policies:
"off" (idle pool threads sleep), "on" (they spin-wait for work, also between passes)
and "in runs" (they spin while session.run works and stop when it returns, so the
C++ decoder has the cores between passes); the cpu-x86 profile's default is "on". The
settings of one precision and cache mode take turns, one generation each, --runs
rounds; every row is the median tokens/s and its host share (time outside
session.run), and the ratio compares it with "1 thread, spinning off". The device
profile's other session options are kept.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np

from bench_cache import BLOCK, GEN, PRESETS, PROMPT, build  # same folder: run as a script

from unmask.devices import select
from unmask.model import Model
from unmask.package import open_package


POLICIES = {"off": (False, False), "on": (True, False), "in runs": (True, True)}  # allow, stop after run


def load_with(package_dir: Path, threads: int, spinning: str) -> Model:
    """A CPU Model whose session uses `threads` intra-op threads and the given spinning policy."""
    package = open_package(package_dir)
    placement = select(package.manifest, "cpu", threads=threads)
    allow, stop = POLICIES[spinning]
    placement = placement.with_session(allow_spinning=allow, stop_spinning_after_run=stop)
    session = placement.create_session(package.graph_path)
    return Model(package, session, threads=threads, device="cpu", placement=placement)


def generate(model: Model, prompt: np.ndarray, cache: str):
    return model.generate(prompt_ids=prompt, gen_length=GEN, block_length=BLOCK, steps=GEN, cache=cache,
                          early_stop=False, temperature=0.0).stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="58m")
    parser.add_argument("--precision", default="fp32,int8", help="comma-separated: fp32,int8")
    parser.add_argument("--cache", default="dual", help="comma-separated: none,prefix,dual")
    parser.add_argument("--runs", type=int, default=3, help="generations per setting (median)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep checkpoints/packages here (reused)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")

    prompt = np.random.default_rng(0).integers(0, 256, PROMPT).astype(np.int64)
    settings = [(threads, spinning) for threads in (1, 2) for spinning in POLICIES]
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print(f"preset {args.preset}, prompt {PROMPT}, gen {GEN}, block {BLOCK}, steps {GEN}, median of {args.runs}")
        print()
        print("| precision | cache | threads | spinning | tok/s | vs 1 thread, spinning off | host share |")
        print("|---|---|---|---|---|---|---|")
        for precision in args.precision.split(","):
            package_dir = build(args.preset, precision, "fused", root)
            models = {setting: load_with(package_dir, *setting) for setting in settings}
            for cache in args.cache.split(","):
                for model in models.values():
                    generate(model, prompt, cache)  # warm-up: first-run allocations and kernel selection
                stats = {setting: [] for setting in settings}
                for _ in range(args.runs):  # settings take turns, so a slow minute hits them all alike
                    for setting, model in models.items():
                        stats[setting].append(generate(model, prompt, cache))
                base = None
                for (threads, spinning), runs in stats.items():
                    rate = statistics.median(st.tokens_per_second for st in runs)
                    host = statistics.median(st.host_share for st in runs)
                    base = base or rate
                    print(f"| {precision} | {cache} | {threads} | {spinning} | {rate:.2f} | {rate / base:.2f}x "
                          f"| {100 * host:.1f} % |", flush=True)


if __name__ == "__main__":
    main()
