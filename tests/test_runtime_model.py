"""Model API: load, generate, stream, chat, settings and bad input, on a toy package.

The toy package is the one-layer graph of test_runtime_engine with a character
tokenizer and LLaDA's chat template, so these tests need no exporter and run in
about a second; the real-model comparisons live in test_runtime_reference.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from test_chat_template import LLADA_SPECIALS, LLADA_TEMPLATE, char_tokenizer
from test_runtime_engine import toy_graph, toy_manifest

import unmask
from unmask.manifest import GraphFiles, read_manifest, sha256_file, write_manifest

SETTINGS = dict(gen_length=8, block_length=4, steps=4, early_stop=False)


def _write_toy(folder, *, cache_reuse=True, template=True):
    folder.mkdir(parents=True)
    tok = char_tokenizer(LLADA_SPECIALS)
    tok._backend.save(str(folder / "tokenizer.json"))
    vocab = tok.vocab_size
    (folder / "model.onnx").write_bytes(toy_graph(vocab=vocab))
    manifest = dataclasses.replace(
        toy_manifest(vocab=vocab, mask_id=tok.special_id("<|mdm_mask|>"), eos_id=tok.special_id("<|endoftext|>"),
                     eot_id=tok.special_id("<|eot_id|>")),
        graph=GraphFiles("model.onnx", {"model.onnx": sha256_file(folder / "model.onnx")}),
        tokenizer_sha256=sha256_file(folder / "tokenizer.json"),
        cache_reuse=cache_reuse,
        chat_template=LLADA_TEMPLATE if template else None,
        bos_token="<|startoftext|>",
        generation={"gen_length": 8, "block_length": 4, "steps": 4},
    )
    write_manifest(manifest, folder)
    return folder


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    return _write_toy(tmp_path_factory.mktemp("toy") / "pkg")


@pytest.fixture(scope="module")
def model(toy_dir):
    return unmask.load(toy_dir, device="cpu", threads=1)


PROMPT = [5, 6, 7, 8, 9, 10]


class TestGenerate:
    def test_result(self, model):
        result = model.generate(prompt_ids=PROMPT, **SETTINGS)
        assert result.token_ids.dtype == np.int64 and result.token_ids.shape == (8,)
        assert result.prompt_ids.tolist() == PROMPT
        stops = {model.manifest.special_ids.eos_id, model.manifest.special_ids.eot_id}
        kept = [t for t in result.token_ids.tolist()]
        end = next((i for i, t in enumerate(kept) if t in stops), len(kept))
        assert result.text == model.tokenizer.decode(kept[:end])
        assert model.manifest.special_ids.mask_id not in kept

    def test_stats(self, model):
        stats = model.generate(prompt_ids=PROMPT, **SETTINGS).stats
        assert stats.nfe == 4 == len(stats.forward_seconds) == len(stats.host_seconds) == len(stats.step_kinds)
        assert stats.tokens == 8 and stats.tokens_per_forward == 2.0
        assert stats.first_block_seconds is not None and stats.first_block_seconds <= stats.total_seconds
        assert stats.tokens_per_second > 0 and stats.peak_rss_bytes > 10 << 20
        assert all(f > 0 for f in stats.forward_seconds) and all(h >= 0 for h in stats.host_seconds)
        assert stats.step_kinds == ["refresh", "window"] * 2 and stats.cache == "dual"
        assert stats.window_lengths == [14, 4, 14, 4]
        assert stats.past_lengths == [0, 10, 0, 10]
        json.dumps(stats.to_dict())

    @pytest.mark.parametrize("cache, kinds, windows, pasts", [
        ("none", ["full"] * 4, [14] * 4, [0] * 4),
        ("prefix", ["refresh", "window"] * 2, [14, 8, 14, 4], [0, 6, 0, 10]),
    ])
    def test_stats_per_cache_mode(self, model, cache, kinds, windows, pasts):
        stats = model.generate(prompt_ids=PROMPT, cache=cache, **SETTINGS).stats
        assert (stats.step_kinds, stats.window_lengths, stats.past_lengths) == (kinds, windows, pasts)

    def test_package_defaults_and_cache_default(self, model):
        cfg = model.resolve_config()
        assert (cfg.gen_length, cfg.block_length, cfg.steps, cfg.cache) == (8, 4, 4, "dual")
        assert model.facts.mask_id == model.manifest.special_ids.mask_id
        # a given config is complete: package defaults do not apply
        cfg = model.resolve_config(unmask.GenerationConfig(gen_length=16), block_length=8)
        assert (cfg.gen_length, cfg.block_length, cfg.steps) == (16, 8, None)
        assert model.resolve_config(model.resolve_config(steps=8)) == model.resolve_config(steps=8)

    def test_session_holds_no_copy_of_the_graph_bytes(self, model):
        # load() hands ORT the hashed bytes; the session must not keep them beside the weights it copied
        assert model.engine.session._model_bytes is None
        assert model.generate(prompt_ids=PROMPT, **SETTINGS).stats.nfe > 0

    def test_deterministic(self, model):
        a = model.generate(prompt_ids=PROMPT, **SETTINGS)
        b = model.generate(prompt_ids=PROMPT, **SETTINGS)
        assert a.token_ids.tolist() == b.token_ids.tolist()

    def test_first_step_of_cache_modes_equals_none(self, model):
        first = {}
        for cache in ("none", "prefix", "dual"):
            event = next(model.stream(prompt_ids=PROMPT, cache=cache, **SETTINGS))
            first[cache] = (event.positions.tolist(), event.tokens.tolist())
        assert first["prefix"] == first["none"] == first["dual"]

    def test_one_layer_caches_are_exact(self, model):
        # one layer: K/V of a position depend only on its own token, so reuse is exact
        runs = {c: model.generate(prompt_ids=PROMPT, cache=c, **SETTINGS).token_ids.tolist()
                for c in ("none", "prefix", "dual")}
        assert runs["prefix"] == runs["none"] == runs["dual"]

    def test_prompt_text_uses_chat_template(self, model):
        ids = model.encode_prompt("hi")
        assert ids.tolist() == model.chat_template.encode([{"role": "user", "content": "hi"}], model.tokenizer)
        result = model.generate("hi", gen_length=4, block_length=4, steps=2)
        assert result.prompt_ids.tolist() == ids.tolist()

    def test_messages_and_ids_agree(self, model):
        messages = [{"role": "user", "content": "hi <|eot_id|>"}]
        ids = model.encode_prompt(messages=messages)
        assert ids.tolist().count(model.tokenizer.special_id("<|eot_id|>")) == 1
        a = model.generate(messages=messages, **SETTINGS)
        b = model.generate(prompt_ids=ids, **SETTINGS)
        assert a.token_ids.tolist() == b.token_ids.tolist()


class TestPackageParallelRule:
    """A package whose default is threshold decoding (the embedded model's is) or a factor: the
    other rule from the caller replaces it; both from the caller is still refused."""

    @staticmethod
    def package(folder, **rule):
        _write_toy(folder)
        manifest = read_manifest(folder)
        manifest.generation = {**manifest.generation, **rule}
        write_manifest(manifest, folder)
        return unmask.load(folder, device="cpu", threads=1)

    def test_the_callers_rule_replaces_the_packages(self, tmp_path):
        by_threshold = self.package(tmp_path / "t", threshold=0.7)
        assert by_threshold.resolve_config().threshold == 0.7
        cfg = by_threshold.resolve_config(factor=0.5)
        assert (cfg.factor, cfg.threshold) == (0.5, None)
        assert by_threshold.generate(prompt_ids=PROMPT, factor=0.5).config.factor == 0.5
        by_factor = self.package(tmp_path / "f", factor=0.5)
        cfg = by_factor.resolve_config(threshold=0.9)
        assert (cfg.factor, cfg.threshold) == (None, 0.9)
        with pytest.raises(unmask.ConfigError, match="set only one"):
            by_threshold.resolve_config(factor=0.5, threshold=0.9)


class TestStream:
    def test_events(self, model):
        events = list(model.stream(prompt_ids=PROMPT, **SETTINGS))
        assert [e.step for e in events] == [0, 1, 2, 3]
        assert [e.block_done for e in events] == [False, True, False, True]
        assert [e.done for e in events] == [False, False, False, True]
        assert all(e.result is None for e in events[:-1])
        result = events[-1].result
        committed = np.concatenate([e.positions for e in events])
        assert sorted(committed.tolist()) == list(range(len(PROMPT), len(PROMPT) + 8))
        tokens = dict(zip(committed.tolist(), np.concatenate([e.tokens for e in events]).tolist()))
        assert [tokens[p] for p in range(len(PROMPT), len(PROMPT) + 8)] == result.token_ids.tolist()
        assert "".join(e.text for e in events) == result.text
        assert events[0].text == "" and events[2].text == ""
        assert [e.gen_start for e in events] == [len(PROMPT)] * 4  # positions - gen_start index the answer

    def test_canvas_places_commits_by_the_events_gen_start(self, model):
        import io

        from unmask.cli.render import CanvasView

        view = CanvasView(io.StringIO(), model.tokenizer.decode)
        view.start(model.resolve_config(**SETTINGS))
        for event in model.stream(prompt_ids=PROMPT, **SETTINGS):
            view.event(event)
        assert view.canvas == event.result.token_ids.tolist()

    def test_interrupt_leaves_model_usable(self, model, monkeypatch):
        expected = model.generate(prompt_ids=PROMPT, **SETTINGS).token_ids.tolist()
        begin = type(model.engine).begin

        def interrupting_begin(self, **kwargs):
            run = begin(self, **kwargs)
            calls = {"n": 0}
            forward = run.forward

            def forward_then_interrupt(request, ids):
                calls["n"] += 1
                if calls["n"] == 3:
                    raise KeyboardInterrupt
                return forward(request, ids)

            run.forward = forward_then_interrupt
            return run

        monkeypatch.setattr(type(model.engine), "begin", interrupting_begin)
        with pytest.raises(KeyboardInterrupt):
            model.generate(prompt_ids=PROMPT, **SETTINGS)
        monkeypatch.undo()
        assert model.generate(prompt_ids=PROMPT, **SETTINGS).token_ids.tolist() == expected


class TestChat:
    def test_history_and_reset(self, model):
        chat = model.chat(system="Be brief.", gen_length=4, block_length=4, steps=2)
        first = chat.send("hi")
        assert chat.history == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": first.text}]
        seen = chat.messages("again")
        assert seen[0] == {"role": "system", "content": "Be brief."} and seen[-1]["content"] == "again"
        events = list(chat.stream("again"))
        assert events[-1].result is not None and len(chat.history) == 4
        expected = model.encode_prompt(messages=seen)
        assert events[-1].result.prompt_ids.tolist() == expected.tolist()
        chat.reset()
        assert chat.history == [] and chat.system == "Be brief."

    def test_unfinished_turn_not_recorded(self, model):
        chat = model.chat(gen_length=8, block_length=4, steps=4)
        stream = chat.stream("hi")
        next(stream)
        stream.close()
        assert chat.history == []

    def test_bad_chat_settings(self, model):
        with pytest.raises(unmask.ConfigError):
            model.chat(gen_length=0)
        with pytest.raises(unmask.ConfigError):
            model.chat().send("   ")


class TestBadInput:
    @pytest.mark.parametrize("kwargs", [
        dict(prompt=""), dict(prompt="  \n"), dict(prompt_ids=[]), dict(messages=[]),
        dict(prompt="hi", prompt_ids=[1]), dict(),
        dict(prompt_ids=[1], gen_length=0), dict(prompt_ids=[1], cache="triple"),
        dict(prompt_ids=[1], steps=3, gen_length=8, block_length=4),
        dict(prompt_ids=[1], temperature=-1.0), dict(prompt_ids=[1], no_such_setting=1),
        dict(prompt_ids=[[1, 2]]), dict(prompt_ids=[10 ** 6]), dict(prompt_ids=[-1]),
    ])
    def test_config_errors(self, model, kwargs):
        with pytest.raises(unmask.ConfigError):
            model.generate(**kwargs)

    def test_errors_raised_at_call_not_iteration(self, model):
        with pytest.raises(unmask.ConfigError):
            model.stream(prompt_ids=[1], gen_length=0)

    def test_prompt_too_long_names_both_numbers(self, model):
        limit = model.manifest.dims.max_sequence_length
        with pytest.raises(unmask.ConfigError, match=rf"{limit - 4}.*\b{limit}\b") as info:
            model.generate(prompt_ids=[1] * (limit - 4), gen_length=8, block_length=4, steps=4)
        assert str(limit + 4) in str(info.value)

    def test_unknown_device(self, toy_dir):
        with pytest.raises(unmask.DeviceError):
            unmask.load(toy_dir, device="tpu")

    @pytest.mark.parametrize("threads", [0, -1, 1.5, True])
    def test_bad_threads(self, toy_dir, threads):
        with pytest.raises(unmask.ConfigError):
            unmask.load(toy_dir, threads=threads)

    def test_cache_on_package_without_reuse(self, tmp_path):
        model = unmask.load(_write_toy(tmp_path / "pkg", cache_reuse=False), device="cpu", threads=1)
        assert model.resolve_config().cache == "none"
        with pytest.raises(unmask.ConfigError):
            model.generate(prompt_ids=PROMPT, cache="dual")
        assert model.generate(prompt_ids=PROMPT, **SETTINGS).stats.step_kinds == ["full"] * 4

    def test_no_template(self, tmp_path):
        model = unmask.load(_write_toy(tmp_path / "pkg", template=False), device="cpu", threads=1)
        assert model.encode_prompt("hi").tolist() == model.tokenizer.encode("hi", add_special_tokens=True)
        with pytest.raises(unmask.ConfigError):
            model.generate(messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(unmask.ConfigError):
            model.chat()
