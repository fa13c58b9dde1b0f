"""Cache modes side by side: tokens/s of none, prefix and dual on LLaDA-shaped random models.

    python benchmarks/bench_cache.py                       # both presets, fp32 and int8
    python benchmarks/bench_cache.py --preset 58m --precision fp32
    python benchmarks/bench_cache.py --preset 58m --graph fused,separate   # q/k/v, gate/up fusion on/off
    python benchmarks/bench_cache.py --preset 58m --graph fused,rope-ops   # RotaryEmbedding kernel vs ops

Each preset is a random LLaDA checkpoint (unmask.export.testing) exported with
unmask.export.export_model; prompt 128 random tokens, gen_length 256, block 32, a fixed
number of steps, early stop off, temperature 0. For every run it prints tokens/s and the
ratio to cache none, the share of step time spent outside session.run, and the GFLOP/s
achieved by each kind of forward (full / refresh / window) against this machine's fp32
GEMM rate, measured in the same run as the faster of a large numpy matmul and the same
matmul in ONNX Runtime (MLAS, weight as an initializer): numpy's BLAS is not always the
fastest GEMM on the machine, and the reference should be the best one.

Targets: dual >= 3x none; host share < 5 %; window forwards >= 50 % of the GEMM rate;
58m preset, fp32, dual >= 18 tok/s (reference figures on a 2-core machine: original
PyTorch LLaDA sampler 2.2 tok/s, llama.cpp diffusion 2.1, Fast-dLLM dual cache 9).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import unmask
from unmask.export import ExportConfig, export_model
from unmask.export.precision import INT8_WEIGHT_MAX
from unmask.export.testing import make_llada_checkpoint
from unmask.manifest import read_manifest

PRESETS = {
    # ~134 M parameters (85 M in the transformer layers, 2 x 24.6 M embedding + LM head)
    "default": dict(dims=dict(d_model=768, n_layers=12, n_heads=12, mlp_hidden_size=2048, vocab_size=32000),
                    steps=64),
    # the 58.5 M-parameter LLaDA layout of the reference figures, one token per forward
    "58m": dict(dims=dict(d_model=512, n_layers=8, n_heads=8, mlp_hidden_size=1408, vocab_size=32000),
                steps=256),
}
PROMPT, GEN, BLOCK = 128, 256, 32
MODES = ("none", "prefix", "dual")


def gemm_gflops(n: int = 2048, repeats: int = 5) -> float:
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def ort_gemm_gflops(threads: int | None, n: int = 2048, repeats: int = 5) -> float:
    """The same n^3 matmul in ONNX Runtime's CPU provider, B an initializer (prepacked, as weights are)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "gemm",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
                              initializer=[numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: ORT default, one thread per physical core
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"a": np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)}
    session.run(None, feeds)
    best = min(_timed(lambda: session.run(None, feeds)) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_flops(dims: dict, window: int, past: int, rows: int) -> float:
    """Multiply-add FLOPs of one forward: linear layers on the window, attention over window+past, LM head rows."""
    d, layers, mlp, vocab = dims["d_model"], dims["n_layers"], dims["mlp_hidden_size"], dims["vocab_size"]
    linear = 4 * d * d + 3 * d * mlp  # q, k, v, o (no GQA here) + gate, up, down
    attention = 2 * window * (window + past) * d  # scores and weighted sum
    return layers * (2 * window * linear + 2 * attention) + 2 * rows * d * vocab


def build(preset: str, precision: str, graph: str, root: Path) -> Path:
    checkpoint = root / f"{preset}-checkpoint"
    if not checkpoint.exists():
        make_llada_checkpoint(checkpoint, max_sequence_length=4096, tokenizer_vocab=320, seed=0,
                              **PRESETS[preset]["dims"])
    package = root / f"{preset}-{precision}-{graph}"
    settings = dict(fuse_projections=graph != "separate", rope="ops" if graph == "rope-ops" else "auto")
    if package.exists():  # a --workdir package from an older export is rebuilt, not measured under a new name
        recorded = read_manifest(package).provenance
        wanted = ExportConfig(precision=precision, **settings).resolve()
        current = {"rope": wanted.rope, "fuse_projections": wanted.fuse_projections,
                   "int8_weight_max": INT8_WEIGHT_MAX if precision == "int8" else None}
        if any(recorded.get(key, "missing") != value for key, value in current.items()):
            shutil.rmtree(package)
    if not package.exists():
        export_model(checkpoint, package, precision, quiet=True, validate=False, **settings)
    return package


def run(model, prompt: np.ndarray, steps: int, cache: str):
    return model.generate(prompt_ids=prompt, gen_length=GEN, block_length=BLOCK, steps=steps, cache=cache,
                          early_stop=False, temperature=0.0)


def kind_rates(stats, dims: dict) -> dict[str, float]:
    """GFLOP/s per kind of forward over the whole run."""
    flops: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for kind, w, p, k, f in zip(stats.step_kinds, stats.window_lengths, stats.past_lengths, stats.logits_rows,
                                stats.forward_seconds):
        flops[kind] = flops.get(kind, 0.0) + step_flops(dims, w, p, k)
        seconds[kind] = seconds.get(kind, 0.0) + f
    return {kind: flops[kind] / seconds[kind] / 1e9 for kind in flops}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=[*PRESETS, "all"], default="all")
    parser.add_argument("--precision", default="fp32,int8", help="comma-separated: fp32,int8")
    parser.add_argument("--graph", default="fused", help="comma-separated: fused (the export default: one q/k/v "
                        "and one gate/up product per layer, RoPE as ORT's RotaryEmbedding kernel), separate "
                        "(unfused projections), rope-ops (fused, RoPE as elementwise ops)")
    parser.add_argument("--steps", type=int, default=None, help="override the preset's fixed step count")
    parser.add_argument("--threads", type=int, default=None, help="ORT threads (default: physical cores)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; the fastest is printed (a shared "
                        "or throttled machine varies run to run; the GEMM rate is already a best of 5)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep checkpoints/packages here (reused)")
    args = parser.parse_args()
    presets = list(PRESETS) if args.preset == "all" else [args.preset]
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    graphs = [g.strip() for g in args.graph.split(",") if g.strip()]
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if not graphs or set(graphs) - {"fused", "separate", "rope-ops"}:
        parser.error(f"--graph takes fused, separate and/or rope-ops, got {args.graph!r}")

    with tempfile.TemporaryDirectory(prefix="bench_cache_") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        numpy_rate, ort_rate = gemm_gflops(), ort_gemm_gflops(args.threads)
        gemm = max(numpy_rate, ort_rate)
        print(f"fp32 GEMM rate, 2048^3 best of 5: numpy {numpy_rate:.1f}, ONNX Runtime {ort_rate:.1f} GFLOP/s; "
              f"reference {gemm:.1f}")
        load = ", load average %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
        print(f"prompt {PROMPT}, gen_length {GEN}, block_length {BLOCK}, early_stop off, temperature 0; "
              f"fastest of {args.repeat} run(s) per row; {os.cpu_count()} CPUs{load}\n")
        header = ("| preset | precision | graph | steps | cache | tok/s | vs none | host share | "
                  "full GFLOP/s | refresh GFLOP/s | window GFLOP/s | window % of GEMM |")
        print(header)
        print("|" + "---|" * (header.count("|") - 1))
        for preset in presets:
            dims = PRESETS[preset]["dims"]
            steps = args.steps or PRESETS[preset]["steps"]
            prompt = np.random.default_rng(0).integers(0, 300, size=PROMPT).astype(np.int64)
            for precision, graph in ((p, g) for p in precisions for g in graphs):
                model = unmask.load(build(preset, precision, graph, root), device="cpu", threads=args.threads)
                model.generate(prompt_ids=prompt, gen_length=BLOCK, block_length=BLOCK, steps=4, cache="dual",
                               early_stop=False)  # warm-up: first-run allocations
                base = None
                for cache in MODES:
                    stats = max((run(model, prompt, steps, cache).stats for _ in range(args.repeat)),
                                key=lambda st: st.tokens_per_second)  # fastest of --repeat, like the GEMM rate
                    rate = stats.tokens_per_second
                    base = base or rate
                    rates = kind_rates(stats, dims)
                    cell = {k: f"{rates[k]:.1f}" if k in rates else "-" for k in ("full", "refresh", "window")}
                    share = f"{100 * rates['window'] / gemm:.0f} %" if "window" in rates else "-"
                    print(f"| {preset} | {precision} | {graph} | {steps} | {cache} | {rate:.2f} | {rate / base:.2f}x | "
                          f"{100 * stats.host_share:.1f} % | {cell['full']} | {cell['refresh']} | {cell['window']} "
                          f"| {share} |", flush=True)
                del model


if __name__ == "__main__":
    main()
