"""Bidirectional attention kernels: the same math, four ways to ask ONNX Runtime for it.

Each kernel is a function of explicit inputs: an AttentionInputs (the emitter, the head
layout and the per-graph tensors the kernels share, made once by the builder) and, per
layer, the window's post-RoPE q [B,W,H,hd], k/v [B,W,Hkv,hd] (with their [B,Hkv,W,hd]
transposes, which are also the present outputs) plus the past [B,Hkv,P,hd] (P may be 0).
It returns the attention output flattened to [B*W, H*hd]. Which kernel a package uses is
decided once, by choose_kernel (benchmarks/bench_export.py attention measures them):

    plain        MatMul / Softmax / MatMul on [B,Hkv,G*W,hd] — runs on every EP (CoreML, DirectML)
    attention23  ONNX Attention (opset 23), is_causal=0, GQA-shaped 4-D inputs
    mha          com.microsoft MultiHeadAttention, K/V heads expanded for GQA
    gqa          com.microsoft GroupQueryAttention, causal=0; its present (past + new) is unused.
                 ORT's CPU kernel refuses batch > 1 when W > 1 and a past is given (CFG), so
                 it is opt-in only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError


@dataclass(frozen=True)
class AttentionInputs:
    """What every layer's kernel reads besides its own q/k/v and past: built once per graph."""

    em: Any  # the Emitter the graph is written with
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str  # activation dtype of q/k/v
    shape_flat: str  # [B, W, -1]: the 3-D [batch, window, heads*hd] layout of the contrib kernels
    lengths: tuple[str, str] | None = None  # gqa only: seqlens_k (int32 [B]) and total length (int32 scalar)
    mask: str | None = None  # the family's attention_mask (None: fully bidirectional); see MASKED_KERNELS

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)


def _all_keys(a: AttentionInputs, name, present_k, present_v, past_k, past_v):
    keys = a.em.make_concat(f"{name}/keys", [past_k, present_k], axis=2)  # [B, Hkv, P+W, hd]
    values = a.em.make_concat(f"{name}/values", [past_v, present_v], axis=2)
    return keys, values


def _merge_heads(a: AttentionInputs, name, out_bhwd):
    """[B, H, W, hd] -> [B*W, H*hd]."""
    out = a.em.make_transpose(f"{name}/merge_heads", out_bhwd, [0, 2, 1, 3])
    return a.em.make_reshape(f"{name}/flatten", out, [-1, a.num_heads * a.head_dim])


def gqa(a: AttentionInputs, name, q, k, v, present_k, present_v, past_k, past_v):
    em = a.em
    seqlens, total = a.lengths
    q3 = em.make_reshape(f"{name}/q_bsd", q, a.shape_flat)
    k3 = em.make_reshape(f"{name}/k_bsd", k, a.shape_flat)
    v3 = em.make_reshape(f"{name}/v_bsd", v, a.shape_flat)
    out, _, _ = em.make("GroupQueryAttention", f"{name}/GroupQueryAttention",
                        [q3, k3, v3, past_k, past_v, seqlens, total], outputs=3, domain="com.microsoft",
                        num_heads=a.num_heads, kv_num_heads=a.num_kv_heads, scale=a.scale, causal=0)
    return em.make_reshape(f"{name}/flatten", out, [-1, a.num_heads * a.head_dim])


def mha(a: AttentionInputs, name, q, k, v, present_k, present_v, past_k, past_v):
    em = a.em
    keys, values = _all_keys(a, name, present_k, present_v, past_k, past_v)
    if a.group > 1:  # MultiHeadAttention has no GQA: repeat each K/V head G times
        expand = em.const([1, 1, a.group, 1, 1])
        keys, values = (
            em.make_reshape(f"{name}/{t}_rep", em.make("Expand", f"{name}/{t}_expand",
                                                      [em.make_unsqueeze(f"{name}/{t}_5d", x, [2]), expand]),
                            [0, a.num_heads, -1, a.head_dim])
            for t, x in (("keys", keys), ("values", values))
        )
    q3 = em.make_reshape(f"{name}/q_bsd", q, a.shape_flat)  # [B, W, H*hd]
    out = em.make("MultiHeadAttention", f"{name}/MultiHeadAttention", [q3, keys, values], domain="com.microsoft",
                  num_heads=a.num_heads, scale=a.scale, unidirectional=0)
    return em.make_reshape(f"{name}/flatten", out, [-1, a.num_heads * a.head_dim])


def attention23(a: AttentionInputs, name, q, k, v, present_k, present_v, past_k, past_v):
    keys, values = _all_keys(a, name, present_k, present_v, past_k, past_v)
    qh = a.em.make_transpose(f"{name}/q_bhwd", q, [0, 2, 1, 3])
    out = a.em.make("Attention", f"{name}/Attention", [qh, keys, values], is_causal=0, scale=a.scale)
    return _merge_heads(a, name, out)


def plain(a: AttentionInputs, name, q, k, v, present_k, present_v, past_k, past_v):
    em = a.em
    keys, values = _all_keys(a, name, present_k, present_v, past_k, past_v)
    scale = em.const(a.scale, "float32" if a.dtype == "float32" else "float16")
    qh = em.make_transpose(f"{name}/q_bhwd", em.make_mul(f"{name}/q_scaled", q, scale), [0, 2, 1, 3])
    # query head h reads K/V head h // G: fold the G heads of a group into the row axis
    qg = em.make_reshape(f"{name}/q_groups", qh, [0, a.num_kv_heads, -1, a.head_dim])  # [B, Hkv, G*W, hd]
    scores = em.make_matmul(f"{name}/scores", qg, em.make_transpose(f"{name}/keys_t", keys, [0, 1, 3, 2]))
    probs = em.make_softmax(f"{name}/Softmax", scores, axis=-1)
    out = em.make_matmul(f"{name}/weighted", probs, values)  # [B, Hkv, G*W, hd]
    out = em.make_reshape(f"{name}/heads", out, [0, a.num_heads, -1, a.head_dim])
    return _merge_heads(a, name, out)


# In the order `unmask export --attention` lists them.
ATTENTION_KERNELS = {"gqa": gqa, "mha": mha, "attention23": attention23, "plain": plain}
ATTENTIONS = ("auto", *ATTENTION_KERNELS)
OPSET = {"attention23": 23}  # kernels that need a newer default-domain opset
# Kernels that apply AttentionInputs.mask. None yet: every family so far is fully bidirectional;
# a block-causal family adds the mask to a kernel's scores and lists the kernel here.
MASKED_KERNELS: tuple[str, ...] = ()

# The `auto` decision table. GPUs: MultiHeadAttention, which has fp16 CUDA kernels and accepts
# batch 2 with a past (CFG). DirectML and CoreML: plain ops that every EP runs (their contrib-op
# coverage varies or is absent). CPU: by the model (see choose_kernel), measured with
# benchmarks/bench_export.py attention. GroupQueryAttention is never chosen: ORT refuses
# batch > 1 with a past when W > 1, which CFG runs.
_TARGET_KERNEL = {"cuda": "mha", "dml": "plain", "coreml": "plain"}
# Kernels a target cannot run at all (CoreML has no contrib ops and no opset-23 Attention).
_TARGET_ONLY = {"coreml": ("plain",)}


def check_attention(attention: str, target: str) -> None:
    """ConfigError unless `attention` is a kernel name (or auto) that `target` can run."""
    if attention not in ATTENTIONS:
        raise ConfigError(f"unknown attention {attention!r}; choose one of {', '.join(ATTENTIONS)}")
    only = _TARGET_ONLY.get(target)
    if only is not None and attention != "auto" and attention not in only:
        raise ConfigError(f"attention {attention!r} is a contrib/opset-23 kernel {target} does not run; "
                          f"use {' or '.join(only)}")


def check_mask(kernel: str, mask: str | None) -> None:
    """ConfigError when the model needs a mask that `kernel` does not apply."""
    if mask is not None and kernel not in MASKED_KERNELS:
        supported = ", ".join(MASKED_KERNELS) or "none yet"
        raise ConfigError(f"this model needs an attention mask, which the {kernel} kernel does not apply "
                          f"(kernels that do: {supported})")


def choose_kernel(attention: str, target: str, num_heads: int, num_kv_heads: int) -> str:
    """The one place `auto` is decided: the kernel a graph for `target` with these heads gets.

    On CPU, MultiHeadAttention for full-head models and ONNX Attention-23 (native GQA) for
    grouped K/V, where MultiHeadAttention would have to expand every K/V head."""
    if attention != "auto":
        return attention
    if target in _TARGET_KERNEL:
        return _TARGET_KERNEL[target]
    return "mha" if num_kv_heads == num_heads else "attention23"
