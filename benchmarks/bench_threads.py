"""Thread count and spinning, on a quiet machine and on one whose other cores are busy.

    python benchmarks/bench_threads.py                          # the embedded default model
    python benchmarks/bench_threads.py --runs 5 --gen 64
    python benchmarks/bench_threads.py --preset 58m --gen 64    # bench_cache.py's random 58.5 M model, int8
    nice -n -15 python benchmarks/bench_threads.py              # on a shared machine: ahead of the other jobs

Every policy is a (threads, spinning) pair built with unmask.devices.select, so the
sessions are the ones unmask.load makes, with only those two settings changed:
1 thread; all physical cores with ORT's pool threads spinning ("on"), sleeping ("off"),
or spinning only inside session.run ("in runs"). Conditions: "quiet" (whatever else
the machine runs; on a shared machine that is approximate, and a negative nice value
puts the benchmark ahead of the other jobs) and "loaded", where this
script starts `--busy` worker processes (default: physical cores - 1) that spin on
arithmetic until the condition ends, as a compiler or a browser tab would.

Policies and conditions take turns, one generation each, for --runs rounds after a
warm-up, so a slow minute hits them all alike. Every cell is the median tokens/s; the
ratio compares it with the best policy of the same condition, and the last column is
each policy's worst ratio: a default should never lose badly in either.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
from contextlib import contextmanager
from pathlib import Path

from unmask.devices import detect, select
from unmask.model import Model, default_package_dir
from unmask.package import open_package

PROMPT = "Write a short story about a robot who learns to paint."


def policies(cores: int) -> dict[str, tuple[int, bool, bool]]:
    """name -> (threads, allow spinning, stop spinning when run returns)."""
    table = {"1 thread": (1, False, False)}
    if cores > 1:
        table.update({f"{cores} threads, spin on": (cores, True, False),
                      f"{cores} threads, spin off": (cores, False, False),
                      f"{cores} threads, spin in runs": (cores, True, True)})
    return table


def load_with(package_dir: Path, threads: int, allow: bool, stop: bool) -> Model:
    """A CPU Model with `threads` intra-op (and decoder) threads and the given spinning."""
    package = open_package(package_dir)
    placement = select(package.manifest, "cpu", threads=threads, spinning=allow)
    placement = placement.with_session(stop_spinning_after_run=stop)
    session = placement.create_session(package.graph_path)
    return Model(package, session, threads=threads, device="cpu", placement=placement)


def _spin(stop) -> None:
    """A busy worker: floating-point work until `stop` is set (checked every ~1 ms)."""
    x = 1.0
    while not stop.is_set():
        for _ in range(20_000):
            x = x * 1.000001 + 1e-9


@contextmanager
def busy(workers: int):
    """`workers` processes keeping cores busy for the duration of the with-block."""
    stop = mp.Event()
    procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(workers)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()


def generate(model: Model, gen: int) -> float:
    result = model.generate(PROMPT, gen_length=gen, block_length=min(gen, 32), steps=gen, early_stop=False,
                            temperature=0.0)
    return result.stats.tokens_per_second


def measure(models: dict[str, Model], conditions: dict[str, int], runs: int, gen: int) -> dict:
    """{condition: {policy: [tok/s per run]}}, policies and conditions taking turns."""
    rates = {c: {name: [] for name in models} for c in conditions}
    for condition, workers in conditions.items():  # warm-up: first-run allocations and kernel choice
        with busy(workers):
            for model in models.values():
                generate(model, gen)
    for _ in range(runs):
        for condition, workers in conditions.items():
            with busy(workers):
                for name, model in models.items():
                    rates[condition][name].append(generate(model, gen))
    return rates


def report(rates: dict, cores: int, busy_workers: int) -> None:
    medians = {c: {name: statistics.median(r) for name, r in per.items()} for c, per in rates.items()}
    conditions = list(medians)
    print(f"{cores} physical cores; loaded = {busy_workers} busy worker process(es); median tok/s (ratio to the "
          "best policy of that condition)")
    print()
    print("| policy | " + " | ".join(conditions) + " | worst ratio |")
    print("|---" * (len(conditions) + 2) + "|")
    for name in medians[conditions[0]]:
        cells, worst = [], 1.0
        for c in conditions:
            ratio = medians[c][name] / max(medians[c].values())
            worst = min(worst, ratio)
            cells.append(f"{medians[c][name]:.0f} ({ratio:.2f})")
        print(f"| {name} | " + " | ".join(cells) + f" | {worst:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a package folder [default: the embedded model]")
    parser.add_argument("--preset", default=None, help="instead: bench_cache.py's random preset (58m, default), int8")
    parser.add_argument("--gen", type=int, default=32, help="tokens per generation (one per forward)")
    parser.add_argument("--runs", type=int, default=3, help="rounds (median)")
    parser.add_argument("--busy", type=int, default=None, help="busy workers when loaded [default: cores - 1, at least 1]")
    args = parser.parse_args()
    if args.runs < 1 or args.gen < 1:
        parser.error("--runs and --gen must be at least 1")
    cores = detect().cpu.physical_cores
    workers = args.busy if args.busy is not None else max(1, cores - 1)
    with tempfile.TemporaryDirectory() as tmp:
        if args.preset:
            from bench_cache import build  # same folder: run as a script

            package_dir = build(args.preset, "int8", "fused", Path(tmp))
        else:
            package_dir = args.model or default_package_dir()
        models = {name: load_with(package_dir, *policy) for name, policy in policies(cores).items()}
        default = select(open_package(package_dir).manifest, "cpu")
        print(f"model {package_dir.name}, gen {args.gen} (one token per forward), {args.runs} rounds; "
              f"load average {os.getloadavg()[0]:.1f} before the quiet runs (other work on the machine)")
        print(f"unmask's choice now: {default.threads} threads ({default.threads_why}), "
              f"spinning {'on' if default.spinning else 'off'}")
        rates = measure(models, {"quiet": 0, "loaded": workers}, args.runs, args.gen)
        report(rates, cores, workers)


if __name__ == "__main__":
    main()
