"""Bounded property-based fuzz of GenerationConfig and unmask.decode (issue 35, item 8).

Every generated config either fails validate() with ConfigError or is accepted by the core
(to_params and a Decoder built without any other exception): validate() is the single gate.
Every forward output, however broken (NaN, inf, huge values, wrong shapes and dtypes), either
gives a valid generation (ids in the vocabulary, never the mask id) or a typed UnmaskError.

The example budgets are fixed and the search derandomized, so CI runs the same cases each time
(and under the sanitizer build, where these are the widest inputs the core sees).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings, strategies as st

import unmask
from unmask import ConfigError, GenerationConfig, ModelFacts, UnmaskError
from unmask.config import ALGORITHMS, CACHE_MODES
from unmask.decoding import make_decoder

FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

HUGE_INTS = [2**17, 2**17 + 1, 2**31, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**64 + 7, -(2**63) - 1, 10**400]
ODD_FLOATS = [0.0, -0.0, 5e-324, 1e-7, 1e-6, 0.5, 1.0, 1.5, 1e300, float("inf"), -float("inf"), float("nan")]
NOT_A_NUMBER = st.sampled_from(["1", "", None, [1], b"2", 1j])


def mostly(usual, hostile):
    """`usual` 15 times in 16: with ~20 fields, a third of the configs have exactly one hostile value.
    (Hostile on the last pick, not 0: hypothesis favours small draws, and shrinks towards usual.)"""
    return st.integers(0, 15).flatmap(lambda pick: hostile if pick == 15 else usual)


def ints(small):
    return mostly(small, st.one_of(st.sampled_from(HUGE_INTS), st.booleans(), st.floats(allow_nan=True),
                                   NOT_A_NUMBER))


def floats(usual):
    return mostly(usual, st.one_of(st.sampled_from(ODD_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                                   st.integers(-2, 3), st.sampled_from(HUGE_INTS), st.booleans(), NOT_A_NUMBER))


def flags(default):
    usual = st.integers(0, 3).flatmap(lambda pick: st.just(not default) if pick == 3 else st.just(default))
    return mostly(usual, st.sampled_from([0, 1, 2, None, "yes", 1.0, np.bool_(True)]))


def optional(strategy):
    """None three times in four (most settings are off by default)."""
    return st.integers(0, 3).flatmap(lambda pick: strategy if pick == 3 else st.none())


@st.composite
def config_fields(draw):
    """Mostly coherent sizes (so the core is reached), every field sometimes hostile."""
    gen_length = draw(ints(st.sampled_from([1, 4, 8, 12, 16, 32])))
    blocks = draw(st.sampled_from([1, 2, 4]))
    coherent_block = gen_length // blocks if isinstance(gen_length, int) and blocks and gen_length > 0 else None
    fields = {
        "gen_length": gen_length,
        "block_length": draw(mostly(st.just(coherent_block), optional(ints(st.integers(-1, 40))))),
        "steps": draw(mostly(st.none(), ints(st.sampled_from([1, 2, 4, 8, 16, 64])))),
        "algorithm": draw(mostly(st.sampled_from(ALGORITHMS), st.sampled_from(["greedy", "", None, 3]))),
        "threshold": draw(optional(floats(st.floats(0.05, 1.0)))),
        "factor": draw(optional(floats(st.floats(0.1, 4.0)))),
        "temperature": draw(floats(st.sampled_from([0.0, 0.5, 1.0]))),
        "top_k": draw(optional(ints(st.integers(-1, 50)))),
        "top_p": draw(optional(floats(st.floats(0.01, 1.0)))),
        "alg_temp": draw(floats(st.sampled_from([0.0, 0.3]))),
        "eps": draw(floats(st.sampled_from([1e-3, 0.5]))),
        "cfg_scale": draw(floats(st.sampled_from([0.0, 1.0]))),
        "logits_eos_inf": draw(flags(False)),
        "confidence_eos_eot_inf": draw(flags(False)),
        "early_stop": draw(flags(True)),
        "seed": draw(ints(st.integers(0, 2**40))),
        "cache": draw(mostly(st.sampled_from((None,) + CACHE_MODES), st.sampled_from(["full", 0]))),
    }
    facts = {
        "mask_id": draw(ints(st.integers(-1, 100))),
        "eos_id": draw(optional(ints(st.integers(-1, 100)))),
        "eot_id": draw(optional(ints(st.integers(-1, 100)))),
        "shift_logits": draw(flags(False)),
    }
    drop = draw(st.sets(st.sampled_from(sorted(fields) + ["eos_id", "eot_id", "shift_logits"]), max_size=6))
    return ({k: v for k, v in fields.items() if k not in drop},
            {k: v for k, v in facts.items() if k not in drop})


def canvas_end(prompt_length: int, cfg: GenerationConfig) -> int:
    """Where the canvas ends: after gen_length, or for SDAR where the block holding that position ends."""
    end = prompt_length + cfg.gen_length
    if cfg.uses_sdar_schedule:
        block = cfg.resolved_block_length
        end = -(-end // block) * block
    return end


class TestConfigFuzz:
    @settings(FUZZ, max_examples=400)
    @given(case=config_fields())
    # The audit's finds, always run: each passed validate() and then failed in the core or in
    # to_params with another exception type (TypeError, OverflowError, ValueError).
    @example(case=({"top_k": 2**63}, {"mask_id": 31}))
    @example(case=({"seed": 2**64}, {"mask_id": 31}))
    @example(case=({"temperature": 10**400}, {"mask_id": 31}))
    @example(case=({"temperature": 1e-300}, {"mask_id": 31}))
    @example(case=({"cfg_scale": float("inf")}, {"mask_id": 31}))
    @example(case=({"gen_length": 2**62, "block_length": 2**62}, {"mask_id": 31}))
    @example(case=({}, {"mask_id": 2**64}))
    def test_validate_is_the_only_gate(self, case):
        fields, fact_fields = case
        try:
            facts = ModelFacts(**fact_fields)
            cfg = GenerationConfig(**fields).validate(facts)
        except ConfigError:
            return
        prompt = np.array([0 if facts.mask_id != 0 else 1], np.int64)
        decoder = make_decoder(cfg, facts, prompt)  # no exception of any type
        assert decoder.length == canvas_end(1, cfg) and not decoder.done


V = 24
CORRUPTIONS = ("none", "nan", "posinf", "neginf", "row_neginf", "huge", "batch", "length", "vocab0", "ndim",
               "float64", "int32", "list", "none_value", "ragged", "fp16")


@st.composite
def decode_cases(draw):
    gen_length = draw(st.sampled_from([4, 8, 16]))
    block_length = draw(st.sampled_from([b for b in (2, 4, 8, 16) if gen_length % b == 0]))
    algorithm = draw(st.sampled_from(ALGORITHMS))
    rule = {}
    if algorithm in ("low_confidence", "maskgit_plus", "topk_margin"):
        rule = draw(st.sampled_from([{}, {"threshold": 0.5}, {"factor": 1.0}]))
    mask_id = draw(st.sampled_from([V - 1, 0, V]))  # V: a mask id the model never scores
    eos_id = draw(st.sampled_from([None, 2, V - 1]))
    facts = ModelFacts(mask_id=mask_id, eos_id=eos_id, shift_logits=draw(st.booleans()))
    cfg = GenerationConfig(
        gen_length=gen_length, block_length=block_length, steps=gen_length, algorithm=algorithm,
        temperature=draw(st.sampled_from([0.0, 0.9])), top_k=draw(st.sampled_from([None, 3])),
        top_p=draw(st.sampled_from([None, 0.7])), alg_temp=draw(st.sampled_from([0.0, 0.5])),
        cfg_scale=draw(st.sampled_from([0.0, 0.5])),
        logits_eos_inf=eos_id is not None and draw(st.booleans()), seed=draw(st.integers(0, 9)), **rule,
    )
    # Which forward call goes wrong, and how; the rest are ordinary random logits.
    plan = draw(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(CORRUPTIONS)), max_size=3))
    return cfg, facts, dict(plan), draw(st.integers(0, 2**16)), draw(st.floats(0.0, 0.5))


def fp16_overflow(logits):
    with np.errstate(over="ignore"):  # the point: large values become inf in float16
        return (logits * 1e4).astype(np.float16)


def broken_forward(plan, seed, rate):
    rng = np.random.default_rng(seed)
    calls = [0]

    def forward(ids):
        kind = plan.get(calls[0], "none")
        calls[0] += 1
        batch, length = ids.shape
        logits = (rng.standard_normal((batch, length, V)) * 4).astype(np.float32)
        hit = rng.random(logits.shape) < rate
        if kind in ("nan", "posinf", "neginf", "huge"):
            logits[hit] = {"nan": np.nan, "posinf": np.inf, "neginf": -np.inf, "huge": 3e38}[kind]
        return {
            "row_neginf": lambda: np.where(hit.any(axis=2, keepdims=True), -np.inf, logits).astype(np.float32),
            "batch": lambda: logits[:1] if batch == 2 else np.concatenate([logits, logits]),
            "length": lambda: logits[:, :-1],
            "vocab0": lambda: logits[:, :, :0],
            "ndim": lambda: logits[0],
            "float64": lambda: logits.astype(np.float64),
            "int32": lambda: logits.astype(np.int32),
            "list": lambda: logits.tolist(),
            "none_value": lambda: None,
            "ragged": lambda: [[[0.0] * V], [[0.0] * (V - 1)]],
            "fp16": lambda: fp16_overflow(logits),
        }.get(kind, lambda: logits)()

    return forward


class TestDecodeFuzz:
    @settings(FUZZ, max_examples=250)
    @given(case=decode_cases())
    def test_valid_result_or_typed_error(self, case):
        cfg, facts, plan, seed, rate = case
        prompt = np.array([1, 3, 5], np.int64)
        try:
            result = unmask.decode(broken_forward(plan, seed, rate), prompt, cfg, facts=facts)
        except UnmaskError:
            return
        generated = result.generated
        assert generated.shape == (canvas_end(3, cfg) - 3,)
        assert ((generated >= 0) & (generated < V) & (generated != facts.mask_id)).all(), generated
        np.testing.assert_array_equal(result.ids[:3], prompt)
