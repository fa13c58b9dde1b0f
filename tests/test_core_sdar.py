"""SDAR's block-diffusion sampler in the C++ core against the numpy reference (tests/sdar_numpy.py).

Token for token at temperature 0 for each strategy, with cache "none" (whole canvas per
forward) and cache "block" (a fake block-causal forward that keeps its own cache and asserts
every window it is given); the sampling distribution at temperature > 0; entropy_bounded's
rule on logits built for it.
"""

from __future__ import annotations

import numpy as np
import pytest

import unmask
from unmask import ConfigError, GenerationConfig, ModelFacts
from unmask.decoding import make_decoder, to_params
from samplers_numpy import softmax64
from sdar_numpy import BlockCausalFake, CachedForward, entropies, sdar_generate

MASK, EOS, EOT, V = 39, 2, 3, 40
STRATEGIES = ("sequential", "low_confidence_static", "low_confidence_dynamic", "entropy_bounded")


def facts(block):
    return ModelFacts(mask_id=MASK, eos_id=EOS, eot_id=EOT, block_size=block)


def run_both(prompt, cfg, model_kw, *, cache):
    block = cfg.block_length
    per_block = cfg.resolved_steps // (cfg.gen_length // block)
    ref = sdar_generate(BlockCausalFake(block, **model_kw), prompt, gen_length=cfg.gen_length, block_length=block,
                        steps=per_block, mask_id=MASK, strategy=cfg.algorithm, threshold=cfg.resolved_threshold,
                        stop_ids=[EOS, EOT] if cfg.early_stop else None)
    model = BlockCausalFake(block, **model_kw)
    forward = CachedForward(model, MASK) if cache == "block" else model
    out = unmask.decode(forward, prompt, cfg.replace(cache=cache), facts=facts(block))
    return ref, out, forward


def assert_same_tokens(out_ids, ref, prompt_length):
    """Equal where the reference decoded; where it stopped (masks left), early stop wrote EOS."""
    assert len(out_ids) == len(ref)
    stopped = ref == MASK
    np.testing.assert_array_equal(out_ids[~stopped], ref[~stopped])
    assert (out_ids[stopped] == EOS).all() and not stopped[:prompt_length].any()


CASES = {
    "one_per_step": dict(),
    "tail_in_first_block": dict(prompt=7),
    "prompt_fills_blocks": dict(prompt=8),
    "short_prompt": dict(prompt=2),
    "block8_three_steps": dict(block_length=8, steps=9, prompt=5),  # 3 per block: counts 3, 3, 2
    "block8_two_steps": dict(block_length=8, steps=6, prompt=11),
    "low_threshold": dict(threshold={"low_confidence_dynamic": 0.2, "entropy_bounded": 2.5}),
    "early_stop": dict(early_stop=True, eos_bias=3.0),
}


def case_config(strategy, case):
    kw = dict(CASES[case])
    prompt_length = kw.pop("prompt", 6)
    eos_bias = kw.pop("eos_bias", 0.5)
    threshold = kw.pop("threshold", {}).get(strategy)
    cfg = GenerationConfig(gen_length=24, block_length=kw.pop("block_length", 4), algorithm=strategy,
                           early_stop=kw.pop("early_stop", False), threshold=threshold, **kw)
    prompt = (np.arange(prompt_length, dtype=np.int64) * 7 + 5) % 30 + 4
    return cfg, prompt, eos_bias


class TestReference:
    @pytest.mark.parametrize("cache", ["none", "block"])
    @pytest.mark.parametrize("case", sorted(CASES))
    @pytest.mark.parametrize("strategy", STRATEGIES)
    @pytest.mark.parametrize("seed", [0, 1])
    def test_matches_numpy(self, strategy, case, cache, seed):
        cfg, prompt, eos_bias = case_config(strategy, case)
        model_kw = dict(vocab=V, mask_id=MASK, seed=seed, eos_id=EOS, eos_bias=eos_bias, scale=1.5)
        ref, out, _ = run_both(prompt, cfg, model_kw, cache=cache)
        assert_same_tokens(out.ids, ref, len(prompt))
        assert out.prompt_length == len(prompt)
        # the canvas ends on a block boundary: gen_length rounded up (absolute blocks)
        assert len(out.ids) == -(-(len(prompt) + cfg.gen_length) // cfg.block_length) * cfg.block_length

    def test_eot_stops_like_eos(self):
        cfg = GenerationConfig(gen_length=24, block_length=4, algorithm="low_confidence_static")
        model_kw = dict(vocab=V, mask_id=MASK, seed=3, eos_id=EOT, eos_bias=3.0)  # EoT likely, EOS not
        ref, out, _ = run_both(np.array([5, 6, 7, 8, 9], dtype=np.int64), cfg, model_kw, cache="block")
        assert (ref == MASK).any(), "the reference stopped on <|im_end|>"
        assert_same_tokens(out.ids, ref, 5)
        assert out.stats.filled > 0

    def test_dynamic_commits_more_than_scheduled(self):
        cfg, prompt, _ = case_config("low_confidence_dynamic", "low_threshold")
        _, out, _ = run_both(prompt, cfg, dict(vocab=V, mask_id=MASK, seed=0, scale=4.0), cache="block")
        denoise = out.stats.nfe
        assert out.stats.committed / denoise > 1.0  # a 0.2 threshold passes several positions per step


class TestBlockCache:
    @pytest.mark.parametrize("prompt_length", [2, 4, 6, 9])
    def test_windows(self, prompt_length):
        cfg = GenerationConfig(gen_length=16, block_length=4, algorithm="sequential", cache="block", early_stop=False)
        prompt = np.arange(prompt_length, dtype=np.int64) + 4
        forward = CachedForward(BlockCausalFake(4, vocab=V, mask_id=MASK), MASK)
        out = unmask.decode(forward, prompt, cfg, facts=facts(4))
        kinds = [k for k, *_ in forward.log]
        first = prompt_length // 4 * 4
        assert kinds.count("prefill") == (1 if first else 0) and kinds[0] == ("prefill" if first else "denoise")
        decoded = list(range(first, len(out.ids), 4))
        # each decoded block but the last is stored exactly once, after its last denoise step
        stores = [s for k, s, *_ in forward.log if k == "store"]
        assert stores == decoded[:-1]
        assert "refresh" not in kinds and "window" not in kinds and "full" not in kinds
        denoise_starts = sorted({s for k, s, *_ in forward.log if k == "denoise"})
        assert denoise_starts == decoded
        # one token per forward: steps = gen_length; the first block holds the prompt tail
        assert kinds.count("denoise") == len(out.ids) - prompt_length

    def test_matches_cache_none_with_cfg_and_template(self):
        template = np.full(20, MASK, dtype=np.int64)
        template[[3, 9]] = [20, 21]
        cfg = GenerationConfig(gen_length=20, block_length=4, algorithm="low_confidence_static", cfg_scale=0.5)
        prompt = np.array([4, 5, 6, 7, 8, 9], dtype=np.int64)
        runs = {}
        for cache in ("none", "block"):
            model = BlockCausalFake(4, vocab=V, mask_id=MASK, seed=2)
            forward = CachedForward(model, MASK) if cache == "block" else model
            runs[cache] = unmask.decode(forward, prompt, cfg.replace(cache=cache), facts=facts(4), template=template)
        np.testing.assert_array_equal(runs["block"].ids, runs["none"].ids)
        np.testing.assert_array_equal(runs["block"].ids[[9, 15]], [20, 21])

    def test_infill_starts_at_the_block_of_the_first_hole(self):
        prompt = np.array([4, 5, 6, 7, 8, MASK, 10, 11, 12, 13], dtype=np.int64)  # a hole in block 1
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="low_confidence_static", early_stop=False)
        runs = {}
        for cache in ("none", "block"):
            model = BlockCausalFake(4, vocab=V, mask_id=MASK, seed=4)
            forward = CachedForward(model, MASK) if cache == "block" else model
            runs[cache] = (unmask.decode(forward, prompt, cfg.replace(cache=cache), facts=facts(4), infill=True),
                           forward)
        np.testing.assert_array_equal(runs["block"][0].ids, runs["none"][0].ids)
        assert (runs["block"][0].ids != MASK).all()
        assert runs["block"][1].log[0] == ("prefill", 0, 4, 0)  # block 0 only: block 1 holds the hole

    def test_request_kinds_and_max_window(self):
        cfg = GenerationConfig(gen_length=8, block_length=4, algorithm="sequential", cache="block")
        d = make_decoder(cfg, facts(4), np.arange(10, dtype=np.int64) + 4)
        assert d.length == 20 and d.max_window == 8  # canvas 10 + 8 -> 20; the prefill is the widest
        r = d.next_request()
        assert (r.kind.name, r.window_start, r.window_end, r.past_length, r.stores_cache) == ("PREFILL", 0, 8, 0, True)
        ev = d.advance(np.zeros((1, 0, V), np.float32))
        assert len(ev.positions) == 0 and not ev.done
        r = d.next_request()
        assert (r.kind.name, r.window_start, r.window_end, r.past_length) == ("DENOISE", 8, 12, 8)
        np.testing.assert_array_equal(r.logits_index, [2, 3])  # positions 10, 11: the prompt tail is 8, 9


def filtered_probs(row, temperature, top_k, top_p):
    """SDAR's sampling distribution: logits / T, then top-k, then top-p (mass before a token > p drops it)."""
    x = row.astype(np.float64) / temperature
    x[MASK] = -np.inf
    if top_k:
        kth = np.sort(x)[::-1][top_k - 1]
        x[x < kth] = -np.inf
    if top_p is not None and top_p < 1:
        order = np.lexsort((np.arange(len(x)), -x))
        cum = np.cumsum(softmax64(x[order]))
        drop = np.zeros(len(x), dtype=bool)
        drop[1:] = cum[:-1] > top_p
        x[order[drop]] = -np.inf
    return softmax64(x)


class TestSampling:
    """Temperature > 0: unmask's counter-based RNG is not torch's, so draws are not the reference's
    tokens; what must be identical is each position's distribution. Checked three ways: a drawn
    token's confidence is exactly its probability under SDAR's filtered distribution, every draw
    lies in that distribution's support, and 20000 draws match its probabilities (chi-square)."""

    @pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.8),
                                                           (1.0, 6, 0.7)])
    def test_distribution(self, temperature, top_k, top_p):
        rng = np.random.default_rng(0)
        row = (rng.standard_normal(V) * 1.5).astype(np.float32)
        want = filtered_probs(row, temperature, top_k, top_p)
        n = 20000
        cfg = GenerationConfig(gen_length=4, block_length=4, algorithm="low_confidence_static",
                               temperature=temperature, top_k=top_k, top_p=top_p, seed=11)
        params = to_params(cfg.validate(), facts(4))
        tokens, conf = unmask._core.score(params, np.tile(row, (n, 1)), step=3)
        assert (want[tokens] > 0).all()
        np.testing.assert_allclose(conf, want[tokens], rtol=1e-6)  # float32 exponentials
        counts = np.bincount(tokens, minlength=V)
        support = want > 0
        expected = want[support] * n
        chi2 = ((counts[support] - expected) ** 2 / expected).sum()
        assert chi2 < support.sum() * 3  # mean chi-square = degrees of freedom (support - 1)

    def test_greedy_ignores_filters(self):
        # the reference's T <= 0 path: argmax and the raw softmax, top-k/top-p not applied
        rng = np.random.default_rng(1)
        rows = (rng.standard_normal((6, V)) * 2).astype(np.float32)
        plain = GenerationConfig(gen_length=4, block_length=4, algorithm="low_confidence_static")
        filtered = plain.replace(top_k=2, top_p=0.5)
        a = unmask._core.score(to_params(plain, facts(4)), rows)
        b = unmask._core.score(to_params(filtered, facts(4)), rows)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        masked = rows.astype(np.float64)
        masked[:, MASK] = -np.inf
        np.testing.assert_allclose(a[1], softmax64(masked).max(axis=1), rtol=1e-6)


def row_with_entropy(top, spread):
    """A logits row: one token at `top` probability, the rest spread over `spread` tokens."""
    p = np.full(V, 1e-30)
    p[10] = top
    p[11 : 11 + spread] = (1 - top) / spread
    return np.log(p).astype(np.float32)


class TestEntropyBounded:
    """The rule on its own terms: per-position entropy over the vocabulary, positions committed in
    ascending entropy while the running sum stays below the budget, at least the step's count."""

    ROWS = [row_with_entropy(0.9, 20), row_with_entropy(0.9, 1), row_with_entropy(0.5, 2),
            row_with_entropy(0.99, 28), row_with_entropy(0.6, 1), row_with_entropy(0.3, 25),
            row_with_entropy(0.95, 3), row_with_entropy(0.8, 1)]

    def first_step(self, budget, steps=8):
        cfg = GenerationConfig(gen_length=8, block_length=8, steps=steps, algorithm="entropy_bounded",
                               threshold=budget)
        d = make_decoder(cfg, facts(8), np.arange(8, dtype=np.int64) + 4)
        rows = np.stack(self.ROWS)
        ev = d.advance(rows[None, d.next_request().logits_index - 8])  # cache none: rows of the canvas
        return ev.positions - 8

    def test_budget(self):
        probs = softmax64(np.stack(self.ROWS).astype(np.float64))
        ent = entropies(probs)
        order = np.argsort(ent, kind="stable")
        cum = np.cumsum(ent[order])
        for budget in (0.05, float(cum[1]) + 1e-4, float(cum[3]) - 1e-4, float(cum[4]) + 0.01, 100.0):  # float32 exps
            want = max(1, int(np.searchsorted(cum, budget, side="left")))
            np.testing.assert_array_equal(self.first_step(budget), np.sort(order[:want]))

    def test_entropy_is_over_the_vocabulary(self):
        # rows 0 and 1 have the same top probability (0.9); the spread tail makes row 0 less certain
        probs = softmax64(np.stack(self.ROWS).astype(np.float64))
        ent = entropies(probs)
        assert ent[0] > ent[1] + 0.2
        first = self.first_step(1e-6)
        assert list(first) == [int(np.argmin(ent))]

    def test_floor_is_the_schedule_count(self):
        assert len(self.first_step(1e-6, steps=2)) == 4  # 8 positions in 2 steps: 4 now, whatever the budget


class TestErrors:
    @pytest.mark.parametrize("settings, message", [
        (dict(block_length=8), "block_length 8 disagrees with this model's block size 4"),
        (dict(cache="prefix"), "cache 'prefix' refreshes keys/values"),
        (dict(cache="dual"), "cache 'dual' refreshes keys/values"),
        (dict(algorithm="low_confidence"), "does not fit a block-causal model"),
        (dict(steps=32), "more than block_length"),
        (dict(factor=1.0), "factor does not apply"),
        (dict(algorithm="sequential", threshold=0.5), "threshold does not apply"),
        (dict(threshold=1.5), "threshold must be in (0, 1]"),
        (dict(algorithm="entropy_bounded", threshold=-1.0), "must be a finite number > 0"),
        (dict(algorithm="entropy_bounded", threshold=float("inf")), "must be a finite number"),
    ])
    def test_one_line_errors(self, settings, message):
        base = dict(gen_length=16, algorithm="low_confidence_dynamic")
        base.update(settings)
        calls = []
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            unmask.decode(lambda ids: calls.append(ids), [4, 5, 6], GenerationConfig(**base), facts=facts(4))
        assert calls == []

    def test_block_cache_needs_block_causal_model(self):
        cfg = GenerationConfig(gen_length=16, block_length=4, algorithm="sequential", cache="block")
        with pytest.raises(ConfigError, match="only for block-causal models"):
            cfg.validate(ModelFacts(mask_id=MASK))
        with pytest.raises(ConfigError, match="SDAR's absolute blocks"):
            cfg.replace(algorithm="low_confidence").validate()
