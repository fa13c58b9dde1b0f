"""The Decoder request/advance protocol used by the runtime Engine: windows, refreshes, rows."""

from __future__ import annotations

import numpy as np
import pytest

import unmask
from unmask import GenerationConfig, ModelFacts, _core
from unmask.decoding import make_decoder
from unmask.stats import STEP_KINDS
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
        assert (req.kind, req.window_start, req.window_end, req.batch) == (_core.StepKind.FULL, 0, 20, 1)
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
            assert (req.kind == _core.StepKind.REFRESH) == first
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
        assert [r.kind for r in requests[:2]] == [_core.StepKind.REFRESH, _core.StepKind.WINDOW]
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


# (kind, window, past length, stores the cache) of a block's first and later steps, prompt 4 +
# gen 16 in blocks of 8 = length 20, and the widest window that does not store its presents.
PLANS = {
    ("none", False): (("FULL", (0, 20), 0, False), ("FULL", (0, 20), 0, False), 20),
    ("none", True): (("FULL", (0, 20), 0, False), ("FULL", (0, 20), 0, False), 20),
    ("prefix", False): (("REFRESH", (0, 20), 0, True), ("WINDOW", (4, 20), 4, False), 16),
    ("prefix", True): (("REFRESH", (0, 20), 0, True), ("WINDOW", (3, 20), 3, False), 17),
    ("dual", False): (("REFRESH", (0, 20), 0, True), ("WINDOW", (4, 12), 12, False), 8),
    ("dual", True): (("REFRESH", (0, 20), 0, True), ("WINDOW", (3, 12), 11, False), 9),  # block + 1
}


class TestDecoderPlan:
    """The window rule lives in the Decoder: kind, window, past and buffer sizes are read, not recomputed."""

    @pytest.mark.parametrize("cache, shift", sorted(PLANS))
    def test_first_block_requests(self, cache, shift):
        first, later, widest = PLANS[cache, shift]
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=8, cache=cache)
        dec = make_decoder(cfg, ModelFacts(mask_id=MASK, shift_logits=shift), PROMPT)
        assert dec.max_window == widest
        model = FakeModel(vocab=V, mask_id=MASK)
        for expected in (first, later):
            req = dec.next_request()
            kind, (start, end), past, stores = expected
            assert (req.kind.name, req.window_start, req.window_end, req.past_length, req.stores_cache) == \
                (kind, start, end, past, stores)
            full = model(np.stack([dec.ids]))[:, req.window_start : req.window_end]
            dec.advance(np.ascontiguousarray(full[:, req.logits_index]))

    def test_stats_names_of_the_kinds(self):
        assert [k.name.lower() for k in (_core.StepKind.FULL, _core.StepKind.REFRESH, _core.StepKind.WINDOW)] == \
            list(STEP_KINDS)

    def test_block_ends_and_final_end(self):
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=8, early_stop=False, cache="dual")
        dec = make_decoder(cfg, FACTS, PROMPT)
        np.testing.assert_array_equal(dec.block_ends, [12, 20])
        model, finals = FakeModel(vocab=V, mask_id=MASK), []
        while not dec.done:
            req = dec.next_request()
            full = model(np.stack([dec.ids]))[:, req.window_start : req.window_end]
            event = dec.advance(np.ascontiguousarray(full[:, req.logits_index]))
            finals.append((event.block_done, event.final_end))
        assert finals == [(False, 4)] * 3 + [(True, 12)] + [(False, 12)] * 3 + [(True, 20)]

    def test_final_end_after_early_stop_is_the_sequence_end(self):
        # every token is EOS: block 0 finishes holding EOS, early stop fills the rest
        eos = 2
        cfg = GenerationConfig(gen_length=16, block_length=8, steps=2)
        dec = make_decoder(cfg, ModelFacts(mask_id=MASK, eos_id=eos), PROMPT)
        logits = np.zeros((1, 8, V), dtype=np.float32)
        logits[..., eos] = 10.0
        event = dec.advance(logits)
        assert (event.done, event.final_end, event.filled) == (True, 20, 8)

    def test_batch(self):
        assert make_decoder(GenerationConfig(gen_length=8, steps=8), FACTS, PROMPT).batch == 1
        assert make_decoder(GenerationConfig(gen_length=8, steps=8, cfg_scale=1.0), FACTS, PROMPT).batch == 2

    @pytest.mark.parametrize("shift, widest", [(False, 8), (True, 9)])
    def test_max_window_covers_infill_holes(self, shift, widest):
        # block 0 spans the prompt's holes from position 1: its window [1 - shift, 9) is wider than a block
        prompt = np.array([5, MASK, 11, MASK, 4], dtype=np.int64)
        cfg = GenerationConfig(gen_length=8, block_length=4, steps=8, cache="dual")
        dec = make_decoder(cfg, ModelFacts(mask_id=MASK, shift_logits=shift), prompt, infill=True)
        assert dec.max_window == widest
        widths = [r.window_end - r.window_start for r in drive(dec, FakeModel(vocab=V, mask_id=MASK))
                  if r.kind == _core.StepKind.WINDOW]
        assert max(widths) == widest
