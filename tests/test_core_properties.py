"""Invariants of the C++ loop over random settings (hypothesis), and sampling frequencies at T > 0."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import unmask
from unmask import GenerationConfig, ModelFacts, _core
from samplers_numpy import FakeModel, softmax_t

MASK, EOS, V = 31, 2, 32
PROMPT = np.array([5, 9, 4], dtype=np.int64)


@st.composite
def configs(draw):
    gen_length = draw(st.sampled_from([8, 12, 16]))
    block_length = draw(st.sampled_from([b for b in (4, 8, gen_length) if gen_length % b == 0]))
    blocks = gen_length // block_length
    steps = blocks * draw(st.integers(1, block_length + 2))
    algorithm = draw(st.sampled_from(["low_confidence", "random", "origin", "maskgit_plus", "topk_margin", "entropy"]))
    rule = draw(st.sampled_from([None, "threshold", "factor"]))
    kw = {}
    if rule and algorithm in ("low_confidence", "maskgit_plus", "topk_margin"):
        kw[rule] = draw(st.sampled_from([0.3, 0.9])) if rule == "threshold" else draw(st.sampled_from([0.5, 2.0]))
    return GenerationConfig(
        gen_length=gen_length, block_length=block_length, steps=steps, algorithm=algorithm,
        temperature=draw(st.sampled_from([0.0, 0.7])), alg_temp=draw(st.sampled_from([0.0, 0.5])),
        top_k=draw(st.sampled_from([None, 5])), cfg_scale=draw(st.sampled_from([0.0, 1.0])),
        early_stop=draw(st.booleans()), seed=draw(st.integers(0, 2**32)), **kw,
    )


def run(cfg, model_seed, threads=1):
    model = FakeModel(vocab=V, mask_id=MASK, seed=model_seed, eos_id=EOS, eos_bias=1.5, mask_bias=2.0)
    events = []
    facts = ModelFacts(mask_id=MASK, eos_id=EOS, shift_logits=not cfg.uses_block_schedule)  # Dream shifts
    result = unmask.decode(model, PROMPT, cfg, on_step=events.append, facts=facts, threads=threads)
    return result, events


class TestLoopProperties:
    @settings(max_examples=60, deadline=None)
    @given(cfg=configs(), model_seed=st.integers(0, 5))
    def test_each_step_commits_in_block_and_stops_in_budget(self, cfg, model_seed):
        result, events = run(cfg, model_seed)
        P, bl = len(PROMPT), cfg.resolved_block_length
        assert result.stats.nfe == len(events) <= cfg.resolved_steps
        seen = set()
        for ev in events:
            model_positions = ev.positions[: len(ev.positions) - ev.filled]
            assert len(model_positions) >= 1
            assert ((model_positions >= P + ev.block * bl) & (model_positions < P + (ev.block + 1) * bl)).all()
            assert not seen.intersection(model_positions.tolist())  # each was still masked
            seen.update(ev.positions.tolist())
            assert (ev.tokens != MASK).all()
        assert (result.generated != MASK).all()
        assert events[-1].done

    @settings(max_examples=25, deadline=None)
    @given(cfg=configs(), model_seed=st.integers(0, 5))
    def test_same_seed_same_tokens_any_thread_count(self, cfg, model_seed):
        a, _ = run(cfg, model_seed, threads=1)
        b, _ = run(cfg, model_seed, threads=1)
        c, _ = run(cfg, model_seed, threads=3)
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.ids, c.ids)


def score_many(algorithm, logits_row, temperature, draws, **kw):
    params = _core.DecodeParams()
    params.algorithm = algorithm
    params.temperature = temperature
    params.mask_id = 10**6  # outside the vocabulary: nothing banned
    params.seed = 11
    for name, value in kw.items():
        setattr(params, name, value)
    logits = np.repeat(logits_row[None, :], draws, axis=0)  # row r is keyed as position r
    tokens, _ = _core.score(params, logits, step=3, threads=2)
    return np.bincount(tokens, minlength=len(logits_row)) / draws


class TestSamplingFrequencies:
    """20,000 draws: frequencies within 0.015 (>= 4 standard deviations) of the target distribution."""

    DRAWS, TOL = 20_000, 0.015
    ROW = np.array([1.0, 0.2, -0.5, 2.0, 0.0, 1.5, -1.0, 0.7], dtype=np.float32)

    def test_llada_gumbel_max(self):
        for t in (0.5, 1.0, 2.0):
            freq = score_many(_core.Algorithm.LOW_CONFIDENCE, self.ROW, t, self.DRAWS)
            np.testing.assert_allclose(freq, softmax_t(self.ROW, t), atol=self.TOL)

    def test_dream_categorical(self):
        for t in (0.5, 1.0):
            freq = score_many(_core.Algorithm.MASKGIT_PLUS, self.ROW, t, self.DRAWS)
            np.testing.assert_allclose(freq, softmax_t(self.ROW, t), atol=self.TOL)

    def test_dream_top_k_top_p(self):
        want = softmax_t(self.ROW, 1.0)
        keep = np.argsort(-self.ROW)[:3]
        filtered = np.zeros_like(want)
        filtered[keep] = want[keep] / want[keep].sum()
        freq = score_many(_core.Algorithm.ENTROPY, self.ROW, 1.0, self.DRAWS, top_k=3)
        np.testing.assert_allclose(freq, filtered, atol=self.TOL)
        freq = score_many(_core.Algorithm.MASKGIT_PLUS, self.ROW, 1.0, self.DRAWS, top_p=0.65)
        np.testing.assert_allclose(freq, filtered, atol=self.TOL)  # masses .373 .226 .137 ...: mass before the 4th is .736 > .65

    def test_float16_matches_float32(self):
        row = self.ROW.astype(np.float16)
        a = score_many(_core.Algorithm.MASKGIT_PLUS, row.astype(np.float32), 1.0, 2000)
        b = score_many(_core.Algorithm.MASKGIT_PLUS, row, 1.0, 2000)
        np.testing.assert_array_equal(a, b)
