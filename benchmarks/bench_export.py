"""Export benchmarks (tables on stdout).

    python benchmarks/bench_export.py memory     # 1.3B-parameter LLaDA-shaped bf16 checkpoint -> int4,
                                                 # peak RSS vs the fp32 size of the weights
    python benchmarks/bench_export.py attention  # CPU latency of the attention kernels (plain, mha,
                                                 # attention23, gqa) for refresh and window calls

Everything is written under a temporary folder (--workdir, default the system temp) and deleted.
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def _peak_rss_monitor():
    """Sample this process's RSS every 20 ms in a thread; returns (stop(), peak list)."""
    import psutil

    proc, peak, done = psutil.Process(), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def stop():
        done.set()
        thread.join()
        return peak[0]

    return stop


def bench_memory(args) -> None:
    from unmask.export import export_model
    from unmask.export.testing import llada_weight_shapes, make_tokenizer, llada_config, write_weights
    import json

    work = Path(tempfile.mkdtemp(prefix="unmask-bench-", dir=args.workdir))
    try:
        src = work / "hf"
        ids = make_tokenizer(src, "llada", 320)
        cfg = llada_config(vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
                           mlp_hidden_size=args.mlp, mask_token_id=ids["<|mdm_mask|>"],
                           eos_token_id=ids["<|endoftext|>"], max_sequence_length=4096)
        (src / "config.json").write_text(json.dumps(cfg))
        shapes = llada_weight_shapes(cfg)
        params = sum(math.prod(s) for s in shapes.values())
        rng = np.random.default_rng(0)
        noise = (rng.standard_normal(1 << 20, dtype=np.float32) * 0.02)  # tiled: fast to generate

        def make(name, shape):
            n = math.prod(shape)
            return np.resize(noise, n).reshape(shape) + (1.0 if "norm" in name or "ln_f" in name else 0.0)

        t0 = time.perf_counter()
        write_weights(src, shapes, "bfloat16", seed=0, shards=args.shards, make=make)
        t_write = time.perf_counter() - t0
        fp32_bytes = params * 4
        stop = _peak_rss_monitor()
        t0 = time.perf_counter()
        result = export_model(src, work / "pkg", precision=args.precision, target="cpu", quiet=True,
                              validate=args.validate)
        t_export = time.perf_counter() - t0
        peak = stop()
        rows = [
            ("parameters", f"{params / 1e9:.3f} B"),
            ("checkpoint (bf16) written in", f"{t_write:.1f} s"),
            ("fp32 size of the weights", f"{fp32_bytes / 2**30:.2f} GiB"),
            (f"export to {args.precision} took", f"{t_export:.1f} s"),
            ("package size", f"{result.manifest.size_bytes / 2**30:.2f} GiB"),
            ("peak RSS of the export", f"{peak / 2**30:.2f} GiB"),
            ("peak RSS / fp32 size", f"{100 * peak / fp32_bytes:.1f} % (target < 40 %)"),
        ]
        for agreement in result.validation:
            rows.append(("validation", agreement.line()))
        _table(["quantity", "value"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_attention(args) -> None:
    import onnxruntime as ort

    from unmask.export import export_model
    from unmask.export.testing import make_llada_checkpoint

    work = Path(tempfile.mkdtemp(prefix="unmask-bench-", dir=args.workdir))
    try:
        src = make_llada_checkpoint(work / "hf", d_model=args.d_model, n_layers=2, n_heads=args.heads,
                                    n_kv_heads=args.kv_heads, mlp_hidden_size=64, vocab_size=320)
        length, window = args.length, args.window
        rows = []
        for kernel in ("plain", "mha", "attention23", "gqa"):
            pkg = work / kernel
            export_model(src, pkg, attention=kernel, quiet=True, validate=False)
            options = ort.SessionOptions()
            options.intra_op_num_threads = args.threads
            session = ort.InferenceSession(str(pkg / "model.onnx"), options, providers=["CPUExecutionProvider"])
            hd = args.d_model // args.heads
            for batch in (1, 2):
                for w, p in ((length, 0), (window, length - window)):
                    ids = np.ones((batch, w), np.int64)
                    feeds = {"input_ids": ids, "position_ids": np.broadcast_to(np.arange(w), (batch, w)).copy(),
                             "logits_index": np.arange(1, dtype=np.int64)}
                    kv = np.zeros((batch, args.kv_heads, p, hd), np.float32)
                    feeds |= {f"past_{t}.{i}": kv for i in range(2) for t in ("key", "value")}
                    try:
                        session.run(["logits"], feeds)
                        times = []
                        for _ in range(args.repeat):
                            t0 = time.perf_counter()
                            session.run(["logits"], feeds)
                            times.append(time.perf_counter() - t0)
                        cell = f"{1e3 * float(np.median(times)):.2f}"
                    except Exception as exc:  # a kernel that refuses this shape is a result too
                        cell = "refused: " + str(exc).split("Status Message: ")[-1][:60]
                    rows.append((kernel, batch, f"W={w} P={p}", cell))
        print(f"2 layers, d_model {args.d_model}, heads {args.heads}/{args.kv_heads}, threads {args.threads}, "
              f"median of {args.repeat} (ms per forward)")
        _table(["kernel", "batch", "call", "ms"], rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _table(header, rows) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    mem = sub.add_parser("memory")
    mem.add_argument("--d-model", type=int, default=2048)
    mem.add_argument("--layers", type=int, default=24)
    mem.add_argument("--heads", type=int, default=16)
    mem.add_argument("--mlp", type=int, default=5632)
    mem.add_argument("--vocab", type=int, default=126464)
    mem.add_argument("--shards", type=int, default=2)
    mem.add_argument("--precision", default="int4")
    mem.add_argument("--validate", action="store_true", help="also run the probe validation")
    att = sub.add_parser("attention")
    att.add_argument("--d-model", type=int, default=2048)
    att.add_argument("--heads", type=int, default=16)
    att.add_argument("--kv-heads", type=int, default=16)
    att.add_argument("--length", type=int, default=512)
    att.add_argument("--window", type=int, default=32)
    att.add_argument("--threads", type=int, default=2)
    att.add_argument("--repeat", type=int, default=5)
    for p in (mem, att):
        p.add_argument("--workdir", default=None)
    args = parser.parse_args()
    {"memory": bench_memory, "attention": bench_attention}[args.what](args)


if __name__ == "__main__":
    main()
