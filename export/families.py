"""Model families: how LLaDA and Dream checkpoints name things. Hooks only, no math.

A family reads its config.json keys into a ModelSpec (refusing any value the shared
graph does not implement, naming the key), says where each weight lives, and carries the
generation defaults its package ships with.
"""

from __future__ import annotations

from typing import Any

from ..config import GenerationConfig
from ..errors import ConfigError
from .builder import GraphBuilder, LayerWeights
from .checkpoint import ModelSpec, TokenizerFiles, require, require_values


class LladaBuilder(GraphBuilder):
    architecture = "llada"
    model_types = ("llada",)
    shift_logits = False
    generation = GenerationConfig(block_length=32)  # LLaDA's published semi-autoregressive block
    MASK_TOKEN, EOT_TOKEN, BOS_TOKEN = "<|mdm_mask|>", "<|eot_id|>", "<|startoftext|>"
    # key -> the only value(s) the graph implements
    SUPPORTED = {
        "block_type": "llama", "layer_norm_type": "rms", "activation_type": "silu", "rope": True,
        "alibi": False, "attention_layer_norm": False, "scale_logits": False, "input_emb_norm": False,
        "include_bias": False, "multi_query_attention": (None, False), "clip_qkv": None,
        "layer_norm_with_affine": True, "rope_scaling": None,
    }

    @classmethod
    def parse_config(cls, hf: dict[str, Any], tokenizer: TokenizerFiles) -> ModelSpec:
        require_values(hf, cls.SUPPORTED)
        d_model, n_heads = require(hf, "d_model"), require(hf, "n_heads")
        mlp = hf.get("mlp_hidden_size") or int(hf.get("mlp_ratio", 4) * d_model)
        return ModelSpec(
            architecture=cls.architecture,
            vocab_size=hf.get("embedding_size") or require(hf, "vocab_size"),
            hidden_size=d_model,
            num_layers=require(hf, "n_layers"),
            num_heads=n_heads,
            num_kv_heads=hf.get("n_kv_heads") or n_heads,
            intermediate_size=mlp,
            rope_theta=float(hf.get("rope_theta", 10000.0)),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-5)),
            max_sequence_length=int(hf.get("max_sequence_length", 4096)),
            qkv_bias=bool(hf.get("include_qkv_bias", False)),
            tie_embeddings=bool(hf.get("weight_tying", False)),
            **special_ids(hf, tokenizer, cls.MASK_TOKEN, cls.EOT_TOKEN, cls.BOS_TOKEN),
        ).check()

    def embedding_name(self):
        return "model.transformer.wte.weight"

    def final_norm_name(self):
        return "model.transformer.ln_f.weight"

    def head_name(self):
        return self.embedding_name() if self.spec.tie_embeddings else "model.transformer.ff_out.weight"

    def layer_names(self, i):
        b = f"model.transformer.blocks.{i}"
        bias = (lambda p: f"{b}.{p}_proj.bias") if self.spec.qkv_bias else (lambda p: None)
        return LayerWeights(
            attn_norm=f"{b}.attn_norm.weight", q=f"{b}.q_proj.weight", k=f"{b}.k_proj.weight",
            v=f"{b}.v_proj.weight", o=f"{b}.attn_out.weight", ff_norm=f"{b}.ff_norm.weight",
            gate=f"{b}.ff_proj.weight", up=f"{b}.up_proj.weight", down=f"{b}.ff_out.weight",
            q_bias=bias("q"), k_bias=bias("k"), v_bias=bias("v"),
        )


class DreamBuilder(GraphBuilder):
    architecture = "dream"
    model_types = ("dream",)
    shift_logits = True  # the decoder reads position i's distribution from row i-1
    generation = GenerationConfig(algorithm="entropy")  # Dream's recommended timestep algorithm
    MASK_TOKEN, EOT_TOKEN, BOS_TOKEN = "<|mask|>", "<|im_end|>", None
    SUPPORTED = {"hidden_act": "silu", "rope_scaling": None, "use_sliding_window": (False, None)}

    @classmethod
    def parse_config(cls, hf: dict[str, Any], tokenizer: TokenizerFiles) -> ModelSpec:
        require_values(hf, cls.SUPPORTED)
        rope = hf.get("rope_parameters") or {}
        if rope.get("rope_type", "default") != "default":
            raise ConfigError(f"config.json: rope_parameters.rope_type = {rope['rope_type']!r} is not supported "
                              "(supported: 'default')")
        heads = require(hf, "num_attention_heads")
        return ModelSpec(
            architecture=cls.architecture,
            vocab_size=require(hf, "vocab_size"),
            hidden_size=require(hf, "hidden_size"),
            num_layers=require(hf, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=hf.get("num_key_value_heads") or heads,
            intermediate_size=require(hf, "intermediate_size"),
            rope_theta=float(hf.get("rope_theta") or rope.get("rope_theta") or 10000.0),
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            max_sequence_length=int(hf.get("max_position_embeddings", 4096)),
            qkv_bias=True,
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            **special_ids(hf, tokenizer, cls.MASK_TOKEN, cls.EOT_TOKEN, cls.BOS_TOKEN),
        ).check()

    def embedding_name(self):
        return "model.embed_tokens.weight"

    def final_norm_name(self):
        return "model.norm.weight"

    def head_name(self):
        return self.embedding_name() if self.spec.tie_embeddings else "lm_head.weight"

    def layer_names(self, i):
        b = f"model.layers.{i}"
        return LayerWeights(
            attn_norm=f"{b}.input_layernorm.weight", q=f"{b}.self_attn.q_proj.weight",
            k=f"{b}.self_attn.k_proj.weight", v=f"{b}.self_attn.v_proj.weight", o=f"{b}.self_attn.o_proj.weight",
            ff_norm=f"{b}.post_attention_layernorm.weight", gate=f"{b}.mlp.gate_proj.weight",
            up=f"{b}.mlp.up_proj.weight", down=f"{b}.mlp.down_proj.weight",
            q_bias=f"{b}.self_attn.q_proj.bias", k_bias=f"{b}.self_attn.k_proj.bias",
            v_bias=f"{b}.self_attn.v_proj.bias",
        )


FAMILIES: tuple[type[GraphBuilder], ...] = (LladaBuilder, DreamBuilder)


def family_for(hf: dict[str, Any]) -> type[GraphBuilder]:
    model_type = str(hf.get("model_type", "")).lower()
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    known = ", ".join(t for f in FAMILIES for t in f.model_types)
    raise ConfigError(f"config.json: model_type = {hf.get('model_type')!r} is not supported (supported: {known})")


def special_ids(hf: dict[str, Any], tokenizer: TokenizerFiles, mask_token: str, eot_token: str,
                bos_token: str | None) -> dict[str, int | None]:
    """Ids from config.json, falling back to the tokenizer's special tokens by their text."""

    def first_int(*values):
        for value in values:
            if isinstance(value, list) and value:  # HF allows a list of EOS ids
                value = value[0]
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    mask = first_int(hf.get("mask_token_id"), tokenizer.id_of(mask_token))
    eos = first_int(hf.get("eos_token_id"), tokenizer.id_of(tokenizer.eos_token), tokenizer.id_of("<|endoftext|>"))
    if mask is None:
        raise ConfigError(f"config.json: missing key 'mask_token_id' (and no {mask_token} token in tokenizer.json)")
    if eos is None:
        raise ConfigError("config.json: missing key 'eos_token_id' (and no EOS token in tokenizer.json)")
    return dict(
        mask_id=mask,
        eos_id=eos,
        eot_id=tokenizer.id_of(eot_token),
        bos_id=first_int(tokenizer.id_of(tokenizer.bos_token or bos_token), hf.get("bos_token_id")),
        pad_id=first_int(hf.get("pad_token_id")),
    )
