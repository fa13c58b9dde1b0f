"""unmask.cli.options: flags <-> GenerationConfig fields, parsing, ineffective-flag notes."""

import click
import pytest
from click.testing import CliRunner

from dataclasses import fields

from unmask import ConfigError, GenerationConfig, ModelFacts, ModelFormatError
from unmask.cli import options


@click.command()
@options.generation_options
def _probe(**kwargs):
    overrides = options.pop_overrides(kwargs)
    click.echo(repr(sorted(overrides.items())))
    click.echo(repr(sorted(kwargs)))


class TestSettings:
    def test_every_user_field_has_a_flag(self):
        names = set(options.settings())
        assert names == set(GenerationConfig.field_names())
        for s in options.settings().values():
            assert s.flag == "--" + s.name.replace("_", "-")

    def test_help_comes_from_field_metadata(self):
        for f in fields(GenerationConfig):
            assert f.metadata["help"].strip(), f.name  # every field says what it is for
            assert options.settings()[f.name].help == f.metadata["help"]
        result = CliRunner().invoke(_probe, ["--help"], terminal_width=400)
        for f in fields(GenerationConfig):
            assert f.metadata["help"].split(";")[0] in " ".join(result.output.split()), f.name

    @pytest.mark.parametrize(
        "name, text, value",
        [
            ("gen_length", "64", 64),
            ("gen-length", " 64 ", 64),
            ("steps", "none", None),
            ("threshold", "0.9", 0.9),
            ("threshold", "off", None),
            ("early_stop", "false", False),
            ("logits_eos_inf", "on", True),
            ("cache", "none", "none"),  # the cache mode "none", not the value None
            ("cache", "auto", None),
            ("algorithm", "maskgit_plus", "maskgit_plus"),
        ],
    )
    def test_parse_setting(self, name, text, value):
        assert options.parse_setting(name, text)[1] == value

    @pytest.mark.parametrize(
        "name, text, match",
        [
            ("gen_len", "3", "valid settings: gen_length"),
            ("gen_length", "many", "integer"),
            ("gen_length", "none", "integer"),  # not optional
            ("algorithm", "greedy", "low_confidence, random, origin"),
            ("early_stop", "maybe", "true or false"),
            ("mask_id", "3", "unknown setting"),  # model facts are not settings
        ],
    )
    def test_parse_setting_rejects(self, name, text, match):
        with pytest.raises(ConfigError, match=match):
            options.parse_setting(name, text)


class TestFlags:
    def test_only_given_flags_override(self):
        result = CliRunner().invoke(_probe, ["--gen-length", "32", "--no-early-stop", "--threshold", "none"])
        assert result.exit_code == 0, result.output
        first, rest = result.output.splitlines()
        assert first == repr([("early_stop", False), ("gen_length", 32), ("threshold", None)])
        assert rest == repr(["device", "threads", "verbose"])

    def test_no_flags_no_overrides(self):
        result = CliRunner().invoke(_probe, [])
        assert result.output.splitlines()[0] == "[]"

    def test_bad_choice_lists_valid(self):
        result = CliRunner().invoke(_probe, ["--algorithm", "greedy"])
        assert result.exit_code == 2
        assert "low_confidence, random" in result.output

    def test_bad_number(self):
        result = CliRunner().invoke(_probe, ["--steps", "x"])
        assert result.exit_code == 2 and "--steps" in result.output

    def test_help_lists_field_comments(self):
        result = CliRunner().invoke(_probe, ["--help"])
        assert "--confidence-eos-eot-inf / --no-confidence-eos-eot-inf" in result.output
        assert "semi-autoregressive block size" in result.output


class TestResolve:
    def test_ineffective_notes(self):
        llada = GenerationConfig(algorithm="low_confidence")
        notes = options.ineffective(llada, ["top_k", "gen_length", "eps"], architecture="llada")
        assert len(notes) == 2 and notes[0].startswith("--top-k has no effect")
        dream = GenerationConfig(algorithm="entropy")
        assert options.ineffective(dream, ["confidence_eos_eot_inf"])[0].startswith("--confidence-eos-eot-inf")
        assert options.ineffective(dream, ["top_p", "cfg_scale", "logits_eos_inf"]) == []
        drawn = GenerationConfig(algorithm="maskgit_plus", threshold=0.9)
        assert "threshold" in options.ineffective(drawn, ["alg_temp"])[0]
        cached = GenerationConfig(cache="dual")
        assert "no key/value inputs" in options.ineffective(cached, ["cache"], cache_reuse=False)[0]

    def test_describe_names_sources(self):
        cfg = GenerationConfig(gen_length=32, steps=16)
        text = options.describe(cfg, {"steps": 16}, {"gen_length": 32}, ModelFacts(mask_id=5))
        lines = {line.split()[0]: line for line in text.splitlines()}
        assert lines["gen_length"].endswith("[flag]")
        assert lines["steps"].endswith("[package]")
        assert lines["mask_id"].endswith("[model]")
        assert lines["block_length"].rstrip().endswith("[default]") and "= gen_length 32" in lines["block_length"]


class TestModelPath:
    def test_missing_path_suggests_export(self, tmp_path):
        with pytest.raises(ModelFormatError, match="unmask export"):
            options.check_model_path(tmp_path / "nope")

    def test_checkpoint_folder_suggests_export(self, tmp_path):
        (tmp_path / "config.json").write_text("{}")
        with pytest.raises(ModelFormatError, match="checkpoint folder.*unmask export"):
            options.check_model_path(tmp_path)

    def test_none_is_the_embedded_model(self):
        options.check_model_path(None)
