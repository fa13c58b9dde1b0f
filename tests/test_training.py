"""training (the checkout's training folder): tokenizer, noising, sampler, and a few-step training smoke test."""

import itertools
import json
import math
import re

import numpy as np
import pytest
import torch

from unmask import tasks
from unmask.export.safetensors_io import CheckpointTensors
from unmask.export.reference import LladaModel, llada_config, load_reference
from training.tokenizer import special_ids, train_tokenizer
from training.batches import TRIM_EOS_MAX, Batch, Batcher, parse_family_weights
from training.train import (
    TrainConfig,
    add_noise,
    diffusion_loss,
    generate_low_confidence,
    main,
    resolve_data,
    resolve_precision,
    train,
)
from arithmetic_prompts import read_question

# a tiny BPE compresses less, hence the longer generation region
TINY = dict(d_model=32, n_layers=1, n_heads=2, mlp_hidden_size=64, vocab_size=400, tokenizer_examples=500,
            gen_length=64, batch_size=4, max_steps=3, eval_per_family=1, final_eval_per_family=1, log_every=1,
            threads=1)


@pytest.fixture(scope="module")
def tokenizer():
    """The tokenizer the real training run builds (same corpus size and vocabulary target)."""
    cfg = TrainConfig(out="unused")
    corpus = [tasks.chat_prompt(e.prompt) + e.answer + tasks.EOT
              for e in itertools.islice(tasks.iter_examples("train"), cfg.tokenizer_examples)]
    return train_tokenizer(corpus, vocab_size=cfg.vocab_size)


class TestTokenizer:
    def test_specials_and_single_digits(self, tokenizer):
        ids = special_ids(tokenizer)
        assert len(set(ids.values())) == 4
        assert tokenizer.encode("<|mdm_mask|>", add_special_tokens=False).ids == [ids["mask"]]
        assert tokenizer.encode("907", add_special_tokens=False).tokens == ["9", "0", "7"]

    def test_a_word_is_the_same_token_in_prompt_and_answer(self, tokenizer):
        in_prompt = tokenizer.encode("weather in Paris today", add_special_tokens=False).tokens
        in_answer = tokenizer.encode('{"city":"Paris"}', add_special_tokens=False).tokens
        assert "Paris" in in_prompt and "Paris" in in_answer

    def test_every_answer_fits_gen_length(self, tokenizer):
        for ex in tasks.make_examples("heldout", 500):
            assert len(tokenizer.encode(ex.answer).ids) + 1 <= tasks.GEN_LENGTH  # + <|eot_id|>
            assert tokenizer.decode(tokenizer.encode(ex.answer).ids) == ex.answer


class TestBatches:
    def test_region_is_answer_eot_then_eos(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused"))
        ids = special_ids(tokenizer)
        region = batcher.region("42")
        assert len(region) == tasks.GEN_LENGTH
        assert region[2:] == [ids["eot"]] + [ids["eos"]] * (tasks.GEN_LENGTH - 3)
        with pytest.raises(ValueError, match="gen_length"):
            batcher.region("1" * 60)

    def test_trimmed_region_ends_a_few_eos_after_the_answer(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused"))
        ids = special_ids(tokenizer)
        lengths = set()
        for _ in range(200):
            region = batcher.region("42", trim=True)
            assert region[:3] == batcher.region("42")[:3] and set(region[3:]) == {ids["eos"]}
            lengths.add(len(region))
        assert lengths == set(range(4, 4 + TRIM_EOS_MAX))
        answer = "1" * (tasks.GEN_LENGTH - 2)  # no room for TRIM_EOS_MAX: never longer than gen_length
        assert {len(batcher.region(answer, trim=True)) for _ in range(50)} <= {tasks.GEN_LENGTH - 1, tasks.GEN_LENGTH}

    @pytest.mark.parametrize("pack_width", [144, 0])
    def test_trim_rate_shortens_that_share_of_regions(self, tokenizer, pack_width):
        """trim_rate of the examples end a few EOS after <|eot_id|>; the rest keep the full
        region; either way the region mask covers exactly the answer region, at the example's end."""
        cfg = TrainConfig(out="unused", trim_rate=0.75, pack_width=pack_width, length_buckets=1)
        ids = special_ids(tokenizer)
        batcher, full, trimmed = Batcher(tokenizer, cfg), 0, 0
        for _ in range(4):
            batch = batcher.next(64)
            for n in range(batch.examples):
                where = batch.example == n
                tokens, region = batch.ids[where].tolist(), batch.region[where].tolist()
                length = sum(region)
                assert region == [False] * (len(tokens) - length) + [True] * length
                answer = tokens[len(tokens) - length:]
                assert ids["eot"] in answer and answer.index(ids["eot"]) > 0
                assert set(answer[answer.index(ids["eot"]) + 1:]) == {ids["eos"]}
                if length == tasks.GEN_LENGTH:
                    full += 1
                else:
                    trimmed += 1
                    assert 1 <= length - 1 - answer.index(ids["eot"]) <= TRIM_EOS_MAX
        assert 0.6 <= trimmed / (full + trimmed) <= 0.9

    def test_trim_rate_zero_pads_every_region_to_gen_length(self, tokenizer):
        batch = Batcher(tokenizer, TrainConfig(out="unused", trim_rate=0.0)).next(32)
        assert int(batch.region.sum()) == 32 * tasks.GEN_LENGTH

    def test_noise_never_touches_the_prompt(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused", pack_width=0, trim_rate=0.5))
        batch = batcher.next(16)
        ids = batch.ids
        noisy, masked, t = add_noise(batch, 2, 1e-3, torch.Generator().manual_seed(0))
        prompt = ~batch.region
        assert torch.equal(noisy[prompt], ids[prompt]) and not masked[prompt].any()
        assert masked.any() and torch.all(noisy[masked] == 2)
        assert t.shape == (16,) and bool(((t > 0) & (t <= 1)).all())

    @pytest.mark.parametrize("tied, pack_width", [(False, 0), (True, 0), (False, 144)])
    def test_loss_scores_only_masked_positions_and_matches_full_logits(self, tokenizer, tied, pack_width):
        """diffusion_loss runs the LM head on masked positions only; the value must equal the
        LLaDA SFT loss computed from the full [R, L, V] logits with the same noise."""
        batcher = Batcher(tokenizer, TrainConfig(out="unused", pack_width=pack_width))
        torch.manual_seed(0)
        config = _config(tokenizer)
        config["weight_tying"] = tied
        model = LladaModel(config)
        batch = batcher.next(8)
        mask = special_ids(tokenizer)["mask"]
        loss = diffusion_loss(model, batch, tasks.GEN_LENGTH, mask, 0.1, torch.Generator().manual_seed(3))
        noisy, masked, t = add_noise(batch, mask, 0.1, torch.Generator().manual_seed(3))
        with torch.no_grad():
            logits = model(noisy, batch.positions, batch.attention)
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.ids, reduction="none")
        expected = (ce * masked / t[batch.example.clamp(min=0)]).sum() / (8 * tasks.GEN_LENGTH)
        assert masked.any() and math.isfinite(loss.item())
        assert int(masked.sum()) == int(sum((masked & (batch.example == n)).sum() for n in range(8)))
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5)

    def test_noise_levels_are_stratified(self, tokenizer):
        """One t per slice of [eps, 1): a batch of 16 always spans light and heavy masking."""
        ids = torch.zeros((16, 40), dtype=torch.long)
        region = torch.zeros((16, 40), dtype=torch.bool)
        region[:, -8:] = True
        batch = Batch(ids, ids, region | True, region, torch.arange(16)[:, None].expand(16, 40))
        for seed in range(5):
            _, _, t = add_noise(batch, 2, 0.1, torch.Generator().manual_seed(seed))
            slots = torch.floor((t - 0.1) / 0.9 * 16).long()
            assert sorted(slots.tolist()) == list(range(16))

    def test_families_are_drawn_by_weight(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused", family_weights="arithmetic=3,list=1"))
        drawn = [ex.family for ex in batcher.draw(4000)]
        assert set(drawn) == {"arithmetic", "list"}
        assert 0.72 <= drawn.count("arithmetic") / len(drawn) <= 0.78

    def test_copy_drill_is_training_only_and_fits(self, tokenizer):
        """The training-only "copy" family repeats its prompt's items exactly, always fits the
        region, and is drawn by weight like the task families."""
        batcher = Batcher(tokenizer, TrainConfig(out="unused", family_weights="copy=1,units=1"))
        drawn = batcher.draw(2000)
        copies = [ex for ex in drawn if ex.family == "copy"]
        assert 0.45 <= len(copies) / len(drawn) <= 0.55 and "copy" not in tasks.FAMILIES
        for ex in copies:
            assert ex.answer and ex.prompt.endswith(": " + ex.answer)
            assert len(batcher.region(ex.answer)) == tasks.GEN_LENGTH  # raises if it did not fit
        assert len({ex.answer for ex in copies}) > 0.9 * len(copies)
        assert {"Paris", "Anna"} & {item for ex in copies for item in ex.answer.replace(",", " ").split()}

    def test_copy_values_drill_repeats_training_side_values_exactly(self):
        """The training-only "copy_values" family repeats people-typed values, about half of them
        made up, never a value of the novel set, and always fits the people region."""
        from unmask import people, people_values

        corpus = [tasks.chat_prompt(ex.prompt, ex.history) + ex.answer + tasks.EOT
                  for ex in itertools.islice(people.iter_train(0), 2000)]
        tok = train_tokenizer(corpus, 600)
        batcher = Batcher(tok, resolve_data(TrainConfig(out="unused", data="people", family_weights="copy_values=1")))
        copies = batcher.draw(2000)
        assert {ex.family for ex in copies} == {"copy_values"} and "copy_values" not in people.FAMILIES
        novel = {v.lower() for values in people_values.NOVEL.values() for v in values}
        known = {w for values in people_values.TRAIN.values() for v in values for w in v.lower().split()}
        for ex in copies:
            assert ex.answer and ex.prompt.rstrip('"').endswith(ex.answer)
            assert len(batcher.region(ex.answer)) == people.GEN_LENGTH  # raises if it did not fit
            assert not any(re.search(rf"\b{re.escape(v)}\b", ex.answer.lower()) for v in novel), ex.answer
        made_up = [ex for ex in copies if set(ex.answer.lower().replace(",", " ").split()) - known]
        assert len({ex.answer for ex in copies}) > 0.75 * len(copies) and len(made_up) > 0.3 * len(copies)

    @staticmethod
    def _arithmetic_drill(tokenizer, family: str):
        """3000 questions of a training-only arithmetic drill as (a, op, b) digit strings, after
        checking what every such drill owes: right answers, train-split prompts only, none of
        them a held-out question."""
        batcher = Batcher(tokenizer, TrainConfig(out="unused", family_weights=f"{family}=1"))
        drawn = batcher.draw(3000)
        assert {ex.family for ex in drawn} == {family} and family not in tasks.FAMILIES
        terms = []
        for ex in drawn:
            a, op, b, value = read_question(ex.prompt)
            assert int(ex.answer) == value >= 0
            assert tasks.split_of(ex.prompt) == "train"
            terms.append((a, op, b))
        heldout = {ex.prompt for ex in itertools.islice(tasks.iter_examples("heldout", families=["arithmetic"]), 3000)}
        assert not heldout & {ex.prompt for ex in drawn}
        return drawn, terms

    def test_short_arithmetic_drill_spreads_digit_counts_and_never_asks_heldout(self, tokenizer):
        """The training-only "arith_short" family asks the arithmetic family's questions with
        1-, 2- and 3-digit terms in equal shares (uniform 0..999 gives 3 digits nine times in
        ten)."""
        _, terms = self._arithmetic_drill(tokenizer, "arith_short")
        lengths = [len(t) for a, op, b in terms if op != "*" for t in (a, b)]
        shares = [lengths.count(n) / len(lengths) for n in (1, 2, 3)]
        assert all(0.29 <= share <= 0.38 for share in shares), shares

    def test_sums_drill_adds_two_and_three_digit_terms_and_never_asks_heldout(self, tokenizer):
        """The training-only "sums" family asks sums of two 2- or 3-digit terms (3 digits two
        times in three), a quarter of them with "plus"."""
        drawn, terms = self._arithmetic_drill(tokenizer, "sums")
        assert {op for _, op, _ in terms} == {"+"}
        lengths = [len(t) for a, _, b in terms for t in (a, b)]
        assert set(lengths) == {2, 3} and 0.63 <= lengths.count(3) / len(lengths) <= 0.70
        assert 0.2 <= sum("plus" in ex.prompt for ex in drawn) / len(drawn) <= 0.3

    def test_products_and_differences_drills_keep_the_heldout_terms_and_phrasings(self, tokenizer):
        """The training-only "products" and "differences" families ask only that operation, with
        the arithmetic family's own terms (a 1-2 digit number times a digit, either order;
        uniform 0..999 terms, larger first) and all four of its phrasings."""
        drawn, terms = self._arithmetic_drill(tokenizer, "products")
        assert {op for _, op, _ in terms} == {"*"}
        assert all(2 <= min(int(a), int(b)) <= 9 and max(int(a), int(b)) <= 99 for a, _, b in terms)
        assert 0.4 <= sum(len(a) == 1 for a, _, _ in terms) / len(terms) <= 0.6
        assert 0.2 <= sum("times" in ex.prompt for ex in drawn) / len(drawn) <= 0.3
        drawn, terms = self._arithmetic_drill(tokenizer, "differences")
        assert {op for _, op, _ in terms} == {"-"} and all(int(a) >= int(b) for a, _, b in terms)
        assert 0.75 <= sum(len(a) == len(b) == 3 for a, _, b in terms) / len(terms) <= 0.87
        assert {ex.prompt.split()[0] for ex in drawn} == {"What", "Compute", "Calculate"}

    def test_reweigh_draws_the_new_families_from_then_on(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused", family_weights="units=1"))
        assert {ex.family for ex in batcher.draw(200)} == {"units"}
        batcher.reweigh("units=0,sums=1,list=3")
        drawn = [ex.family for ex in batcher.draw(4000)]
        assert set(drawn) == {"sums", "list"} and 0.72 <= drawn.count("list") / len(drawn) <= 0.78

    def test_length_grouping_cuts_padding(self, tokenizer):
        def padding(buckets):
            batcher = Batcher(tokenizer, TrainConfig(out="unused", pack_width=0, length_buckets=buckets))
            batches = [batcher.next(32) for _ in range(16)]
            assert all(b.ids.shape[0] == 32 and b.examples == 32 for b in batches)
            return sum(int((~b.attention).sum()) for b in batches)
        assert padding(16) < 0.5 * padding(1)

    def test_packed_rows_hold_whole_examples_that_see_only_themselves(self, tokenizer):
        """pack_width packs a step's examples into shared rows: each example is one contiguous
        run with positions from 0 and its answer region at its end, and attends only to itself."""
        cfg = TrainConfig(out="unused", pack_width=144, history_rate=0.1, trim_rate=0.0)
        batch = Batcher(tokenizer, cfg).next(64)
        assert batch.examples == 64 and batch.ids.shape[0] < 64 and batch.attention.dim() == 3
        ids = special_ids(tokenizer)
        for n in range(64):
            rows, cols = torch.nonzero(batch.example == n, as_tuple=True)
            assert rows.unique().numel() == 1 and torch.equal(cols, torch.arange(cols[0], cols[-1] + 1))
            r, span = int(rows[0]), slice(int(cols[0]), int(cols[-1]) + 1)
            assert batch.positions[r, span].tolist() == list(range(cols.numel()))
            assert batch.ids[r, span][0] == ids["bos"]
            assert batch.region[r, span].tolist() == [False] * (cols.numel() - cfg.gen_length) + [True] * cfg.gen_length
            assert bool(batch.attention[r, span, span].all())
            assert not batch.attention[r, span][:, batch.example[r] != n].any()
        assert (batch.example < 0).float().mean() < 0.2  # first-fit leaves little padding
        pad_rows, pad_cols = torch.nonzero(batch.example < 0, as_tuple=True)
        assert bool(batch.attention[pad_rows, pad_cols, pad_cols].all())  # never an all-hidden (NaN) row

    def test_a_packed_example_gets_the_hidden_states_it_gets_alone(self, tokenizer):
        """Block-diagonal attention plus restarted positions: packing changes no number."""
        torch.manual_seed(0)
        model = LladaModel(_config(tokenizer)).eval()
        batch = Batcher(tokenizer, TrainConfig(out="unused", pack_width=144)).next(6)
        with torch.no_grad():
            packed = model.hidden_states(batch.ids, batch.positions, batch.attention)
            for n in range(6):
                where = batch.example == n
                alone = model.hidden_states(batch.ids[where][None])[0]
                torch.testing.assert_close(packed[where], alone, rtol=1e-4, atol=1e-5)

    def test_some_prompts_are_typed_loosely(self, tokenizer):
        examples = tasks.make_examples("train", 300)
        for rate, low, high in ((0.0, 0, 0), (0.3, 40, 140), (1.0, 200, 300)):
            batcher = Batcher(tokenizer, TrainConfig(out="unused", loose_rate=rate))
            loose = 0
            for ex in examples:
                text = tokenizer.decode(batcher.prompt(ex), skip_special_tokens=False)
                if text != tasks.chat_prompt(ex.prompt):
                    loose += 1
                    user = text.split("user" + tasks.END_HEADER + "\n\n", 1)[1].split(tasks.EOT, 1)[0]
                    assert user != ex.prompt and tasks.loosen(user) == tasks.loosen(ex.prompt)
            assert low <= loose <= high, (rate, loose)

    def test_some_prompts_follow_earlier_turns(self, tokenizer):
        batcher = Batcher(tokenizer, TrainConfig(out="unused", history_rate=0.5, pack_width=0, length_buckets=1,
                                                 trim_rate=0.0))
        ids = special_ids(tokenizer)
        ids_batch = batcher.next(64).ids
        headers = (ids_batch[:, :-tasks.GEN_LENGTH] == ids["eot"]).sum(1)  # one <|eot_id|> per finished message
        assert set(headers.tolist()) <= {1, 3, 5} and 1 in headers.tolist() and {3, 5} & set(headers.tolist())
        assert 0.3 <= float((headers > 1).float().mean()) <= 0.7

    @pytest.mark.parametrize("spec, message", [
        ("poetry=2", "FAMILY=WEIGHT"), ("arithmetic", "FAMILY=WEIGHT"), ("list=lots", "not a number"),
        ("list=-1", ">= 0"), ("list=0,units=0", "at least one"), ("units=inf", "finite"),
    ])
    def test_bad_family_weights(self, spec, message):
        with pytest.raises(ValueError, match=message):
            parse_family_weights(spec)

    def test_sampler_fills_every_mask(self, tokenizer):
        cfg = TrainConfig(out="unused", gen_length=8)
        batcher = Batcher(tokenizer, cfg)
        torch.manual_seed(0)
        model = LladaModel(_config(tokenizer)).eval()
        ids, positions, attention = batcher.prompts(tasks.make_examples("heldout", 3))
        out = generate_low_confidence(model, ids, positions, attention, 8, special_ids(tokenizer)["mask"])
        assert out.shape == (3, 8) and not (out == special_ids(tokenizer)["mask"]).any()


def _config(tokenizer):
    ids = special_ids(tokenizer)
    return llada_config(vocab_size=tokenizer.get_vocab_size(), d_model=32, n_layers=1, n_heads=2,
                        mlp_hidden_size=64, mask_token_id=ids["mask"], eos_token_id=ids["eos"])


class TestTrainSmoke:
    def test_few_steps_write_an_hf_llada_folder(self, tmp_path):
        out = tmp_path / "model"
        summary = train(TrainConfig(out=str(out), **TINY))
        assert summary["steps"] == 3 and summary["last_loss"] > 0
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "special_tokens_map.json", "training_summary.json"} <= {p.name for p in out.iterdir()}
        assert not list(out.glob("*.tmp"))
        config = json.loads((out / "config.json").read_text())
        assert config["model_type"] == "llada" and config["block_type"] == "llama"
        assert config["d_model"] == 32 and config["n_layers"] == 1
        tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
        assert tokenizer_config["chat_template"] == tasks.CHAT_TEMPLATE
        model = load_reference(out)
        assert isinstance(model, LladaModel)
        assert set(summary["heldout_exact_match"]) == set(tasks.FAMILIES) | {"overall"}
        assert set(summary["heldout_exact_match_loose"]) == set(tasks.FAMILIES) | {"overall"}

    def test_bf16_autocast_trains_fp32_weights(self, tmp_path):
        summary = train(TrainConfig(out=str(tmp_path / "bf16"), precision="bf16", **dict(TINY, max_steps=2)))
        assert summary["precision"] == "bf16" and math.isfinite(summary["last_loss"])
        tensors = CheckpointTensors(tmp_path / "bf16")
        assert {info.dtype for info in tensors.tensors.values()} == {"F32"}  # master weights stay fp32

    @pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")  # torch's own import
    def test_compiled_forward_trains_the_same_weights(self, tmp_path):
        """--compile changes how the forward runs, not what it computes: the same seed gives
        the same loss and, after two steps, the same weights as eager (to float rounding)."""
        tiny = dict(TINY, max_steps=2)
        eager = train(TrainConfig(out=str(tmp_path / "eager"), **tiny))
        compiled = train(TrainConfig(out=str(tmp_path / "compiled"), compile=True, **tiny))
        assert compiled["train_config"]["compile"] is True
        assert compiled["last_loss"] == pytest.approx(eager["last_loss"], rel=1e-4)
        a, b = CheckpointTensors(tmp_path / "eager"), CheckpointTensors(tmp_path / "compiled")
        assert set(a.tensors) == set(b.tensors)
        for name in a.tensors:
            assert torch.allclose(torch.from_numpy(a.read(name)), torch.from_numpy(b.read(name)), atol=1e-5), name

    def test_ema_checkpoint_holds_the_average_of_the_steps_weights(self, tmp_path):
        """With ema_decay d the first step's weights are copied and each later step blends in
        (1 - d) of the new ones: after two steps at d = 0.25 the checkpoint is 0.25 w1 + 0.75 w2,
        where w1, w2 are what one and two plain steps of the same seed write. The raw weights
        are scored beside it."""
        assert TrainConfig().ema_decay == 0.999  # the shipped recipe averages
        one = dict(TINY, max_steps=1)
        train(TrainConfig(out=str(tmp_path / "w1"), ema_decay=0.0, **one))
        train(TrainConfig(out=str(tmp_path / "w2"), ema_decay=0.0, **dict(TINY, max_steps=2)))
        summary = train(TrainConfig(out=str(tmp_path / "ema"), ema_decay=0.25, **dict(TINY, max_steps=2)))
        assert set(summary["heldout_exact_match_raw_weights"]) == set(tasks.FAMILIES) | {"overall"}
        w1, w2, ema = (CheckpointTensors(tmp_path / name) for name in ("w1", "w2", "ema"))
        moved = 0
        for name in w1.tensors:
            a, b, got = (torch.from_numpy(t.read(name)) for t in (w1, w2, ema))
            assert torch.allclose(got, 0.25 * a + 0.75 * b, atol=1e-6), name
            moved += not torch.allclose(got, b, atol=1e-6)
        assert moved > len(w1.tensors) // 2  # the average is not simply the last weights
        train(TrainConfig(out=str(tmp_path / "ema1"), ema_decay=0.25, **one))  # one step: the copy
        for name in w1.tensors:
            assert torch.equal(torch.from_numpy(CheckpointTensors(tmp_path / "ema1").read(name)),
                               torch.from_numpy(w1.read(name))), name

    @pytest.mark.parametrize("std", [0.02, 0.1])
    def test_init_std_draws_every_weight_with_that_spread(self, tmp_path, std):
        """Zero steps write the initial weights: every matrix and embedding table is N(0, std^2)
        (norm weights stay 1)."""
        summary = train(TrainConfig(out=str(tmp_path / "init"), init_std=std, ema_decay=0.0, **dict(TINY, max_steps=0)))
        assert summary["steps"] == 0 and summary["train_config"]["init_std"] == std
        tensors = CheckpointTensors(tmp_path / "init")
        matrices = 0
        for name in tensors.tensors:
            w = torch.from_numpy(tensors.read(name))
            if w.dim() == 1:  # RMSNorm weights
                assert torch.equal(w, torch.ones_like(w)), name
                continue
            matrices += 1
            assert abs(w.mean().item()) < 0.2 * std and w.std().item() == pytest.approx(std, rel=0.1), name
        assert matrices >= 7  # embedding, q/k/v/out, three MLP matrices, head
        assert json.loads((tmp_path / "init" / "config.json").read_text())["init_std"] == std

    def test_late_family_weights_take_over_at_their_share_of_the_budget(self, tmp_path, capsys):
        summary = train(TrainConfig(out=str(tmp_path / "late"), late_at=0.0,
                                    late_family_weights="arithmetic=1,sums=1", **dict(TINY, max_steps=2)))
        assert summary["steps"] == 2 and summary["train_config"]["late_family_weights"] == "arithmetic=1,sums=1"
        assert "step 0: family weights from now on arithmetic=1,sums=1" in capsys.readouterr().out

    def test_one_example_per_row_trains(self, tmp_path):
        """The default packs examples into shared rows; pack_width 0 batches one per row."""
        assert TrainConfig().pack_width > 0
        summary = train(TrainConfig(out=str(tmp_path / "rows"), pack_width=0, **dict(TINY, max_steps=2)))
        assert summary["steps"] == 2 and math.isfinite(summary["last_loss"])
        assert summary["train_config"]["pack_width"] == 0

    def test_weight_tying_writes_one_shared_table_that_exports(self, tmp_path):
        from unmask.export import export_model

        out = tmp_path / "tied"
        train(TrainConfig(out=str(out), weight_tying=True, **dict(TINY, max_steps=2)))
        assert json.loads((out / "config.json").read_text())["weight_tying"] is True
        names = set(CheckpointTensors(out).tensors)
        assert "model.transformer.ff_out.weight" not in names and "model.transformer.wte.weight" in names  # head = embedding
        package = export_model(out, tmp_path / "pkg", precision="int8", quiet=True)
        assert package.validation and package.validation[0].top1_agreement >= 0.9

    def test_bad_settings_fail_before_the_folder_is_made(self, tmp_path, capsys):
        out = tmp_path / "model"
        assert main(["--out", str(out), "--family-weights", "arithmetic=x"]) == 2
        assert main(["--out", str(out), "--precision", "fp8"]) == 2
        assert main(["--out", str(out), "--pack-width", "-1"]) == 2
        assert main(["--out", str(out), "--loose-rate", "1.5"]) == 2
        assert main(["--out", str(out), "--trim-rate", "-0.5"]) == 2
        assert main(["--out", str(out), "--final-eval-per-family", "200"]) == 2  # more than the split holds
        assert main(["--out", str(out), "--eval-per-family", "0"]) == 2
        assert main(["--out", str(out), "--ema-decay", "1"]) == 2
        assert main(["--out", str(out), "--init-std", "0"]) == 2
        assert main(["--out", str(out), "--late-family-weights", "sum=1"]) == 2
        assert main(["--out", str(out), "--late-family-weights", "sums=1", "--late-at", "2"]) == 2
        err = capsys.readouterr().err
        assert "not a number" in err and "auto, bf16 or fp32" in err and "pack_width" in err and "loose_rate" in err
        assert "trim_rate is a probability" in err
        assert "use a smaller --final-eval-per-family" in err and "short families: ['units']" in err
        assert "--eval-per-family must be at least 1, got 0" in err
        assert "bad family weight 'sum=1'" in err and "late_at is a probability in [0, 1], got 2.0" in err
        assert "ema_decay is the share of the average kept per step, in [0, 1) (0 = off), got 1.0" in err
        assert "init_std is a standard deviation > 0, got 0.0" in err
        assert not out.exists()
        assert resolve_precision("fp32") == "fp32" and resolve_precision("auto") in ("bf16", "fp32")

    def test_init_from_starts_at_the_checkpoints_weights_and_tokenizer(self, tmp_path, capsys):
        """A second stage: zero steps from a checkpoint write back the same weights (the average
        starts as a copy) and the same tokenizer, and the architecture comes from the checkpoint."""
        first = tmp_path / "first"
        train(TrainConfig(out=str(first), **dict(TINY, max_steps=2)))
        again = tmp_path / "again"
        summary = train(TrainConfig(out=str(again), init_from=str(first), **dict(TINY, max_steps=0, d_model=64)))
        assert summary["train_config"]["d_model"] == 32 and summary["train_config"]["init_from"] == str(first)
        a, b = CheckpointTensors(first), CheckpointTensors(again)
        assert set(a.tensors) == set(b.tensors)
        for name in a.tensors:
            assert np.array_equal(a.read(name), b.read(name)), name
        assert (again / "tokenizer.json").read_text() == (first / "tokenizer.json").read_text()
        train(TrainConfig(out=str(tmp_path / "more"), init_from=str(first), **TINY))  # and it trains on
        assert not np.array_equal(CheckpointTensors(tmp_path / "more").read(name), a.read(name))
        for bad, message in ((tmp_path / "nowhere", "not a checkpoint of this script"),
                             (again, "is the output folder")):
            assert main(["--out", str(again), "--overwrite", "--init-from", str(bad), "--max-steps", "0"]) == 2
            assert message in capsys.readouterr().err

    def test_refuses_existing_folder_unless_overwrite(self, tmp_path, capsys):
        out = tmp_path / "model"
        out.mkdir()
        with pytest.raises(FileExistsError):
            train(TrainConfig(out=str(out), **TINY))
        assert main(["--out", str(out), "--max-steps", "1"]) == 2
        assert "--overwrite" in capsys.readouterr().err
        assert not list(out.iterdir())
        train(TrainConfig(out=str(out), overwrite=True, **dict(TINY, max_steps=1)))
        assert (out / "model.safetensors").exists()


class TestPeopleData:
    def test_people_batches_draw_conversations_and_the_ood_family(self):
        from unmask import people

        corpus = [tasks.chat_prompt(ex.prompt, ex.history) + ex.answer + tasks.EOT
                  for ex in itertools.islice(people.iter_train(0), 2000)]
        tok = train_tokenizer(corpus, 600)
        cfg = resolve_data(TrainConfig(out="unused", data="people", pack_width=0, length_buckets=1))
        assert cfg.gen_length == people.GEN_LENGTH and "ood=" in cfg.family_weights
        batcher = Batcher(tok, cfg)
        examples = batcher.draw(400)
        assert {ex.family for ex in examples} == set(people.FAMILIES) | {"arith_short", "sums"}
        assert all(ex.answer == people.REFUSAL for ex in examples if ex.family == "ood")
        followed = [ex for ex in examples if ex.history]
        assert followed and all(tasks.split_of(ex.prompt) == "train" for ex in examples)
        ids = batcher.prompt(followed[0])
        assert tok.decode(ids, skip_special_tokens=False).count("<|start_header_id|>user") == len(followed[0].history) + 1
        assert len(batcher.region(people.REFUSAL)) == people.GEN_LENGTH

    def test_ood_weight_needs_people_data(self):
        with pytest.raises(ValueError, match="bad family weight 'ood=1'"):
            parse_family_weights("ood=1")
        assert parse_family_weights("ood=1", "people") == {"ood": 1.0}
        with pytest.raises(ValueError, match="unknown data"):
            resolve_data(TrainConfig(out="unused", data="web"))

    def test_people_data_mixes_in_the_tasks_own_templates_by_name(self):
        from unmask import people

        assert parse_family_weights("list=1,tasks.list=0.5", "people") == {"list": 1.0, "tasks.list": 0.5}
        with pytest.raises(ValueError, match="bad family weight 'tasks.list=1'"):
            parse_family_weights("tasks.list=1")  # --data tasks draws them under their own names
        tok = train_tokenizer([tasks.chat_prompt(ex.prompt) + ex.answer for ex in
                               itertools.islice(people.iter_train(0), 500)], 500)
        cfg = resolve_data(TrainConfig(out="unused", data="people", family_weights="tasks.list=1,ood=1"))
        examples = Batcher(tok, cfg).draw(300)
        templates = {ex.prompt for ex in tasks.make_examples("train", 2000, families=["list"])}
        lists = [ex for ex in examples if ex.family == "list"]
        assert 100 < len(lists) < 200 and all(not ex.history and tasks.split_of(ex.prompt) == "train" for ex in lists)
        assert sum(ex.prompt in templates for ex in lists) > 0.3 * len(lists)  # the tasks' own wordings

    def test_few_people_steps_score_each_people_set(self, tmp_path):
        from unmask import people

        summary = train(TrainConfig(out=str(tmp_path / "people"), data="people", **dict(TINY, gen_length=48)))
        assert summary["steps"] == 3 and summary["gen_length"] == people.GEN_LENGTH
        assert set(summary["people_sets"]) == set(people.SETS)
        assert set(summary["people_sets"]["ood"]) == {"ood", "overall"}
        assert summary["train_config"]["data"] == "people"

    def test_ship_default_declares_what_the_checkpoint_was_trained_on(self, tmp_path):
        from unmask import people
        from training.ship_default import trained_tasks

        assert trained_tasks(tmp_path) == (tasks.FAMILIES, tasks.GEN_LENGTH)  # no summary: the tasks' defaults
        summary = {"gen_length": 48, "train_config": {"data": "people"}}
        (tmp_path / "training_summary.json").write_text(json.dumps(summary))
        assert trained_tasks(tmp_path) == (people.FAMILIES, 48)
        summary = {"gen_length": 32, "train_config": {"data": "tasks"}}
        (tmp_path / "training_summary.json").write_text(json.dumps(summary))
        assert trained_tasks(tmp_path) == (tasks.FAMILIES, 32)
