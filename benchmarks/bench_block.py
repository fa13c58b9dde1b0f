"""Block diffusion against LLaDA: an SDAR-layout model with cache `block` beside a LLaDA-layout
model of the same size with cache `dual`, one token per forward, in one run.

    python benchmarks/bench_block.py                                  # the issue's sizes
    python benchmarks/bench_block.py --prompt 32 --gen 64 --scaling 64,128 --precision fp32

Both models are random checkpoints (unmask.export.testing) of about 58.5 M parameters:
hidden 512, 8 layers, 8 heads (8 key/value heads), MLP 1408, vocabulary 32000; the SDAR one
has Qwen3's per-head q/k norms and block size 4. Prompt 128 random tokens, gen_length 256,
temperature 0, early stop off, one token per forward (steps = gen_length): SDAR
`low_confidence_static` (block 4, 4 steps per block), LLaDA `low_confidence` (block 32).

Printed per row: forward passes, tokens/s, milliseconds per generated token, time to the
first final token (SDAR: its first block finished; LLaDA: its first block) and the ratios the
issue sets as targets: SDAR block >= 1.3x the tokens/s of LLaDA dual, its first block >= 3x
sooner, and a flat per-token cost over gen_length 256, 512, 1024 (`--scaling`; the "cost
growth" column divides each row's ms/token by the same model's at the first scaling length).
`--llada-scaling` runs LLaDA dual at the scaling lengths too, for contrast (slow: one token per
forward over a window of 32 against the whole sequence).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

import unmask
from unmask.export import export_model
from unmask.export.testing import make_llada_checkpoint, make_sdar_checkpoint

HIDDEN, LAYERS, HEADS, MLP, VOCAB, SDAR_BLOCK, LLADA_BLOCK = 512, 8, 8, 1408, 32000, 4, 32


def build(family: str, precision: str, root: Path, max_length: int) -> Path:
    checkpoint = root / f"{family}-checkpoint"
    if not checkpoint.exists():
        if family == "sdar":
            make_sdar_checkpoint(checkpoint, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                 num_key_value_heads=HEADS, head_dim=HIDDEN // HEADS, intermediate_size=MLP,
                                 vocab_size=VOCAB, block_size=SDAR_BLOCK, max_position_embeddings=max_length)
        else:
            make_llada_checkpoint(checkpoint, d_model=HIDDEN, n_layers=LAYERS, n_heads=HEADS, mlp_hidden_size=MLP,
                                  vocab_size=VOCAB, max_sequence_length=max_length, tokenizer_vocab=320, seed=0)
    package = root / f"{family}-{precision}"
    if not package.exists():
        export_model(checkpoint, package, precision, quiet=True, validate=False)
    return package


def measure(model, prompt: np.ndarray, gen: int, family: str, repeat: int) -> dict:
    settings = (dict(algorithm="low_confidence_static", cache="block") if family == "sdar"
                else dict(algorithm="low_confidence", block_length=LLADA_BLOCK, cache="dual"))
    best = None
    for _ in range(repeat):
        stats = model.generate(prompt_ids=prompt, gen_length=gen, steps=gen, early_stop=False, temperature=0.0,
                               **settings).stats
        if best is None or stats.tokens_per_second > best.tokens_per_second:
            best = stats
    return dict(nfe=best.nfe, tokens=best.tokens, rate=best.tokens_per_second,
                ms_per_token=1000 * best.total_seconds / best.tokens, first=best.first_block_seconds,
                cache=best.cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--gen", type=int, default=256, help="gen_length of the side-by-side rows")
    parser.add_argument("--scaling", default="256,512,1024", help="gen_lengths of SDAR's per-token cost rows")
    parser.add_argument("--precision", default="fp32,int8,int4", help="comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="ORT threads (default: the device profile's)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per row; the fastest is printed")
    parser.add_argument("--workdir", type=Path, default=None, help="keep checkpoints/packages here (reused)")
    parser.add_argument("--llada-scaling", action="store_true", help="LLaDA dual at the scaling lengths too")
    args = parser.parse_args()
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    scaling = [int(g) for g in args.scaling.split(",") if g.strip()]
    max_length = args.prompt + max([args.gen, *scaling]) + LLADA_BLOCK
    prompt = np.random.default_rng(0).integers(0, 300, size=args.prompt).astype(np.int64)
    load = ", load average %.1f" % os.getloadavg()[0] if hasattr(os, "getloadavg") else ""
    print(f"prompt {args.prompt}, one token per forward, temperature 0, early stop off; fastest of {args.repeat} "
          f"run(s) per row; {os.cpu_count()} CPUs{load}\n")
    print("| model | precision | cache | gen | forwards | tok/s | ms/token | cost growth | first block s | "
          "vs LLaDA tok/s | LLaDA first block / this |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench_block_") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for precision in precisions:
            models = {f: unmask.load(build(f, precision, root, max_length), device="cpu", threads=args.threads)
                      for f in ("llada", "sdar")}
            for family, model in models.items():  # warm-up: first-run allocations
                measure(model, prompt, 8 if family == "sdar" else LLADA_BLOCK, family, 1)
            lengths = {"llada": list(dict.fromkeys([args.gen, *(scaling if args.llada_scaling else [])])),
                       "sdar": list(dict.fromkeys([args.gen, *scaling]))}
            results = {(f, g): measure(models[f], prompt, g, f, args.repeat) for f in models for g in lengths[f]}
            llada = results["llada", args.gen]
            for (family, gen), r in results.items():
                base = results.get((family, scaling[0])) if scaling else None
                growth = f"{r['ms_per_token'] / base['ms_per_token']:.2f}x" if base else "-"
                side = family == "sdar" and gen == args.gen
                versus = f"{r['rate'] / llada['rate']:.2f}x" if side else "-"
                sooner = f"{llada['first'] / r['first']:.1f}x" if side else "-"
                print(f"| {family} | {precision} | {r['cache']} | {gen} | {r['nfe']} | {r['rate']:.1f} | "
                      f"{r['ms_per_token']:.2f} | {growth} | {r['first']:.3f} | {versus} | {sooner} |", flush=True)
            del models


if __name__ == "__main__":
    main()
