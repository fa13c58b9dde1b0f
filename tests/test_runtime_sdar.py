"""SDAR packages end to end: unmask.load of a package exported from make_sdar_checkpoint, decoded
with cache `block` (the default here) against the numpy reference loop driven by the PyTorch
reference forward; generate, stream (text per finished block), chat, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import unmask
from unmask import ConfigError
from unmask.export import export_model
from unmask.export.reference import load_reference
from unmask.export.testing import make_sdar_checkpoint
from sdar_numpy import sdar_generate

BLOCK = 4


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    """(PyTorch reference, loaded model) of a random SDAR checkpoint, block size 4."""
    folder = make_sdar_checkpoint(tmp_path_factory.mktemp("hf") / "sdar", max_position_embeddings=128, seed=3)
    out = tmp_path_factory.mktemp("pkg") / "sdar"
    export_model(folder, out, quiet=True)
    return load_reference(folder), unmask.load(out, device="cpu", threads=1)


def reference_forward(reference):
    def forward(ids):
        with torch.no_grad():
            return reference(torch.from_numpy(ids)).numpy()
    return forward


class TestGenerate:
    @pytest.mark.parametrize("strategy", ["sequential", "low_confidence_static", "low_confidence_dynamic",
                                          "entropy_bounded"])
    @pytest.mark.parametrize("prompt_length", [6, 8])
    def test_tokens_match_the_reference_loop(self, sdar, strategy, prompt_length):
        reference, model = sdar
        prompt = (np.arange(prompt_length, dtype=np.int64) * 37 + 11) % 250 + 20
        threshold = {"low_confidence_dynamic": 0.05, "entropy_bounded": 6.0}.get(strategy)
        result = model.generate(prompt_ids=prompt, gen_length=16, algorithm=strategy, threshold=threshold,
                                early_stop=False)
        cfg = result.config
        assert cfg.cache == "block" and cfg.block_length == BLOCK
        want = sdar_generate(reference_forward(reference), prompt, gen_length=16, block_length=BLOCK,
                             steps=BLOCK, mask_id=model.facts.mask_id, strategy=strategy,
                             threshold=cfg.resolved_threshold)
        np.testing.assert_array_equal(result.token_ids, want[prompt_length:])
        kinds = result.stats.step_kinds
        assert set(kinds) <= {"prefill", "denoise", "store"}
        assert kinds.count("prefill") == 1 and kinds[0] == "prefill"
        decoded_blocks = len(want) // BLOCK - prompt_length // BLOCK
        assert kinds.count("store") == decoded_blocks - 1
        assert max(result.stats.window_lengths[1:]) == BLOCK

    def test_block_cache_equals_no_cache(self, sdar):
        _, model = sdar
        prompt = np.arange(9, dtype=np.int64) + 40
        a = model.generate(prompt_ids=prompt, gen_length=12, early_stop=False)
        b = model.generate(prompt_ids=prompt, gen_length=12, early_stop=False, cache="none")
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        assert b.stats.step_kinds == ["full"] * b.stats.nfe
        assert len(a.token_ids) == 12 + 3  # 9 + 12 = 21 positions, padded to the block end (24)

    def test_a_block_gathers_its_past_once(self, sdar, monkeypatch):
        """The store pass after a block's last step reuses the past gathered for its steps."""
        from unmask.engine import EngineRun

        _, model = sdar
        calls = []
        real = EngineRun._gather_past
        monkeypatch.setattr(EngineRun, "_gather_past", lambda self, *a: calls.append(a[2:]) or real(self, *a))
        result = model.generate(prompt_ids=np.arange(9, dtype=np.int64) + 40, gen_length=12, early_stop=False)
        kinds = result.stats.step_kinds
        layers = model.manifest.dims.num_layers
        blocks = [start for start, *_ in calls[:: 2 * layers]]  # one (key, value) pair per layer per gather
        assert len(calls) == 2 * layers * (kinds.count("store") + 1) and blocks == [8, 12, 16, 20]

    def test_stream_yields_text_per_finished_block(self, sdar):
        _, model = sdar
        events = list(model.stream("Hello there", gen_length=16, early_stop=False))
        done = [e for e in events if e.block_done]
        assert len(done) >= 4
        assert "".join(e.text for e in events) == events[-1].result.text
        text_events = [e for e in events if e.text]
        assert all(e.block_done or e.done for e in text_events)
        assert len(text_events) >= 2  # a token stream, not one block at the end

    def test_chat(self, sdar):
        _, model = sdar
        chat = model.chat(system="Be brief.", gen_length=8)
        first = chat.send("Hi!")
        assert chat.history[-1]["content"] == first.text
        prompt = model.encode_prompt(messages=chat.messages("Again"))
        text = model.tokenizer.decode(prompt)
        assert "<|im_start|>assistant" in text.replace("\n", "") or len(prompt) > 0


class TestRefusals:
    @pytest.mark.parametrize("settings, message", [
        (dict(block_length=8), "disagrees with this model's block size 4"),
        (dict(cache="dual"), "cache 'dual' refreshes"),
        (dict(cache="prefix"), "cache 'prefix' refreshes"),
        (dict(algorithm="entropy"), "does not fit a block-causal model"),
    ])
    def test_one_line_errors(self, sdar, settings, message):
        _, model = sdar
        with pytest.raises(ConfigError, match=message) as info:
            model.generate("Hello", gen_length=8, **settings)
        assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def folder(sdar):
    """The SDAR package's folder, as a user names it on the command line."""
    return str(sdar[1].package.folder)


class TestCommands:
    """The CLI on an SDAR package, unchanged from the user's side."""

    def invoke(self, *args):
        from click.testing import CliRunner
        from unmask.cli import cli

        return CliRunner().invoke(cli, list(args), catch_exceptions=True)

    def test_generate_json(self, folder):
        import json

        result = self.invoke("generate", folder, "-p", "Hello", "--gen-length", "8", "--json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["config"]["cache"] == "block" and doc["config"]["block_length"] == BLOCK

    def test_refusal_is_one_line(self, folder, capsys):
        from unmask.cli import main

        assert main(["generate", folder, "-p", "Hello", "--gen-length", "8", "--cache", "dual"]) != 0
        err = capsys.readouterr().err
        assert "refreshes keys/values" in err and len(err.strip().splitlines()) == 1

    def test_bench(self, folder, tmp_path):
        result = self.invoke("bench", folder, "--gen-length", "8", "--out", str(tmp_path / "bench"))
        assert result.exit_code == 0, result.output
        assert "block" in result.output

    def test_eval(self, folder):
        import json
        from pathlib import Path

        spec = {"generator": "unmask.tasks", "families": ["arithmetic"], "gen_length": 8}
        (Path(folder) / "tasks.json").write_text(json.dumps(spec))
        result = self.invoke("eval", folder, "--limit", "2", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)


class TestServe:
    def test_max_tokens_rounds_to_the_package_block(self, sdar):
        from unmask.serve.adapter import prepare

        _, model = sdar
        _, config = prepare(model, {}, prompt="Hello", max_tokens=6)
        assert (config.gen_length, config.block_length, config.cache) == (8, BLOCK, "block")
