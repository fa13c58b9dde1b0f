"""The Decoder request/advance protocol used by the runtime Engine: windows, refreshes, rows."""

from __future__ import annotations

import numpy as np
import pytest

import unmask
from unmask import GenerationConfig, ModelFacts
from unmask.decoding import make_decoder
from samplers_numpy import FakeModel

MASK, V = 39, 40
PROMPT = np.array([5, 9, 11, 4], dtype=np.int64)
FACTS = ModelFacts(mask_id=MASK)


def drive(dec, model):
    """Run the protocol with full-sequence logits sliced to each request; returns the requests."""
    requests = []
    while not dec.done:
        req = dec.next_request()
        requests.append(req)
        ids = dec.input_ids()
        assert ids.shape == (req.batch, req.window_end - req.window_start)
        full = model(np.stack([dec.ids] * req.batch) if req.batch == 1 else _cfg_rows(dec, req))
        window = full[:, req.window_start : req.window_end]
        dec.advance(np.ascontiguousarray(window[:, req.logits_index]))
    return requests


def _cfg_rows(dec, req):
    ids = dec.input_ids()
    assert req.window_start == 0 and req.window_end == dec.length
    return ids


class TestDecoderRequests:
    def test_cache_none_is_whole_sequence(self):
        dec = make_decoder(GenerationConfig(gen_length=16, block_length=8, steps=8), FACTS, PROMPT)
        req = dec.next_request()
        assert (req.window_start, req.window_end, req.refresh, req.batch) == (0, 20, False, 1)
        np.testing.assert_array_equal(req.logits_index, np.arange(4, 12))  # masked rows of block 0 only
        np.testing.assert_array_equal(dec.input_ids()[0], dec.ids)

    @pytest.mark.parametrize("cache", ["prefix", "dual"])
    @pytest.mark.parametrize("shift", [False, True])
    def test_cache_windows(self, cache, shift):
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=8, cache=cache)
        dec = make_decoder(cfg, ModelFacts(mask_id=MASK, shift_logits=shift), PROMPT)
        requests = drive(dec, FakeModel(vocab=V, mask_id=MASK))
        s = 1 if shift else 0
        for req in requests:
            start, end = 4 + 8 * req.block, 12 + 8 * req.block
            first = req.step % 4 == 0
            assert req.refresh == first
            if first:
                assert (req.window_start, req.window_end) == (0, 20)
            else:
                assert req.window_start == start - s
                assert req.window_end == (20 if cache == "prefix" else end)
            served = req.window_start + req.logits_index + s  # positions the rows serve
            assert ((served >= start) & (served < end)).all()
        assert (dec.ids[4:] != MASK).all()

    def test_window_protocol_equals_decode(self):
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=16, algorithm="maskgit_plus")
        facts = ModelFacts(mask_id=MASK, shift_logits=True)
        dec = make_decoder(cfg, facts, PROMPT)
        drive(dec, FakeModel(vocab=V, mask_id=MASK, seed=2))
        out = unmask.decode(FakeModel(vocab=V, mask_id=MASK, seed=2), PROMPT, cfg, facts=facts)
        np.testing.assert_array_equal(dec.ids, out.ids)

    def test_cfg_second_row_masks_the_prompt(self):
        template = np.full(8, MASK, dtype=np.int64)
        template[3] = 17
        dec = make_decoder(GenerationConfig(gen_length=8, steps=8, cfg_scale=1.0), FACTS, PROMPT, template=template)
        ids = dec.input_ids()
        assert dec.next_request().batch == 2
        np.testing.assert_array_equal(ids[0], dec.ids)
        assert (ids[1] == MASK).all()  # prompt and pinned positions masked; holes are masks already

    def test_one_block_window_covers_generation(self):
        cfg = GenerationConfig(gen_length=12, steps=6, cache="dual")
        dec = make_decoder(cfg, FACTS, PROMPT)
        requests = drive(dec, FakeModel(vocab=V, mask_id=MASK))
        assert requests[0].refresh and not requests[1].refresh
        assert (requests[1].window_start, requests[1].window_end) == (4, 16)

    def test_infill_holes_join_the_first_block(self):
        prompt = np.array([5, MASK, 11, MASK, 4], dtype=np.int64)
        cfg = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual")
        dec = make_decoder(cfg, FACTS, prompt, infill=True)
        np.testing.assert_array_equal(dec.next_request().logits_index, [1, 3, 5, 6, 7, 8])
        drive(dec, FakeModel(vocab=V, mask_id=MASK))
        assert (dec.ids != MASK).all()
        np.testing.assert_array_equal(dec.ids[[0, 2, 4]], [5, 11, 4])

    def test_advance_after_done_raises(self):
        dec = make_decoder(GenerationConfig(gen_length=4, steps=1), FACTS, PROMPT)
        drive(dec, FakeModel(vocab=V, mask_id=MASK))
        with pytest.raises(RuntimeError):
            dec.next_request()
