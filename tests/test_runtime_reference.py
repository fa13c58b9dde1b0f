"""The runtime against the PyTorch reference: same tokens with cache none, measured agreement with reuse.

Tiny random LLaDA and Dream checkpoints (unmask.export.testing), exported at fp32.
Cache "none" must give exactly the tokens of unmask.decode driven by the reference
forward (temperature 0). Prefix/dual are approximations: their first step equals none,
a one-layer model reuses K/V exactly, and the agreement on a fixed prompt set is
printed (run with -s) and recorded as a test property.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import unmask
from unmask import decode
from unmask.export import export_model
from unmask.export.reference import load_reference
from unmask.export.testing import make_dream_checkpoint, make_llada_checkpoint

SETTINGS = dict(gen_length=32, block_length=8, steps=16, early_stop=False)
PROMPTS = ["What is 12 + 30?", "Hello! How can I help you today?", "Copy the word apple:", "def add(a, b):"]


def _build(root, family: str, **dims):
    checkpoint = root / f"{family}-checkpoint"
    if family == "llada":
        make_llada_checkpoint(checkpoint, max_sequence_length=128, **dims)
    else:
        make_dream_checkpoint(checkpoint, max_position_embeddings=128, **dims)
    export_model(checkpoint, root / f"{family}-package", "fp32", quiet=True, validate=False)
    return checkpoint, unmask.load(root / f"{family}-package", device="cpu", threads=1)


@pytest.fixture(scope="module", params=["llada", "dream"])
def family(request, tmp_path_factory):
    checkpoint, model = _build(tmp_path_factory.mktemp(request.param), request.param)
    return request.param, model, load_reference(checkpoint).as_forward()


def _algorithms(family: str) -> list[str]:
    # Dream's own sampler is the timestep schedule; the block schedule also runs on it
    return ["low_confidence"] if family == "llada" else ["maskgit_plus", "low_confidence"]


class TestAgainstReference:
    def test_cache_none_equals_reference_decode(self, family):
        name, model, forward = family
        for algorithm in _algorithms(name):
            for text in PROMPTS[:2]:
                ids = model.encode_prompt(text)
                config = model.resolve_config(cache="none", algorithm=algorithm, **SETTINGS)
                expected = decode(forward, ids, config, facts=model.facts)
                got = model.generate(prompt_ids=ids, config=config)
                assert got.token_ids.tolist() == expected.generated.tolist(), (name, algorithm, text)
                assert got.stats.nfe == expected.stats.nfe

    def test_first_step_of_prefix_and_dual_equals_none(self, family):
        name, model, _ = family
        for algorithm in _algorithms(name):
            first = {}
            for cache in ("none", "prefix", "dual"):
                event = next(model.stream(PROMPTS[0], cache=cache, algorithm=algorithm, **SETTINGS))
                first[cache] = (event.positions.tolist(), event.tokens.tolist())
            assert first["prefix"] == first["none"] == first["dual"], (name, algorithm)

    def test_cfg_batch_runs_with_cache(self, family):
        name, model, forward = family
        ids = model.encode_prompt(PROMPTS[0])
        config = model.resolve_config(cache="none", cfg_scale=1.0, **SETTINGS)
        assert model.generate(prompt_ids=ids, config=config).token_ids.tolist() == \
            decode(forward, ids, config, facts=model.facts).generated.tolist()
        first = [next(model.stream(prompt_ids=ids, cache=c, cfg_scale=1.0, **SETTINGS)).tokens.tolist()
                 for c in ("none", "dual")]
        assert first[0] == first[1]

    def test_agreement_with_none_reported(self, family, record_property):
        name, model, _ = family
        for algorithm in _algorithms(name):
            agreement = {"prefix": [], "dual": []}
            for text in PROMPTS:
                base = model.generate(text, cache="none", algorithm=algorithm, **SETTINGS).token_ids
                for cache in agreement:
                    tokens = model.generate(text, cache=cache, algorithm=algorithm, **SETTINGS).token_ids
                    agreement[cache].append(float(np.mean(tokens == base)))
            summary = {cache: round(float(np.mean(v)), 3) for cache, v in agreement.items()}
            print(f"\n{name} {algorithm}: token agreement with cache none over {len(PROMPTS)} prompts: {summary}")
            record_property(f"agreement_{name}_{algorithm}", summary)
            # random weights: reuse is approximate, but far from chance (1/vocab)
            assert min(summary.values()) >= 0.3


@pytest.mark.parametrize("name", ["llada", "dream"])
def test_one_layer_reuse_is_exact(tmp_path, name):
    """With one layer, K/V depend only on each position's own token: reuse changes nothing."""
    dims = dict(n_layers=1) if name == "llada" else dict(num_hidden_layers=1)
    _, model = _build(tmp_path, name, **dims)
    for algorithm in _algorithms(name):
        runs = {c: model.generate(PROMPTS[0], cache=c, algorithm=algorithm, **SETTINGS).token_ids.tolist()
                for c in ("none", "prefix", "dual")}
        assert runs["prefix"] == runs["none"] == runs["dual"], (name, algorithm)


def test_generic_graph_runs_without_cache(tmp_path):
    """An export_torch package (input_ids -> logits for every row) runs with cache none only."""
    from unmask.export import export_torch

    checkpoint = make_llada_checkpoint(tmp_path / "llada-checkpoint", max_sequence_length=128)
    reference = load_reference(checkpoint)
    ids_of = json.loads((checkpoint / "config.json").read_text())
    export_torch(reference, tmp_path / "generic", tokenizer=checkpoint, mask_id=ids_of["mask_token_id"],
                 eos_id=ids_of["eos_token_id"], max_sequence_length=128, validate=False)
    model = unmask.load(tmp_path / "generic", device="cpu", threads=1)
    assert model.resolve_config(**SETTINGS).cache == "none"
    with pytest.raises(unmask.ConfigError):
        model.generate(PROMPTS[0], cache="dual", **SETTINGS)
    ids = model.encode_prompt(PROMPTS[0])
    config = model.resolve_config(**SETTINGS)
    got = model.generate(prompt_ids=ids, config=config)
    assert got.token_ids.tolist() == decode(reference.as_forward(), ids, config, facts=model.facts).generated.tolist()
    assert set(got.stats.step_kinds) == {"full"}
