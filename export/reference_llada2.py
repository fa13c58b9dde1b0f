"""PyTorch reference forward of the LLaDA2 mixture-of-experts layout (model_type llada2_moe).

Written from the layer math of LLaDA2.0-mini (docs/models.md, "LLaDA2"): a fused
query_key_value projection, per-head q/k RMSNorm before a partial RoPE (the first
`rotary_dim` dims of each head rotate, half-split; the rest pass through), attention
block-causal over `block_size` positions, the first `first_k_dense_replace` layers with a
dense SwiGLU MLP and the others with a routed mixture of experts plus shared experts:

    s   = sigmoid(x Wg^T)                      fp32
    b   = s + expert_bias                      selection only
    g   = sum of the top-2 of b in each of n_group groups; keep the topk_group best groups
    idx = top num_experts_per_tok of b among the kept groups
    w   = s[idx] / (sum s[idx] + 1e-20) * routed_scaling_factor
    out = sum_k w_k expert_idx_k(x) + shared(x)

Ties (equal scores, equal group sums) go to the LOWER index everywhere: HF's torch.topk
leaves them unspecified, and ONNX TopK, which the exported graph uses, returns the lower
index first. Parameters are named as the HF checkpoint names them, so load_hf_state and
save_pretrained of ReferenceModel work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .family_llada2 import llada2_fields
from .reference import ReferenceConfig, ReferenceModel, _init_weights, rmsnorm


@dataclass
class Llada2Config(ReferenceConfig):
    """The dense dims of ReferenceConfig plus the router and experts."""

    rotary_dim: int = 0  # leading dims of each head that RoPE rotates; 0: all of them
    moe_intermediate_size: int = 0  # width of one routed expert
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0  # the shared expert's width is moe_intermediate_size times this
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0
    first_k_dense_replace: int = 0  # layers below this index have a dense MLP


def parse_llada2_config(hf: dict[str, Any]) -> Llada2Config:
    """The exporter's reading of the keys (family_llada2.llada2_fields: the same refusals, by key name)."""
    f = llada2_fields(hf)
    moe = f["moe"]
    return Llada2Config(
        vocab_size=f["vocab_size"], hidden_size=f["hidden_size"], num_layers=f["num_layers"],
        num_heads=f["num_heads"], num_kv_heads=f["num_kv_heads"], intermediate_size=f["intermediate_size"],
        rope_theta=f["rope_theta"], rms_norm_eps=f["rms_norm_eps"], qkv_bias=False,
        tie_embeddings=f["tie_embeddings"], head_dim=f["head_dim"], qk_norm=True, block_size=f["block_size"],
        rotary_dim=f["rotary_dim"], moe_intermediate_size=moe.expert_size, num_experts=moe.num_experts,
        experts_per_token=moe.experts_per_token, num_shared_experts=moe.shared_size // moe.expert_size,
        n_group=moe.n_group, topk_group=moe.topk_group, routed_scaling_factor=moe.routed_scaling_factor,
        first_k_dense_replace=moe.first_dense_layers,
    )


# ---------------------------------------------------------------------- routing


def top_indices(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest along the last axis, ties to the lower index (a stable sort)."""
    return torch.sort(values, dim=-1, descending=True, stable=True).indices[..., :k]


def route(x: torch.Tensor, gate: torch.Tensor, expert_bias: torch.Tensor, cfg: Llada2Config):
    """(experts [T, k], weights [T, k]) of tokens x [T, D]: the grouped sigmoid router, in fp32."""
    scores = torch.sigmoid(x.float() @ gate.float().T)  # [T, E]
    biased = scores + expert_bias.float()
    t, e, g = scores.shape[0], cfg.num_experts, cfg.n_group
    group_scores = biased.view(t, g, e // g).topk(min(2, e // g), dim=-1).values.sum(-1)  # [T, G]
    kept = torch.zeros(t, g, dtype=torch.bool).scatter(1, top_indices(group_scores, cfg.topk_group), True)
    candidates = biased.masked_fill(~kept.repeat_interleave(e // g, dim=1), float("-inf"))
    experts = top_indices(candidates, cfg.experts_per_token)
    weights = scores.gather(1, experts)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * cfg.routed_scaling_factor
    return experts, weights


class Expert(nn.Module):
    """down(silu(gate x) * up x), no biases; the HF names gate_proj / up_proj / down_proj."""

    def __init__(self, d: int, f: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, cfg: Llada2Config):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.num_experts, cfg.hidden_size))
        self.expert_bias = nn.Parameter(torch.zeros(cfg.num_experts), requires_grad=False)


class SparseMoe(nn.Module):
    """Routed experts plus the shared expert (added unweighted)."""

    def __init__(self, cfg: Llada2Config):
        super().__init__()
        self.cfg = cfg
        self.gate = Router(cfg)
        self.experts = nn.ModuleList(Expert(cfg.hidden_size, cfg.moe_intermediate_size)
                                     for _ in range(cfg.num_experts))
        self.shared_experts = (Expert(cfg.hidden_size, cfg.moe_intermediate_size * cfg.num_shared_experts)
                               if cfg.num_shared_experts else None)

    def routed(self, x):
        """sum_k w_k expert_k(x) over the routed experts only, x [..., D]."""
        flat = x.reshape(-1, x.shape[-1])
        experts, weights = route(flat, self.gate.weight, self.gate.expert_bias, self.cfg)
        out = torch.zeros_like(flat, dtype=torch.float32)
        for e in experts.unique().tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            out.index_add_(0, rows, weights[rows, slot, None] * self.experts[e](flat[rows]).float())
        return out.view(x.shape)

    def forward(self, x):
        out = self.routed(x)
        return out if self.shared_experts is None else out + self.shared_experts(x)


class Attention(nn.Module):
    def __init__(self, cfg: Llada2Config):
        super().__init__()
        self.cfg, hd = cfg, cfg.head_dim
        self.query_key_value = nn.Linear(cfg.hidden_size, (cfg.num_heads + 2 * cfg.num_kv_heads) * hd, bias=False)
        self.dense = nn.Linear(cfg.num_heads * hd, cfg.hidden_size, bias=False)
        if cfg.qk_norm:
            self.query_layernorm, self.key_layernorm = nn.Parameter(torch.ones(hd)), nn.Parameter(torch.ones(hd))

    def forward(self, x, cos, sin, key_mask=None, past=None):
        cfg, (b, length, _) = self.cfg, x.shape
        qkv = self.query_key_value(x).view(b, length, cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim)
        q, k, v = qkv.split([cfg.num_heads, cfg.num_kv_heads, cfg.num_kv_heads], dim=2)
        if cfg.qk_norm:
            q, k = rmsnorm(q, self.query_layernorm, cfg.rms_norm_eps), rmsnorm(k, self.key_layernorm, cfg.rms_norm_eps)
        q, k, v = (partial_rope(q.transpose(1, 2), cos, sin), partial_rope(k.transpose(1, 2), cos, sin),
                   v.transpose(1, 2))
        present = (k, v)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        group = cfg.num_heads // cfg.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, is_causal=False)
        return self.dense(a.transpose(1, 2).reshape(b, length, -1)), present


def partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotation of the first 2 * cos.shape[-1] dims of x [B, H, L, hd]; the rest pass."""
    rot = 2 * cos.shape[-1]
    x1, x2, rest = x[..., :rot // 2], x[..., rot // 2:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


class Layer(nn.Module):
    def __init__(self, cfg: Llada2Config, index: int):
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.input_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.attention = Attention(cfg)
        self.post_attention_layernorm = nn.Parameter(torch.ones(cfg.hidden_size))
        dense = index < cfg.first_k_dense_replace
        self.mlp = Expert(cfg.hidden_size, cfg.intermediate_size) if dense else SparseMoe(cfg)

    def forward(self, h, cos, sin, key_mask=None, past=None):
        a, present = self.attention(rmsnorm(h, self.input_layernorm, self.eps), cos, sin, key_mask, past)
        h = h + a
        return h + self.mlp(rmsnorm(h, self.post_attention_layernorm, self.eps)), present


class Llada2Model(ReferenceModel):
    """LLaDA2 (LLaDA2.0-mini layout); forward / forward_window / logits / I/O from ReferenceModel."""

    model_type = "llada2_moe"
    init_std_key = "initializer_range"

    def __init__(self, hf_config: dict[str, Any]):
        nn.Module.__init__(self)  # the dense Blocks of ReferenceModel are not this layout
        self.hf_config = dict(hf_config)
        self.cfg = cfg = self.parse_config(self.hf_config)
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        std = self.hf_config.get(self.init_std_key)
        self.apply(lambda m: _init_weights(m, std if isinstance(std, (int, float)) and std > 0 else 0.02))
        for layer in self.layers:  # the router starts random too (a zero router would tie every score)
            if isinstance(layer.mlp, SparseMoe):
                nn.init.normal_(layer.mlp.gate.weight, std=0.02)

    @classmethod
    def parse_config(cls, hf):
        return parse_llada2_config(hf)

    @property
    def embed(self):
        return self.word_embeddings

    @property
    def head(self):
        return self.lm_head

    def hf_names(self):
        rename = {"word_embeddings.weight": "model.word_embeddings.weight", "norm": "model.norm.weight"}
        names = {}
        for name, _ in self.named_parameters():
            if name in rename:
                names[name] = rename[name]
            elif name.startswith("lm_head."):
                names[name] = name
            else:
                names[name] = "model." + name + ("" if name.endswith((".weight", ".expert_bias")) else ".weight")
        return names

    def _layers(self, input_ids, position_ids, key_mask, past=None):
        cfg = self.cfg
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.rotary_dim, 2, dtype=torch.float32) / cfg.rotary_dim))
        angles = position_ids.to(torch.float32)[..., None] * inv_freq
        cos, sin = angles.cos()[:, None], angles.sin()[:, None]
        h, presents = self.word_embeddings(input_ids), []
        for i, layer in enumerate(self.layers):
            h, present = layer(h, cos, sin, key_mask, None if past is None else past[i])
            presents.append(present)
        return rmsnorm(h, self.norm, cfg.rms_norm_eps), presents


__all__ = ["Llada2Config", "Llada2Model", "parse_llada2_config", "route", "top_indices", "partial_rope"]
