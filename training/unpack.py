"""Turn a LLaDA-layout model package back into a checkpoint folder the trainer continues from.

    python -m training.unpack PACKAGE OUT

A second stage of training may start from the shipped model (runtime/models/default) instead
of a checkpoint kept somewhere else: the package's weights are dequantized to fp32 (int8:
per-output-channel scales; MatMulNBits: per-block scales and zero points; fp16 embedding
upcast), the fused q/k/v and gate/up products are split back into LLaDA's tensors, and the
package's tokenizer is written beside them. The result is what `training.train` itself writes
(config.json, model.safetensors, tokenizer files), so `--init-from OUT` reads it like any other.
Quantized weights come back with their rounding error; the next stage trains it away.

Reads the package's ONNX initializers only (onnx.load, no session, no code from the folder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from tokenizers import Tokenizer

from unmask.export.reference import LladaModel, llada_config
from .tokenizer import save_tokenizer


class UnpackError(ValueError):
    pass


def _codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """MatMulNBits codes along the last axis: 4-bit values are two a byte, the low nibble first."""
    if bits == 8:
        return packed
    return np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


def _linear(weights: dict[str, np.ndarray], name: str, k: int) -> np.ndarray:
    """The fp32 [N, k] weight of linear `name` in whichever form the exporter stored it."""
    if f"{name}.weight" in weights:  # fp32 / fp16 Gemm with transB: already [N, K]
        return weights[f"{name}.weight"].astype(np.float32)
    if f"{name}.weight_quantized" in weights:  # dynamic int8: q [K, N] times a scale per output channel
        q, scale = weights[f"{name}.weight_quantized"], weights[f"{name}.weight_scale"]
        return (q.astype(np.float32) * scale[None, :]).T.copy()
    for bits in (4, 8):
        if f"{name}.weight_q{bits}" in weights:  # MatMulNBits: [N, blocks, bytes] + scales [N, blocks]
            packed, scales = weights[f"{name}.weight_q{bits}"], weights[f"{name}.weight_scales"]
            zero = np.full(scales.shape, 1 << (bits - 1), np.float32)
            if f"{name}.weight_zero_points" in weights:  # packed like the codes, one row of blocks a row
                zero = _codes(weights[f"{name}.weight_zero_points"], bits)[:, : scales.shape[1]].astype(np.float32)
            w = (_codes(packed, bits).astype(np.float32) - zero[..., None]) * scales[..., None]
            return w.reshape(w.shape[0], -1)[:, :k]  # the last block is padded when it does not divide k
    raise UnpackError(f"the package has no weight for {name!r} in a form this tool reads "
                      "(fp32, dynamic int8 or MatMulNBits)")


def unpack(package: str | Path, out: str | Path) -> Path:
    """Write `out` (must not exist) as a checkpoint folder of `package`'s weights and tokenizer."""
    package, out = Path(package), Path(out)
    try:
        manifest = json.loads((package / "unmask.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnpackError(f"{package}: not a model package (unmask.json: {exc})") from None
    if manifest.get("architecture") != "llada":
        raise UnpackError(f"{package}: architecture {manifest.get('architecture')!r}; only LLaDA packages unpack")
    if out.exists():
        raise UnpackError(f"{out} exists; name a new folder")
    try:
        dims, ids, graph_file, tokenizer_file = (manifest["dims"], manifest["special_ids"],
                                                 manifest["graph"]["file"], manifest["tokenizer"])
    except (KeyError, TypeError) as exc:
        raise UnpackError(f"{package}: unmask.json lacks {exc}; is it a package of this unmask?") from None
    d, layers, heads, kv_heads = dims["hidden_size"], dims["num_layers"], dims["num_heads"], dims["num_kv_heads"]
    if kv_heads != heads:
        raise UnpackError(f"{package}: {kv_heads} key/value heads for {heads} query heads; LLaDA checkpoints "
                          "of the trainer have one per head")
    if not out.parent.is_dir():
        raise UnpackError(f"{out.parent} is not a folder; create it first or name another OUT")
    graph = onnx.load(str(package / graph_file), load_external_data=True)
    weights = {t.name: numpy_helper.to_array(t) for t in graph.graph.initializer}
    tokenizer = Tokenizer.from_file(str(package / tokenizer_file))
    needed = ["rope.inv_freq", "embed.weight", "model.transformer.ln_f.weight"]
    needed += [f"model.transformer.blocks.{i}.{n}_norm.weight" for i in range(layers) for n in ("attn", "ff")]
    missing = [name for name in needed if name not in weights]
    if missing:
        raise UnpackError(f"{package}: the graph lacks {missing[0]} (and {len(missing) - 1} more); only packages "
                          "of unmask's LLaDA export unpack")
    if any(name.endswith(".bias") for name in weights):
        raise UnpackError(f"{package}: its projections have biases, which the trainer's LLaDA model has not")
    if not any(name.startswith("layers.0/mlp/gate_up.") for name in weights):
        raise UnpackError(f"{package}: exported without fused projections (fuse_projections); export it again "
                          "with the default settings")

    mlp = _linear(weights, "layers.0/mlp/gate_up", d).shape[0] // 2
    # inv_freq[i] = theta ** (-2i / head_dim): the last entry carries theta with the least rounding
    inv_freq, hd = weights["rope.inv_freq"].astype(np.float64), dims["head_dim"]
    theta = float(np.round(inv_freq[-1] ** (-hd / (hd - 2.0))))
    embed = weights["embed.weight"].astype(np.float32)
    head = None
    if any(name.startswith("head.weight") for name in weights):
        head = _linear(weights, "head", d)
        # a tied checkpoint's head is the embedding again, stored in the head's own (8-bit) format in int8/int4
        if np.linalg.norm(head - embed) <= 0.02 * np.linalg.norm(embed):
            head = None
    model = LladaModel(llada_config(
        vocab_size=dims["vocab_size"], d_model=d, n_layers=layers, n_heads=heads, mlp_hidden_size=mlp,
        max_sequence_length=dims["max_sequence_length"], rope_theta=theta, mask_token_id=ids["mask_id"],
        eos_token_id=ids["eos_id"], pad_token_id=ids.get("pad_id"), weight_tying=head is None))
    model.hf_config["bos_token_id"] = ids.get("bos_id")

    t = "model.transformer"
    state = {f"{t}.wte.weight": embed, f"{t}.ln_f.weight": weights[f"{t}.ln_f.weight"]}
    if head is not None:
        state[f"{t}.ff_out.weight"] = head
    for i in range(layers):
        b = f"{t}.blocks.{i}"
        q, k, v = np.split(_linear(weights, f"layers.{i}/attn/q_k_v", d), [d, 2 * d])
        gate, up = np.split(_linear(weights, f"layers.{i}/mlp/gate_up", d), 2)
        state |= {f"{b}.q_proj.weight": q, f"{b}.k_proj.weight": k, f"{b}.v_proj.weight": v,
                  f"{b}.attn_out.weight": _linear(weights, f"layers.{i}/attn/o", d),
                  f"{b}.ff_proj.weight": gate, f"{b}.up_proj.weight": up,
                  f"{b}.ff_out.weight": _linear(weights, f"layers.{i}/mlp/down", mlp),
                  f"{b}.attn_norm.weight": weights[f"{b}.attn_norm.weight"],
                  f"{b}.ff_norm.weight": weights[f"{b}.ff_norm.weight"]}
    model.load_hf_state({k: torch.tensor(np.asarray(v, np.float32)) for k, v in state.items()})
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))  # the folder appears whole or not at all
    try:
        model.save_pretrained(tmp)
        save_tokenizer(tokenizer, tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.unpack", description=__doc__.split("\n")[0])
    parser.add_argument("package", help="a LLaDA-layout model package folder (e.g. runtime/models/default)")
    parser.add_argument("out", help="new checkpoint folder to write")
    args = parser.parse_args(argv)
    try:
        unpack(args.package, args.out)
    except UnpackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: continue with python -m training.train --init-from {args.out} --out NEXT ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
