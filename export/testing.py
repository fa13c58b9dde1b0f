"""Tiny LLaDA and Dream checkpoints in the exact HF layout, for tests and benchmarks.

    from unmask.export.testing import make_llada_checkpoint, make_dream_checkpoint
    folder = make_llada_checkpoint(tmp_path / "llada", dtype="bfloat16")

Each folder holds config.json (the real releases' keys), model.safetensors (or shards with
model.safetensors.index.json), a byte-level BPE tokenizer.json trained here with the
family's special tokens, and tokenizer_config.json with the family's chat template.
Weights are random (numpy, no torch); `write_safetensors` streams tensors one at a time,
so benchmarks can write billion-parameter checkpoints in bounded memory.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from ..manifest import replacing

LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|mdm_mask|>", "<|start_header_id|>", "<|end_header_id|>",
                  "<|eot_id|>"]
DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]

LLADA_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
DREAM_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "What is 12 + 30? The answer is 42.",
    "Diffusion language models unmask many tokens per step.",
    "Sort the numbers 3 1 2: 1 2 3. Copy the word apple: apple.",
    "def add(a, b):\n    return a + b\n",
    "Hello! How can I help you today?",
]

# ---------------------------------------------------------------------- safetensors


_ST_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def to_dtype_bytes(array: np.ndarray, dtype: str) -> np.ndarray:
    """float32 array -> the little-endian words of `dtype` (bf16: round to nearest even)."""
    array = np.asarray(array, dtype=np.float32)
    if dtype == "float32":
        return array.astype("<f4")
    if dtype == "float16":
        return array.astype("<f2")
    bits = array.view(np.uint32)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).astype("<u2")


def write_safetensors(path: Path, tensors: Iterable[tuple[str, tuple[int, ...], Callable[[], np.ndarray]]],
                      dtype: str) -> None:
    """Write (name, shape, make_array) entries; each array is made, converted and written in turn."""
    entries = list(tensors)
    itemsize = 4 if dtype == "float32" else 2
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in entries:
        size = math.prod(shape) * itemsize
        header[name] = {"dtype": _ST_CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with replacing(path) as tmp, open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape, make in entries:
            words = to_dtype_bytes(make(), dtype)
            assert words.shape == tuple(shape), (name, words.shape, shape)
            f.write(memoryview(np.ascontiguousarray(words)).cast("B"))


# ---------------------------------------------------------------------- tokenizer


def make_tokenizer(folder: Path, family: str = "llada", vocab_size: int = 320) -> dict[str, int]:
    """Train a byte-level BPE tokenizer.json with the family's special tokens; returns special -> id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = LLADA_SPECIALS if family == "llada" else DREAM_SPECIALS
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(specials), special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tok.add_special_tokens(specials)  # after the trained vocabulary, as in the real releases
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in specials}
    if family == "llada":
        tcfg = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "chat_template": LLADA_CHAT_TEMPLATE,
                "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096}
    else:
        tcfg = {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                "mask_token": "<|mask|>", "chat_template": DREAM_CHAT_TEMPLATE,
                "tokenizer_class": "DreamTokenizer", "model_max_length": 4096}
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
    return ids


# ---------------------------------------------------------------------- configs


def llada_config(*, vocab_size, d_model, n_layers, n_heads, n_kv_heads=None, mlp_hidden_size=None,
                 max_sequence_length=64, rope_theta=500000.0, rms_norm_eps=1e-5, mask_token_id, eos_token_id,
                 weight_tying=False, include_qkv_bias=False) -> dict:
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"},
        "d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads or n_heads, "n_layers": n_layers,
        "mlp_hidden_size": mlp_hidden_size or 4 * d_model, "mlp_ratio": 4, "vocab_size": vocab_size,
        "embedding_size": vocab_size, "max_sequence_length": max_sequence_length, "rope": True,
        "rope_theta": rope_theta, "rope_full_precision": True, "rms_norm_eps": rms_norm_eps,
        "block_type": "llama", "layer_norm_type": "rms", "layer_norm_with_affine": True, "activation_type": "silu",
        "alibi": False, "alibi_bias_max": 8.0, "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True, "bias_for_layer_norm": False, "include_bias": False,
        "include_qkv_bias": include_qkv_bias, "scale_logits": False, "input_emb_norm": False,
        "weight_tying": weight_tying, "multi_query_attention": None, "block_group_size": 1,
        "flash_attention": False, "attention_dropout": 0.0, "embedding_dropout": 0.0, "residual_dropout": 0.0,
        "init_fn": "mitchell", "init_std": 0.02, "init_device": "meta", "init_cutoff_factor": None,
        "precision": "amp_bf16", "use_cache": False, "clip_qkv": None,
        "mask_token_id": mask_token_id, "eos_token_id": eos_token_id, "pad_token_id": eos_token_id,
    }


def dream_config(*, vocab_size, hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads=None,
                 intermediate_size=None, max_position_embeddings=64, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 mask_token_id, eos_token_id, tie_word_embeddings=False) -> dict:
    return {
        "architectures": ["DreamModel"], "model_type": "Dream", "auto_map": {
            "AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "hidden_size": hidden_size, "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads or num_attention_heads, "num_hidden_layers": num_hidden_layers,
        "intermediate_size": intermediate_size or 4 * hidden_size, "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings, "max_window_layers": num_hidden_layers,
        "rope_theta": rope_theta, "rope_scaling": None, "rms_norm_eps": rms_norm_eps, "hidden_act": "silu",
        "initializer_range": 0.02, "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None,
        "use_cache": False, "tie_word_embeddings": tie_word_embeddings, "torch_dtype": "bfloat16",
        "mask_token_id": mask_token_id, "eos_token_id": eos_token_id, "bos_token_id": eos_token_id,
        "pad_token_id": eos_token_id,
    }


# ---------------------------------------------------------------------- weights


def llada_weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    d, hd = cfg["d_model"], cfg["d_model"] // cfg["n_heads"]
    kv, f, v = cfg["n_kv_heads"] * hd, cfg["mlp_hidden_size"], cfg["embedding_size"]
    t = "model.transformer"
    shapes = {f"{t}.wte.weight": (v, d)}
    for i in range(cfg["n_layers"]):
        b = f"{t}.blocks.{i}"
        shapes |= {f"{b}.attn_norm.weight": (d,), f"{b}.q_proj.weight": (d, d), f"{b}.k_proj.weight": (kv, d),
                   f"{b}.v_proj.weight": (kv, d), f"{b}.attn_out.weight": (d, d), f"{b}.ff_norm.weight": (d,),
                   f"{b}.ff_proj.weight": (f, d), f"{b}.up_proj.weight": (f, d), f"{b}.ff_out.weight": (d, f)}
        if cfg.get("include_qkv_bias"):
            shapes |= {f"{b}.q_proj.bias": (d,), f"{b}.k_proj.bias": (kv,), f"{b}.v_proj.bias": (kv,)}
    shapes[f"{t}.ln_f.weight"] = (d,)
    if not cfg["weight_tying"]:
        shapes[f"{t}.ff_out.weight"] = (v, d)
    return shapes


def dream_weight_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    d, hd = cfg["hidden_size"], cfg["hidden_size"] // cfg["num_attention_heads"]
    kv, f, v = cfg["num_key_value_heads"] * hd, cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, d)}
    for i in range(cfg["num_hidden_layers"]):
        b = f"model.layers.{i}"
        shapes |= {f"{b}.input_layernorm.weight": (d,), f"{b}.self_attn.q_proj.weight": (d, d),
                   f"{b}.self_attn.q_proj.bias": (d,), f"{b}.self_attn.k_proj.weight": (kv, d),
                   f"{b}.self_attn.k_proj.bias": (kv,), f"{b}.self_attn.v_proj.weight": (kv, d),
                   f"{b}.self_attn.v_proj.bias": (kv,), f"{b}.self_attn.o_proj.weight": (d, d),
                   f"{b}.post_attention_layernorm.weight": (d,), f"{b}.mlp.gate_proj.weight": (f, d),
                   f"{b}.mlp.up_proj.weight": (f, d), f"{b}.mlp.down_proj.weight": (d, f)}
    shapes["model.norm.weight"] = (d,)
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (v, d)
    return shapes


def random_weight(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Deterministic random weights: norms near 1, biases and matrices small (std 1/sqrt(fan_in))."""
    rng = np.random.default_rng([seed, *name.encode()])
    if "norm" in name or name.endswith("ln_f.weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith(".bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    std = 1.0 if ("wte" in name or "embed_tokens" in name) else 1.0 / math.sqrt(shape[-1])
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def write_weights(folder: Path, shapes: dict[str, tuple[int, ...]], dtype: str, seed: int, shards: int = 1,
                  make: Callable[[str, tuple[int, ...]], np.ndarray] | None = None) -> None:
    """model.safetensors, or `shards` files plus model.safetensors.index.json (HF naming)."""
    make = make or (lambda name, shape: random_weight(name, shape, seed))
    names = list(shapes)
    groups = [names[i::shards] for i in range(shards)] if shards > 1 else [names]
    weight_map = {}
    for k, group in enumerate(groups):
        file = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / file, [(n, shapes[n], (lambda n=n: make(n, shapes[n]))) for n in group], dtype)
        weight_map |= {n: file for n in group}
    if shards > 1:
        total = sum(math.prod(s) for s in shapes.values()) * (4 if dtype == "float32" else 2)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def make_llada_checkpoint(folder: str | os.PathLike, *, d_model: int = 32, n_layers: int = 2, n_heads: int = 4,
                          n_kv_heads: int | None = None, mlp_hidden_size: int = 48, vocab_size: int = 320,
                          dtype: str = "float32", shards: int = 1, weight_tying: bool = False,
                          include_qkv_bias: bool = False, max_sequence_length: int = 64, seed: int = 0,
                          tokenizer_vocab: int | None = None, **config_overrides) -> Path:
    """A random LLaDA checkpoint folder (config.json, safetensors, tokenizer files); returns the folder."""
    folder = Path(folder)
    ids = make_tokenizer(folder, "llada", min(tokenizer_vocab or vocab_size, vocab_size))
    cfg = llada_config(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                       n_kv_heads=n_kv_heads, mlp_hidden_size=mlp_hidden_size,
                       max_sequence_length=max_sequence_length, mask_token_id=ids["<|mdm_mask|>"],
                       eos_token_id=ids["<|endoftext|>"], weight_tying=weight_tying,
                       include_qkv_bias=include_qkv_bias)
    cfg |= config_overrides
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    write_weights(folder, llada_weight_shapes(cfg), dtype, seed, shards)
    return folder


def make_dream_checkpoint(folder: str | os.PathLike, *, hidden_size: int = 32, num_hidden_layers: int = 2,
                          num_attention_heads: int = 4, num_key_value_heads: int = 2, intermediate_size: int = 48,
                          vocab_size: int = 320, dtype: str = "float32", shards: int = 1,
                          tie_word_embeddings: bool = False, max_position_embeddings: int = 64, seed: int = 0,
                          **config_overrides) -> Path:
    """A random Dream checkpoint folder (Qwen2.5 layout with q/k/v biases and grouped KV heads)."""
    folder = Path(folder)
    ids = make_tokenizer(folder, "dream", vocab_size)
    cfg = dream_config(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                       num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                       intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
                       mask_token_id=ids["<|mask|>"], eos_token_id=ids["<|endoftext|>"],
                       tie_word_embeddings=tie_word_embeddings)
    cfg |= config_overrides
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    write_weights(folder, dream_weight_shapes(cfg), dtype, seed, shards)
    return folder


__all__ = ["make_llada_checkpoint", "make_dream_checkpoint", "make_tokenizer", "write_safetensors",
           "write_weights", "llada_config", "dream_config", "llada_weight_shapes", "dream_weight_shapes",
           "random_weight", "to_dtype_bytes"]
