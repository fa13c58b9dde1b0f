"""Precisions side by side: speed and memory of fp32, int8 and int4 packages of one random LLaDA model.

    python benchmarks/bench_quant.py                               # 130m preset: fp32, int8, int4
    python benchmarks/bench_quant.py --preset 550m --variants int8,int4
    python benchmarks/bench_quant.py --variants int4,int4:block_size=128,int4:block_size=128:symmetric=0
    python benchmarks/bench_quant.py --variants int8,int4 --profile   # per-operator shares of a window step

The workload of issue 36: prompt 64 random tokens, gen_length 64, block 32, one token per
forward (steps = 64), early stop off, temperature 0, cache none and dual, 2 threads. A variant
is a precision with optional ExportConfig fields (`int4:block_size=128:accuracy_level=0`), so
export settings are compared in the same run. All packages are loaded in one process and run
round-robin (every cell once per round, the fastest round printed), so a machine shared with
other work slows every cell alike and the ratios hold even when the absolute figures do not.

Per cell: tokens/s, median milliseconds per forward, host share (step time outside
session.run), the forwards' GFLOP/s and their share of this machine's fp32 GEMM rate, and
speed against fp32 and int8 in the same cache mode. A generation takes seconds, so on a busy
machine a burst of load can still land on one cell: a second table times single forwards
(a dual-cache window step and a cache-none step) of every package in turn, --forwards times,
and gives their medians side by side; compare precisions by that table.

Memory: each package is loaded in a fresh process that generates with both cache modes; its
peak RSS over the process's life and its peak while generating (Linux: the high-water mark is
reset once the model is loaded) are printed against the package size and the issue's bound,
1.25 x package + 100 MB. Loading peaks above generating: the hashed package bytes and ORT's
copy of the weights coexist until the session is built.

--profile: each package again with ONNX Runtime's profiler, one dual-cache generation, and
the operator types' shares of the window steps' time (the profiler slows every kernel a little).

Targets (issue 36): int4 dual >= int8 dual; int4 cache none >= 1.5x its earlier per-forward
speed; int8 host share < 5 %; fp32 dual windows >= 70 % of the GEMM rate; peak RSS of int4
and int8 <= 1.25 x package + 100 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import unmask
from unmask.stats import peak_rss_bytes

if "--child" not in sys.argv:  # the memory child imports only what a user's process would: unmask
    from bench_cache import gemm_gflops, kind_rates, ort_gemm_gflops

    from unmask import op_profile
    from unmask.bench import Generation
    from unmask.export import ExportConfig, export_model
    from unmask.export.testing import make_llada_checkpoint
    from unmask.manifest import read_manifest

PRESETS = {
    # ~134 M parameters: 85 M in 12 layers, 2 x 24.6 M embedding + LM head
    "130m": dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden_size=2048, vocab_size=32000),
    # ~550 M parameters: 453 M in 16 layers, 2 x 49 M embedding + LM head
    "550m": dict(d_model=1536, n_layers=16, n_heads=16, mlp_hidden_size=4096, vocab_size=32000),
}
PROMPT, GEN, BLOCK = 64, 64, 32
CACHES = ("none", "dual")


def parse_variant(text: str) -> tuple[str, dict]:
    """'int4:block_size=128:symmetric=0' -> ('int4', {'block_size': 128, 'symmetric': False})."""
    precision, *pairs = text.split(":")
    fields = {f.name: f.type for f in ExportConfig.__dataclass_fields__.values()}
    settings = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in fields or not value.lstrip("-").isdigit():
            raise SystemExit(f"variant {text!r}: {pair!r} is not FIELD=INTEGER of an ExportConfig field")
        settings[key] = bool(int(value)) if "bool" in str(fields[key]) else int(value)
    try:  # a bad variant fails before any export
        ExportConfig(precision=precision, **settings).resolve()
    except unmask.ConfigError as exc:
        raise SystemExit(f"variant {text!r}: {exc}") from None
    return precision, settings


def build(preset: str, variant: str, root: Path) -> Path:
    checkpoint = root / f"{preset}-checkpoint"
    if not checkpoint.exists():
        make_llada_checkpoint(checkpoint, max_sequence_length=4096, tokenizer_vocab=320, seed=0, **PRESETS[preset])
    package = root / f"{preset}-{variant.replace(':', '-').replace('=', '')}"
    precision, settings = parse_variant(variant)
    if package.exists() and stale(package, ExportConfig(precision=precision, **settings).resolve()):
        shutil.rmtree(package)  # a --workdir package from other exporter defaults is rebuilt, not measured
    if not package.exists():
        export_model(checkpoint, package, precision, quiet=True, validate=False, **settings)
    return package


def stale(package: Path, config: ExportConfig) -> bool:
    """Whether the package's recorded quantization settings differ from what `config` would write."""
    recorded = read_manifest(package).provenance
    int4 = config.precision == "int4"
    wanted = {"block_size": config.block_size if int4 else None, "symmetric": config.symmetric if int4 else None,
              "accuracy_level": config.accuracy_level if int4 else None}
    return any(recorded.get(key, "missing") != value for key, value in wanted.items())


def package_bytes(package: Path) -> int:
    return sum(f.stat().st_size for f in package.iterdir() if f.is_file())


def generate(model, cache: str):
    prompt = np.random.default_rng(0).integers(0, 300, size=PROMPT).astype(np.int64)
    return model.generate(prompt_ids=prompt, gen_length=GEN, block_length=BLOCK, steps=GEN, cache=cache,
                          early_stop=False, temperature=0.0).stats


def _ratio(st, other) -> str:
    return f"{st.tokens_per_second / other.tokens_per_second:.2f}x" if other else "-"


def speed(packages: dict[str, Path], dims: dict, rounds: int, reps: int, threads: int) -> None:
    gemm = max(gemm_gflops(), ort_gemm_gflops(threads))
    models = {v: unmask.load(path, device="cpu", threads=threads) for v, path in packages.items()}
    for model in models.values():
        generate(model, "dual")  # warm-up: first-run allocations
    runs: dict[tuple[str, str], list] = {}
    for _ in range(rounds):  # round-robin: background load hits every cell alike
        for cache in CACHES:
            for variant, model in models.items():
                runs.setdefault((variant, cache), []).append(generate(model, cache))
    print(f"fp32 GEMM reference {gemm:.1f} GFLOP/s; fastest of {rounds} round-robin runs per cell; "
          f"load average {os.getloadavg()[0]:.1f}\n")
    print("| variant | cache | tok/s | ms / forward | host share | GFLOP/s | % of GEMM | vs fp32 | vs int8 |")
    print("|---|---|---|---|---|---|---|---|---|")
    best = {key: max(stats, key=lambda st: st.tokens_per_second) for key, stats in runs.items()}
    for cache in CACHES:
        for variant in models:
            st = best[(variant, cache)]
            forward = 1000 * statistics.median(st.forward_seconds)
            rate = kind_rates(st, dims).get("window" if cache == "dual" else "full")
            flops = f"{rate:.1f} | {100 * rate / gemm:.0f} %" if rate else "- | -"
            print(f"| {variant} | {cache} | {st.tokens_per_second:.2f} | {forward:.1f} | {100 * st.host_share:.1f} % | "
                  f"{flops} | {_ratio(st, best.get(('fp32', cache)))} | {_ratio(st, best.get(('int8', cache)))} |",
                  flush=True)
    forwards(models, dims, reps)


def step_feeds(session, dims: dict, window: int, past: int, rows: int) -> dict:
    """Inputs of one forward: `window` new positions after `past` cached ones, `rows` logit rows."""
    rng = np.random.default_rng(0)
    heads = dims["n_heads"]
    kv = rng.standard_normal((1, heads, past, dims["d_model"] // heads)).astype(np.float32)
    feeds = {"input_ids": rng.integers(0, 300, (1, window)), "position_ids": np.arange(past, past + window)[None],
             "logits_index": np.arange(rows)}
    feeds |= {f"past_{t}.{i}": kv for i in range(dims["n_layers"]) for t in ("key", "value")}
    names = {i.name for i in session.get_inputs()}
    return {k: v for k, v in feeds.items() if k in names}


def forwards(models: dict, dims: dict, reps: int) -> None:
    """One forward of each package in turn, `reps` times: the finest round-robin, so a shared machine's
    bursts of load fall on every package alike. Window: the dual cache's step (32 new positions after
    the 64-token prompt and the block before, 16 logit rows); full: cache none (128 positions, 32 rows)."""
    shapes = {"window": (BLOCK, PROMPT + BLOCK, BLOCK // 2), "full": (PROMPT + GEN, 0, BLOCK)}
    print("\nOne forward at a time, round-robin: median / fastest ms of", reps, "each\n")
    print("| step | " + " | ".join(models) + " |")
    print("|---|" + "---|" * len(models))
    for step, shape in shapes.items():
        feeds = {v: step_feeds(m.engine.session, dims, *shape) for v, m in models.items()}
        times = {v: [] for v in models}
        for _ in range(reps):
            for v, m in models.items():
                start = time.perf_counter()
                m.engine.session.run(["logits"], feeds[v])
                times[v].append(time.perf_counter() - start)
        cells = [f"{1000 * statistics.median(t):.1f} / {1000 * min(t):.1f}" for t in times.values()]
        print(f"| {step} | " + " | ".join(cells) + " |")
        if "int8" in times:
            ratios = [f"{statistics.median(times['int8']) / statistics.median(t):.2f}x" for t in times.values()]
            print(f"| {step}: speed vs int8 (medians) | " + " | ".join(ratios) + " |", flush=True)


def memory(packages: dict[str, Path], threads: int) -> None:
    print("\nPeak RSS of a fresh process per package: over its whole life (load included), and while generating "
          "(high-water mark reset after load; Linux)\n")
    print("| variant | package MiB | peak RSS MiB | peak / package | generating MiB | generating / package | "
          "bound 1.25 x package + 100 MB | within (peak, generating) |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, path in packages.items():
        cmd = [sys.executable, __file__, "--child", str(path), "--threads", str(threads)]
        peaks = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        size = package_bytes(path)
        bound = 1.25 * size + 100e6
        peak, generating = peaks["peak_rss"], peaks["generating_rss"]
        within = ", ".join("yes" if value and value <= bound else "no" for value in (peak, generating))
        gen = f"{generating / 2**20:.0f} | {generating / size:.2f}" if generating else "- | -"
        print(f"| {variant} | {size / 2**20:.0f} | {peak / 2**20:.0f} | {peak / size:.2f} | {gen} | "
              f"{bound / 2**20:.0f} | {within} |", flush=True)


def child(package: Path, threads: int) -> None:
    """One fresh process: load, generate with each cache mode, print the peak RSS (and the peak since load)."""
    model = unmask.load(package, device="cpu", threads=threads)
    # Linux keeps ru_maxrss across exec, so a child of a big bench process would report the parent's peak:
    # read the process's own high-water mark (VmHWM) where there is one, before resetting it
    loading = _high_water_mark() or peak_rss_bytes()
    resettable = _reset_high_water_mark()
    for cache in CACHES:
        generate(model, cache)
    generating = _high_water_mark() if resettable else None
    print(json.dumps({"peak_rss": max(loading, generating or peak_rss_bytes()), "generating_rss": generating}))


def _reset_high_water_mark() -> bool:
    try:  # Linux: writing 5 to clear_refs resets VmHWM, the peak resident set size
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _high_water_mark() -> int:
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    return 0


def profile(packages: dict[str, Path], threads: int, root: Path) -> None:
    """Operator types' shares of the window steps of one dual-cache generation, per package."""
    for i, (variant, path) in enumerate(packages.items()):
        model = unmask.load(path, device="cpu", threads=threads, profile_prefix=root / f"profile-{i}")
        generate(model, "dual")  # warm-up
        st = generate(model, "dual")
        warmup = Generation(False, st.nfe, 0.0)  # the warm-up's forwards are left out
        steps = [Generation(kind == "window", 1, f + h)
                 for kind, f, h in zip(st.step_kinds, st.forward_seconds, st.host_seconds)]
        trace = op_profile.finish(model, root)
        summary = op_profile.summarize(trace, [warmup, *steps])
        window = [f for kind, f in zip(st.step_kinds, st.forward_seconds) if kind == "window"]
        print(f"\n{variant}: window step {1000 * statistics.median(window):.1f} ms (median, profiler on)"
              + (f"; {summary['note']}" if summary["note"] else ""))
        for line in summary["operators"]:
            print(f"  {line['op_type']:34s} {line['kind']:10s} {100 * line['share']:5.1f} %  "
                  f"{1e6 * line['seconds'] / max(line['calls'], 1):8.0f} us/call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=list(PRESETS), default="130m")
    parser.add_argument("--variants", default="fp32,int8,int4",
                        help="comma-separated PRECISION[:FIELD=VALUE...] (ExportConfig fields)")
    parser.add_argument("--rounds", type=int, default=2, help="round-robin runs per cell; the fastest is printed")
    parser.add_argument("--forwards", type=int, default=20, help="round-robin single forwards per package and step")
    parser.add_argument("--threads", type=int, default=2, help="ORT intra-op threads")
    parser.add_argument("--no-speed", action="store_true", help="skip the speed table")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak RSS table")
    parser.add_argument("--profile", action="store_true", help="per-operator shares of a window step")
    parser.add_argument("--workdir", type=Path, default=None, help="keep checkpoints/packages here (reused)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.threads)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for variant in variants:
        parse_variant(variant)
    if args.rounds < 1 or args.forwards < 1:
        parser.error(f"--rounds and --forwards must be at least 1, got {args.rounds} and {args.forwards}")
    with tempfile.TemporaryDirectory(prefix="bench_quant_") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        packages = {v: build(args.preset, v, root) for v in variants}
        print(f"preset {args.preset}; prompt {PROMPT}, gen_length {GEN}, block {BLOCK}, one token per forward; "
              f"{args.threads} threads, {os.cpu_count()} CPUs")
        if not args.no_speed:
            speed(packages, PRESETS[args.preset], args.rounds, args.forwards, args.threads)
        if not args.no_memory:
            memory(packages, args.threads)
        if args.profile:
            profile(packages, args.threads, Path(tmp))


if __name__ == "__main__":
    main()
