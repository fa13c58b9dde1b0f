"""export_model / `unmask export`: reading, the package and its manifest, bad input, export_torch."""

import json
import math
import os

import numpy as np
import pytest

from unmask import ConfigError, ModelFormatError
from unmask.cli import main
from unmask.export import export_model
from unmask.export.safetensors_io import CheckpointTensors
from unmask.export.testing import make_dream_checkpoint, make_llada_checkpoint, random_weight
from unmask.manifest import read_manifest, verify_graph_files


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    return make_llada_checkpoint(tmp_path_factory.mktemp("llada") / "hf")


@pytest.fixture(scope="module")
def dream(tmp_path_factory):
    return make_dream_checkpoint(tmp_path_factory.mktemp("dream") / "hf")


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


class TestReading:
    @pytest.mark.parametrize("dtype, tol", [("float32", 0), ("float16", 1e-3), ("bfloat16", 8e-3)])
    @pytest.mark.parametrize("shards", [1, 3])
    def test_dtypes_and_shards(self, tmp_path, dtype, tol, shards):
        folder = make_llada_checkpoint(tmp_path / "hf", dtype=dtype, shards=shards)
        tensors = CheckpointTensors(folder)
        name = "model.transformer.blocks.1.ff_proj.weight"
        want = random_weight(name, (48, 32), seed=0)
        got = tensors.read(name)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 0.1)
        np.testing.assert_array_equal(tensors.read(name, rows=(5, 9)), got[5:9])
        assert (folder / "model.safetensors.index.json").exists() == (shards > 1)


class TestPackage:
    def test_manifest_and_files(self, llada, tmp_path):
        out = tmp_path / "pkg"
        result = export_model(llada, out, precision="int4", quiet=True)
        m = read_manifest(out)
        assert m == result.manifest
        assert sorted(os.listdir(out)) == ["model.onnx", "tokenizer.json", "unmask.json"]
        verify_graph_files(m, out)
        assert (m.architecture, m.precision, m.target, m.shift_logits, m.cache_reuse) == ("llada", "int4", "cpu",
                                                                                        False, True)
        assert m.generation == {"block_length": 32}
        assert "<|start_header_id|>" in m.chat_template and m.bos_token == "<|startoftext|>"
        tok = json.loads((llada / "tokenizer.json").read_text())
        special = {t["content"]: t["id"] for t in tok["added_tokens"]}
        assert (m.special_ids.mask_id, m.special_ids.eos_id, m.special_ids.eot_id, m.special_ids.bos_id) == (
            special["<|mdm_mask|>"], special["<|endoftext|>"], special["<|eot_id|>"], special["<|startoftext|>"])
        assert set(m.provenance["source_files"]) >= {"config.json", "model.safetensors", "tokenizer.json"}
        assert m.size_bytes == (out / "model.onnx").stat().st_size
        assert _leftovers(tmp_path) == []

    def test_dream_manifest(self, dream, tmp_path):
        m = export_model(dream, tmp_path / "pkg", quiet=True, validate=False).manifest
        assert m.shift_logits and m.dims.num_kv_heads == 2 and m.generation == {"algorithm": "entropy"}
        assert "<|im_start|>" in m.chat_template
        assert m.model_facts().shift_logits

    def test_external_data_above_threshold(self, llada, tmp_path):
        out = tmp_path / "pkg"
        export_model(llada, out, quiet=True, external_data_threshold=0)
        m = read_manifest(out)
        assert set(m.graph.files) == {"model.onnx", "model.onnx.data"}
        assert m.size_bytes == sum((out / f).stat().st_size for f in m.graph.files)

    def test_existing_output_needs_force(self, llada, tmp_path):
        out = tmp_path / "pkg"
        out.mkdir()
        (out / "keep").write_text("x")
        with pytest.raises(ConfigError, match="force"):
            export_model(llada, out, quiet=True)
        assert (out / "keep").exists()
        export_model(llada, out, quiet=True, force=True, validate=False)
        assert not (out / "keep").exists() and (out / "unmask.json").exists()


class TestCli:
    def test_export_command(self, dream, tmp_path, capsys):
        out = tmp_path / "pkg"
        assert main(["export", str(dream), str(out), "--precision", "int8"]) == 0
        err = capsys.readouterr().err
        assert "validation" in err and "KL" in err and "top-1" in err
        assert read_manifest(out).precision == "int8"
        assert main(["export", str(dream), str(out)]) == 1
        assert "--force" in capsys.readouterr().err

    def test_bad_combination(self, dream, tmp_path, capsys):
        assert main(["export", str(dream), str(tmp_path / "pkg"), "--precision", "int8", "--target", "coreml"]) == 1
        assert "int8" in capsys.readouterr().err and not (tmp_path / "pkg").exists()

    def test_rope_kernel_coreml_does_not_run(self, dream, tmp_path, capsys):
        assert main(["export", str(dream), str(tmp_path / "pkg"), "--target", "coreml", "--rope", "contrib"]) == 1
        assert "use ops" in capsys.readouterr().err and not (tmp_path / "pkg").exists()


def _copy(src, dst):
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


class TestBadInput:
    def _fails(self, folder, tmp_path, error, match, **settings):
        with pytest.raises(error, match=match):
            export_model(folder, tmp_path / "pkg", quiet=True, **settings)
        assert not (tmp_path / "pkg").exists() and _leftovers(tmp_path) == []

    def test_missing_config(self, llada, tmp_path):
        folder = _copy(llada, tmp_path / "hf")
        (folder / "config.json").unlink()
        self._fails(folder, tmp_path, ModelFormatError, "config.json")

    @pytest.mark.parametrize("name, text, match", [
        ("config.json", "[1, 2]", "config.json: expected a JSON object"),
        ("config.json", "{not json", "config.json: not readable JSON"),
        ("tokenizer_config.json", '["chat_template"]', "tokenizer_config.json: expected a JSON object"),
        ("tokenizer.json", '"tok"', "tokenizer.json: expected a JSON object"),
    ])
    def test_json_file_that_is_not_an_object(self, llada, tmp_path, name, text, match):
        folder = _copy(llada, tmp_path / "hf")
        (folder / name).write_text(text)
        self._fails(folder, tmp_path, ModelFormatError, match)

    def test_missing_weights(self, llada, tmp_path):
        folder = _copy(llada, tmp_path / "hf")
        (folder / "model.safetensors").unlink()
        self._fails(folder, tmp_path, ModelFormatError, "safetensors")

    def test_unknown_model_type(self, llada, tmp_path):
        folder = _copy(llada, tmp_path / "hf")
        cfg = json.loads((folder / "config.json").read_text()) | {"model_type": "gpt2"}
        (folder / "config.json").write_text(json.dumps(cfg))
        self._fails(folder, tmp_path, ConfigError, "model_type.*gpt2")

    @pytest.mark.parametrize("key, value", [("alibi", True), ("activation_type", "gelu"), ("scale_logits", True)])
    def test_unsupported_value_is_named(self, tmp_path, key, value):
        folder = make_llada_checkpoint(tmp_path / "hf", **{key: value})
        self._fails(folder, tmp_path, ConfigError, f"{key} = {value!r}")

    def test_shape_mismatch_names_tensor_and_shapes(self, tmp_path):
        folder = make_llada_checkpoint(tmp_path / "hf")
        cfg = json.loads((folder / "config.json").read_text()) | {"mlp_hidden_size": 64}
        (folder / "config.json").write_text(json.dumps(cfg))
        self._fails(folder, tmp_path, ModelFormatError, r"ff_proj.weight has shape \[48, 32\].*\[64, 32\]")

    def test_nan_weight_is_named(self, tmp_path):
        from unmask.export.testing import llada_weight_shapes, write_weights

        folder = make_llada_checkpoint(tmp_path / "hf")
        cfg = json.loads((folder / "config.json").read_text())
        bad = "model.transformer.blocks.1.up_proj.weight"

        def make(name, shape):
            w = random_weight(name, shape, 0)
            if name == bad:
                w[3, 4] = math.nan
            return w

        write_weights(folder, llada_weight_shapes(cfg), "bfloat16", 0, make=make)
        self._fails(folder, tmp_path, ModelFormatError, bad.replace(".", r"\."))

    def test_truncated_safetensors(self, llada, tmp_path):
        folder = _copy(llada, tmp_path / "hf")
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) - 100])
        self._fails(folder, tmp_path, ModelFormatError, "truncated")

    def test_garbage_safetensors(self, llada, tmp_path):
        folder = _copy(llada, tmp_path / "hf")
        (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
        self._fails(folder, tmp_path, ModelFormatError, "safetensors")

    def test_write_failure_leaves_nothing(self, llada, tmp_path, monkeypatch):
        from unmask.export import emitter

        def full_disk(self, data):
            raise ModelFormatError(f"{self.path}: cannot write weights ([Errno 28] No space left on device)")

        monkeypatch.setattr(emitter.WeightFile, "_write", full_disk)
        self._fails(llada, tmp_path, ModelFormatError, "No space left")

    def test_interrupt_leaves_nothing(self, llada, tmp_path, monkeypatch):
        from unmask.export import builder

        def interrupted(self, *args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(builder.GraphBuilder, "mlp", interrupted)
        self._fails(llada, tmp_path, KeyboardInterrupt, None)


class TestExportTorch:
    def test_generic_package(self, llada, tmp_path):
        torch = pytest.importorskip("torch")
        from unmask.export import export_torch
        from unmask.export.reference import load_reference

        model = load_reference(llada)
        result = export_torch(model, tmp_path / "pkg", tokenizer=llada, mask_id=model.hf_config["mask_token_id"])
        m = read_manifest(tmp_path / "pkg")
        assert (m.architecture, m.cache_reuse, m.dims.vocab_size) == ("generic", False, 320)
        assert result.validation[0].max_abs_error <= 1e-4
        assert torch is not None
