"""NaN and infinite logits get one rule on every scoring path (issue 35, item 3).

A row is unscorable, and the step raises, when a logit the sampler may pick is NaN or +inf,
or when every such logit is -inf; banned ids (the mask id) are never read. A single -inf is
an ordinary "never". The paths: LLaDA's block schedule (argmax, Gumbel, `random`), Dream's
timestep schedule without filters (fused row pass, chunked draw) and with top-k / top-p
(the scalar filter path), float32 and float16, with and without classifier-free guidance.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import unmask
from unmask import GenerationConfig, InputError, ModelFacts, _core

V, MASK, EOT = 24, 23, 7
ALGORITHMS = ("LOW_CONFIDENCE", "RANDOM", "ORIGIN", "MASKGIT_PLUS", "TOPK_MARGIN", "ENTROPY")
FILTERS = (None, "top_k", "top_p")
PATHS = list(itertools.product(ALGORITHMS, FILTERS, (0.0, 0.8)))


def params(algorithm, filt, temperature, cfg_scale=0.0):
    p = _core.DecodeParams()
    p.mask_id = MASK
    p.algorithm = getattr(_core.Algorithm, algorithm)
    p.temperature = temperature
    p.cfg_scale = cfg_scale
    if filt == "top_k":
        p.top_k = 4
    elif filt == "top_p":
        p.top_p = 0.9
    return p


def rows(*edits):
    """Four ordinary rows; edits (row, index, value) applied."""
    out = np.tile(np.linspace(-3.0, 3.0, V, dtype=np.float32), (4, 1))
    out += np.arange(4, dtype=np.float32)[:, None] * 0.01
    for r, i, value in edits:
        out[r, i] = value
    return out


def score(p, logits, dtype=np.float32):
    return _core.score(p, logits.astype(dtype), step=3, threads=1)


class TestOneRule:
    @pytest.mark.parametrize("algorithm,filt,temperature", PATHS)
    @pytest.mark.parametrize("value", [np.nan, np.inf])
    @pytest.mark.parametrize("dtype", [np.float32, np.float16])
    def test_nan_or_plus_inf_raises_on_every_path(self, algorithm, filt, temperature, value, dtype):
        with pytest.raises(InputError, match="NaN or infinite"):
            score(params(algorithm, filt, temperature), rows((2, 5, value)), dtype)

    @pytest.mark.parametrize("algorithm,filt,temperature", PATHS)
    def test_all_minus_inf_raises_on_every_path(self, algorithm, filt, temperature):
        logits = rows()
        logits[1, :] = -np.inf
        logits[1, MASK] = 5.0  # the banned mask id does not make the row scorable
        with pytest.raises(InputError, match="NaN or infinite"):
            score(params(algorithm, filt, temperature), logits)

    @pytest.mark.parametrize("algorithm,filt,temperature", PATHS)
    def test_single_minus_inf_is_an_ordinary_never(self, algorithm, filt, temperature):
        # Token 22 (the runner-up) at -inf: the row still scores, never picks it, and its
        # confidence is finite. Before the fix, Dream rows at T > 0 raised here.
        tokens, confidence = score(params(algorithm, filt, temperature), rows((2, 22, -np.inf)))
        assert np.isfinite(confidence).all()
        assert tokens[2] != 22 and ((tokens >= 0) & (tokens < V) & (tokens != MASK)).all()

    @pytest.mark.parametrize("algorithm,filt,temperature", PATHS)
    def test_values_at_the_mask_id_are_never_read(self, algorithm, filt, temperature):
        p = params(algorithm, filt, temperature)
        clean = score(p, rows())
        for value in (np.nan, np.inf):
            tokens, confidence = score(p, rows(*[(r, MASK, value) for r in range(4)]))
            np.testing.assert_array_equal(tokens, clean[0])
            np.testing.assert_allclose(confidence, clean[1], rtol=1e-6, atol=1e-12)

    @pytest.mark.parametrize("algorithm,filt,temperature", PATHS)
    def test_huge_finite_logits_score(self, algorithm, filt, temperature):
        tokens, confidence = score(params(algorithm, filt, temperature), rows((0, 3, 3e38), (0, 4, -3e38)))
        assert tokens[0] == 3 or algorithm == "RANDOM" or temperature > 0
        assert np.isfinite(confidence).all()

    @pytest.mark.parametrize("algorithm,filt", list(itertools.product(ALGORITHMS, FILTERS)))
    def test_guidance_that_makes_inf_minus_inf_raises(self, algorithm, filt):
        logits = np.stack([rows((1, 5, np.inf)), rows((1, 5, np.inf))])  # cond - uncond = NaN
        with pytest.raises(InputError, match="NaN or infinite"):
            score(params(algorithm, filt, 0.0, cfg_scale=1.0), logits)

    @pytest.mark.parametrize("temperature", [0.0, 0.8])
    @pytest.mark.parametrize("algorithm", ["LOW_CONFIDENCE", "RANDOM"])
    def test_nan_at_an_unranked_id_raises(self, algorithm, temperature):
        # confidence_eos_eot_inf keeps EoT out of the confidence softmax, not out of the row.
        p = params(algorithm, None, temperature)
        p.eot_id = EOT
        p.confidence_eos_eot_inf = True
        with pytest.raises(InputError, match="NaN or infinite"):
            score(p, rows((0, EOT, np.nan)))


class TestDecodeWithFilters:
    """The audit's case: with top_k/top_p set, NaN logits were accepted and the NaN token committed."""

    @pytest.mark.parametrize("filters", [{"top_k": 3}, {"top_p": 0.5}, {}])
    @pytest.mark.parametrize("algorithm", ["maskgit_plus", "entropy", "origin"])
    def test_nan_logits_raise_with_and_without_filters(self, filters, algorithm):
        cfg = GenerationConfig(gen_length=8, steps=8, algorithm=algorithm, temperature=0.5, **filters)
        rng = np.random.default_rng(0)

        def forward(ids):
            logits = rng.standard_normal((1, ids.shape[1], V)).astype(np.float32)
            logits[0, :, 9] = np.nan  # NaN at one token, everywhere
            return logits

        with pytest.raises(InputError, match="NaN or infinite"):
            unmask.decode(forward, np.array([1, 2], np.int64), cfg, facts=ModelFacts(mask_id=MASK))
