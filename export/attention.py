"""Bidirectional attention kernels: the same math, four ways to ask ONNX Runtime for it.

Each takes the window's post-RoPE q [B,W,H,hd], k/v [B,W,Hkv,hd] (and their [B,Hkv,W,hd]
transposes, which are also the present outputs) plus the past [B,Hkv,P,hd] (P may be 0),
and returns the attention output flattened to [B*W, H*hd]. Which one a package uses is
ExportConfig.attention, resolved per target (benchmarks/bench_export.py --attention measures).

    plain        MatMul / Softmax / MatMul on [B,Hkv,G*W,hd] — runs on every EP (CoreML, DirectML)
    attention23  ONNX Attention (opset 23), is_causal=0, GQA-shaped 4-D inputs
    mha          com.microsoft MultiHeadAttention, K/V heads expanded for GQA
    gqa          com.microsoft GroupQueryAttention, causal=0; its present (past + new) is unused.
                 ORT's CPU kernel refuses batch > 1 when W > 1 and a past is given (CFG), so
                 it is opt-in only.
"""

from __future__ import annotations

import math


def _all_keys(b, name, present_k, present_v, past_k, past_v):
    em = b.em
    keys = em.make_concat(f"{name}/keys", [past_k, present_k], axis=2)  # [B, Hkv, P+W, hd]
    values = em.make_concat(f"{name}/values", [past_v, present_v], axis=2)
    return keys, values


def _merge_heads(b, name, out_bhwd):
    """[B, H, W, hd] -> [B*W, H*hd]."""
    em = b.em
    out = em.make_transpose(f"{name}/merge_heads", out_bhwd, [0, 2, 1, 3])
    return em.make_reshape(f"{name}/flatten", out, [-1, b.spec.num_heads * b.spec.head_dim])


def plain(b, name, q, k, v, present_k, present_v, past_k, past_v):
    em, s = b.em, b.spec
    keys, values = _all_keys(b, name, present_k, present_v, past_k, past_v)
    scale = em.const(1.0 / math.sqrt(s.head_dim), "float32" if b.dtype == "float32" else "float16")
    qh = em.make_transpose(f"{name}/q_bhwd", em.make_mul(f"{name}/q_scaled", q, scale), [0, 2, 1, 3])
    # query head h reads K/V head h // G: fold the G heads of a group into the row axis
    qg = em.make_reshape(f"{name}/q_groups", qh, [0, s.num_kv_heads, -1, s.head_dim])  # [B, Hkv, G*W, hd]
    scores = em.make_matmul(f"{name}/scores", qg, em.make_transpose(f"{name}/keys_t", keys, [0, 1, 3, 2]))
    probs = em.make_softmax(f"{name}/Softmax", scores, axis=-1)
    out = em.make_matmul(f"{name}/weighted", probs, values)  # [B, Hkv, G*W, hd]
    out = em.make_reshape(f"{name}/heads", out, [0, s.num_heads, -1, s.head_dim])
    return _merge_heads(b, name, out)


def attention23(b, name, q, k, v, present_k, present_v, past_k, past_v):
    em, s = b.em, b.spec
    keys, values = _all_keys(b, name, present_k, present_v, past_k, past_v)
    qh = em.make_transpose(f"{name}/q_bhwd", q, [0, 2, 1, 3])
    out = em.make("Attention", f"{name}/Attention", [qh, keys, values], is_causal=0,
                  scale=1.0 / math.sqrt(s.head_dim))
    return _merge_heads(b, name, out)


def mha(b, name, q, k, v, present_k, present_v, past_k, past_v):
    em, s = b.em, b.spec
    keys, values = _all_keys(b, name, present_k, present_v, past_k, past_v)
    if s.group > 1:  # MultiHeadAttention has no GQA: repeat each K/V head G times
        expand = em.const([1, 1, s.group, 1, 1])
        keys, values = (
            em.make_reshape(f"{name}/{t}_rep", em.make("Expand", f"{name}/{t}_expand",
                                                      [em.make_unsqueeze(f"{name}/{t}_5d", x, [2]), expand]),
                            [0, s.num_heads, -1, s.head_dim])
            for t, x in (("keys", keys), ("values", values))
        )
    q3 = em.make_reshape(f"{name}/q_bsd", q, b.shape_bw_flat)  # [B, W, H*hd]
    out = em.make("MultiHeadAttention", f"{name}/MultiHeadAttention", [q3, keys, values], domain="com.microsoft",
                  num_heads=s.num_heads, scale=1.0 / math.sqrt(s.head_dim), unidirectional=0)
    return em.make_reshape(f"{name}/flatten", out, [-1, s.num_heads * s.head_dim])


def gqa(b, name, q, k, v, present_k, present_v, past_k, past_v):
    em, s = b.em, b.spec
    seqlens, total = _gqa_lengths(b)
    q3 = em.make_reshape(f"{name}/q_bsd", q, b.shape_bw_flat)
    k3 = em.make_reshape(f"{name}/k_bsd", k, b.shape_bw_flat)
    v3 = em.make_reshape(f"{name}/v_bsd", v, b.shape_bw_flat)
    out, _, _ = em.make("GroupQueryAttention", f"{name}/GroupQueryAttention",
                        [q3, k3, v3, past_k, past_v, seqlens, total], outputs=3, domain="com.microsoft",
                        num_heads=s.num_heads, kv_num_heads=s.num_kv_heads, scale=1.0 / math.sqrt(s.head_dim),
                        causal=0)
    return em.make_reshape(f"{name}/flatten", out, [-1, s.num_heads * s.head_dim])


def _gqa_lengths(b):
    """seqlens_k (int32 [B], total - 1 per row) and total_sequence_length (int32 scalar), built once."""
    if b.gqa_lengths is None:
        em = b.em
        past = em.make_shape("gqa/past_len", b.past_k0, start=2, end=3)
        window = em.make_shape("gqa/window_len", b.input_ids, start=1, end=2)
        total = em.make_add("gqa/total", past, window)  # [1] int64
        batch = em.make_shape("gqa/batch", b.input_ids, start=0, end=1)
        seqlens = em.make("Expand", "gqa/seqlens", [em.make_sub("gqa/last", total, em.const([1])), batch])
        b.gqa_lengths = (
            em.make_cast("gqa/seqlens_i32", seqlens, "int32"),
            em.make_cast("gqa/total_i32", em.make("Squeeze", "gqa/total_scalar", [total, em.const([0])]), "int32"),
        )
    return b.gqa_lengths


def resolve_kernel(attention: str, spec) -> str:
    """The CPU 'auto' choice depends on the model: MHA has no GQA, so GQA models use Attention-23."""
    if attention != "auto":
        return attention
    return "mha" if spec.num_kv_heads == spec.num_heads else "attention23"


ATTENTION_KERNELS = {"plain": plain, "attention23": attention23, "mha": mha, "gqa": gqa}
OPSET = {"attention23": 23}  # kernels that need a newer default-domain opset
