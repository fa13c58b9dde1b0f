"""unmask.manifest: round-trip, defaults, bad input."""

import json

import pytest

from unmask import GenerationConfig, ModelFormatError
from unmask.manifest import (
    FORMAT_VERSION,
    Dims,
    GraphFiles,
    Manifest,
    SpecialIds,
    generation_defaults,
    read_manifest,
    sha256_file,
    verify_graph_files,
    write_manifest,
)


def _manifest(**changes):
    values = dict(
        architecture="llada",
        dims=Dims(vocab_size=320, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=16,
                  max_sequence_length=128),
        special_ids=SpecialIds(mask_id=300, eos_id=301, eot_id=302, bos_id=303),
        precision="fp32",
        target="cpu",
        graph=GraphFiles(file="model.onnx", files={"model.onnx": "0" * 64}),
        generation={"block_length": 32},
        chat_template="{{ messages }}",
        provenance={"exporter_version": "0.1.0", "source_files": {"config.json": "ab"}},
    )
    values.update(changes)
    return Manifest(**values)


class TestManifest:
    def test_round_trip(self, tmp_path):
        m = _manifest()
        write_manifest(m, tmp_path)
        raw = json.loads((tmp_path / "unmask.json").read_text())
        assert list(raw)[0] == "format_version" and raw["format_version"] == FORMAT_VERSION
        assert read_manifest(tmp_path) == m

    def test_generation_config_and_facts(self):
        m = _manifest(shift_logits=True)
        cfg = m.generation_config(gen_length=64)
        assert cfg.block_length == 32 and cfg.gen_length == 64
        facts = m.model_facts()
        assert (facts.mask_id, facts.eos_id, facts.eot_id, facts.shift_logits) == (300, 301, 302, True)

    def test_generation_defaults_keeps_only_differences(self):
        assert generation_defaults(GenerationConfig()) == {}
        assert generation_defaults(GenerationConfig(block_length=32)) == {"block_length": 32}

    def test_unknown_keys_are_ignored(self, tmp_path):
        write_manifest(_manifest(), tmp_path)
        raw = json.loads((tmp_path / "unmask.json").read_text())
        raw["future_field"] = 1
        (tmp_path / "unmask.json").write_text(json.dumps(raw))
        assert read_manifest(tmp_path).architecture == "llada"

    def test_verify_graph_files(self, tmp_path):
        (tmp_path / "model.onnx").write_bytes(b"graph")
        m = _manifest(graph=GraphFiles(files={"model.onnx": sha256_file(tmp_path / "model.onnx")}))
        verify_graph_files(m, tmp_path)
        (tmp_path / "model.onnx").write_bytes(b"other")
        with pytest.raises(ModelFormatError, match="sha256"):
            verify_graph_files(m, tmp_path)


class TestManifestBadInput:
    def test_missing_file(self, tmp_path):
        with pytest.raises(ModelFormatError, match="not found"):
            read_manifest(tmp_path)

    def test_not_json(self, tmp_path):
        (tmp_path / "unmask.json").write_text("{nope")
        with pytest.raises(ModelFormatError, match="JSON"):
            read_manifest(tmp_path)

    @pytest.mark.parametrize(
        "edit, key",
        [
            (lambda r: r.pop("dims"), "dims"),
            (lambda r: r["dims"].pop("head_dim"), "dims.head_dim"),
            (lambda r: r.update(precision="int3"), "precision"),
            (lambda r: r.update(target="tpu"), "target"),
            (lambda r: r["special_ids"].update(mask_id=-1), "special_ids.mask_id"),
            (lambda r: r.update(format_version=FORMAT_VERSION + 1), "format_version"),
            (lambda r: r.update(generation={"no_such": 1}), "no_such"),
            (lambda r: r["graph"].update(file="../evil.onnx"), "evil"),
            (lambda r: r.pop("precision"), "precision"),
        ],
    )
    def test_bad_key_is_named(self, tmp_path, edit, key):
        write_manifest(_manifest(), tmp_path)
        raw = json.loads((tmp_path / "unmask.json").read_text())
        edit(raw)
        (tmp_path / "unmask.json").write_text(json.dumps(raw))
        with pytest.raises(ModelFormatError, match=key.replace(".", r"\.")):
            read_manifest(tmp_path)

    def test_write_rejects_invalid(self, tmp_path):
        with pytest.raises(ModelFormatError, match="architecture"):
            write_manifest(_manifest(architecture="gpt"), tmp_path)
        assert not (tmp_path / "unmask.json").exists()
