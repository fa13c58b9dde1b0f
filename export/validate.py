"""Validation of a freshly written package: run its graph on probe inputs and compare.

The fp32 baseline is a numpy forward of the checkpoint that streams the weights one tensor
at a time (the same math as the fp32 graph, to ~1e-6, without building or loading a
second full-precision graph — an 8B int4 export must validate on a 16 GB laptop). With
reference="torch" the package is also compared with the PyTorch reference forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelFormatError
from .builder import GraphBuilder


@dataclass(frozen=True)
class Agreement:
    """How closely logits `got` follow logits `want` (rows = positions)."""

    baseline: str
    max_abs_error: float
    relative_rms_error: float
    kl_divergence: float  # mean over rows of KL(softmax(want) || softmax(got)), nats
    top1_agreement: float  # fraction of rows with the same argmax

    def line(self) -> str:
        return (f"vs {self.baseline:<9} max|err| {self.max_abs_error:.3g}  rel RMS {self.relative_rms_error:.3g}  "
                f"KL {self.kl_divergence:.3g}  top-1 {100 * self.top1_agreement:.1f}%")


def compare(got: np.ndarray, want: np.ndarray, baseline: str) -> Agreement:
    got = got.astype(np.float64).reshape(-1, got.shape[-1])
    want = want.astype(np.float64).reshape(-1, want.shape[-1])
    diff = got - want
    log_p, log_q = _log_softmax(want), _log_softmax(got)
    return Agreement(
        baseline=baseline,
        max_abs_error=float(np.abs(diff).max()),
        relative_rms_error=float(math.sqrt((diff ** 2).mean() / max((want ** 2).mean(), 1e-30))),
        kl_divergence=float((np.exp(log_p) * (log_p - log_q)).sum(-1).mean()),
        top1_agreement=float((got.argmax(-1) == want.argmax(-1)).mean()),
    )


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def probe_ids(vocab_size: int, length: int, seed: int = 0) -> np.ndarray:
    """Two random sequences [2, length] (fixed seed: the same probes for every export)."""
    return np.random.default_rng(seed).integers(0, vocab_size, size=(2, length), dtype=np.int64)


# ---------------------------------------------------------------------- running a package


def run_package(package: Path, ids: np.ndarray, manifest) -> np.ndarray:
    """Full-sequence logits [B, L, V] of a package graph on CPU (empty past, every row)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(package / manifest.graph.file), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own types; the package is what is wrong
        raise ModelFormatError(f"{package / manifest.graph.file}: ONNX Runtime cannot load the graph ({exc})") from exc
    feeds = {"input_ids": ids}
    if manifest.cache_reuse:
        b, length = ids.shape
        d = manifest.dims
        kv = np.zeros((b, d.num_kv_heads, 0, d.head_dim), dtype=manifest.kv_dtype)
        feeds |= {"position_ids": np.broadcast_to(np.arange(length, dtype=np.int64), ids.shape).copy(),
                  "logits_index": np.arange(length, dtype=np.int64)}
        feeds |= {f"past_{t}.{i}": kv for i in range(d.num_layers) for t in ("key", "value")}
    return session.run(["logits"], feeds)[0].astype(np.float32)


# ---------------------------------------------------------------------- numpy fp32 forward


def numpy_forward(builder: GraphBuilder, ids: np.ndarray) -> np.ndarray:
    """Logits [B, L, V] of the checkpoint in float64 math, reading one tensor at a time."""
    s, read = builder.spec, builder.tensors.read
    b, length = ids.shape
    embed = builder.embedding_name()
    h = np.stack([read(embed, rows=(int(t), int(t) + 1))[0] for t in ids.reshape(-1)]).astype(np.float64)
    h = h.reshape(b, length, s.hidden_size)
    hd = s.head_dim
    inv_freq = 1.0 / (np.float32(s.rope_theta) ** (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd)))
    angles = np.arange(length, dtype=np.float32)[:, None] * inv_freq  # fp32, as the graph
    cos, sin = np.cos(angles).astype(np.float64), np.sin(angles).astype(np.float64)
    bias = 0.0  # block-causal: key j is hidden from query i when its block comes later
    if s.block_size is not None:
        blocks = np.arange(length) // s.block_size
        bias = np.where(blocks[None, :] <= blocks[:, None], 0.0, -np.inf)

    def norm(x, name):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + s.rms_norm_eps) * read(name)

    def head_norm(x, name):  # per-head RMSNorm over hd (Qwen3 layout), before RoPE
        return x if name is None else norm(x, name)

    def rope(x):  # [B, L, H, hd]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        c, sn = cos[None, :, None], sin[None, :, None]
        return np.concatenate([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)

    def proj(x, name, bias=None):
        y = x @ read(name).T.astype(np.float64)
        return y if bias is None else y + read(bias)

    for i in range(s.num_layers):
        n = builder.layer_names(i)
        x = norm(h, n.attn_norm)
        q = rope(head_norm(proj(x, n.q, n.q_bias).reshape(b, length, s.num_heads, hd), n.q_norm))
        k = rope(head_norm(proj(x, n.k, n.k_bias).reshape(b, length, s.num_kv_heads, hd), n.k_norm))
        v = proj(x, n.v, n.v_bias).reshape(b, length, s.num_kv_heads, hd)
        k, v = np.repeat(k, s.group, axis=2), np.repeat(v, s.group, axis=2)
        scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        a = np.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, length, -1)
        h = h + proj(a, n.o)
        x = norm(h, n.ff_norm)
        gate = proj(x, n.gate)
        h = h + proj(gate / (1 + np.exp(-gate)) * proj(x, n.up), n.down)
    x = norm(h, builder.final_norm_name())
    head = builder.head_name()
    rows = builder.tensors.info(head).shape[0]
    step = max(1, (32 << 20) // (4 * s.hidden_size))
    return np.concatenate([x @ read(head, rows=(r, min(rows, r + step))).T.astype(np.float64)
                           for r in range(0, rows, step)], axis=-1).astype(np.float32)


def torch_reference_logits(src: Path, ids: np.ndarray) -> np.ndarray:
    """Logits of the PyTorch reference forward (needs the test extra: torch)."""
    try:
        from .reference import load_reference
    except ImportError as exc:
        raise ModelFormatError(f"--reference torch needs the test extra (pip install 'unmask[test]'): {exc}") from exc
    return load_reference(src).as_forward()(ids)


def validate(package: Path, manifest, builder: GraphBuilder, src: Path, *, probe_length: int,
             reference: str | None) -> list[Agreement]:
    ids = probe_ids(manifest.dims.vocab_size, probe_length)
    got = run_package(package, ids, manifest)
    if not np.isfinite(got).all():
        raise ModelFormatError(f"{package}: the exported graph produced NaN/Inf logits on probe inputs")
    results = [compare(got, numpy_forward(builder, ids), "fp32")]
    if reference == "torch":
        results.append(compare(got, torch_reference_logits(src, ids), "torch"))
    return results
