"""PyTorch reference forward for LLaDA and Dream, written from docs/models.md (the forward pass).

The independent check of every exported graph, and the model that
the checkout's training/ folder trains. One module computes the shared math; the two
families differ only in their config keys and weight names, which live in the
small `LladaModel` / `DreamModel` subclasses.

    model = load_reference("path/to/hf_folder")           # config.json + *.safetensors
    logits = model(ids)                                    # [B, L, V] float32
    model.save_pretrained("out/")                          # same HF layout back

Weights are read with safetensors (never pickle) and held in float32.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from ..errors import ModelFormatError
from ..manifest import replacing, write_text_atomic


@dataclass
class ReferenceConfig:
    """The dims and constants of the math, whichever family's keys they came from."""

    vocab_size: int  # rows of the embedding and of the LM head (LLaDA: embedding_size)
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool  # Dream: q/k/v projections carry a bias
    tie_embeddings: bool  # LM head reuses the embedding matrix

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# ---------------------------------------------------------------------- the math


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) * w, computed in float32."""
    x32 = x.float()
    return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()


def rope_angles(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B, 1, L, hd/2] of pos * inv_freq, inv_freq_j = theta^(-2j/hd), all in float32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = position_ids.to(torch.float32)[..., None] * inv_freq  # [B, L, hd/2]
    return angles.cos()[:, None], angles.sin()[:, None]


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotation: [x1, x2] -> [x1*cos - x2*sin, x2*cos + x1*sin]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ReferenceConfig):
        super().__init__()
        hd = cfg.head_dim
        self.cfg = cfg
        self.q = nn.Linear(cfg.hidden_size, cfg.num_heads * hd, bias=cfg.qkv_bias)
        self.k = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=cfg.qkv_bias)
        self.v = nn.Linear(cfg.hidden_size, cfg.num_kv_heads * hd, bias=cfg.qkv_bias)
        self.o = nn.Linear(cfg.num_heads * hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, key_mask=None):
        cfg, (B, L, _) = self.cfg, x.shape
        q = self.q(x).view(B, L, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = self.k(x).view(B, L, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = self.v(x).view(B, L, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        group = cfg.num_heads // cfg.num_kv_heads  # GQA: query head h reads K/V head h // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        # softmax(q k^T / sqrt(hd)) v with NO causal mask; key_mask [B, 1, L|1, L] (hidden_states
        # shapes it) only hides batch padding or, in packed rows, the other sequences' keys.
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, is_causal=False)
        return self.o(a.transpose(1, 2).reshape(B, L, -1))


class Block(nn.Module):
    def __init__(self, cfg: ReferenceConfig):
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.attn_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.attn = Attention(cfg)
        self.ff_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, h, cos, sin, key_mask=None):
        h = h + self.attn(rmsnorm(h, self.attn_norm, self.eps), cos, sin, key_mask)
        n = rmsnorm(h, self.ff_norm, self.eps)
        return h + self.down(F.silu(self.gate(n)) * self.up(n))


class ReferenceModel(nn.Module):
    """Shared math; subclasses say how their HF config and weight names map onto it."""

    model_type: ClassVar[str]
    shift_logits: ClassVar[bool] = False
    init_std_key: ClassVar[str]  # the config key holding the std of the normal init of linear and embedding weights

    def __init__(self, hf_config: dict[str, Any]):
        super().__init__()
        self.hf_config = dict(hf_config)
        self.cfg = cfg = self.parse_config(self.hf_config)
        if cfg.hidden_size % cfg.num_heads or cfg.num_heads % cfg.num_kv_heads or cfg.head_dim % 2:
            raise ModelFormatError(
                f"config.json: hidden size {cfg.hidden_size}, heads {cfg.num_heads}, KV heads "
                f"{cfg.num_kv_heads} do not give an even head_dim shared by whole GQA groups"
            )
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        std = self.hf_config.get(self.init_std_key)
        self.apply(partial(_init_weights, std=std if isinstance(std, (int, float)) and std > 0 else 0.02))

    # --- family hooks
    @classmethod
    def parse_config(cls, hf: dict[str, Any]) -> ReferenceConfig:
        raise NotImplementedError

    def hf_names(self) -> dict[str, str]:
        """Internal parameter name -> HF weight name, for every parameter."""
        raise NotImplementedError

    # --- forward
    def forward(self, input_ids, position_ids=None, attention_mask=None) -> torch.Tensor:
        """Logits [B, L, V] float32 for ids [B, L]. attention_mask [B, L] (True = real token) only
        hides batch padding from the keys; inference never needs it. Training on packed rows passes
        [B, L, L] (True = query i may read key j)."""
        return self.logits(self.hidden_states(input_ids, position_ids, attention_mask))

    def hidden_states(self, input_ids, position_ids=None, attention_mask=None) -> torch.Tensor:
        """The final-normed hidden states [B, L, D] that the LM head reads."""
        cfg = self.cfg
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1])[None].expand(input_ids.shape[0], -1)
        cos, sin = rope_angles(position_ids, cfg.head_dim, cfg.rope_theta)
        key_mask = None
        if attention_mask is not None:  # [B, L] keys of every query, or [B, L, L] per query: one shape for all layers
            key_mask = attention_mask.to(torch.bool)
            key_mask = key_mask[:, None, None, :] if key_mask.dim() == 2 else key_mask[:, None]
        h = self.embed(input_ids)
        for block in self.blocks:
            h = block(h, cos, sin, key_mask)
        return rmsnorm(h, self.final_norm, cfg.rms_norm_eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head over hidden states [..., D] -> float32 logits [..., V] (tied: embedding^T)."""
        head = self.embed.weight if self.head is None else self.head.weight
        return (hidden @ head.float().T).float()

    def as_forward(self) -> Callable[[np.ndarray], np.ndarray]:
        """numpy forward(ids int64 [B, L]) -> float32 [B, L, V], the shape `unmask.decode` calls."""

        @torch.no_grad()
        def forward(ids: np.ndarray) -> np.ndarray:
            return self(torch.from_numpy(np.asarray(ids, dtype=np.int64))).numpy()

        return forward

    # --- HF folder I/O
    def load_hf_state(self, tensors: dict[str, torch.Tensor]) -> None:
        names = self.hf_names()
        expected = set(names.values())
        missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        if missing or unexpected:
            raise ModelFormatError(
                f"{self.model_type} weights do not match the config: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        state = {}
        params = dict(self.named_parameters())
        for internal, hf in names.items():
            t = tensors[hf]
            if tuple(t.shape) != tuple(params[internal].shape):
                raise ModelFormatError(f"weight {hf}: shape {tuple(t.shape)}, expected {tuple(params[internal].shape)}")
            state[internal] = t.to(torch.float32)
        self.load_state_dict(state, strict=True)

    def save_pretrained(self, out_dir: str | os.PathLike, dtype: torch.dtype = torch.float32) -> None:
        """Write config.json + model.safetensors in the family's HF layout; each file is written to
        a temporary name first and moved into place (manifest.replacing)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        params = dict(self.named_parameters())
        tensors = {hf: params[name].detach().to(dtype).contiguous() for name, hf in self.hf_names().items()}
        with replacing(out / "model.safetensors") as tmp:
            save_file(tensors, str(tmp), metadata={"format": "pt"})
        config = dict(self.hf_config, torch_dtype=str(dtype).removeprefix("torch."))
        write_text_atomic(out / "config.json", json.dumps(config, indent=2) + "\n")


def _init_weights(module: nn.Module, std: float) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=std)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def _required(hf: dict[str, Any], key: str) -> Any:
    if hf.get(key) is None:
        raise ModelFormatError(f"config.json: missing key {key!r}")
    return hf[key]


# ---------------------------------------------------------------------- families


class LladaModel(ReferenceModel):
    model_type = "llada"
    init_std_key = "init_std"
    # key -> the only value the math here implements (the exporter checks these strictly too)
    SUPPORTED = {
        "block_type": "llama", "layer_norm_type": "rms", "activation_type": "silu", "rope": True,
        "alibi": False, "attention_layer_norm": False, "scale_logits": False, "input_emb_norm": False,
        "include_bias": False,
    }

    @classmethod
    def parse_config(cls, hf):
        for key, value in cls.SUPPORTED.items():
            if key in hf and hf[key] != value:
                raise ModelFormatError(f"config.json: {key}={hf[key]!r} is not supported (only {value!r})")
        d_model, n_heads = _required(hf, "d_model"), _required(hf, "n_heads")
        mlp = hf.get("mlp_hidden_size") or int(hf.get("mlp_ratio", 4) * d_model)
        return ReferenceConfig(
            vocab_size=hf.get("embedding_size") or _required(hf, "vocab_size"),
            hidden_size=d_model,
            num_layers=_required(hf, "n_layers"),
            num_heads=n_heads,
            num_kv_heads=hf.get("n_kv_heads") or n_heads,
            intermediate_size=mlp,
            rope_theta=float(hf.get("rope_theta", 10000.0)),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
            qkv_bias=bool(hf.get("include_qkv_bias", False)),
            tie_embeddings=bool(hf.get("weight_tying", False)),
        )

    def hf_names(self):
        t = "model.transformer"
        names = {"embed.weight": f"{t}.wte.weight", "final_norm": f"{t}.ln_f.weight"}
        if self.head is not None:
            names["head.weight"] = f"{t}.ff_out.weight"
        for i in range(self.cfg.num_layers):
            b = f"{t}.blocks.{i}"
            names |= {
                f"blocks.{i}.attn_norm": f"{b}.attn_norm.weight",
                f"blocks.{i}.attn.o.weight": f"{b}.attn_out.weight",
                f"blocks.{i}.ff_norm": f"{b}.ff_norm.weight",
                f"blocks.{i}.gate.weight": f"{b}.ff_proj.weight",
                f"blocks.{i}.up.weight": f"{b}.up_proj.weight",
                f"blocks.{i}.down.weight": f"{b}.ff_out.weight",
            }
            for p in "qkv":
                names[f"blocks.{i}.attn.{p}.weight"] = f"{b}.{p}_proj.weight"
                if self.cfg.qkv_bias:
                    names[f"blocks.{i}.attn.{p}.bias"] = f"{b}.{p}_proj.bias"
        return names


class DreamModel(ReferenceModel):
    model_type = "Dream"
    init_std_key = "initializer_range"
    shift_logits = True  # applied by the sampler: position i reads row i-1; the forward is unshifted

    @classmethod
    def parse_config(cls, hf):
        theta = hf.get("rope_theta") or (hf.get("rope_parameters") or {}).get("rope_theta") or 10000.0
        heads = _required(hf, "num_attention_heads")
        return ReferenceConfig(
            vocab_size=_required(hf, "vocab_size"),
            hidden_size=_required(hf, "hidden_size"),
            num_layers=_required(hf, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            intermediate_size=_required(hf, "intermediate_size"),
            rope_theta=float(theta),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            qkv_bias=True,
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        )

    def hf_names(self):
        names = {"embed.weight": "model.embed_tokens.weight", "final_norm": "model.norm.weight"}
        if self.head is not None:
            names["head.weight"] = "lm_head.weight"
        for i in range(self.cfg.num_layers):
            b = f"model.layers.{i}"
            names |= {
                f"blocks.{i}.attn_norm": f"{b}.input_layernorm.weight",
                f"blocks.{i}.attn.o.weight": f"{b}.self_attn.o_proj.weight",
                f"blocks.{i}.ff_norm": f"{b}.post_attention_layernorm.weight",
                f"blocks.{i}.gate.weight": f"{b}.mlp.gate_proj.weight",
                f"blocks.{i}.up.weight": f"{b}.mlp.up_proj.weight",
                f"blocks.{i}.down.weight": f"{b}.mlp.down_proj.weight",
            }
            for p in "qkv":
                names[f"blocks.{i}.attn.{p}.weight"] = f"{b}.self_attn.{p}_proj.weight"
                names[f"blocks.{i}.attn.{p}.bias"] = f"{b}.self_attn.{p}_proj.bias"
        return names


FAMILIES: dict[str, type[ReferenceModel]] = {"llada": LladaModel, "dream": DreamModel}


# ---------------------------------------------------------------------- config builders


def llada_config(*, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int | None = None,
                 mlp_hidden_size: int | None = None, max_sequence_length: int = 4096, rope_theta: float = 500000.0,
                 rms_norm_eps: float = 1e-5, mask_token_id: int, eos_token_id: int, pad_token_id: int | None = None,
                 weight_tying: bool = False, init_std: float = 0.02) -> dict[str, Any]:
    """A complete LLaDA config.json (the keys of the public LLaDA releases) for the given dims."""
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada",
        "d_model": d_model, "n_heads": n_heads, "n_kv_heads": n_kv_heads or n_heads, "n_layers": n_layers,
        "mlp_hidden_size": mlp_hidden_size or 4 * d_model, "mlp_ratio": 4,
        "vocab_size": vocab_size, "embedding_size": vocab_size, "max_sequence_length": max_sequence_length,
        "rope": True, "rope_theta": rope_theta, "rope_full_precision": True, "rms_norm_eps": rms_norm_eps,
        "block_type": "llama", "layer_norm_type": "rms", "layer_norm_with_affine": True,
        "activation_type": "silu", "alibi": False, "alibi_bias_max": 8.0, "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True, "bias_for_layer_norm": False, "include_bias": False,
        "include_qkv_bias": False, "scale_logits": False, "input_emb_norm": False, "weight_tying": weight_tying,
        "multi_query_attention": None, "block_group_size": 1, "flash_attention": False,
        "attention_dropout": 0.0, "embedding_dropout": 0.0, "residual_dropout": 0.0,
        "init_fn": "mitchell", "init_std": init_std, "init_device": "meta", "init_cutoff_factor": None,
        "precision": "amp_bf16", "use_cache": False,
        "mask_token_id": mask_token_id, "eos_token_id": eos_token_id,
        "pad_token_id": eos_token_id if pad_token_id is None else pad_token_id,
    }


def dream_config(*, vocab_size: int, hidden_size: int, num_hidden_layers: int, num_attention_heads: int,
                 num_key_value_heads: int | None = None, intermediate_size: int | None = None,
                 max_position_embeddings: int = 4096, rope_theta: float = 1000000.0, rms_norm_eps: float = 1e-6,
                 mask_token_id: int, eos_token_id: int, bos_token_id: int | None = None,
                 pad_token_id: int | None = None, tie_word_embeddings: bool = False) -> dict[str, Any]:
    """A complete Dream config.json (Qwen2.5 keys) for the given dims."""
    return {
        "architectures": ["DreamModel"], "model_type": "Dream",
        "hidden_size": hidden_size, "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads or num_attention_heads,
        "num_hidden_layers": num_hidden_layers, "intermediate_size": intermediate_size or 4 * hidden_size,
        "vocab_size": vocab_size, "max_position_embeddings": max_position_embeddings,
        "rope_theta": rope_theta, "rope_scaling": None, "rms_norm_eps": rms_norm_eps, "hidden_act": "silu",
        "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None, "use_cache": False,
        "tie_word_embeddings": tie_word_embeddings, "mask_token_id": mask_token_id,
        "eos_token_id": eos_token_id, "bos_token_id": eos_token_id if bos_token_id is None else bos_token_id,
        "pad_token_id": eos_token_id if pad_token_id is None else pad_token_id,
    }


# ---------------------------------------------------------------------- loading


def family_of(hf_config: dict[str, Any]) -> type[ReferenceModel]:
    model_type = str(hf_config.get("model_type", "")).lower()
    if model_type not in FAMILIES:
        raise ModelFormatError(
            f"config.json: model_type {hf_config.get('model_type')!r} is not one of {', '.join(FAMILIES)}"
        )
    return FAMILIES[model_type]


def read_safetensors(hf_dir: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of the folder (single file or sharded via model.safetensors.index.json)."""
    folder = Path(hf_dir)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ModelFormatError(f"{folder}: no *.safetensors files")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        with safe_open(str(folder / name), framework="pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key).to(torch.float32)  # one tensor at a time, widened
    return tensors


def load_reference(hf_dir: str | os.PathLike) -> ReferenceModel:
    """The reference model of an HF folder (config.json + safetensors), float32, in eval mode."""
    config_path = Path(hf_dir) / "config.json"
    if not config_path.exists():
        raise ModelFormatError(f"{hf_dir}: no config.json")
    hf_config = json.loads(config_path.read_text(encoding="utf-8"))
    model = family_of(hf_config)(hf_config)
    model.load_hf_state(read_safetensors(hf_dir))
    return model.eval()


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "ReferenceConfig", "ReferenceModel", "LladaModel", "DreamModel", "FAMILIES",
    "llada_config", "dream_config", "load_reference", "read_safetensors", "family_of",
    "rmsnorm", "rope", "rope_angles", "parameter_count",
]
