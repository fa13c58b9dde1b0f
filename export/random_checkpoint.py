"""A small random checkpoint in a real Hugging Face layout, to try `unmask export` in a minute.

    python -m unmask.export.random_checkpoint llada ./tiny-llada
    unmask export ./tiny-llada tiny

The folder is what a LLaDA or Dream release looks like on the Hub (config.json with the
release's keys, model.safetensors, tokenizer.json, tokenizer_config.json with the chat
template), with random weights and a tiny byte-level tokenizer: the export, the package
and every command work on it, its answers are noise. numpy and tokenizers only (no torch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .testing import make_dream_checkpoint, make_llada_checkpoint

FAMILIES = {"llada": make_llada_checkpoint, "dream": make_dream_checkpoint}
DTYPES = ("float32", "float16", "bfloat16")
CONTEXT = 1024  # nominal maximum sequence length written to config.json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unmask.export.random_checkpoint",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("family", choices=sorted(FAMILIES), help="checkpoint layout to write")
    parser.add_argument("out", type=Path, help="folder to create (must not exist)")
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16",
                        help="weight storage, as in the releases (default: bfloat16)")
    parser.add_argument("--seed", type=int, default=0, help="random weights' seed")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"error: {args.out} already exists; choose a new folder", file=sys.stderr)
        return 1
    # a context long enough for the runtime's default gen_length plus a chat prompt
    context = {"llada": "max_sequence_length", "dream": "max_position_embeddings"}[args.family]
    folder = FAMILIES[args.family](args.out, dtype=args.dtype, seed=args.seed, **{context: CONTEXT})
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    print(f"wrote a random {args.family} checkpoint to {folder} ({size / 1024:.0f} KiB); "
          f"next: unmask export {folder} NAME")
    return 0


if __name__ == "__main__":
    sys.exit(main())
