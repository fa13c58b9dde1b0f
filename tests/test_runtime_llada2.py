"""LLaDA2 packages end to end: a tiny llada2_moe checkpoint exported with the project's own
helpers, loaded with unmask.load and decoded with its defaults (algorithm llada2, cache block),
token for token against the numpy reference sampler driven by the PyTorch reference forward of
the same checkpoint; the CLI's generate and chat; the refusals."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from click.testing import CliRunner

import unmask
from unmask import ConfigError
from unmask.cli import cli
from unmask.export import export_model
from unmask.export.reference import load_reference
from unmask.export.testing import make_llada2_checkpoint
from llada2_numpy import llada2_generate
from test_export_sdar import _full  # the PyTorch reference's whole-sequence forward

BLOCK = 4


def exported(tmp_path_factory, **config_overrides):
    """(PyTorch reference, loaded model) of a random LLaDA2 MoE checkpoint, block size 4."""
    folder = make_llada2_checkpoint(tmp_path_factory.mktemp("hf") / "llada2", seed=3, **config_overrides)
    export_model(folder, folder.parent / "pkg", quiet=True)
    return load_reference(folder), unmask.load(folder.parent / "pkg", device="cpu", threads=1)


@pytest.fixture(scope="module")
def llada2(tmp_path_factory):
    return exported(tmp_path_factory)


@pytest.fixture(scope="module")
def frequent_eos(tmp_path_factory):
    """The same checkpoint with config.json's eos_token_id set to a token the model often picks (31)."""
    return exported(tmp_path_factory, eos_token_id=31)


@pytest.fixture(scope="module")
def folder(llada2):
    return str(llada2[1].package.folder)


def reference_forward(reference):
    return functools.partial(_full, reference)  # ids [B, L] -> the reference's logits [B, L, V]


# (prompt length, settings): the tiny model's confidences are 0.02 to 0.1, so the default 0.95
# threshold is never reached (the schedule's floor decides) and 0.04 passes several at once
CASES = {
    "defaults_mid_block_prompt": (6, {}),
    "defaults_block_end_prompt": (8, {}),
    "low_threshold": (7, dict(threshold=0.04)),
    "two_steps_per_block": (5, dict(steps=8)),
    "minimal_topk": (6, dict(gen_length=4, minimal_topk=2)),
    "filters_at_greedy": (6, dict(threshold=0.3, top_k=3, top_p=0.9)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tokens_match_the_reference_sampler(llada2, case):
    reference, model = llada2
    prompt_length, settings = CASES[case]
    prompt = (np.arange(prompt_length, dtype=np.int64) * 37 + 11) % 250 + 20
    settings = dict(gen_length=16) | settings
    result = model.generate(prompt_ids=prompt, early_stop=False, **settings)
    cfg = result.config
    assert (cfg.algorithm, cfg.cache, cfg.block_length) == ("llada2", "block", BLOCK)  # the package's defaults
    want = llada2_generate(reference_forward(reference), prompt, gen_length=cfg.gen_length, block_length=BLOCK,
                           steps=cfg.resolved_steps // cfg.num_blocks, mask_id=model.facts.mask_id,
                           eos_id=model.facts.eos_id, threshold=cfg.resolved_threshold,
                           minimal_topk=cfg.minimal_topk or 1, top_k=cfg.top_k, top_p=cfg.top_p)
    np.testing.assert_array_equal(result.token_ids, want[prompt_length:])
    kinds = result.stats.step_kinds
    assert set(kinds) <= {"prefill", "denoise", "store"} and kinds[0] == "prefill"
    assert kinds.count("store") == len(want) // BLOCK - prompt_length // BLOCK - 1
    assert max(result.stats.window_lengths[1:]) == BLOCK


def test_early_stop_mid_block(frequent_eos):
    """The first generated EOS (position 8, the first of block 2) is committed by that block's first step with
    nothing masked before it: the generation ends there, its holes EOS, the text the full decode's."""
    reference, model = frequent_eos
    assert model.facts.eos_id == 31
    prompt = (np.arange(6, dtype=np.int64) * 37 + 11) % 250 + 20
    result = model.generate(prompt_ids=prompt, gen_length=16)
    cfg = result.config
    want = llada2_generate(reference_forward(reference), prompt, gen_length=16, block_length=BLOCK,
                           steps=cfg.resolved_steps // cfg.num_blocks, mask_id=model.facts.mask_id, eos_id=31,
                           threshold=cfg.resolved_threshold)[6:]
    eos = int(np.flatnonzero(want == 31)[0])
    np.testing.assert_array_equal(result.token_ids[: eos + 1], want[: eos + 1])
    assert (result.token_ids[eos + 1 :] == 31).all() and (want[eos + 1 :] != 31).any()
    assert result.stats.tokens == eos + 1 and (6 + eos + 1) % BLOCK  # stopped right there, inside its block
    assert result.stats.step_kinds[-1] == "denoise"


def test_low_threshold_commits_several_per_step(llada2):
    _, model = llada2
    prompt = np.arange(7, dtype=np.int64) + 30
    fast = model.generate(prompt_ids=prompt, gen_length=16, threshold=0.04, early_stop=False)
    slow = model.generate(prompt_ids=prompt, gen_length=16, early_stop=False)
    assert fast.stats.step_kinds.count("denoise") < slow.stats.step_kinds.count("denoise")


def test_block_cache_equals_no_cache(llada2):
    _, model = llada2
    prompt = np.arange(9, dtype=np.int64) + 40
    a = model.generate(prompt_ids=prompt, gen_length=12, threshold=0.04)
    b = model.generate(prompt_ids=prompt, gen_length=12, threshold=0.04, cache="none")
    np.testing.assert_array_equal(a.token_ids, b.token_ids)
    assert set(b.stats.step_kinds) == {"full"}


def test_chat(llada2):
    _, model = llada2
    chat = model.chat(gen_length=8)
    first = chat.send("Hi!")
    assert chat.history[-1]["content"] == first.text
    assert first.config.algorithm == "llada2" and first.config.cache == "block"


class TestCommands:
    """The CLI on a LLaDA2 package: the sampler and the block cache without a flag."""

    def test_generate_json(self, llada2, folder):
        _, model = llada2
        result = CliRunner().invoke(cli, ["generate", folder, "-p", "Hello", "--gen-length", "8", "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert (doc["config"]["algorithm"], doc["config"]["cache"], doc["config"]["block_length"]) == (
            "llada2", "block", BLOCK)
        assert doc["text"] == model.generate("Hello", gen_length=8).text

    def test_chat_command(self, llada2, folder):
        _, model = llada2
        result = CliRunner().invoke(cli, ["chat", folder, "--gen-length", "8", "--no-stream"], input="Hi!\n/exit\n")
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0] == model.chat(gen_length=8).send("Hi!").text.strip()

    def test_minimal_topk_flag(self, folder):
        result = CliRunner().invoke(cli, ["generate", folder, "-p", "Hello", "--gen-length", "8",
                                          "--minimal-topk", "4", "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["config"]["minimal_topk"] == 4

    @pytest.mark.parametrize("args, message", [
        (["--minimal-topk", "2", "--algorithm", "low_confidence_static"], "minimal_topk does not apply"),
        (["--block-length", "8"], "disagrees with this model's block size 4"),
        (["--threshold", "2"], "threshold must be in (0, 1]"),
    ])
    def test_refusals_are_one_line(self, folder, capsys, args, message):
        from unmask.cli import main

        assert main(["generate", folder, "-p", "Hello", "--gen-length", "8", *args]) != 0
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1

    def test_unused_setting_is_noted(self, folder):
        result = CliRunner().invoke(cli, ["generate", folder, "-p", "Hello", "--gen-length", "8", "--alg-temp", "0.5"])
        assert result.exit_code == 0, result.output
        assert "--alg-temp has no effect here (llada2, algorithm llada2" in result.stderr


def test_refusals_from_python(llada2):
    _, model = llada2
    with pytest.raises(ConfigError, match="minimal_topk 9 exceeds gen_length 8"):
        model.generate("Hello", gen_length=8, minimal_topk=9)
