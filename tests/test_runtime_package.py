"""Package loading: the loader refuses hostile or broken packages before ORT opens anything."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import unmask
from unmask.manifest import (
    FORMAT_VERSION,
    Dims,
    GraphFiles,
    Manifest,
    SpecialIds,
    sha256_file,
    write_manifest,
)
from unmask.package import external_data_locations, open_package


def _graph_with_external(folder: Path, location: str) -> None:
    """model.onnx whose one initializer lives in external data at `location` (written verbatim)."""
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (folder / "model.onnx").write_bytes(model.SerializeToString())


def make_package(folder: Path, *, location: str = "model.onnx.data", list_data: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _graph_with_external(folder, location)
    (folder / "model.onnx.data").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (folder / "tokenizer.json").write_text("{}")
    files = {"model.onnx": sha256_file(folder / "model.onnx")}
    if list_data:
        files["model.onnx.data"] = sha256_file(folder / "model.onnx.data")
    manifest = Manifest(
        architecture="llada",
        dims=Dims(vocab_size=16, hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=4,
                  max_sequence_length=64),
        special_ids=SpecialIds(mask_id=15, eos_id=14),
        precision="fp32",
        target="cpu",
        graph=GraphFiles(file="model.onnx", files=files),
    )
    write_manifest(manifest, folder)
    return folder


def _rehash(folder: Path) -> None:
    raw = json.loads((folder / "unmask.json").read_text())
    raw["graph"]["files"] = {name: sha256_file(folder / name) for name in raw["graph"]["files"]}
    (folder / "unmask.json").write_text(json.dumps(raw))


class TestOpenPackage:
    def test_good_package_opens(self, tmp_path):
        package = open_package(make_package(tmp_path / "pkg"))
        assert package.graph_path.name == "model.onnx"
        assert external_data_locations((package.graph_path).read_bytes()) == ["model.onnx.data"]

    def test_locations_found_by_onnx_too(self, tmp_path):
        folder = make_package(tmp_path / "pkg")
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        expected = [e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"]
        assert external_data_locations((folder / "model.onnx").read_bytes()) == expected

    def test_bad_sha256(self, tmp_path):
        folder = make_package(tmp_path / "pkg")
        (folder / "model.onnx.data").write_bytes(np.ones(4, dtype=np.float32).tobytes())
        with pytest.raises(unmask.ModelFormatError, match="sha256"):
            unmask.load(folder)

    def test_newer_format_version(self, tmp_path):
        folder = make_package(tmp_path / "pkg")
        raw = json.loads((folder / "unmask.json").read_text())
        raw["format_version"] = FORMAT_VERSION + 1
        (folder / "unmask.json").write_text(json.dumps(raw))
        with pytest.raises(unmask.ModelFormatError, match="newer"):
            unmask.load(folder)

    @pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "/etc/passwd",
                                          "C:\\Windows\\win.ini", "..\\secret.bin"])
    def test_external_data_outside(self, tmp_path, location):
        (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
        folder = make_package(tmp_path / "pkg", location=location)
        _rehash(folder)
        with pytest.raises(unmask.ModelFormatError, match="outside"):
            unmask.load(folder)

    def test_external_data_symlink_outside(self, tmp_path):
        secret = tmp_path / "secret.bin"
        secret.write_bytes(np.arange(4, dtype=np.float32).tobytes())
        folder = make_package(tmp_path / "pkg")
        (folder / "model.onnx.data").unlink()
        os.symlink(secret, folder / "model.onnx.data")
        with pytest.raises(unmask.ModelFormatError, match="symlink"):
            unmask.load(folder)

    def test_tokenizer_symlink_outside(self, tmp_path):
        (tmp_path / "elsewhere.json").write_text("{}")
        folder = make_package(tmp_path / "pkg")
        (folder / "tokenizer.json").unlink()
        os.symlink(tmp_path / "elsewhere.json", folder / "tokenizer.json")
        with pytest.raises(unmask.ModelFormatError, match="symlink"):
            unmask.load(folder)

    def test_unlisted_external_data(self, tmp_path):
        folder = make_package(tmp_path / "pkg", list_data=False)
        with pytest.raises(unmask.ModelFormatError, match="not listed"):
            unmask.load(folder)

    def test_garbage_graph(self, tmp_path):
        folder = make_package(tmp_path / "pkg")
        (folder / "model.onnx").write_bytes(b"\xff" * 40)
        _rehash(folder)
        with pytest.raises(unmask.ModelFormatError):
            unmask.load(folder)

    def test_missing_folder(self, tmp_path):
        with pytest.raises(unmask.ModelFormatError):
            unmask.load(tmp_path / "nothing")

    def test_copy_of_good_package_still_opens(self, tmp_path):
        folder = make_package(tmp_path / "pkg")
        shutil.copytree(folder, tmp_path / "copy")
        open_package(tmp_path / "copy")


class TestDefaultModel:
    def test_missing_default_says_how_to_export(self):
        from unmask.model import DEFAULT_MODEL

        if Path(unmask.__file__).parent.joinpath(*DEFAULT_MODEL, "unmask.json").is_file():
            pytest.skip("this install embeds a default model")
        with pytest.raises(unmask.ModelFormatError, match="unmask export"):
            unmask.load()
