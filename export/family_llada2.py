"""The LLaDA2 family (model_type llada2_moe, LLaDA2.0-mini): a block-diffusion mixture of experts.

What differs from the shared graph, and where it is handled:
- one fused query_key_value weight: `FusedRows` shows its row ranges [q | k | v] under
  virtual names, so the shared attention (which fuses q/k/v again) and the numpy
  validation read it unchanged, and a mis-shaped fused tensor is refused by its own name;
- per-head q/k RMSNorm before a partial RoPE (spec.rotary_dim, the builder's rope);
- block-causal attention over 32-position blocks (the samplers' block; config.json has no
  key for it, an explicit `block_size` key overrides it);
- layers from first_k_dense_replace on: the router and experts of export/moe.py plus a
  shared expert, instead of the dense MLP.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import GenerationConfig
from ..errors import ConfigError, ModelFormatError
from .builder import GraphBuilder, LayerWeights
from .checkpoint import ModelSpec, TokenizerFiles, require
from .moe import MoeNames, MoeSpec, emit_experts, emit_router, expert_block, expert_op, moe_shapes, numpy_moe
from .precision import Kind, Role, weight_format

DEFAULT_BLOCK = 32  # LLaDA2's block length: the default of every published sampler
# key -> the values the graph implements (None: absent means the HF code's default, which is this)
SUPPORTED = {"score_function": ("sigmoid",), "use_qkv_bias": (False,), "use_bias": (False,), "rope_scaling": (None,),
             "norm_topk_prob": (True,), "moe_router_enable_expert_bias": (True,), "use_qk_norm": (True,),
             "hidden_act": ("silu",)}


def llada2_fields(hf: dict[str, Any]) -> dict[str, Any]:
    """The dims and router parameters of a llada2_moe config.json, every unsupported value refused
    with its key (never approximated). Shared by the exporter and the PyTorch reference."""
    for key, allowed in SUPPORTED.items():
        if key in hf and hf[key] is not None and hf[key] not in allowed:
            raise ConfigError(f"config.json: {key} = {hf[key]!r} is not supported "
                              f"(supported: {' or '.join(repr(a) for a in allowed)})")
    heads = require(hf, "num_attention_heads")
    head_dim = hf.get("head_dim") or require(hf, "hidden_size") // heads
    experts, k = require(hf, "num_experts"), require(hf, "num_experts_per_tok")
    n_group, topk_group = hf.get("n_group") or 1, hf.get("topk_group") or 1
    counts = {"num_experts": (experts, 1), "num_experts_per_tok": (k, 1), "n_group": (n_group, 1),
              "topk_group": (topk_group, 1), "moe_intermediate_size": (require(hf, "moe_intermediate_size"), 1),
              "num_shared_experts": (hf.get("num_shared_experts") or 0, 0),
              "first_k_dense_replace": (hf.get("first_k_dense_replace") or 0, 0)}  # key: (value, least allowed)
    for key, (value, least) in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"config.json: {key} = {value!r} must be an integer >= {least}")
    if experts % n_group or (n_group > 1 and experts // n_group < 2):
        raise ConfigError(f"config.json: n_group = {n_group} must divide num_experts = {experts} into groups of at "
                          "least 2 experts (a group scores by the sum of its top 2)")
    if topk_group > n_group:
        raise ConfigError(f"config.json: topk_group = {topk_group} exceeds n_group = {n_group}")
    if k > topk_group * (experts // n_group):
        raise ConfigError(f"config.json: num_experts_per_tok = {k} exceeds the {topk_group * (experts // n_group)} "
                          "experts of the topk_group kept groups")
    rotary = hf.get("rotary_dim") or int(head_dim * float(hf.get("partial_rotary_factor") or 1.0))
    if not isinstance(rotary, int) or rotary < 2 or rotary % 2 or rotary > head_dim:
        raise ConfigError(f"config.json: rotary_dim = {rotary!r} (head_dim x partial_rotary_factor) must be an even "
                          f"number of dims up to head_dim = {head_dim}")
    scale = hf.get("routed_scaling_factor", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale <= 0:
        raise ConfigError(f"config.json: routed_scaling_factor = {scale!r} must be a positive number")
    moe = MoeSpec(num_experts=experts, experts_per_token=k, expert_size=hf["moe_intermediate_size"],
                  shared_size=hf["moe_intermediate_size"] * (hf.get("num_shared_experts") or 0), n_group=n_group,
                  topk_group=topk_group, routed_scaling_factor=float(scale),
                  first_dense_layers=hf.get("first_k_dense_replace") or 0)
    return dict(
        vocab_size=require(hf, "vocab_size"), hidden_size=require(hf, "hidden_size"),
        num_layers=require(hf, "num_hidden_layers"), num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads, intermediate_size=require(hf, "intermediate_size"),
        rope_theta=float(hf.get("rope_theta") or 600000.0), rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_sequence_length=int(hf.get("max_position_embeddings", 32768)),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), head_dim=head_dim,
        block_size=hf.get("block_size") or DEFAULT_BLOCK, rotary_dim=rotary, moe=moe,
    )


class FusedRows:
    """CheckpointTensors plus virtual names for row ranges of fused tensors ({view: (tensor, start, stop)});
    every other attribute is the wrapped object's. The fused tensor's shape is checked by its own name."""

    def __init__(self, tensors, views: dict[str, tuple[str, int, int]], fused_shapes: dict[str, tuple[int, ...]]):
        self._tensors, self._views, self._fused = tensors, views, fused_shapes

    def __getattr__(self, name):
        return getattr(self._tensors, name)

    def __contains__(self, name: str) -> bool:
        return name in self._views or name in self._tensors

    def info(self, name: str):
        if name not in self._views:
            return self._tensors.info(name)
        fused, start, stop = self._views[name]
        info = self._tensors.info(fused)
        if tuple(info.shape) != self._fused[fused]:
            raise ModelFormatError(f"weight {fused} has shape {list(info.shape)} but config.json implies "
                                   f"{list(self._fused[fused])}")
        row_bytes = info.nbytes // info.shape[0]
        return dataclasses.replace(info, name=name, shape=(stop - start, *info.shape[1:]),
                                   offset=info.offset + start * row_bytes)

    def read(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        if name not in self._views:
            return self._tensors.read(name, rows)
        fused, start, stop = self._views[name]
        lo, hi = rows if rows is not None else (0, stop - start)
        return self._tensors.read(fused, rows=(start + lo, start + hi))


class Llada2Builder(GraphBuilder):
    architecture = "llada2"
    model_types = ("llada2_moe",)
    shift_logits = False  # the logits of position p are the distribution of position p
    generation = GenerationConfig(algorithm="llada2")  # LLaDA2's sampler; the block length comes from block_size
    MASK_TOKEN, EOT_TOKEN, BOS_TOKEN = "<|mask|>", "<|role_end|>", "<|startoftext|>"

    @classmethod
    def parse_config(cls, hf: dict[str, Any], tokenizer: TokenizerFiles) -> ModelSpec:
        from .families import special_ids

        return ModelSpec(architecture=cls.architecture, qkv_bias=False, **llada2_fields(hf),
                         **special_ids(hf, tokenizer, cls.MASK_TOKEN, cls.EOT_TOKEN, cls.BOS_TOKEN)).check()

    def __init__(self, spec, tensors, config, **kwargs):
        s = spec
        views, fused = {}, {}
        q, kv = s.num_heads * s.head_dim, s.num_kv_heads * s.head_dim
        for i in range(s.num_layers):
            name = self._qkv_name(i)
            fused[name] = (q + 2 * kv, s.hidden_size)
            for part, (start, stop) in zip("qkv", ((0, q), (q, q + kv), (q + kv, q + 2 * kv))):
                views[f"{name}#{part}"] = (name, start, stop)
        super().__init__(spec, FusedRows(tensors, views, fused), config, **kwargs)
        self.expert_op = expert_op(config.precision, config.target)
        m = spec.moe
        if self.expert_op == "QMoE" and config.precision == "int4" and (s.hidden_size % config.block_size
                                                                        or m.expert_size % config.block_size):
            raise ConfigError(f"block_size = {config.block_size} must divide hidden_size = {s.hidden_size} and "
                              f"moe_intermediate_size = {m.expert_size} (QMoE quantizes both in blocks)")

    @staticmethod
    def _qkv_name(i: int) -> str:
        return f"model.layers.{i}.attention.query_key_value.weight"

    def embedding_name(self):
        return "model.word_embeddings.weight"

    def final_norm_name(self):
        return "model.norm.weight"

    def head_name(self):
        return self.embedding_name() if self.spec.tie_embeddings else "lm_head.weight"

    def layer_names(self, i):
        b, qkv = f"model.layers.{i}", self._qkv_name(i)
        mlp = f"{b}.mlp" if not self.spec.moe.is_moe(i) else f"{b}.mlp.shared_experts"
        return LayerWeights(
            attn_norm=f"{b}.input_layernorm.weight", q=f"{qkv}#q", k=f"{qkv}#k", v=f"{qkv}#v",
            o=f"{b}.attention.dense.weight", ff_norm=f"{b}.post_attention_layernorm.weight",
            gate=f"{mlp}.gate_proj.weight", up=f"{mlp}.up_proj.weight", down=f"{mlp}.down_proj.weight",
            q_norm=f"{b}.attention.query_layernorm.weight", k_norm=f"{b}.attention.key_layernorm.weight",
        )

    def moe_names(self, i: int) -> MoeNames:
        b = f"model.layers.{i}.mlp"
        n = self.layer_names(i)
        return MoeNames(router=f"{b}.gate.weight", expert_bias=f"{b}.gate.expert_bias",
                        expert=lambda e: tuple(f"{b}.experts.{e}.{p}_proj.weight" for p in ("gate", "up", "down")),
                        shared=(n.gate, n.up, n.down) if self.spec.moe.shared_size else None)

    def layer_shapes(self, i):
        shapes = super().layer_shapes(i)
        if self.spec.moe.is_moe(i):
            n = self.layer_names(i)
            for dense in (n.gate, n.up, n.down):
                shapes.pop(dense)
            shapes |= moe_shapes(self.spec.moe, self.moe_names(i), self.spec.hidden_size)
        return shapes

    def mlp(self, i, x):
        if not self.spec.moe.is_moe(i):
            return super().mlp(i, x)
        em, spec, names, name = self.em, self.spec.moe, self.moe_names(i), f"layers.{i}/moe"
        x32 = x if self.dtype == "float32" else em.make_cast(f"{name}/x_fp32", x, "float32")
        scores, selected = emit_router(em, name, x32, self.read(names.router), self.read(names.expert_bias), spec)
        fmt = weight_format(Role.LAYER, self.config)
        bits = {Kind.DYNAMIC_INT8: 8, Kind.NBITS: fmt.bits}.get(fmt.kind, 0)
        routed = emit_experts(em, name, x, scores, selected, self.expert_op, spec, names, self.read,
                              dtype=self.dtype, bits=bits,
                              block=expert_block(self.config.block_size, self.spec.hidden_size, spec.expert_size),
                              accuracy_level=fmt.accuracy_level)
        out = em.make_mul(f"{name}/scaled", routed, em.const(spec.routed_scaling_factor, self.dtype))
        if names.shared is None:
            return out
        return em.make_add(f"{name}/plus_shared", out, self.swiglu(f"{name}/shared", x, *names.shared))

    def numpy_mlp(self, i, x, proj):
        if not self.spec.moe.is_moe(i):
            return super().numpy_mlp(i, x, proj)
        return numpy_moe(x, self.spec.moe, self.moe_names(i), self.tensors.read)

    def provenance(self):
        m = self.spec.moe
        return {"moe": {"expert_op": self.expert_op, "num_experts": m.num_experts,
                        "experts_per_token": m.experts_per_token, "expert_size": m.expert_size,
                        "shared_size": m.shared_size, "n_group": m.n_group, "topk_group": m.topk_group,
                        "routed_scaling_factor": m.routed_scaling_factor, "dense_layers": m.first_dense_layers}}
