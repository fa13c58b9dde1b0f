"""GenerationConfig: defaults, overrides and the contradictions it must reject."""

import pytest

import unmask
from unmask import ConfigError, GenerationConfig


class TestGenerationConfig:
    def test_defaults_validate(self):
        cfg = GenerationConfig().validate()
        assert cfg.resolved_steps == cfg.gen_length
        assert cfg.num_blocks == 1

    def test_replace_and_round_trip(self):
        cfg = GenerationConfig().replace(gen_length=64, block_length=16, steps=32)
        assert cfg.validate().num_blocks == 4
        assert GenerationConfig.from_dict(cfg.to_dict()) == cfg

    def test_unknown_field_lists_valid(self):
        with pytest.raises(ConfigError, match="gen_length"):
            GenerationConfig().replace(gen_len=3)

    @pytest.mark.parametrize(
        "overrides",
        [
            {"gen_length": 100, "block_length": 32},
            {"gen_length": 64, "block_length": 16, "steps": 30},
            {"threshold": 0.0},
            {"threshold": 1.5},
            {"top_p": 0.0},
            {"top_p": 1.01},
            {"temperature": -0.1},
            {"algorithm": "fastest"},
            {"threshold": 0.9, "factor": 1.0},
            {"gen_length": 0},
            {"cache": "triple"},
            {"threshold": 0.9, "algorithm": "entropy"},
            {"steps": 2.5},
        ],
    )
    def test_contradictions_raise(self, overrides):
        with pytest.raises(ConfigError):
            GenerationConfig().replace(**overrides).validate()

    def test_errors_share_a_base(self):
        assert issubclass(ConfigError, unmask.UnmaskError)
        assert issubclass(unmask.ModelFormatError, unmask.UnmaskError)
        assert issubclass(unmask.DeviceError, unmask.UnmaskError)
