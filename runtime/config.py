"""GenerationConfig: every knob of one generation, with one name everywhere.

The same field names are the Python keyword overrides, the CLI flags
(`--gen-length` for `gen_length`), the `/set` keys of `unmask chat` and the
`generation` defaults in a package manifest; each field's help text is its
`metadata["help"]`. What the model itself dictates (mask/eos/eot ids,
shift_logits) is not a setting: it is a `ModelFacts`, read from the manifest.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from . import _core
from .errors import ConfigError

# What the C++ core can represent and bounds (csrc/params.h): validate() refuses the same.
MAX_LENGTH = _core.MAX_LENGTH  # gen_length, steps, block_length
MIN_TEMPERATURE = _core.MIN_TEMPERATURE  # a positive temperature below it overflows 1/T in float32
INT64_MAX = 2**63 - 1  # token ids, top_k
UINT64_MAX = 2**64 - 1  # seed

# Algorithms and the schedule family each belongs to.
BLOCK_ALGORITHMS = ("low_confidence", "random")  # LLaDA block schedule
TIMESTEP_ALGORITHMS = ("origin", "maskgit_plus", "topk_margin", "entropy")  # Dream timestep schedule
# The SDAR schedule of block diffusion: blocks aligned to position 0, `steps` per block = the
# reference's steps per block, count from the block length. SDAR's four strategies and LLaDA2's sampler.
SDAR_ALGORITHMS = ("sequential", "low_confidence_static", "low_confidence_dynamic", "entropy_bounded", "llada2")
ALGORITHMS = BLOCK_ALGORITHMS + TIMESTEP_ALGORITHMS + SDAR_ALGORITHMS
CACHE_MODES = ("none", "prefix", "dual", "block")
# Defaults of the threshold rules: SDAR's confidence_threshold and its CLI's eb_threshold, LLaDA2's threshold
SDAR_THRESHOLDS = {"low_confidence_dynamic": 0.85, "entropy_bounded": 0.35, "llada2": 0.95}

# Algorithms whose confidence is a probability-like score that a threshold or
# factor rule can compare against a number in (0, 1].
_PARALLEL_ALGORITHMS = ("low_confidence", "maskgit_plus", "topk_margin")


def _setting(default: Any, help: str) -> Any:
    """A GenerationConfig field with its one-line help (the CLI flag's help text)."""
    return field(default=default, metadata={"help": help})


@dataclass
class GenerationConfig:
    """Settings of one generation. Every field has a default; `validate()` rejects contradictions."""

    # --- what to generate
    gen_length: int = _setting(128, "tokens in the generated region (all start masked)")
    steps: int | None = _setting(None, "forward passes budget; None -> gen_length (one token per step)")
    block_length: int | None = _setting(None, "semi-autoregressive block size; None -> one block (gen_length)")
    algorithm: str = _setting("low_confidence", "LLaDA block schedule: low_confidence, random; "
                                                "Dream timesteps: origin, maskgit_plus, topk_margin, entropy; "
                                                "SDAR blocks: sequential, low_confidence_static, "
                                                "low_confidence_dynamic, entropy_bounded, llada2")

    # --- Fast-dLLM parallel decoding (replace the fixed per-step count)
    threshold: float | None = _setting(None, "commit every masked position with confidence >= threshold "
                                             "(low_confidence_dynamic: > threshold, default 0.85; "
                                             "llada2: > threshold, default 0.95; "
                                             "entropy_bounded: the entropy budget, default 0.35)")
    factor: float | None = _setting(None, "commit rank n while confidence >= 1 - factor/(n+1)")
    minimal_topk: int | None = _setting(None, "llada2: at most gen_length // minimal_topk steps per block; "
                                              "None = 1")

    # --- token sampling
    temperature: float = _setting(0.0, "0 = greedy argmax")
    top_k: int | None = _setting(None, "keep the k most likely tokens (Dream sampler); None = off")
    top_p: float | None = _setting(None, "nucleus filter (Dream sampler); None = off")
    alg_temp: float = _setting(0.0, "Dream: > 0 draws positions from softmax(confidence / alg_temp)")
    eps: float = _setting(1e-3, "Dream: last timestep of linspace(1, eps, steps + 1)")
    cfg_scale: float = _setting(0.0, "classifier-free guidance; 0 = off, > 0 doubles the batch")
    logits_eos_inf: bool = _setting(False, "forbid EOS as a token (its logit becomes -inf)")
    confidence_eos_eot_inf: bool = _setting(False, "LLaDA: rank EOS/EoT last when choosing positions")
    early_stop: bool = _setting(True, "stop once a finished block holds EOS (rest becomes EOS); llada2: "
                                      "as soon as the first EOS has no mask before it")
    seed: int = _setting(0, "RNG seed: same seed, same tokens, whatever the thread count")

    # --- engine
    cache: str | None = _setting(None, "key/value reuse: none | prefix | dual | block; None -> block for "
                                       "block-causal packages, else dual when the package allows")

    # ------------------------------------------------------------------ derived
    @property
    def resolved_steps(self) -> int:
        return self.gen_length if self.steps is None else self.steps

    @property
    def resolved_block_length(self) -> int:
        return self.gen_length if self.block_length is None else self.block_length

    @property
    def num_blocks(self) -> int:
        return self.gen_length // self.resolved_block_length

    @property
    def uses_block_schedule(self) -> bool:
        return self.algorithm in BLOCK_ALGORITHMS

    @property
    def uses_sdar_schedule(self) -> bool:
        return self.algorithm in SDAR_ALGORITHMS

    @property
    def resolved_threshold(self) -> float | None:
        """The threshold the core uses: SDAR's default where its rule needs one and none is set."""
        return self.threshold if self.threshold is not None else SDAR_THRESHOLDS.get(self.algorithm)

    def canvas_length(self, prompt_length: int) -> int:
        """Positions the model sees: prompt + gen_length, SDAR's rounded up to the end of a block
        (its blocks are aligned to position 0)."""
        total = prompt_length + self.gen_length
        block = self.resolved_block_length
        return -(-total // block) * block if self.uses_sdar_schedule else total

    def for_model(self, facts: "ModelFacts") -> "GenerationConfig":
        """A copy with what the model decides filled in: a block-causal model's block_length."""
        if facts.block_size is not None and self.block_length is None:
            return self.replace(block_length=facts.block_size)
        return self

    # ------------------------------------------------------------------ building
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "GenerationConfig":
        """Build from a mapping (manifest defaults, JSON); unknown keys are an error."""
        return cls().replace(**dict(values))

    def replace(self, **overrides: Any) -> "GenerationConfig":
        """A copy with some fields changed; unknown names raise ConfigError listing the valid ones."""
        unknown = sorted(set(overrides) - set(self.field_names()))
        if unknown:
            raise ConfigError(
                f"unknown generation setting(s) {', '.join(unknown)}; "
                f"valid settings: {', '.join(self.field_names())}"
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ------------------------------------------------------------------ checking
    def validate(self, facts: "ModelFacts | None" = None) -> "GenerationConfig":
        """Raise ConfigError on any invalid or contradictory setting; return self.

        With `facts`, also the settings this model's token ids cannot honour. This is the one
        user-facing check; the C++ core checks the same again at its boundary, so whatever
        passes here builds a decoder.
        """
        _check_int("gen_length", self.gen_length, minimum=1, maximum=MAX_LENGTH)
        if self.steps is not None:
            _check_int("steps", self.steps, minimum=1, maximum=MAX_LENGTH)
        if self.block_length is not None:
            _check_int("block_length", self.block_length, minimum=1, maximum=MAX_LENGTH)
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(
                f"unknown algorithm {self.algorithm!r}; choose one of {', '.join(ALGORITHMS)}"
            )
        block = self.resolved_block_length
        if self.gen_length % block:
            raise ConfigError(
                f"gen_length {self.gen_length} is not a multiple of block_length {block}; "
                f"use a block_length that divides it (e.g. {_a_divisor(self.gen_length, block)})"
            )
        if self.resolved_steps % self.num_blocks:
            raise ConfigError(
                f"steps {self.resolved_steps} is not a multiple of the number of blocks "
                f"({self.num_blocks} = gen_length {self.gen_length} / block_length {block}); "
                f"each block needs the same number of steps"
            )
        self._check_minimal_topk()
        if self.threshold is not None and self.factor is not None:
            raise ConfigError("threshold and factor are two parallel-decoding rules; set only one")
        if self.uses_sdar_schedule:
            self._check_sdar()
        elif self.threshold is not None and not (0.0 < _num("threshold", self.threshold) <= 1.0):
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.factor is not None and not (_num("factor", self.factor) > 0.0):
            raise ConfigError(f"factor must be > 0, got {self.factor}")
        if (self.threshold is not None or self.factor is not None) and not self.uses_sdar_schedule \
                and self.algorithm not in _PARALLEL_ALGORITHMS:
            raise ConfigError(
                f"threshold/factor need a probability-like confidence; algorithm {self.algorithm!r} has none "
                f"(use one of {', '.join(_PARALLEL_ALGORITHMS)})"
            )
        temperature = _num("temperature", self.temperature)
        if temperature != 0 and not temperature >= MIN_TEMPERATURE:
            raise ConfigError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {self.temperature}")
        if self.top_p is not None and not (0.0 < _num("top_p", self.top_p) <= 1.0):
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k is not None:
            _check_int("top_k", self.top_k, minimum=1, maximum=INT64_MAX)
        if _num("alg_temp", self.alg_temp) < 0:
            raise ConfigError(f"alg_temp must be >= 0, got {self.alg_temp}")
        if not (0.0 < _num("eps", self.eps) < 1.0):
            raise ConfigError(f"eps must be in (0, 1), got {self.eps}")
        if _num("cfg_scale", self.cfg_scale) < 0:
            raise ConfigError(f"cfg_scale must be >= 0, got {self.cfg_scale}")
        _check_int("seed", self.seed, minimum=0, maximum=UINT64_MAX)
        if self.cache is not None and self.cache not in CACHE_MODES:
            raise ConfigError(f"unknown cache mode {self.cache!r}; choose one of {', '.join(CACHE_MODES)}")
        for name in ("logits_eos_inf", "confidence_eos_eot_inf", "early_stop"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if facts is not None:
            self._check_against(facts)
        if self.cache == "block" and not self.uses_sdar_schedule:
            raise ConfigError(f"cache 'block' decodes SDAR's absolute blocks; algorithm {self.algorithm!r} lays its "
                              f"blocks out differently (use one of {', '.join(SDAR_ALGORITHMS)})")
        return self

    def _check_sdar(self) -> None:
        """SDAR's algorithms: its schedule commits >= 1 token per step, its threshold rules."""
        if self.factor is not None:
            raise ConfigError(f"factor does not apply to algorithm {self.algorithm!r} (SDAR's rules use threshold)")
        per_block = self.resolved_steps // self.num_blocks
        if per_block > self.resolved_block_length:
            raise ConfigError(
                f"steps {self.resolved_steps} gives {per_block} steps per block, more than block_length "
                f"{self.resolved_block_length}; SDAR commits at least one token per step (steps <= gen_length)")
        if self.threshold is None:
            return
        if self.algorithm in ("low_confidence_dynamic", "llada2") and \
                not (0.0 < _num("threshold", self.threshold) <= 1.0):
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.algorithm == "entropy_bounded" and not (_num("threshold", self.threshold) > 0.0):
            raise ConfigError(f"threshold (entropy_bounded's entropy budget, in nats) must be a finite number > 0, "
                              f"got {self.threshold}")
        if self.algorithm not in SDAR_THRESHOLDS:
            raise ConfigError(f"threshold does not apply to algorithm {self.algorithm!r} "
                              f"(use {', '.join(SDAR_THRESHOLDS)})")

    def _check_minimal_topk(self) -> None:
        """LLaDA2's cap on the steps per block: gen_length // minimal_topk (the reference's rule)."""
        if self.minimal_topk is None:
            return
        _check_int("minimal_topk", self.minimal_topk, minimum=1)
        if self.algorithm != "llada2":
            raise ConfigError(f"minimal_topk does not apply to algorithm {self.algorithm!r} "
                              f"(it caps the steps of algorithm llada2)")
        if self.minimal_topk > self.gen_length:
            raise ConfigError(f"minimal_topk {self.minimal_topk} exceeds gen_length {self.gen_length}: "
                              f"gen_length // minimal_topk = 0 steps per block would decode nothing; "
                              f"use at most {self.gen_length}")

    def _check_against(self, facts: "ModelFacts") -> None:
        """The rules that need the model's token ids and attention (the C++ core asserts the same)."""
        if not isinstance(facts, ModelFacts):
            raise ConfigError(f"facts must be a ModelFacts, got {type(facts).__name__}")
        if facts.block_size is not None:
            self._check_block_causal(facts.block_size)
        elif self.cache == "block":
            raise ConfigError("cache 'block' is exact only for block-causal models (SDAR packages); this model "
                              "attends bidirectionally: use cache none, prefix or dual")
        if self.logits_eos_inf and facts.eos_id is None:
            raise ConfigError("logits_eos_inf forbids the EOS token, but this model has no eos_id")
        if self.confidence_eos_eot_inf and facts.eos_id is None and facts.eot_id is None:
            raise ConfigError("confidence_eos_eot_inf ranks EOS/EoT last, but this model has neither id")

    def _check_block_causal(self, block_size: int) -> None:
        """A block-causal model fixes the block length, the layout and which caches are exact."""
        if self.resolved_block_length != block_size:
            raise ConfigError(f"block_length {self.resolved_block_length} disagrees with this model's block size "
                              f"{block_size} (its attention is block-causal over {block_size} positions); "
                              f"leave block_length unset or set it to {block_size}")
        if not self.uses_sdar_schedule:
            raise ConfigError(f"algorithm {self.algorithm!r} does not fit a block-causal model; "
                              f"use one of {', '.join(SDAR_ALGORITHMS)}")
        if self.cache in ("prefix", "dual"):
            raise ConfigError(f"cache {self.cache!r} refreshes keys/values that a block-causal model never changes; "
                              f"use cache 'block' (exact, the default here) or 'none'")


@dataclass(frozen=True)
class ModelFacts:
    """What the decoder must know about the model itself; a package's manifest holds them
    (`Manifest.model_facts()`), bring-your-own-forward callers give them to `unmask.decode`."""

    mask_id: int  # the [MASK] token every generated position starts as
    eos_id: int | None = None  # end of text: early stop and the EOS rules look for it
    eot_id: int | None = None  # end of turn (LLaDA <|eot_id|>, Dream <|im_end|>)
    shift_logits: bool = False  # Dream: position i reads its distribution from row i-1
    block_size: int | None = None  # block-causal attention over blocks of this many positions (SDAR)

    def __post_init__(self) -> None:
        _check_int("mask_id", self.mask_id, minimum=0, maximum=INT64_MAX)
        if self.block_size is not None:
            _check_int("block_size", self.block_size, minimum=1, maximum=MAX_LENGTH)
        for name in ("eos_id", "eot_id"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=0, maximum=INT64_MAX)
        if not isinstance(self.shift_logits, bool):
            raise ConfigError(f"shift_logits must be True or False, got {self.shift_logits!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "ModelFacts":
        unknown = sorted(set(values) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(f"unknown model fact(s) {', '.join(unknown)}; valid: mask_id, eos_id, eot_id, "
                              f"shift_logits, block_size")
        if "mask_id" not in values:
            raise ConfigError("mask_id is required (the model's [MASK] token id)")
        return cls(**dict(values))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_threads(threads: Any) -> int | None:
    """The one rule for a thread count, at every entry (load, decode, device selection, CLI).

    At most max(256, hardware threads): more only costs (20000 threads never finished starting).
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"threads must be a positive integer (or None for the device profile's), got {threads!r}")
    if threads is not None and threads > _core.max_threads():
        raise ConfigError(f"threads must be at most {_core.max_threads()} (256, or this machine's hardware threads "
                          f"if more), got {threads}")
    return threads


def _num(name: str, value: Any) -> float:
    """A finite float: no setting has a meaning for NaN or infinity (the core refuses both)."""
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf
        if math.isfinite(number):
            return number
    raise ConfigError(f"{name} must be a finite number, got {value!r}")


def _check_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {value}")


def _a_divisor(n: int, near: int) -> int:
    """The divisor of n nearest to `near` (divisors come in pairs d, n // d: O(sqrt n))."""
    divisors = {d for small in range(1, math.isqrt(n) + 1) if n % small == 0 for d in (small, n // small)}
    return min(sorted(divisors), key=lambda d: abs(d - near))
