"""What an HF checkpoint folder says about the model: config, tokenizer files, special ids.

Only JSON and safetensors headers are read here (nothing is executed: no remote code, no
pickle). The family-specific parts (config keys, weight names) live on the builder
subclasses in `families.py`; this module holds what both share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ModelFormatError
from ..manifest import read_json_object


@dataclass(frozen=True)
class ModelSpec:
    """The dims and constants of the math, whichever family's config keys they came from."""

    architecture: str  # llada | dream | sdar
    vocab_size: int  # rows of the embedding and of the LM head (logits width)
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float
    max_sequence_length: int  # nominal context; the graph itself accepts any length
    qkv_bias: bool  # q/k/v projections carry a bias (Dream; LLaDA with include_qkv_bias)
    tie_embeddings: bool  # LM head reuses the embedding matrix
    mask_id: int
    eos_id: int
    pad_id: int | None = None
    bos_id: int | None = None
    eot_id: int | None = None
    head_dim: int = 0  # size of one attention head; 0: hidden_size / num_heads (SDAR-4B: 128, not 2560 / 32)
    block_size: int | None = None  # block-causal attention over blocks of this many positions; None: bidirectional

    def __post_init__(self):
        if not self.head_dim and isinstance(self.hidden_size, int) and isinstance(self.num_heads, int) \
                and self.num_heads > 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)

    @property
    def group(self) -> int:
        """Query heads per K/V head (GQA)."""
        return self.num_heads // self.num_kv_heads

    def check(self) -> "ModelSpec":
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"config.json: {key} = {value!r} must be a positive integer")
        if not isinstance(self.head_dim, int) or isinstance(self.head_dim, bool) or self.head_dim < 2 \
                or self.head_dim % 2:
            raise ConfigError(f"config.json: head_dim = {self.head_dim!r} must be a positive even integer")
        if self.hidden_size % self.num_heads and self.head_dim == self.hidden_size // self.num_heads:  # derived
            raise ConfigError(
                f"config.json: hidden size {self.hidden_size} / {self.num_heads} heads must give an even head_dim"
            )
        if self.block_size is not None and (not isinstance(self.block_size, int) or isinstance(self.block_size, bool)
                                            or self.block_size < 1):
            raise ConfigError(f"config.json: block_size = {self.block_size!r} must be a positive integer")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"config.json: {self.num_heads} heads are not a multiple of {self.num_kv_heads} key/value heads"
            )
        for key in ("mask_id", "eos_id"):
            value = getattr(self, key)
            if not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ConfigError(f"config.json: {key} = {value!r} is not a token id below vocab size {self.vocab_size}")
        return self


@dataclass(frozen=True)
class TokenizerFiles:
    """tokenizer.json (required: the package ships it) and tokenizer_config.json facts."""

    path: Path
    special: dict[str, int] = field(default_factory=dict)  # special token text -> id
    chat_template: str | None = None
    bos_token: str | None = None
    eos_token: str | None = None

    def id_of(self, token: str | None) -> int | None:
        return None if token is None else self.special.get(token)


def read_json(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON file (config, tokenizer, tokenizer config): one JSON object."""
    if not path.is_file():
        raise ModelFormatError(f"{path}: missing")
    return read_json_object(path)


def read_config(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise ModelFormatError(f"{folder}: not a folder")
    return read_json(folder / "config.json")


def read_tokenizer_files(folder: Path) -> TokenizerFiles:
    path = folder / "tokenizer.json"
    tok = read_json(path)
    special = {}
    for entry in tok.get("added_tokens", []):
        if isinstance(entry, dict) and isinstance(entry.get("content"), str) and isinstance(entry.get("id"), int):
            special[entry["content"]] = entry["id"]
    cfg_path = folder / "tokenizer_config.json"
    tcfg = read_json(cfg_path) if cfg_path.is_file() else {}
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # HF allows named templates; "default" is what apply_chat_template uses
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return TokenizerFiles(
        path=path,
        special=special,
        chat_template=template if isinstance(template, str) else None,
        bos_token=_token_text(tcfg.get("bos_token")),
        eos_token=_token_text(tcfg.get("eos_token")),
    )


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "<|endoftext|>", ...} in older tokenizer configs
        value = value.get("content")
    return value if isinstance(value, str) else None


def require(hf: dict[str, Any], key: str) -> Any:
    value = hf.get(key)
    if value is None:
        raise ConfigError(f"config.json: missing key {key!r}")
    return value


def require_values(hf: dict[str, Any], supported: dict[str, Any]) -> None:
    """Every key present must hold the one value the graph implements (never a silently wrong graph)."""
    for key, allowed in supported.items():
        if key in hf and hf[key] not in (allowed if isinstance(allowed, tuple) else (allowed,)):
            expect = " or ".join(repr(a) for a in (allowed if isinstance(allowed, tuple) else (allowed,)))
            raise ConfigError(f"config.json: {key} = {hf[key]!r} is not supported (supported: {expect})")
