"""Bad input to unmask.decode / make_decoder: clear errors of the documented types."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import unmask
from unmask import ConfigError, GenerationConfig, ModelFacts
from unmask.decoding import make_decoder
from samplers_numpy import FakeModel

MASK, V = 39, 40
PROMPT = np.array([5, 9, 11], dtype=np.int64)
CFG = GenerationConfig(gen_length=8, steps=4)
FACTS = ModelFacts(mask_id=MASK)


class Boom(Exception):
    pass


class TestDecodeBadInput:
    @pytest.mark.parametrize("shape", [(1, 10, V), (2, 11, V), (11, V), (1, 11, 0)])
    def test_wrong_logits_shape(self, shape):
        with pytest.raises(ValueError, match=r"\(1, 11, V\)") as info:
            unmask.decode(lambda ids: np.zeros(shape, np.float32), PROMPT, CFG, facts=FACTS)
        assert str(shape).replace(",)", ")") in str(info.value)

    @pytest.mark.parametrize("dtype", [np.float64, np.int32])
    def test_wrong_logits_dtype(self, dtype):
        with pytest.raises(ValueError, match="float32 or float16"):
            unmask.decode(lambda ids: np.zeros((1, 11, V), dtype), PROMPT, CFG, facts=FACTS)

    def test_cfg_expects_two_rows(self):
        cfg = CFG.replace(cfg_scale=1.0)
        with pytest.raises(ValueError, match=r"\(2, 11, V\)"):
            unmask.decode(lambda ids: np.zeros((1, 11, V), np.float32), PROMPT, cfg, facts=FACTS)

    def test_forward_exception_propagates_and_process_stays_healthy(self):
        model = FakeModel(vocab=V, mask_id=MASK)

        def forward(ids):
            if model.calls == 2:
                raise Boom("forward failed")
            return model(ids)

        for _ in range(20):
            model.calls = 0
            with pytest.raises(Boom):
                unmask.decode(forward, PROMPT, CFG, facts=FACTS)
        gc.collect()
        out = unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, CFG, facts=FACTS)
        assert (out.generated != MASK).all()

    def test_nan_logits(self):
        with pytest.raises(ValueError, match="NaN"):
            unmask.decode(lambda ids: np.full((1, 11, V), np.nan, np.float32), PROMPT, CFG, facts=FACTS)

    def test_empty_prompt(self):
        with pytest.raises(ValueError, match="empty"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), np.zeros(0, np.int64), CFG, facts=FACTS)

    @pytest.mark.parametrize("ids", [np.array([[5, 9]], np.int64), [5.0, 9.0], "59", [[5, 9]]])
    def test_prompt_not_a_list_of_ids(self, ids):
        with pytest.raises(ConfigError, match="1-D sequence of integer"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), ids, CFG, facts=FACTS)

    @pytest.mark.parametrize("ids", [[5, 9, 11], (5, 9, 11), np.array([5, 9, 11], np.int32)])
    def test_prompt_as_list_or_any_int_array(self, ids):
        want = unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, CFG, facts=FACTS)
        got = unmask.decode(FakeModel(vocab=V, mask_id=MASK), ids, CFG, facts=FACTS)
        np.testing.assert_array_equal(got.ids, want.ids)
        assert got.prompt_length == 3

    def test_mask_in_prompt_needs_infill(self):
        prompt = np.array([5, MASK, 11], np.int64)
        with pytest.raises(ValueError, match="infill=True"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), prompt, CFG, facts=FACTS)
        out = unmask.decode(FakeModel(vocab=V, mask_id=MASK), prompt, CFG, infill=True, facts=FACTS)
        assert (out.ids != MASK).all() and out.ids[0] == 5 and out.ids[2] == 11

    def test_negative_ids(self):
        with pytest.raises(ValueError, match="negative"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), np.array([5, -1], np.int64), CFG, facts=FACTS)

    def test_template_length(self):
        with pytest.raises(ValueError, match="gen_length"):
            make_decoder(CFG, FACTS, PROMPT, template=np.full(3, MASK, np.int64))

    @pytest.mark.parametrize("facts", [None, {"mask_id": MASK}, MASK])
    def test_facts_required(self, facts):
        with pytest.raises(ConfigError, match="ModelFacts"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, CFG, facts=facts)

    @pytest.mark.parametrize("overrides", [{"block_length": 3}, {"threshold": 0.9, "factor": 1.0},
                                           {"logits_eos_inf": True}, {"confidence_eos_eot_inf": True},
                                           {"early_stop": ...}, {"cache": "triple"}])
    def test_config_contradictions(self, overrides):
        with pytest.raises(ConfigError):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, CFG.replace(**overrides), facts=FACTS)

    @pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
    def test_bad_threads(self, threads):
        with pytest.raises(ConfigError, match="threads must be a positive integer"):
            unmask.decode(FakeModel(vocab=V, mask_id=MASK), PROMPT, CFG, facts=FACTS, threads=threads)

    @pytest.mark.parametrize("overrides, message", [({"block_length": 3}, "block_length must divide gen_length"),
                                                    ({"logits_eos_inf": True}, "logits_eos_inf needs eos_id")])
    def test_core_still_asserts_what_python_checks(self, overrides, message):
        """make_decoder takes a checked config; skipping the check still cannot reach the loop."""
        with pytest.raises(ConfigError, match=message):
            make_decoder(CFG.replace(**overrides), FACTS, PROMPT)
