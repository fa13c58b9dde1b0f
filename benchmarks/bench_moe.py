"""Mixture-of-experts benchmarks (issue 31): window-step cost of LLaDA2-layout MoE packages.

    python benchmarks/bench_moe.py compare   # random MoE models (16, 32, 64 experts; 2 active + 1 shared)
                                             # against a dense model of the same active size, int8 and int4,
                                             # side by side in one run; target: MoE step <= 1.5x dense
    python benchmarks/bench_moe.py plan      # LLaDA2.0-mini's real widths: one MoE layer exported and timed,
                                             # extrapolated to the whole model (size, load memory, step time)

A window step is one graph call on a block of --window positions after a cache of --past
positions (the block-diffusion runtime's call). Every model is exported by `unmask export`'s
own code from a random bf16 checkpoint written here; all files go under a temporary folder
(--workdir) and are deleted. Medians of --repeats calls after two warm-up calls.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_export import _peak_rss_monitor, _table  # same folder: the RSS sampler and the table printer


def _checkpoint(folder: Path, args, experts: int, dense: bool, layers: int, vocab: int = 320) -> Path:
    """A random llada2_moe checkpoint; dense: every layer a SwiGLU of the active MoE width
    ((k + shared) x expert width), so it does the same multiply-adds per token."""
    from unmask.export.testing import make_llada2_checkpoint

    heads = args.hidden // args.head_dim
    return make_llada2_checkpoint(
        folder, hidden_size=args.hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=max(1, heads // args.group), head_dim=args.head_dim,
        intermediate_size=(args.active + args.shared) * args.expert, moe_intermediate_size=args.expert,
        num_experts=experts, num_experts_per_tok=args.active, n_group=args.n_group, topk_group=args.topk_group,
        num_shared_experts=args.shared, first_k_dense_replace=layers if dense else 0, block_size=args.window,
        vocab_size=vocab, dtype="bfloat16", max_position_embeddings=4096)


def _params(folder: Path, dense: bool, args, experts: int) -> tuple[int, int]:
    """(total, active per token) parameters of a checkpoint folder's config."""
    import json

    from unmask.export.testing import llada2_weight_shapes

    shapes = llada2_weight_shapes(json.loads((folder / "config.json").read_text()))
    total = sum(math.prod(s) for s in shapes.values())
    routed = 0 if dense else sum(math.prod(s) for n, s in shapes.items() if ".experts." in n)
    return total, total - routed + routed * args.active // experts


def _session(package: Path, args):
    """A CPU session; pool threads sleep between ops unless --spin (the cpu-x86 profile spins, which
    pays on an idle machine; on a shared one the spinning threads starve each other: one MoE layer
    measured 6.5 ms spinning, 2.1 ms not, with 2 threads among other jobs)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if args.spin else "0")
    return ort.InferenceSession(str(package / "model.onnx"), options, providers=["CPUExecutionProvider"])


def _feeds(manifest, args) -> dict:
    """One window call's inputs: --window positions after --past cached ones."""
    d, rng = manifest.dims, np.random.default_rng(0)
    past = rng.standard_normal((1, d.num_kv_heads, args.past, d.head_dim)).astype(np.float32)
    feeds = {"input_ids": rng.integers(0, d.vocab_size, (1, args.window)),
             "position_ids": np.arange(args.past, args.past + args.window, dtype=np.int64)[None],
             "logits_index": np.arange(args.window, dtype=np.int64)}
    return feeds | {f"past_{t}.{i}": past for i in range(d.num_layers) for t in ("key", "value")}


def _step_ms(calls: dict, repeats: int) -> dict:
    """Median ms per window call of each {label: (session, feeds)}, timed round-robin (one call of
    each in turn) so that a busy machine slows every model alike; two warm-up rounds first."""
    times = {label: [] for label in calls}
    for i in range(repeats + 2):
        for label, (session, feeds) in calls.items():
            t0 = time.perf_counter()
            session.run(["logits"], feeds)
            if i >= 2:
                times[label].append(1000 * (time.perf_counter() - t0))
    return {label: statistics.median(t) for label, t in times.items()}


def scratch_parent(workdir: str | None) -> str | None:
    """--workdir, created when missing (the scratch folder goes inside it)."""
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    return workdir


def bench_compare(args) -> None:
    from unmask.export import export_model

    work = Path(tempfile.mkdtemp(prefix="unmask-moe-", dir=scratch_parent(args.workdir)))
    rows = []
    try:
        models = [("dense", 0, True)] + [(f"moe {e}x", e, False) for e in args.experts]
        packages, params = {}, {}
        for label, experts, dense in models:
            src = _checkpoint(work / f"hf-{label}", args, max(experts, args.n_group * 2), dense, args.layers)
            params[label] = _params(src, dense, args, max(experts, 1))
            for precision in args.precisions:
                out = work / f"pkg-{label}-{precision}".replace(" ", "")
                packages[label, precision] = export_model(src, out, precision, quiet=True, validate=False)
            shutil.rmtree(src, ignore_errors=True)
        for precision in args.precisions:
            results = {label: packages[label, precision] for label, _, _ in models}
            calls = {label: (_session(r.path, args), _feeds(r.manifest, args)) for label, r in results.items()}
            ms = _step_ms(calls, args.repeats)
            for label, r in results.items():
                total, active = params[label]
                rows.append((label, f"{total / 1e6:.1f} M", f"{active / 1e6:.1f} M", precision,
                             f"{r.manifest.size_bytes / 2**20:.0f} MiB", f"{ms[label]:.2f}",
                             f"{ms[label] / ms['dense']:.2f}x"))
        print(f"window {args.window} after {args.past} cached positions, {args.threads} threads "
              f"({'spinning' if args.spin else 'not spinning'}), "
              f"hidden {args.hidden}, {args.layers} layers, experts of {args.expert} ({args.active} active "
              f"+ {args.shared} shared); target: MoE <= 1.5x dense")
        _table(["model", "parameters", "active / token", "precision", "package", "window step ms", "vs dense"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_plan(args) -> None:
    """One LLaDA2.0-mini MoE layer at its real widths, exported, loaded and timed; the whole model is
    that layer x the MoE layers, plus the dense layer, embedding and LM head from their formats."""
    from unmask.export import export_model

    work = Path(tempfile.mkdtemp(prefix="unmask-moe-plan-", dir=scratch_parent(args.workdir)))
    try:
        src = _checkpoint(work / "hf", args, args.experts[0], False, layers=1)
        fp32 = sum(f.stat().st_size for f in src.glob("*.safetensors")) * 2  # bf16 on disk
        stop = _peak_rss_monitor()
        # weights kept in model.onnx.data as the whole model's would be (one layer alone is small
        # enough to be folded into model.onnx, which holds the package in memory once)
        result = export_model(src, work / "pkg", args.precisions[0], quiet=True, validate=False,
                              external_data_threshold=0)
        export_peak = stop()
        stop = _peak_rss_monitor()
        before = _rss()
        session = _session(work / "pkg", args)
        load = stop() - before
        layer_ms = _step_ms({"layer": (session, _feeds(result.manifest, args))}, args.repeats)["layer"]
        layer_bytes = result.manifest.size_bytes
        d, v, moe_layers = args.hidden, args.vocab, args.total_layers - args.dense_layers
        per_param = {"int4": 0.5 + 4 / 32, "int8": 1.0}[args.precisions[0]]  # codes + fp32 scales (blocks of 32)
        heads = d // args.head_dim
        attention = (2 * heads + 2 * (heads // args.group)) * args.head_dim * d  # q, k, v, o
        dense_layer = (attention + 3 * d * args.dense_width) * per_param
        table = v * d * 2 + v * d * (1 + 4 / 32)  # fp16 embedding, 8-bit LM head
        rows = [
            ("one MoE layer: parameters", f"{fp32 / 4 / 1e6:.0f} M"),
            ("one MoE layer: export peak RSS / fp32 size", f"{100 * export_peak / fp32:.1f} % (target < 40 %)"),
            (f"one MoE layer: package ({args.precisions[0]})", f"{layer_bytes / 2**20:.0f} MiB"),
            ("one MoE layer: memory at load", f"{load / 2**20:.0f} MiB"),
            (f"one MoE layer: window step ({args.window} after {args.past})", f"{layer_ms:.1f} ms"),
            (f"whole model: package ({moe_layers} MoE + {args.dense_layers} dense layers, embedding, head)",
             f"{(moe_layers * layer_bytes + args.dense_layers * dense_layer + table) / 2**30:.2f} GiB"),
            ("whole model: memory at load (layers x measured, + tables)",
             f"{(moe_layers * load + args.dense_layers * dense_layer + table) / 2**30:.2f} GiB"),
            ("whole model: window step, layers only (MoE layers x measured)",
             f"{(moe_layers + args.dense_layers) * layer_ms:.0f} ms (+ the {v}-row LM head for the rows asked)"),
        ]
        print(f"LLaDA2.0-mini widths: hidden {d}, {args.experts[0]} experts of {args.expert} ({args.active} active "
              f"+ {args.shared} shared, {args.n_group} groups keep {args.topk_group}), {args.threads} threads")
        _table(["quantity", "value"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    compare = sub.add_parser("compare", help="MoE vs dense window step at int8 and int4")
    compare.set_defaults(func=bench_compare, hidden=768, head_dim=64, group=2, layers=8, expert=768, active=2,
                         shared=1, n_group=4, topk_group=2, experts=[16, 32, 64], precisions=["int8", "int4"])
    plan = sub.add_parser("plan", help="LLaDA2.0-mini's widths: one layer measured, the model extrapolated")
    plan.set_defaults(func=bench_plan, hidden=2048, head_dim=128, group=4, expert=512, active=8, shared=1,
                      n_group=8, topk_group=4, experts=[256], total_layers=20, dense_layers=1, dense_width=5120,
                      vocab=157184, precisions=["int4"])
    for p in (compare, plan):
        p.add_argument("--hidden", type=int)
        p.add_argument("--expert", type=int, help="width of one expert")
        p.add_argument("--experts", type=lambda s: [int(x) for x in s.split(",")], help="expert counts, e.g. 16,32,64")
        p.add_argument("--precisions", type=lambda s: s.split(","), help="e.g. int8,int4")
        p.add_argument("--window", type=int, default=32)
        p.add_argument("--past", type=int, default=64)
        p.add_argument("--repeats", type=int, default=10)
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--spin", action="store_true", help="let ORT's pool threads spin (an idle machine)")
        p.add_argument("--workdir", default=None)
    compare.add_argument("--layers", type=int)
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
