"""Settings and model facts: one home each, resolved once, one rule per input.

GenerationConfig holds what a user chooses; ModelFacts what the model dictates (from the
manifest, or given to unmask.decode). `Model.resolve_config` gives the finished config and
`generate(config=...)` runs it as is. A thread count obeys one rule at every entry.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from samplers_numpy import FakeModel
from test_runtime_model import PROMPT, model, toy_dir  # noqa: F401  (the toy package's fixtures)

import unmask
from unmask import ConfigError, GenerationConfig, ModelFacts
from unmask.config import check_threads
from unmask.devices import select
from unmask.manifest import read_manifest, write_manifest


class TestModelFacts:
    def test_filled_from_the_manifest(self, toy_dir):
        manifest = read_manifest(toy_dir)
        ids = manifest.special_ids
        assert manifest.model_facts() == ModelFacts(mask_id=ids.mask_id, eos_id=ids.eos_id, eot_id=ids.eot_id,
                                                    shift_logits=False)
        shifted = dataclasses.replace(manifest, shift_logits=True).model_facts()
        assert shifted.shift_logits and shifted.mask_id == ids.mask_id

    def test_loaded_model_carries_them(self, model):
        assert model.facts == model.manifest.model_facts()
        assert "mask_id" not in GenerationConfig.field_names()  # a setting is never a model fact

    def test_round_trip(self, toy_dir, tmp_path):
        facts = ModelFacts(mask_id=7, eos_id=2, eot_id=None, shift_logits=True)
        assert ModelFacts.from_dict(facts.to_dict()) == facts
        manifest = read_manifest(toy_dir)
        write_manifest(manifest, tmp_path)
        assert read_manifest(tmp_path).model_facts() == manifest.model_facts()

    @pytest.mark.parametrize("values", [
        dict(mask_id=...), dict(mask_id=-1), dict(mask_id=True), dict(mask_id="3"), dict(mask_id=3.0),
        dict(mask_id=None), dict(mask_id=3, eos_id=...), dict(mask_id=3, eot_id=-2), dict(mask_id=3, eos_id=1.5),
        dict(mask_id=3, shift_logits=1), dict(mask_id=3, shift_logits=...),
    ])
    def test_bad_ids_refused(self, values):
        with pytest.raises(ConfigError):
            ModelFacts(**values)

    @pytest.mark.parametrize("values, match", [({"eos_id": 2}, "mask_id is required"),
                                               ({"mask_id": 1, "pad_id": 0}, "unknown model fact")])
    def test_from_dict_refuses(self, values, match):
        with pytest.raises(ConfigError, match=match):
            ModelFacts.from_dict(values)


class TestGenerationConfigInput:
    @pytest.mark.parametrize("name", GenerationConfig.field_names())
    def test_ellipsis_refused_in_every_field(self, name):
        with pytest.raises(ConfigError, match=name):
            GenerationConfig().replace(**{name: ...}).validate()

    def test_model_facts_are_not_settings(self):
        with pytest.raises(ConfigError, match="unknown generation setting"):
            GenerationConfig().replace(mask_id=3)

    def test_rules_that_need_the_facts(self):
        facts = ModelFacts(mask_id=3)
        GenerationConfig(logits_eos_inf=True).validate()  # fine until a model without EOS is named
        with pytest.raises(ConfigError, match="eos_id"):
            GenerationConfig(logits_eos_inf=True).validate(facts)
        with pytest.raises(ConfigError, match="neither"):
            GenerationConfig(confidence_eos_eot_inf=True).validate(facts)
        GenerationConfig(confidence_eos_eot_inf=True).validate(ModelFacts(mask_id=3, eot_id=4))


class TestResolveOnce:
    def test_resolve_gives_the_finished_config(self, model):
        cfg = model.resolve_config(steps=2, threshold=0.5)
        assert cfg.cache == "dual" and (cfg.gen_length, cfg.block_length, cfg.steps) == (8, 4, 2)
        assert model.resolve_config(cfg) is cfg  # finished: nothing left to resolve

    def test_generate_runs_exactly_the_config(self, model):
        # a finished config that differs from the package's defaults everywhere it can
        cfg = model.resolve_config(GenerationConfig(gen_length=12, steps=6, cache="none", early_stop=False))
        result = model.generate(prompt_ids=PROMPT, config=cfg)
        assert result.config is cfg
        assert result.token_ids.shape == (12,) and result.stats.nfe == 6 and result.stats.cache == "none"
        by_keywords = model.generate(prompt_ids=PROMPT, gen_length=12, block_length=None, steps=6, cache="none",
                                     early_stop=False)
        assert by_keywords.config == cfg and by_keywords.token_ids.tolist() == result.token_ids.tolist()

    def test_chat_session_keeps_its_config(self, model):
        chat = model.chat(steps=2)
        assert chat.config == model.resolve_config(steps=2)
        assert chat.send("hi").config == chat.config
        assert chat.send("again", steps=4).config.steps == 4 and chat.config.steps == 2

    def test_config_must_be_a_generation_config(self, model):
        with pytest.raises(ConfigError, match="GenerationConfig"):
            model.generate(prompt_ids=PROMPT, config={"steps": 2})


class TestThreadRule:
    BAD = [0, -1, 1.5, True, "2"]

    @pytest.mark.parametrize("threads", BAD)
    def test_same_error_at_every_entry(self, toy_dir, threads):
        with pytest.raises(ConfigError) as rule:
            check_threads(threads)
        expected = str(rule.value)
        assert "threads must be a positive integer" in expected
        with pytest.raises(ConfigError) as at_load:
            unmask.load(toy_dir, device="cpu", threads=threads)
        with pytest.raises(ConfigError) as at_select:
            select(None, "cpu", threads=threads)
        with pytest.raises(ConfigError) as at_decode:
            unmask.decode(FakeModel(vocab=40, mask_id=39), [1, 2], GenerationConfig(gen_length=4),
                          facts=ModelFacts(mask_id=39), threads=threads)
        assert str(at_load.value) == str(at_select.value) == str(at_decode.value) == expected

    def test_cli_threads_zero(self, capsys):
        from unmask.cli import main

        with pytest.raises(ConfigError) as rule:
            check_threads(0)
        code = main(["generate", "-p", "hi", "--threads", "0"])
        err = capsys.readouterr().err
        assert code == 1 and err == f"error: {rule.value}\n"

    @pytest.mark.parametrize("threads", [None, 1, 3])
    def test_good_counts_pass(self, threads):
        assert check_threads(threads) == threads


def test_decode_accepts_a_list_prompt():
    cfg, facts = GenerationConfig(gen_length=8, steps=4), ModelFacts(mask_id=39)
    from_list = unmask.decode(FakeModel(vocab=40, mask_id=39), [5, 9, 11], cfg, facts=facts)
    from_array = unmask.decode(FakeModel(vocab=40, mask_id=39), np.array([5, 9, 11], np.int64), cfg, facts=facts)
    assert from_list.ids.tolist() == from_array.ids.tolist() and from_list.prompt_length == 3
