"""A graph whose shapes disagree with its manifest is refused with the graph file's name.

At load: declared logits width, rank, key/value dims and the special ids against the
manifest. Per run: a width the graph declares symbolically but returns wrong. Each
failure is a ModelFormatError, and through the CLI one line naming model.onnx.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_chat_template import LLADA_SPECIALS, char_tokenizer
from test_runtime_engine import toy_graph, toy_manifest

import unmask
from unmask.cli import main
from unmask.manifest import GraphFiles, sha256_file, write_manifest

SETTINGS = dict(gen_length=8, block_length=4, steps=4)


def generic_graph(vocab: int, declared_width: int | str) -> bytes:
    """input_ids [B, L] -> logits [B, L, vocab] (no cache inputs), declaring `declared_width`."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(vocab, 8)).astype(np.float32), "E"),
             numpy_helper.from_array(rng.normal(size=(8, vocab)).astype(np.float32), "W")]
    nodes = [helper.make_node("Gather", ["E", "input_ids"], ["h"]), helper.make_node("MatMul", ["h", "W"], ["logits"])]
    graph = helper.make_graph(
        nodes, "generic",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "L"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "L", declared_width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def symbolic_width(graph: bytes) -> bytes:
    """The same logits behind a Slice whose end ORT cannot infer, so the width is declared "V"."""
    model = onnx.load_from_string(graph)
    producer = next(n for n in model.graph.node if "logits" in n.output)
    producer.output[list(producer.output).index("logits")] = "wide"
    n = helper.make_node
    model.graph.initializer.extend([numpy_helper.from_array(np.array(v, dtype=np.int64), name)
                                    for name, v in (("zeros", [0]), ("huge", [1 << 30]), ("vocab_axis", [2]))])
    model.graph.node.extend([
        n("Shape", ["input_ids"], ["ids_shape"]),
        n("ReduceMin", ["ids_shape"], ["least"], keepdims=1),
        n("Mul", ["least", "zeros"], ["nothing"]),
        n("Add", ["nothing", "huge"], ["end"]),  # 1 << 30 at run time, unknown to shape inference
        n("Slice", ["wide", "zeros", "end", "vocab_axis"], ["logits"]),
    ])
    dim = next(o for o in model.graph.output if o.name == "logits").type.tensor_type.shape.dim[2]
    dim.ClearField("dim_value")
    dim.dim_param = "V"
    return model.SerializeToString()


def write_package(folder, graph: bytes, *, vocab: int, cache_reuse: bool = True, **special):
    """A package whose manifest says `vocab` whatever the graph computes."""
    folder.mkdir(parents=True)
    tok = char_tokenizer(LLADA_SPECIALS)
    tok._backend.save(str(folder / "tokenizer.json"))
    (folder / "model.onnx").write_bytes(graph)
    ids = {"mask_id": 1, "eos_id": 2, **special}
    manifest = dataclasses.replace(
        toy_manifest(vocab=vocab, **ids),
        architecture="llada" if cache_reuse else "generic",
        graph=GraphFiles("model.onnx", {"model.onnx": sha256_file(folder / "model.onnx")}),
        cache_reuse=cache_reuse, size_bytes=len(graph),
        tokenizer_sha256=sha256_file(folder / "tokenizer.json"))
    write_manifest(manifest, folder)
    return folder


def load(folder):
    return unmask.load(folder, device="cpu", threads=1)


class TestAtLoad:
    @pytest.mark.parametrize("graph_vocab, manifest_vocab", [(5000, 320), (100, 320)])
    def test_declared_logits_width(self, tmp_path, graph_vocab, manifest_vocab):
        folder = write_package(tmp_path / "p", toy_graph(vocab=graph_vocab), vocab=manifest_vocab)
        with pytest.raises(unmask.ModelFormatError, match=rf"model\.onnx: graph logits has {graph_vocab} on axis 2 "
                                                          rf"but the manifest says {manifest_vocab}"):
            load(folder)

    def test_generic_graph_width(self, tmp_path):
        folder = write_package(tmp_path / "p", generic_graph(5000, 5000), vocab=320, cache_reuse=False)
        with pytest.raises(unmask.ModelFormatError, match=r"model\.onnx: graph logits has 5000"):
            load(folder)

    def test_logits_rank(self, tmp_path):
        model = onnx.load_from_string(generic_graph(120, 120))
        model.graph.node[-1].output[0] = "scores"  # logits = max over the vocabulary: [B, L]
        model.graph.node.append(helper.make_node("ReduceMax", ["scores"], ["logits"], axes=[2], keepdims=0))
        model.graph.output[0].type.tensor_type.shape.dim.pop()
        folder = write_package(tmp_path / "p", model.SerializeToString(), vocab=120, cache_reuse=False)
        with pytest.raises(unmask.ModelFormatError, match=r"model\.onnx: graph logits has rank 2"):
            load(folder)

    def test_key_value_heads(self, tmp_path):
        graph = toy_graph(vocab=120)
        folder = tmp_path / "p"
        write_package(folder, graph, vocab=120)
        manifest = unmask.manifest.read_manifest(folder)
        write_manifest(dataclasses.replace(manifest, dims=dataclasses.replace(manifest.dims, num_kv_heads=4,
                                                                              num_heads=4)), folder)
        with pytest.raises(unmask.ModelFormatError, match=r"past_key\.0 has 2 on axis 1 .* 4 \(dims\.num_kv_heads\)"):
            load(folder)

    @pytest.mark.parametrize("name", ["mask_id", "eos_id", "eot_id", "bos_id", "pad_id"])
    def test_special_id_outside_vocabulary(self, tmp_path, name):
        folder = write_package(tmp_path / "p", toy_graph(vocab=120), vocab=120, **{name: 120})
        with pytest.raises(unmask.ModelFormatError, match=rf"special_ids\.{name} 120 lies outside .*\[0, 120\)"):
            load(folder)

    def test_matching_package_loads(self, tmp_path):
        folder = write_package(tmp_path / "p", toy_graph(vocab=120), vocab=120, eot_id=119)
        result = load(folder).generate(prompt_ids=[5, 6, 7], **SETTINGS)
        assert result.token_ids.shape == (8,) and int(result.token_ids.max()) < 120


class TestPerRun:
    """A symbolic width passes the load check; the first run then catches the lie."""

    def test_cache_graph(self, tmp_path):
        folder = write_package(tmp_path / "p", symbolic_width(toy_graph(vocab=5000)), vocab=320)
        model = load(folder)
        with pytest.raises(unmask.ModelFormatError, match=r"model\.onnx: ONNX Runtime failed running the graph"):
            model.generate(prompt_ids=[5, 6, 7], **SETTINGS)

    @pytest.mark.parametrize("graph_vocab", [5000, 100])
    def test_generic_graph(self, tmp_path, graph_vocab):
        folder = write_package(tmp_path / "p", symbolic_width(generic_graph(graph_vocab, graph_vocab)), vocab=320, cache_reuse=False)
        model = load(folder)
        with pytest.raises(unmask.ModelFormatError,
                           match=rf"model\.onnx: graph returned logits of shape \(1, 11, {graph_vocab}\), "
                                 r"expected \(1, 11, 320\)"):
            model.generate(prompt_ids=[5, 6, 7], **SETTINGS)


class TestCommandLine:
    def test_generate_one_line(self, tmp_path, capfd):
        """capfd: ORT logs from C++ straight to file descriptor 2, which capsys would not see."""
        folder = write_package(tmp_path / "p", symbolic_width(toy_graph(vocab=5000)), vocab=320)
        code = main(["generate", str(folder), "--raw", "-p", "abc", "--gen-length", "8", "--block-length", "4",
                     "--steps", "4", "--device", "cpu"])
        err = capfd.readouterr().err
        assert code == 1
        assert err.startswith("error: ") and err.count("\n") == 1 and "model.onnx" in err
        assert "has shape {1,4,320} but the computed output shape for this run is {1,4,5000}" in err


class TestTruncatedGraph:
    """model.onnx cut in half: `info` (no --verify) and load both fail, naming the file."""

    @pytest.fixture
    def truncated(self, tmp_path):
        folder = write_package(tmp_path / "p", toy_graph(vocab=120), vocab=120)
        graph = folder / "model.onnx"
        graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2])
        return folder

    def test_info(self, truncated, capsys):
        code = main(["info", str(truncated)])
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1
        assert "model.onnx" in err and "truncated" in err

    def test_load(self, truncated, capsys):
        code = main(["generate", str(truncated), "-p", "abc", "--device", "cpu"])
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1
        assert f"{truncated / 'model.onnx'}: " in err
