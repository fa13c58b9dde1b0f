"""The C++ loop against the numpy reference samplers, token for token at temperature 0."""

from __future__ import annotations

import numpy as np
import pytest

import unmask
from unmask import GenerationConfig, ModelFacts
from samplers_numpy import FakeModel, dream_generate, dream_timesteps, llada_generate

MASK, EOS, EOT, V = 39, 2, 3, 40
PROMPT = np.array([5, 9, 11, 4, 7], dtype=np.int64)
LLADA = ModelFacts(mask_id=MASK, eos_id=EOS, eot_id=EOT)
DREAM = ModelFacts(mask_id=MASK, shift_logits=True)


def llada_config(**kw):
    base = dict(gen_length=24, block_length=8, steps=24, algorithm="low_confidence", early_stop=False)
    base.update(kw)
    return GenerationConfig(**base)


def run_both_llada(model_kw, cfg, template=None):
    ref = llada_generate(FakeModel(**model_kw), PROMPT, steps=cfg.resolved_steps, gen_length=cfg.gen_length,
                         block_length=cfg.resolved_block_length, mask_id=MASK, cfg_scale=cfg.cfg_scale,
                         eos_id=EOS, eot_id=EOT, logits_eos_inf=cfg.logits_eos_inf,
                         confidence_eos_eot_inf=cfg.confidence_eos_eot_inf, threshold=cfg.threshold,
                         factor=cfg.factor, early_stop=cfg.early_stop, template=template)
    model = FakeModel(**model_kw)
    out = unmask.decode(model, PROMPT, cfg, template=template, facts=LLADA)
    return ref, out


LLADA_CASES = {
    "blocks": dict(),
    "one_block": dict(block_length=None, steps=12),
    "few_steps": dict(steps=6),
    "more_steps_than_masks": dict(block_length=4, steps=48),
    "threshold": dict(threshold=0.5),
    "threshold_few_steps": dict(threshold=0.9, steps=6),
    "factor": dict(factor=1.0),
    "factor_one_block": dict(factor=2.0, block_length=None),
    "cfg": dict(cfg_scale=1.5),
    "logits_eos_inf": dict(logits_eos_inf=True),
    "confidence_eos_eot_inf": dict(confidence_eos_eot_inf=True),
    "both_eos_flags": dict(logits_eos_inf=True, confidence_eos_eot_inf=True),
    "early_stop": dict(early_stop=True),
    "early_stop_threshold": dict(early_stop=True, threshold=0.7),
}


class TestLladaReference:
    @pytest.mark.parametrize("case", sorted(LLADA_CASES))
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_matches_numpy(self, case, seed):
        cfg = llada_config(**LLADA_CASES[case])
        model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=2.0, mask_bias=1.0)
        ref, out = run_both_llada(model_kw, cfg)
        np.testing.assert_array_equal(out.ids, ref)
        assert out.stats.nfe <= cfg.resolved_steps

    def test_early_stop_fills_eos_and_saves_forwards(self):
        model_kw = dict(vocab=V, mask_id=MASK, seed=3, eos_id=EOS, eos_bias=6.0)
        cfg = llada_config(early_stop=True)
        ref, out = run_both_llada(model_kw, cfg)
        np.testing.assert_array_equal(out.ids, ref)
        assert out.stats.filled > 0 and out.stats.nfe < cfg.resolved_steps
        gen = out.generated
        first_block_with_eos = min(b for b in range(3) if (gen[b * 8 : (b + 1) * 8] == EOS).any())
        assert (gen[(first_block_with_eos + 1) * 8 :] == EOS).all()

    @pytest.mark.parametrize("early_stop", [False, True])
    def test_fixed_tokens(self, early_stop):
        template = np.full(24, MASK, dtype=np.int64)
        template[[0, 5, 6, 13, 23]] = [20, 21, 22, 23, 24]  # a skeleton: pinned tokens, holes between
        template[16:20] = [25, 26, 27, 28]
        cfg = llada_config(early_stop=early_stop)
        model_kw = dict(vocab=V, mask_id=MASK, seed=4, eos_id=EOS, eos_bias=3.0)
        ref, out = run_both_llada(model_kw, cfg, template=template)
        np.testing.assert_array_equal(out.ids, ref)
        pinned = template != MASK
        np.testing.assert_array_equal(out.generated[pinned], template[pinned])
        assert (out.generated != MASK).all()

    def test_float16_logits(self):
        model = FakeModel(vocab=V, mask_id=MASK, seed=5)
        model.table = model.table.astype(np.float16).astype(np.float32)  # same values in both dtypes
        cfg = llada_config()
        ref = llada_generate(model, PROMPT, steps=24, gen_length=24, block_length=8, mask_id=MASK, early_stop=False)
        model.dtype = np.float16
        out = unmask.decode(model, PROMPT, cfg, facts=LLADA)
        np.testing.assert_array_equal(out.ids, ref)


DREAM_CASES = {
    "maskgit_plus": dict(),
    "topk_margin": dict(algorithm="topk_margin"),
    "entropy": dict(algorithm="entropy"),
    "few_steps": dict(steps=5),
    "top_p": dict(top_p=0.6),
    "top_k": dict(top_k=3, algorithm="topk_margin"),
    "top_p_top_k_entropy": dict(top_p=0.8, top_k=4, algorithm="entropy"),
    "blocks": dict(block_length=8, steps=12),
    "threshold": dict(threshold=0.4),
    "factor": dict(factor=1.5, algorithm="topk_margin"),
    "cfg": dict(cfg_scale=0.5),
    "no_shift": dict(),  # with ModelFacts(shift_logits=False), below
    "early_stop_blocks": dict(block_length=8, steps=12, early_stop=True),
}


class TestDreamReference:
    @pytest.mark.parametrize("case", sorted(DREAM_CASES))
    @pytest.mark.parametrize("seed", [0, 1, 2])
    def test_matches_numpy(self, case, seed):
        kw = dict(gen_length=24, steps=24, algorithm="maskgit_plus", early_stop=False)
        kw.update(DREAM_CASES[case])
        cfg = GenerationConfig(**kw)
        facts = ModelFacts(mask_id=MASK, eos_id=EOS, shift_logits=case != "no_shift")
        model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=2.0)
        ref = dream_generate(FakeModel(**model_kw), PROMPT, steps=cfg.resolved_steps, gen_length=cfg.gen_length,
                             mask_id=MASK, alg=cfg.algorithm, eps=cfg.eps, block_length=cfg.block_length,
                             top_p=cfg.top_p, top_k=cfg.top_k, shift_logits=facts.shift_logits,
                             cfg_scale=cfg.cfg_scale, eos_id=EOS, threshold=cfg.threshold, factor=cfg.factor,
                             early_stop=cfg.early_stop)
        out = unmask.decode(FakeModel(**model_kw), PROMPT, cfg, facts=facts)
        np.testing.assert_array_equal(out.ids, ref)
        assert out.stats.nfe <= cfg.resolved_steps

    def test_zero_commit_steps_cost_no_forward(self):
        # Dream's float32 schedule commits nothing at step 0 when masks == steps; the reference
        # runs that forward anyway, the C++ loop skips it (same tokens, one forward less).
        cfg = GenerationConfig(gen_length=16, steps=16, algorithm="maskgit_plus")
        out = unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, cfg, facts=DREAM)
        assert out.stats.nfe < 16
        assert out.stats.committed == 16

    def test_timesteps_are_float32_linspace(self):
        for steps in (1, 2, 5, 8, 64, 128, 255, 512):
            np.testing.assert_array_equal(unmask._core.dream_timesteps(steps, 1e-3), dream_timesteps(steps, 1e-3))

    def test_timesteps_match_torch(self):
        torch = pytest.importorskip("torch")
        for steps in range(1, 300):
            want = torch.linspace(1, 1e-3, steps + 1, dtype=torch.float32).numpy()
            np.testing.assert_array_equal(unmask._core.dream_timesteps(steps, 1e-3), want)

    def test_origin_commits_argmax_of_current_logits(self):
        cfg = GenerationConfig(gen_length=24, steps=12, algorithm="origin", seed=7)
        model = FakeModel(vocab=V, mask_id=MASK, seed=1)
        seen = []

        def forward(ids):
            logits = model(ids)
            seen.append(np.concatenate([logits[:, :1], logits[:, :-1]], axis=1)[0].copy())
            return logits

        events = []
        out = unmask.decode(forward, PROMPT, cfg, on_step=events.append, facts=DREAM)
        for logits, ev in zip(seen, events):
            masked = logits.copy()
            masked[:, MASK] = -np.inf
            np.testing.assert_array_equal(ev.tokens, np.argmax(masked[ev.positions], axis=-1))
        assert (out.generated != MASK).all() and out.stats.nfe <= 12
