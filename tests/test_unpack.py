"""training.unpack: a LLaDA package back into a checkpoint the trainer continues from."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from tokenizers import Tokenizer

from unmask.export import export_model
from unmask.export.reference import read_safetensors
from unmask.export.testing import make_llada_checkpoint
from unmask.model import DEFAULT_MODEL
from training.train import read_start
from training.unpack import UnpackError, main, unpack


def tensors(folder):
    return {k: v.numpy() for k, v in read_safetensors(folder).items()}


def initializers(package):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(package / "model.onnx")).graph.initializer}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_llada_checkpoint(tmp_path_factory.mktemp("src") / "ckpt", d_model=32, n_layers=2, n_heads=4,
                                 mlp_hidden_size=48, seed=3)


@pytest.mark.parametrize("tied", [False, True])
def test_fp32_package_gives_back_the_exact_weights(tmp_path, tied):
    src = make_llada_checkpoint(tmp_path / "src", weight_tying=tied, seed=5)
    export_model(src, tmp_path / "pkg", "fp32", quiet=True, validate=False)
    unpack(tmp_path / "pkg", tmp_path / "back")
    want, got = tensors(src), tensors(tmp_path / "back")
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value.astype(np.float32), err_msg=name)
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["weight_tying"] is tied and config["mlp_hidden_size"] == 48 and config["rope_theta"] == 500000.0
    assert read_start(str(tmp_path / "back"), str(tmp_path / "next")).dims["d_model"] == 32


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_tied_head_stays_tied_though_stored_apart(tmp_path, precision):
    src = make_llada_checkpoint(tmp_path / "src", weight_tying=True, seed=6)
    export_model(src, tmp_path / "pkg", precision, quiet=True, validate=False)
    assert any(k.startswith("head.weight_q") for k in initializers(tmp_path / "pkg"))  # 8-bit blocks of its own
    unpack(tmp_path / "pkg", tmp_path / "back")
    assert json.loads((tmp_path / "back" / "config.json").read_text())["weight_tying"] is True
    assert "model.transformer.ff_out.weight" not in tensors(tmp_path / "back")


def test_int8_weights_quantize_back_to_the_same_bytes(tmp_path, source):
    export_model(source, tmp_path / "int8", "int8", quiet=True, validate=False)
    unpack(tmp_path / "int8", tmp_path / "back")
    export_model(tmp_path / "back", tmp_path / "again", "int8", quiet=True, validate=False)
    first, second = initializers(tmp_path / "int8"), initializers(tmp_path / "again")
    layer = [k for k in first if k.endswith(("weight_quantized", "weight_scale"))]
    assert len(layer) == 2 * 4 * 2  # q_k_v, o, gate_up, down in each of 2 layers
    for name in layer:
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
    # and the dequantized weights are the originals up to 7-bit rounding (half a step per channel)
    want, got = tensors(source), tensors(tmp_path / "back")
    for name in ("model.transformer.blocks.1.v_proj.weight", "model.transformer.blocks.0.ff_proj.weight"):
        step = np.abs(want[name]).max(axis=1, keepdims=True) / 63
        assert np.all(np.abs(got[name] - want[name]) <= step / 2 + 1e-7), name


@pytest.mark.parametrize("block, symmetric", [(16, False), (32, True)])
def test_int4_blocks_come_back_within_their_rounding(tmp_path, source, block, symmetric):
    # blocks of 32 do not divide the MLP's 48 inputs: the down projection's last block is padded
    export_model(source, tmp_path / "int4", "int4", quiet=True, validate=False, block_size=block, symmetric=symmetric)
    assert any(k.endswith("weight_zero_points") for k in initializers(tmp_path / "int4")) is not symmetric
    unpack(tmp_path / "int4", tmp_path / "back")
    want, got = tensors(source), tensors(tmp_path / "back")
    for name in ("model.transformer.blocks.0.q_proj.weight", "model.transformer.blocks.1.ff_out.weight",
                 "model.transformer.blocks.0.up_proj.weight"):
        w = want[name]
        padded = np.pad(w, ((0, 0), (0, -w.shape[1] % block)))
        blocks = padded.reshape(w.shape[0], -1, block)
        # a block's 4-bit step: its range (with 0) over 15 with zero points, half a step of rounding; symmetric,
        # ORT maps the largest magnitude to -8, so the other sign's extreme clips at +7: up to a whole step
        if symmetric:
            step, bound = np.abs(blocks).max(axis=2) / 8, 1.01
        else:
            step, bound = (np.maximum(blocks.max(axis=2), 0) - np.minimum(blocks.min(axis=2), 0)) / 15, 0.51
        error = np.abs(got[name] - w)
        assert np.all(error <= np.repeat(step, block, axis=1)[:, : w.shape[1]] * bound + 1e-6), name
        assert error.mean() < 0.1 * np.abs(w).mean(), name


def test_refusals_name_the_problem(tmp_path, source, capsys):
    with pytest.raises(UnpackError, match="not a model package"):
        unpack(source, tmp_path / "x")
    export_model(source, tmp_path / "pkg", "fp32", quiet=True, validate=False)
    (tmp_path / "taken").mkdir()
    with pytest.raises(UnpackError, match="exists; name a new folder"):
        unpack(tmp_path / "pkg", tmp_path / "taken")
    with pytest.raises(UnpackError, match="is not a folder"):
        unpack(tmp_path / "pkg", tmp_path / "no" / "such")
    manifest = json.loads((tmp_path / "pkg" / "unmask.json").read_text())
    (tmp_path / "pkg" / "unmask.json").write_text(json.dumps(manifest | {"architecture": "dream"}))
    assert main([str(tmp_path / "pkg"), str(tmp_path / "y")]) == 2
    assert "only LLaDA packages unpack" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    export_model(source, tmp_path / "unfused", "fp32", quiet=True, validate=False, fuse_projections=False)
    with pytest.raises(UnpackError, match="without fused projections"):
        unpack(tmp_path / "unfused", tmp_path / "z")


def test_the_shipped_model_is_a_start_for_a_second_stage(tmp_path):
    """The recipe's first step: the embedded package unpacks, re-exports to the same int8 layer bytes, and
    is a start the trainer takes, with the package's tokenizer, architecture and rope settings."""
    import unmask

    shipped = Path(unmask.__file__).parent.joinpath(*DEFAULT_MODEL)
    unpack(shipped, tmp_path / "start")
    export_model(tmp_path / "start", tmp_path / "again", "int8", quiet=True, validate=False)
    first, second = initializers(shipped), initializers(tmp_path / "again")
    for name in (k for k in first if k.endswith("weight_quantized")):
        np.testing.assert_array_equal(second[name], first[name], err_msg=name)
    start = read_start(str(tmp_path / "start"), str(tmp_path / "next"))
    dims = json.loads((shipped / "unmask.json").read_text())["dims"]
    assert start.dims["d_model"] == dims["hidden_size"] and start.dims["n_layers"] == dims["num_layers"]
    assert (start.rope_theta, start.max_sequence_length) == (10000.0, 512)
    assert start.tokenizer.to_str() == Tokenizer.from_file(str(shipped / "tokenizer.json")).to_str()
