"""Bring-your-own-forward decoding: the C++ unmasking loop driven by any Python forward.

    facts = unmask.ModelFacts(mask_id=126336, eos_id=126081)
    result = unmask.decode(forward, prompt_ids, config, facts=facts)  # forward(ids int64[B, L]) -> float32[B, L, V]

`make_decoder` is the one place a GenerationConfig becomes the C++ params struct; the
runtime Engine uses it too and drives `next_request()` / `advance()` itself (cache windows).

Fixed tokens: `template` (int64[gen_length]) pins every entry that is not the mask id;
the loop fills only the holes. `infill=True` lets the prompt hold mask ids: they become
holes of the first block (committed alongside it, by the same schedule). Early stop never
overwrites pinned tokens: it only fires when no pinned token lies after the finished block.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import _core
from .config import GenerationConfig, ModelFacts, check_threads
from .errors import ConfigError, InputError

_ALGORITHMS = {
    "low_confidence": _core.Algorithm.LOW_CONFIDENCE,
    "random": _core.Algorithm.RANDOM,
    "origin": _core.Algorithm.ORIGIN,
    "maskgit_plus": _core.Algorithm.MASKGIT_PLUS,
    "topk_margin": _core.Algorithm.TOPK_MARGIN,
    "entropy": _core.Algorithm.ENTROPY,
    "sequential": _core.Algorithm.SEQUENTIAL,
    "low_confidence_static": _core.Algorithm.LOW_CONFIDENCE_STATIC,
    "low_confidence_dynamic": _core.Algorithm.LOW_CONFIDENCE_DYNAMIC,
    "entropy_bounded": _core.Algorithm.ENTROPY_BOUNDED,
    "llada2": _core.Algorithm.LLADA2,
}
_CACHE_MODES = {"none": _core.CacheMode.NONE, "prefix": _core.CacheMode.PREFIX, "dual": _core.CacheMode.DUAL,
                "block": _core.CacheMode.BLOCK}


@dataclass
class StepEvent:
    """What one step committed (absolute positions); `filled` trailing entries come from early stop."""

    positions: np.ndarray
    tokens: np.ndarray
    block: int
    step: int
    block_done: bool
    done: bool
    filled: int = 0


@dataclass
class DecodeStats:
    nfe: int = 0  # forward passes
    committed: int = 0  # positions committed by the model (early-stop fills excluded)
    filled: int = 0  # positions filled with EOS by early stop
    forward_seconds: list[float] = field(default_factory=list)  # per step, around the forward callable
    host_seconds: list[float] = field(default_factory=list)  # per step, around advance() (scoring + selection)

    @property
    def tokens_per_forward(self) -> float:
        return self.committed / self.nfe if self.nfe else 0.0


@dataclass
class DecodeResult:
    ids: np.ndarray  # int64 [L]: prompt + generated region
    prompt_length: int
    stats: DecodeStats

    @property
    def generated(self) -> np.ndarray:
        return self.ids[self.prompt_length :]


def to_params(config: GenerationConfig, facts: ModelFacts, *, threads: int | None = None) -> "_core.DecodeParams":
    """A checked GenerationConfig + ModelFacts -> the C++ params struct (a field-by-field copy).

    Checking is the caller's (`config.validate(facts)`, `check_threads`); the C++ core checks
    the same again at its boundary. An unresolved cache (None: no package says reuse is possible) runs
    without reuse.
    """
    p = _core.DecodeParams()
    p.gen_length = config.gen_length
    p.steps = config.resolved_steps
    p.block_length = config.resolved_block_length
    p.algorithm = _ALGORITHMS[config.algorithm]
    p.threshold = config.resolved_threshold
    p.factor = config.factor
    p.minimal_topk = config.minimal_topk or 1
    p.temperature = float(config.temperature)
    p.top_k = config.top_k
    p.top_p = config.top_p
    p.alg_temp = float(config.alg_temp)
    p.eps = float(config.eps)
    p.cfg_scale = float(config.cfg_scale)
    p.logits_eos_inf = config.logits_eos_inf
    p.confidence_eos_eot_inf = config.confidence_eos_eot_inf
    p.early_stop = config.early_stop
    p.seed = config.seed
    p.cache = _CACHE_MODES[config.cache or "none"]
    p.mask_id = facts.mask_id
    p.eos_id = facts.eos_id
    p.eot_id = facts.eot_id
    p.shift_logits = facts.shift_logits
    p.threads = threads or 0
    return p


def token_ids(name: str, ids: Any) -> np.ndarray:
    """Token ids as a contiguous int64 array: any 1-D sequence of integers (list, numpy array)."""
    array = np.asarray(ids)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise ConfigError(f"{name} must be a 1-D sequence of integer token ids (list or int64 array), "
                          f"got {type(ids).__name__} of shape {array.shape} and dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def make_decoder(
    config: GenerationConfig,
    facts: ModelFacts,
    prompt_ids: Any,
    *,
    template: Any = None,
    infill: bool = False,
    threads: int | None = None,
) -> "_core.Decoder":
    """A C++ Decoder for one checked config (docs/architecture.md describes the request/advance protocol).

    The cache mode is `config.cache`; the caller has run `config.validate(facts)`.
    """
    prompt = token_ids("prompt_ids", prompt_ids)
    if prompt.size == 0:
        raise ConfigError("prompt_ids is empty: give at least one token (e.g. BOS)")
    fixed = None if template is None else token_ids("template", template)
    return _core.Decoder(to_params(config, facts, threads=threads), prompt, fixed, bool(infill))


def _check_logits(logits: Any, batch: int, length: int) -> np.ndarray:
    expected = f"({batch}, {length}, V) float32 or float16"
    if not isinstance(logits, np.ndarray):
        try:
            logits = np.asarray(logits)
        except Exception as exc:  # an object numpy cannot read
            raise InputError(f"forward returned {type(logits).__name__}, expected an array {expected}") from exc
    if logits.ndim != 3 or logits.shape[0] != batch or logits.shape[1] != length or logits.shape[2] < 1:
        raise InputError(f"forward returned logits of shape {tuple(logits.shape)}, expected {expected}")
    if logits.dtype not in (np.float32, np.float16):
        raise InputError(f"forward returned logits of dtype {logits.dtype} and shape {tuple(logits.shape)}, "
                         f"expected {expected}")
    return np.ascontiguousarray(logits)


def decode(
    forward: Callable[[np.ndarray], Any],
    prompt_ids: Any,
    config: GenerationConfig,
    on_step: Callable[[StepEvent], None] | None = None,
    *,
    facts: ModelFacts,
    template: Any = None,
    infill: bool = False,
    threads: int | None = None,
) -> DecodeResult:
    """Run the unmasking loop with `forward(ids int64[B, L]) -> logits[B, L, V]` (B = 2 with CFG).

    `facts` says what the loop must know about the model: `ModelFacts(mask_id=..., eos_id=...)`.
    `prompt_ids` (and `template`) are any 1-D sequences of integer ids.
    Every forward sees the whole sequence (cache "none"), except with config.cache "block" (a
    block-causal model, `facts.block_size` set): then `forward(ids, request)` gets only the
    window's ids [B, W] and the Request saying which positions they are (`window_start`,
    `window_end`), how many cached positions before them to attend to (`past_length`) and
    whether to keep the window's keys/values (`stores_cache`); the forward keeps that cache
    itself and returns logits [B, W, V]. Prefix and dual caches do not apply here.
    An exception raised by `forward` or `on_step` propagates unchanged; the decoder is dropped.
    """
    if not isinstance(config, GenerationConfig):
        raise ConfigError(f"config must be a GenerationConfig, got {type(config).__name__}")
    if not isinstance(facts, ModelFacts):
        raise ConfigError(f"facts must be a ModelFacts (mask_id, eos_id, ...), got {type(facts).__name__}")
    config = config.for_model(facts)
    windowed = config.cache == "block"
    config.validate(facts)
    decoder = make_decoder(config.replace(cache="block" if windowed else "none"), facts, prompt_ids,
                           template=template, infill=infill, threads=check_threads(threads))
    stats = DecodeStats()
    while not decoder.done:
        request = decoder.next_request()
        ids = decoder.input_ids()
        t0 = time.perf_counter()
        logits = forward(ids, request) if windowed else forward(ids)
        t1 = time.perf_counter()
        logits = _check_logits(logits, request.batch, int(request.window_end) - int(request.window_start))
        event = decoder.advance_window(logits)
        t2 = time.perf_counter()
        stats.nfe += 1
        stats.forward_seconds.append(t1 - t0)
        stats.host_seconds.append(t2 - t1)
        stats.committed += len(event.positions) - event.filled
        stats.filled += event.filled
        if on_step is not None:
            on_step(
                StepEvent(
                    positions=event.positions,
                    tokens=event.tokens,
                    block=event.block,
                    step=event.step,
                    block_done=event.block_done,
                    done=event.done,
                    filled=event.filled,
                )
            )
    return DecodeResult(ids=decoder.ids, prompt_length=decoder.prompt_length, stats=stats)
