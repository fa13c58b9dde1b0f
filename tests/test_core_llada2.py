"""LLaDA2's block sampler (algorithm llada2) in the C++ core against the numpy reference
(tests/llada2_numpy.py), token for token at temperature 0 on fake block-causal logits.

Many random cases (prompt ending mid-block or on a block end, one to three blocks, any steps per
block, thresholds from always to never reached, minimal_topk, top-k/top-p, EOS) with cache
"none" (whole canvas per forward) and "block" (a fake forward that keeps its own cache and
asserts each window); then each rule on a case built for it, the sampling distribution at
temperature > 0, and the refusals.
"""

from __future__ import annotations

import numpy as np
import pytest

import unmask
from unmask import ConfigError, GenerationConfig, ModelFacts
from unmask.cli.options import ineffective
from unmask.decoding import to_params
from llada2_numpy import block_schedule, filter_logits, llada2_generate
from samplers_numpy import softmax64
from sdar_numpy import BlockCausalFake, CachedForward

MASK, EOS, EOT, V = 39, 2, 3, 40


def facts(block):
    return ModelFacts(mask_id=MASK, eos_id=EOS, eot_id=EOT, block_size=block)


def reference(prompt, cfg, model_kw, *, eos_early_stop=False):
    """The numpy reference on the same fake model, with cfg's settings."""
    return llada2_generate(BlockCausalFake(cfg.block_length, **model_kw), prompt, gen_length=cfg.gen_length,
                           block_length=cfg.block_length, steps=cfg.resolved_steps // cfg.num_blocks, mask_id=MASK,
                           eos_id=EOS, threshold=cfg.resolved_threshold, minimal_topk=cfg.minimal_topk or 1,
                           eos_early_stop=eos_early_stop, top_k=cfg.top_k, top_p=cfg.top_p)


def core(prompt, cfg, model_kw, *, cache="block", **kw):
    """unmask.decode on the fake model; returns (result, the forward it was given)."""
    model = BlockCausalFake(cfg.block_length, **model_kw)
    forward = CachedForward(model, MASK) if cache == "block" else model
    return unmask.decode(forward, prompt, cfg.replace(cache=cache), facts=facts(cfg.block_length), **kw), forward


def assert_same(out, ref, prompt_length, early_stop):
    """Identical canvases; with early stop, identical up to the first generated EOS, and after it
    each position either decoded before the stop (the reference's token) or filled with EOS."""
    assert len(out.ids) == len(ref)
    eos = np.flatnonzero(ref[prompt_length:] == EOS)
    end = prompt_length + eos[0] + 1 if early_stop and len(eos) else len(ref)
    np.testing.assert_array_equal(out.ids[:end], ref[:end])
    assert ((out.ids[end:] == EOS) | (out.ids[end:] == ref[end:])).all()
    assert out.stats.filled <= len(ref) - end


def random_case(seed):
    """(config, prompt, fake model settings) drawn from the seed."""
    rng = np.random.default_rng(seed)
    block = int(rng.choice([4, 8]))
    gen_length = block * int(rng.integers(1, 4))
    top_k = [None, None, 3, 12][int(rng.integers(4))]
    top_p = [None, None, 0.5, 0.9][int(rng.integers(4))]
    cfg = GenerationConfig(
        gen_length=gen_length, block_length=block, algorithm="llada2",
        steps=int(rng.integers(1, block + 1)) * (gen_length // block),
        threshold=[None, 0.3, 0.6, 0.9, 0.999][int(rng.integers(5))],
        minimal_topk=[None, 1, 2, 3, gen_length][int(rng.integers(5))],
        top_k=top_k, top_p=top_p, early_stop=bool(rng.integers(2)))
    prompt = rng.integers(4, 36, size=int(rng.integers(1, 3 * block)))
    model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=float(rng.choice([0.0, 1.5, 3.0])),
                    scale=float(rng.choice([1.0, 2.5, 4.0])))
    return cfg, prompt, model_kw


@pytest.mark.parametrize("cache", ["none", "block"])
@pytest.mark.parametrize("seed", range(60))
def test_random_cases_match_numpy(seed, cache):
    cfg, prompt, model_kw = random_case(seed)
    out, _ = core(prompt, cfg, model_kw, cache=cache)
    assert_same(out, reference(prompt, cfg, model_kw), len(prompt), cfg.early_stop)
    assert out.prompt_length == len(prompt)


def test_random_cases_cover_the_rules():
    """The random cases above reach each rule they claim to test."""
    seen = set()
    for seed in range(60):
        cfg, prompt, model_kw = random_case(seed)
        out, _ = core(prompt, cfg, model_kw)
        per_block = cfg.resolved_steps // cfg.num_blocks
        seen.add("mid_block_prompt" if len(prompt) % cfg.block_length else "block_end_prompt")
        seen.add("eos_stop" if out.stats.filled else "no_stop")
        seen.add("filters" if cfg.top_k or cfg.top_p else "no_filters")
        if cfg.minimal_topk and cfg.gen_length // cfg.minimal_topk < per_block:
            seen.add("minimal_topk_caps")
    assert {"mid_block_prompt", "block_end_prompt", "eos_stop", "no_stop", "minimal_topk_caps", "filters",
            "no_filters"} <= seen


class TestRules:
    def test_prompt_tail_rides_in_the_first_block(self):
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="llada2", early_stop=False)
        prompt = np.array([5, 6, 7, 8, 9, 10, 11], dtype=np.int64)  # 7: block 1 holds 4, 5, 6 and one mask
        out, forward = core(prompt, cfg, dict(vocab=V, mask_id=MASK, seed=1))
        assert len(out.ids) == 16  # 7 + 8 = 15 rounded up to the block end
        assert forward.log[0] == ("prefill", 0, 4, 0) and forward.log[1] == ("denoise", 4, 8, 4)
        np.testing.assert_array_equal(out.ids, reference(prompt, cfg, dict(vocab=V, mask_id=MASK, seed=1)))

    def test_floor_is_the_schedule_when_no_position_passes(self):
        # threshold 0.999 on flat logits: nothing passes, so each step commits exactly its count
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=6, algorithm="llada2", threshold=0.999,
                               early_stop=False)
        events = []
        model_kw = dict(vocab=V, mask_id=MASK, seed=2, scale=1.0)
        out, _ = core(np.arange(8, dtype=np.int64) + 4, cfg, model_kw, on_step=events.append)
        counts = [len(e.positions) for e in events if len(e.positions)]
        assert block_schedule(8, 3) == [3, 3, 2]
        assert counts == [3, 3, 2, 3, 3, 2]
        np.testing.assert_array_equal(out.ids, reference(np.arange(8, dtype=np.int64) + 4, cfg, model_kw))

    def test_every_position_above_the_threshold_is_committed(self):
        cfg = GenerationConfig(gen_length=16, block_length=8, algorithm="llada2", threshold=0.3, early_stop=False)
        model_kw = dict(vocab=V, mask_id=MASK, seed=3, scale=4.0)
        prompt = np.arange(8, dtype=np.int64) + 4
        out, _ = core(prompt, cfg, model_kw)
        np.testing.assert_array_equal(out.ids, reference(prompt, cfg, model_kw))
        assert out.stats.committed / (out.stats.nfe - 2) > 1.5  # minus the prefill and one store

    def test_minimal_topk_caps_the_steps_per_block(self):
        cfg = GenerationConfig(gen_length=8, block_length=8, algorithm="llada2", threshold=0.999, early_stop=False)
        model_kw = dict(vocab=V, mask_id=MASK, seed=4, scale=1.0)
        prompt = np.arange(8, dtype=np.int64) + 4
        plain, _ = core(prompt, cfg, model_kw)
        capped, _ = core(prompt, cfg.replace(minimal_topk=3), model_kw)
        # the prefill, then 8 steps of one; capped: 8 // 3 = 2 steps of 4 (the cap reads gen_length)
        assert plain.stats.nfe == 1 + 8 and capped.stats.nfe == 1 + 2
        np.testing.assert_array_equal(capped.ids, reference(prompt, cfg.replace(minimal_topk=3), model_kw))
        assert steps_of_first_block(cfg.replace(gen_length=16, steps=16, minimal_topk=3)) == 5  # 16 // 3 caps 8

    def test_eos_stops_mid_block(self):
        """The stop comes once the first EOS has no mask before it, before the block's steps run out."""
        cfg = GenerationConfig(gen_length=24, block_length=8, algorithm="llada2", threshold=0.999)
        stopped_early = 0
        for seed in range(12):
            model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=2.5, scale=1.0)
            prompt = np.arange(5, dtype=np.int64) + 4
            events = []
            out, _ = core(prompt, cfg, model_kw, on_step=events.append)
            full = reference(prompt, cfg, model_kw)
            assert_same(out, full, 5, True)
            eos = 5 + int(np.flatnonzero(full[5:] == EOS)[0])
            filled = events[-1].positions[len(events[-1].positions) - events[-1].filled :]
            stopped_early += bool(len(filled) and filled.min() < (eos // 8 + 1) * 8)  # holes of its own block
        assert stopped_early >= 3

    def test_agrees_with_the_reference_eos_early_stop_when_it_leaves_no_hole(self):
        """dllm's eos_early_stop ends a block as soon as it holds EOS; where no mask is left before that
        EOS, the text is unmask's. Where one is, the reference keeps <|mask|> there (docs/models.md)."""
        cfg = GenerationConfig(gen_length=16, block_length=8, algorithm="llada2", threshold=0.999)
        agree = holes = 0
        for seed in range(16):
            model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=2.5, scale=1.0)
            prompt = np.arange(6, dtype=np.int64) + 4
            ref = reference(prompt, cfg, model_kw, eos_early_stop=True)
            eos = np.flatnonzero(ref[6:] == EOS)
            if not len(eos):
                continue
            end = 6 + eos[0] + 1
            if (ref[6:end] == MASK).any():
                holes += 1
                continue
            out, _ = core(prompt, cfg, model_kw)
            np.testing.assert_array_equal(out.ids[:end], ref[:end])
            agree += 1
        assert agree >= 3 and holes >= 1

    def test_eos_in_the_prompt_tail_does_not_stop(self):
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="llada2", threshold=0.999)
        model_kw = dict(vocab=V, mask_id=MASK, seed=5, eos_id=EOS, eos_bias=-20.0)  # EOS never generated
        prompt = np.array([4, 5, 6, 7, 8, EOS], dtype=np.int64)
        out, _ = core(prompt, cfg, model_kw)
        assert out.stats.filled == 0 and not (out.generated == EOS).any()
        np.testing.assert_array_equal(out.ids, reference(prompt, cfg, model_kw))
        # the reference's eos_early_stop sees the prompt's EOS in the block and leaves its masks
        assert (reference(prompt, cfg, model_kw, eos_early_stop=True)[6:8] == MASK).any()

    def test_end_of_turn_is_not_a_stop(self):
        cfg = GenerationConfig(gen_length=16, block_length=4, algorithm="llada2")
        model_kw = dict(vocab=V, mask_id=MASK, seed=6, eos_id=EOT, eos_bias=3.0)  # EoT likely, EOS not
        prompt = np.arange(5, dtype=np.int64) + 4
        out, _ = core(prompt, cfg, model_kw)
        ref = reference(prompt, cfg, model_kw)
        assert (ref[5:] == EOT).any() and not (ref[5:] == EOS).any()
        assert out.stats.filled == 0
        np.testing.assert_array_equal(out.ids, ref)

    def test_pinned_token_after_eos_keeps_decoding(self):
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="llada2", threshold=0.999)
        model_kw = dict(vocab=V, mask_id=MASK, seed=7, eos_id=EOS, eos_bias=4.0)
        template = np.full(8, MASK, dtype=np.int64)
        template[7] = 30
        out, _ = core(np.arange(4, dtype=np.int64) + 4, cfg, model_kw, template=template)
        free, _ = core(np.arange(4, dtype=np.int64) + 4, cfg.replace(early_stop=False), model_kw, template=template)
        assert (out.generated[:7] == EOS).any() and out.stats.filled == 0 and out.ids[11] == 30
        np.testing.assert_array_equal(out.ids, free.ids)


def steps_of_first_block(cfg):
    """Forward passes of one block when nothing passes the threshold: the decoder's steps per block."""
    model_kw = dict(vocab=V, mask_id=MASK, seed=8, scale=0.5)
    _, forward = core(np.arange(cfg.block_length, dtype=np.int64) + 4, cfg.replace(threshold=0.999), model_kw)
    return sum(1 for kind, start, *_ in forward.log if kind == "denoise" and start == cfg.block_length)


class TestSampling:
    def test_greedy_applies_the_filters(self):
        """At T = 0 the token is the filtered argmax and the confidence its renormalised probability
        (SDAR's greedy path ignores the filters; LLaDA2's does not)."""
        rows = (np.random.default_rng(9).standard_normal((6, V)) * 2).astype(np.float32)
        cfg = GenerationConfig(gen_length=4, block_length=4, algorithm="llada2", top_k=3, top_p=0.8)
        tokens, conf = unmask._core.score(to_params(cfg, facts(4)), rows)
        logits = rows.astype(np.float64)
        logits[:, MASK] = -np.inf
        want = softmax64(filter_logits(logits, 3, 0.8))
        np.testing.assert_array_equal(tokens, want.argmax(axis=1))
        np.testing.assert_allclose(conf, want.max(axis=1), rtol=1e-9)
        assert (conf > softmax64(logits).max(axis=1) + 1e-3).all()  # renormalised over what was kept

    @pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8)])
    def test_distribution(self, temperature, top_k, top_p):
        """T > 0: the same distribution as the reference (the draws are unmask's counter-based RNG)."""
        row = (np.random.default_rng(10).standard_normal(V) * 1.5).astype(np.float32)
        logits = row[None].astype(np.float64) / temperature
        logits[:, MASK] = -np.inf
        want = softmax64(filter_logits(logits, top_k, top_p))[0]
        n = 20000
        cfg = GenerationConfig(gen_length=4, block_length=4, algorithm="llada2", temperature=temperature,
                               top_k=top_k, top_p=top_p, seed=12)
        tokens, conf = unmask._core.score(to_params(cfg, facts(4)), np.tile(row, (n, 1)), step=2)
        assert (want[tokens] > 0).all()
        np.testing.assert_allclose(conf, want[tokens], rtol=1e-6)
        counts = np.bincount(tokens, minlength=V)
        support = want > 0
        chi2 = ((counts[support] - want[support] * n) ** 2 / (want[support] * n)).sum()
        assert chi2 < support.sum() * 3

    def test_seed_reproduces_a_sampled_generation(self):
        cfg = GenerationConfig(gen_length=16, block_length=4, algorithm="llada2", temperature=1.0, seed=5)
        model_kw = dict(vocab=V, mask_id=MASK, seed=11)
        prompt = np.arange(6, dtype=np.int64) + 4
        a, b = core(prompt, cfg, model_kw)[0], core(prompt, cfg, model_kw, cache="none")[0]
        c = core(prompt, cfg.replace(seed=6), model_kw)[0]
        np.testing.assert_array_equal(a.ids, b.ids)
        assert (a.ids != c.ids).any()


class TestErrors:
    @pytest.mark.parametrize("settings, message", [
        (dict(minimal_topk=0), "minimal_topk must be >= 1"),
        (dict(minimal_topk=17), "minimal_topk 17 exceeds gen_length 16"),
        (dict(minimal_topk=2, algorithm="low_confidence_dynamic"), "minimal_topk does not apply"),
        (dict(threshold=1.5), r"threshold must be in \(0, 1\]"),
        (dict(threshold=0.0), r"threshold must be in \(0, 1\]"),
        (dict(steps=32), "more than block_length"),
        (dict(factor=0.5), "factor does not apply"),
        (dict(block_length=8), "disagrees with this model's block size 4"),
        (dict(cache="dual"), "cache 'dual' refreshes"),
    ])
    def test_one_line_errors(self, settings, message):
        base = dict(gen_length=16, algorithm="llada2") | settings
        calls = []
        with pytest.raises(ConfigError, match=message) as info:
            unmask.decode(lambda ids: calls.append(ids), [4, 5, 6], GenerationConfig(**base), facts=facts(4))
        assert calls == [] and "\n" not in str(info.value)

    def test_core_asserts_what_it_is_given(self):
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="low_confidence_static")
        params = to_params(cfg, facts(4))
        params.minimal_topk = 2
        with pytest.raises(ConfigError, match="minimal_topk applies only to llada2"):
            unmask._core.Decoder(params, np.arange(4, dtype=np.int64) + 4, None, False)
        params = to_params(cfg.replace(algorithm="llada2"), facts(4))
        params.threshold = None
        with pytest.raises(ConfigError, match="need a threshold"):
            unmask._core.Decoder(params, np.arange(4, dtype=np.int64) + 4, None, False)

    def test_settings_it_does_not_read_are_noted(self):
        cfg = GenerationConfig(gen_length=8, algorithm="llada2")
        notes = ineffective(cfg, ["alg_temp", "eps", "confidence_eos_eot_inf", "top_k", "top_p"])
        assert len(notes) == 3 and all("llada2" in n for n in notes)

    def test_threshold_defaults_to_the_reference(self):
        cfg = GenerationConfig(gen_length=8, algorithm="llada2")
        assert cfg.resolved_threshold == 0.95
        assert to_params(cfg.replace(block_length=4), facts(4)).threshold == 0.95
