"""Mixture-of-experts layers in the graph: the grouped sigmoid router and three forms of the experts.

The router is computed in the graph, in fp32, before any expert op (docs/models.md, "LLaDA2"):

    s   = Sigmoid(x Wg^T)                       [T, E]
    b   = s + expert_bias                       selection only
    g   = ReduceSum(TopK(Reshape(b, [T, G, E/G]), 2).values)       [T, G]
    b'  = Where(group of e in TopK(g, topk_group), b, -inf)
    sel = OneHot(TopK(b', k).indices) summed over k                [T, E] 0/1

ONNX TopK returns the lower index first on equal values (the reference does the same), so
the set of selected experts is decided here; the expert op is only told which experts, in a
form where its own top-k has no ties to break (ORT's would pick the higher index):

    QMoE   (int8 / int4)  router_probs = sel, router_weights = s, normalize_routing_weights = 1:
                          the op gathers s at the k experts with value 1 and divides by their sum
    MoE    (fp32)         no router_weights input: router_probs = Where(sel, Log(s), -inf); the
                          op's softmax over the row gives s_i / sum_sel s (one log/exp round trip)
    dense  (plain ops)    every expert on every token as batched MatMuls, weighted by
                          Where(sel, s, 0) / sum: for providers without the com.microsoft ops
                          (E / k times the expert compute: a fallback, not a fast path)

then the output is multiplied by routed_scaling_factor and the shared expert is added.
Expert weights are stacked [E, ...] as the ops want them, streamed one expert at a time
(fc1 rows interleaved gate/up: ORT's CPU MoE accepts only swiglu_fusion = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ConfigError
from .config import TARGET_MOE_OPS

# QMoE quantizes in blocks of the export's block_size along K. ORT 1.32's CPU kernel is fast only
# on its int8-activation paths: blocked 8-bit weights, 4-bit at accuracy_level 4. One layer of 16
# experts, D = F = 512, 32 tokens, 2 threads: 8-bit blocks of 32 or 64 1.5-1.9 ms, 8-bit with one
# scale per row 20 ms, float MoE 22 ms, 4-bit at accuracy_level 0 20 ms. The int8 activations cost
# ~1.5 % of the layer's output against ~1 % for the 8-bit weights alone (tests bound both).


@dataclass(frozen=True)
class MoeSpec:
    """Router and expert dims of a mixture-of-experts layer (LLaDA2 keys in comments)."""

    num_experts: int  # num_experts
    experts_per_token: int  # num_experts_per_tok
    expert_size: int  # moe_intermediate_size: width of one routed expert
    shared_size: int  # moe_intermediate_size * num_shared_experts; 0: no shared expert
    n_group: int  # groups of experts; a group's score is the sum of its top 2 biased scores
    topk_group: int  # groups kept per token
    routed_scaling_factor: float
    first_dense_layers: int  # first_k_dense_replace: layers below this have a dense MLP

    @property
    def group_size(self) -> int:
        return self.num_experts // self.n_group

    def is_moe(self, layer: int) -> bool:
        return layer >= self.first_dense_layers


@dataclass(frozen=True)
class MoeNames:
    """Checkpoint names of one MoE layer."""

    router: str  # [E, D]
    expert_bias: str  # [E]
    expert: Callable[[int], tuple[str, str, str]]  # e -> (gate [F, D], up [F, D], down [D, F])
    shared: tuple[str, str, str] | None  # the shared expert's (gate, up, down), None without one


def moe_shapes(spec: MoeSpec, names: MoeNames, d: int) -> dict[str, tuple[int, ...]]:
    e, f = spec.num_experts, spec.expert_size
    shapes = {names.router: (e, d), names.expert_bias: (e,)}
    for x in range(e):
        gate, up, down = names.expert(x)
        shapes |= {gate: (f, d), up: (f, d), down: (d, f)}
    if names.shared is not None:
        gate, up, down = names.shared
        shapes |= {gate: (spec.shared_size, d), up: (spec.shared_size, d), down: (d, spec.shared_size)}
    return shapes


# ---------------------------------------------------------------------- which expert op


def expert_op(precision: str, target: str) -> str:
    """MoE, QMoE or dense for a package of `precision` for `target` (config.TARGET_MOE_OPS, which the
    device profiles' moe_ops repeat per provider); ConfigError when quantized experts have no op
    there (a dense quantized fallback would be slower than a float package)."""
    ops = TARGET_MOE_OPS[target]
    if precision in ("int8", "int4"):
        if "QMoE" in ops:
            return "QMoE"
        raise ConfigError(f"{precision} experts need com.microsoft QMoE, which the providers of target {target} "
                          f"do not run (their device profiles' moe_ops: {', '.join(ops) or 'none'}); export this "
                          f"model for {target} at fp32 or fp16 (experts as plain MatMuls), or for target cpu")
    if "MoE" in ops and precision == "fp32":  # ORT's CPU MoE kernel is fp32 only
        return "MoE"
    return "dense"


def expert_block(block_size: int, d: int, f: int) -> int | None:
    """Quantization block of QMoE experts along K: the export's block_size where it divides both
    widths, else None (one scale per output row: exact, but ORT's slow path; 4-bit refuses it)."""
    return block_size if d % block_size == 0 and f % block_size == 0 else None


# ---------------------------------------------------------------------- router


def emit_router(em, name: str, x32: str, router: np.ndarray, expert_bias: np.ndarray,
                spec: MoeSpec) -> tuple[str, str]:
    """(s, sel): sigmoid scores [T, E] and the 0/1 selection [T, E] of tokens x32 [T, D] (fp32)."""
    e, g = spec.num_experts, spec.n_group
    w = em.weight(f"{name}.router.weight", router.astype(np.float32))
    scores = em.make_sigmoid(f"{name}/router/Sigmoid", em.make("Gemm", f"{name}/router/Gemm", [x32, w], transB=1))
    biased = em.make_add(f"{name}/router/biased", scores,
                         em.weight(f"{name}.router.expert_bias", expert_bias.astype(np.float32)))
    minus_inf = em.const(-np.inf, "float32")
    candidates = biased
    if spec.topk_group < g:  # keep the best groups by the sum of their top 2 biased scores
        grouped = em.make_reshape(f"{name}/router/groups", biased, [-1, g, spec.group_size])
        top2, _ = em.make("TopK", f"{name}/router/group_top2", [grouped, em.const([2])], outputs=2, axis=-1)
        group_scores = em.make("ReduceSum", f"{name}/router/group_scores", [top2, em.const([-1])], keepdims=0)
        _, kept = em.make("TopK", f"{name}/router/kept_groups", [group_scores, em.const([spec.topk_group])],
                          outputs=2, axis=-1)
        kept_mask = _one_hot(em, f"{name}/router/group_mask", kept, g)  # [T, G]
        keep = em.make("Greater", f"{name}/router/keep", [em.make_unsqueeze(f"{name}/router/keep3", kept_mask, [-1]),
                                                          em.const(0.0, "float32")])
        candidates = em.make_reshape(f"{name}/router/candidates",
                                     em.make("Where", f"{name}/router/drop_groups", [keep, grouped, minus_inf]),
                                     [-1, e])
    _, chosen = em.make("TopK", f"{name}/router/experts", [candidates, em.const([spec.experts_per_token])],
                        outputs=2, axis=-1)
    return scores, _one_hot(em, f"{name}/router/selected", chosen, e)


def _one_hot(em, name: str, indices: str, depth: int) -> str:
    """[T, n] indices -> [T, depth] float 0/1 with ones at the indices."""
    hot = em.make("OneHot", f"{name}/OneHot", [indices, em.const([depth]), em.const([0.0, 1.0], "float32")], axis=-1)
    return em.make("ReduceMax", f"{name}/ReduceMax", [hot, em.const([1])], keepdims=0)


def routing_weights(em, name: str, scores: str, selected: str) -> str:
    """Where(sel, s, 0) / sum: the dense fallback's [T, E] mixing weights (before the scaling factor)."""
    picked = em.make_mul(f"{name}/picked", scores, selected)
    total = em.make("ReduceSum", f"{name}/picked_sum", [picked, em.const([-1])], keepdims=1)
    return em.make_div(f"{name}/weights", picked, em.make_add(f"{name}/sum_eps", total, em.const(1e-20, "float32")))


# ---------------------------------------------------------------------- quantization of experts


def quantize_rows(w: np.ndarray, bits: int, block: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric QMoE weights of w [N, K]: uint8 codes [N, K * bits / 8] (4-bit: two K-adjacent codes
    per byte, low nibble the even k) with zero point 2^(bits-1), and scales [N] or [N, K / block]."""
    n, k = w.shape
    top = (1 << (bits - 1)) - 1  # 7 or 127: symmetric, so -8 / -128 is never used
    blocks = w.reshape(n, k // block, block) if block else w.reshape(n, 1, k)
    scale = np.maximum(np.abs(blocks).max(axis=-1), 1e-12) / top  # [N, blocks]
    codes = (np.clip(np.rint(blocks / scale[..., None]), -top, top) + (1 << (bits - 1))).astype(np.uint8)
    codes = codes.reshape(n, k)
    if bits == 4:
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return codes, (scale if block else scale[:, 0]).astype(np.float32)


def dequantize_rows(codes: np.ndarray, scales: np.ndarray, bits: int, block: int | None) -> np.ndarray:
    """The float weights [N, K] a QMoE kernel multiplies by (tests and the numpy validation)."""
    if bits == 4:
        codes = np.stack([codes & 15, codes >> 4], axis=-1).reshape(codes.shape[0], -1)
    q = codes.astype(np.float32) - (1 << (bits - 1))
    n, k = q.shape
    s = scales.reshape(n, -1)
    return (q.reshape(n, s.shape[1], -1) * s[..., None]).reshape(n, k)


# ---------------------------------------------------------------------- experts

# Reads one checkpoint tensor as float32 (the builder's reader, which also ticks the progress bar).
Read = Callable[[str], np.ndarray]


def emit_experts(em, name: str, x: str, scores: str, selected: str, op: str, spec: MoeSpec, names: MoeNames,
                 read: Read, *, dtype: str, bits: int = 0, block: int | None = None, accuracy_level: int = 0) -> str:
    """sum_k w_k expert_k(x) [T, D] of the routed experts (before routed_scaling_factor), as `op`.
    Each expert tensor is read exactly once: all gate/up first (fc1), then all down (fc2)."""
    e, k = spec.num_experts, spec.experts_per_token
    swiglu = dict(k=k, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1)
    if op == "MoE":
        fc1 = _stack(em, f"{name}.fc1", e, lambda x_: _interleaved(read, names.expert(x_)), dtype)
        fc2 = _stack(em, f"{name}.fc2", e, lambda x_: read(names.expert(x_)[2]), dtype)
        log_scores = em.make("Log", f"{name}/log_scores", [scores])
        probs = em.make("Where", f"{name}/router_probs", [_is_one(em, name, selected), log_scores,
                                                           em.const(-np.inf, "float32")])
        return em.make("MoE", f"{name}/MoE", [x, probs, fc1, "", fc2], domain="com.microsoft", **swiglu)
    if op == "QMoE":
        fc1, s1 = _stack_quantized(em, f"{name}.fc1", e, lambda x_: _interleaved(read, names.expert(x_)), bits, block)
        fc2, s2 = _stack_quantized(em, f"{name}.fc2", e, lambda x_: read(names.expert(x_)[2]), bits, block)
        inputs = [x, selected, fc1, s1, "", fc2, s2] + [""] * 7 + [scores]  # 14: router_weights
        return em.make("QMoE", f"{name}/QMoE", inputs, domain="com.microsoft", expert_weight_bits=bits,
                       block_size=block, accuracy_level=accuracy_level, **swiglu)
    return _dense_experts(em, name, x, scores, selected, spec, names, read, dtype)


def _is_one(em, name, selected):
    return em.make("Greater", f"{name}/is_selected", [selected, em.const(0.5, "float32")])


def _interleaved(read: Read, expert: tuple[str, str, str]) -> np.ndarray:
    """fc1 rows of one expert as ORT's swiglu_fusion = 1 wants them: gate_0, up_0, gate_1, up_1, ..."""
    gate, up = read(expert[0]), read(expert[1])
    return np.stack([gate, up], axis=1).reshape(-1, gate.shape[1])


def _stack(em, name: str, count: int, make: Callable[[int], np.ndarray], dtype: str) -> str:
    """An [E, N, K] float initializer written one expert at a time."""
    first = make(0)
    writer = em.weight_stream(name, dtype, (count, *first.shape))
    writer.write(first[None].astype(dtype))
    for x in range(1, count):
        writer.write(make(x)[None].astype(dtype))
    return em.finish_weight(writer)


def _stack_quantized(em, name: str, count: int, make: Callable[[int], np.ndarray], bits: int,
                     block: int | None) -> tuple[str, str]:
    """QMoE codes [E, N, K * bits / 8] streamed one expert at a time; the scales (small) follow."""
    writer, scales = None, []
    for x in range(count):
        codes, scale = quantize_rows(make(x), bits, block)
        if writer is None:
            writer = em.weight_stream(f"{name}.weight_q{bits}", "uint8", (count, *codes.shape))
        writer.write(codes[None])
        scales.append(scale)
    return em.finish_weight(writer), em.weight(f"{name}.scales", np.stack(scales))


def _dense_experts(em, name, x, scores, selected, spec, names, read, dtype):
    """Every expert on every token: [E, T, D] by two batched MatMuls, then the weighted sum over E."""
    f = spec.expert_size
    fc1 = _stack(em, f"{name}.fc1_dense", spec.num_experts,
                 lambda x_: np.concatenate([read(names.expert(x_)[0]).T, read(names.expert(x_)[1]).T], axis=1),
                 dtype)  # [E, D, 2F]: gate columns, then up columns
    fc2 = _stack(em, f"{name}.fc2_dense", spec.num_experts, lambda x_: read(names.expert(x_)[2]).T, dtype)
    gate, up = em.make_split(f"{name}/gate_up", em.make_matmul(f"{name}/fc1", x, fc1), [f, f], axis=-1)
    act = em.make_mul(f"{name}/gated", em.make_mul(f"{name}/silu", gate, em.make_sigmoid(f"{name}/Sigmoid", gate)), up)
    out = em.make_matmul(f"{name}/fc2", act, fc2)  # [E, T, D]
    weights = routing_weights(em, name, scores, selected)
    if dtype != "float32":
        weights = em.make_cast(f"{name}/weights_act", weights, dtype)
    per_expert = em.make_unsqueeze(f"{name}/weights_etd", em.make_transpose(f"{name}/weights_et", weights, [1, 0]),
                                   [-1])
    return em.make("ReduceSum", f"{name}/mix", [em.make_mul(f"{name}/weighted", out, per_expert), em.const([0])],
                   keepdims=0)


# ---------------------------------------------------------------------- numpy (validation)


def numpy_route(x: np.ndarray, router: np.ndarray, expert_bias: np.ndarray, spec: MoeSpec):
    """(experts [T, k], weights [T, k]) in float64, ties to the lower index (a stable sort)."""
    scores = 1.0 / (1.0 + np.exp(-(x @ router.T.astype(np.float64))))
    biased = scores + expert_bias
    t, e, g = scores.shape[0], spec.num_experts, spec.n_group
    group_scores = -np.sort(-biased.reshape(t, g, e // g), axis=-1)[..., :2].sum(-1)
    kept = np.argsort(-group_scores, axis=-1, kind="stable")[:, :spec.topk_group]
    keep = np.zeros((t, g), bool)
    np.put_along_axis(keep, kept, True, axis=-1)
    candidates = np.where(np.repeat(keep, e // g, axis=1), biased, -np.inf)
    experts = np.argsort(-candidates, axis=-1, kind="stable")[:, :spec.experts_per_token]
    weights = np.take_along_axis(scores, experts, axis=-1)
    return experts, weights / (weights.sum(-1, keepdims=True) + 1e-20) * spec.routed_scaling_factor


def numpy_moe(x: np.ndarray, spec: MoeSpec, names: MoeNames, read: Read) -> np.ndarray:
    """The MoE layer of tokens x [..., D] (routed plus shared), float64, one expert read at a time."""
    flat = x.reshape(-1, x.shape[-1])
    experts, weights = numpy_route(flat, read(names.router), read(names.expert_bias), spec)
    out = np.zeros_like(flat)
    for e in np.unique(experts):
        rows, slot = np.nonzero(experts == e)
        out[rows] += weights[rows, slot, None] * _numpy_swiglu(flat[rows], names.expert(int(e)), read)
    if names.shared is not None:
        out += _numpy_swiglu(flat, names.shared, read)
    return out.reshape(x.shape)


def _numpy_swiglu(x, expert, read):
    gate = x @ read(expert[0]).T.astype(np.float64)
    return (gate / (1 + np.exp(-gate)) * (x @ read(expert[1]).T.astype(np.float64))) @ read(expert[2]).T.astype(np.float64)


__all__ = ["expert_block", "MoeSpec", "MoeNames", "moe_shapes", "expert_op", "emit_router", "routing_weights",
           "quantize_rows", "dequantize_rows", "emit_experts",
           "numpy_route", "numpy_moe"]
