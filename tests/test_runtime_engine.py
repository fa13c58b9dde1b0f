"""Engine: past/present buffers and IOBinding, checked on a one-layer toy graph.

In a one-layer model the keys/values of a position depend only on its own token and
position, so reusing the refresh's K/V is exact while the tokens outside the window are
unchanged: window logits must equal the full pass's, whatever the order of the past.
That pins down how the engine assembles the past for prefix and dual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from unmask.engine import Engine
from unmask.manifest import Dims, GraphFiles, Manifest, SpecialIds

VOCAB, HEADS, HEAD_DIM, MAX_POS = 11, 2, 4, 256
WIDTH = HEADS * HEAD_DIM


def toy_graph(seed: int = 0, kv_dtype=np.float32, vocab: int = VOCAB) -> bytes:
    """input_ids, position_ids, past_key.0/past_value.0, logits_index -> logits, present_key.0/value.0."""
    rng = np.random.default_rng(seed)
    weights = {
        "E": rng.normal(size=(vocab, WIDTH)),
        "P": rng.normal(size=(MAX_POS, WIDTH)),  # absolute position code, added to K (stands in for RoPE)
        "Wq": rng.normal(size=(WIDTH, WIDTH)) / 2,
        "Wk": rng.normal(size=(WIDTH, WIDTH)) / 2,
        "Wv": rng.normal(size=(WIDTH, WIDTH)),
        "Wo": rng.normal(size=(WIDTH, vocab)),
    }
    inits = [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()]
    inits += [
        numpy_helper.from_array(np.array([0, 0, HEADS, HEAD_DIM], dtype=np.int64), "heads_shape"),
        numpy_helper.from_array(np.array([0, 0, WIDTH], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.array(1 / np.sqrt(HEAD_DIM), dtype=np.float32), "scale"),
    ]
    kv_onnx = TensorProto.FLOAT16 if kv_dtype == np.float16 else TensorProto.FLOAT
    n = helper.make_node
    nodes = [
        n("Gather", ["E", "input_ids"], ["emb"]),
        n("Gather", ["P", "position_ids"], ["pos"]),
        n("MatMul", ["emb", "Wq"], ["q2"]),
        n("MatMul", ["emb", "Wk"], ["k1"]),
        n("Add", ["k1", "pos"], ["k2"]),
        n("MatMul", ["emb", "Wv"], ["v2"]),
    ]
    for name in ("q", "k", "v"):
        nodes += [n("Reshape", [f"{name}2", "heads_shape"], [f"{name}3"]),
                  n("Transpose", [f"{name}3"], [f"{name}4"], perm=[0, 2, 1, 3])]
    nodes += [
        n("Cast", ["k4"], ["present_key.0"], to=kv_onnx),
        n("Cast", ["v4"], ["present_value.0"], to=kv_onnx),
        n("Cast", ["past_key.0"], ["pk"], to=TensorProto.FLOAT),
        n("Cast", ["past_value.0"], ["pv"], to=TensorProto.FLOAT),
        n("Concat", ["pk", "k4"], ["k_all"], axis=2),
        n("Concat", ["pv", "v4"], ["v_all"], axis=2),
        n("Transpose", ["k_all"], ["kT"], perm=[0, 1, 3, 2]),
        n("MatMul", ["q4", "kT"], ["s0"]),
        n("Mul", ["s0", "scale"], ["s1"]),
        n("Softmax", ["s1"], ["a"], axis=-1),
        n("MatMul", ["a", "v_all"], ["o4"]),
        n("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]),
        n("Reshape", ["o3", "flat_shape"], ["o2"]),
        n("Gather", ["o2", "logits_index"], ["rows"], axis=1),
        n("MatMul", ["rows", "Wo"], ["logits"]),
    ]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "W"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["B", "W"]),
        helper.make_tensor_value_info("past_key.0", kv_onnx, ["B", HEADS, "P", HEAD_DIM]),
        helper.make_tensor_value_info("past_value.0", kv_onnx, ["B", HEADS, "P", HEAD_DIM]),
        helper.make_tensor_value_info("logits_index", TensorProto.INT64, ["K"]),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "K", vocab]),
        helper.make_tensor_value_info("present_key.0", kv_onnx, ["B", HEADS, "W", HEAD_DIM]),
        helper.make_tensor_value_info("present_value.0", kv_onnx, ["B", HEADS, "W", HEAD_DIM]),
    ]
    graph = helper.make_graph(nodes, "toy", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def toy_manifest(kv_dtype: str = "float32", vocab: int = VOCAB, **special) -> Manifest:
    return Manifest(
        architecture="llada",
        dims=Dims(vocab_size=vocab, hidden_size=WIDTH, num_layers=1, num_heads=HEADS, num_kv_heads=HEADS,
                  head_dim=HEAD_DIM, max_sequence_length=MAX_POS),
        special_ids=SpecialIds(**{"mask_id": vocab - 1, "eos_id": 0, **special}),
        precision="fp32", target="cpu", graph=GraphFiles(), kv_dtype=kv_dtype,
    )


@dataclass
class Request:  # the fields of a Decoder request the engine reads
    window_start: int
    window_end: int
    logits_index: np.ndarray
    past_length: int = 0
    stores_cache: bool = False


def refresh_request(length: int, rows: np.ndarray) -> Request:
    return Request(0, length, rows, stores_cache=True)


def window_request(start: int, end: int, rows: np.ndarray, length: int) -> Request:
    """A later step of a block: the window against the cache of every position outside it."""
    return Request(start, end, rows, past_length=length - (end - start))


def engine_for(kv_dtype=np.float32) -> Engine:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(toy_graph(kv_dtype=kv_dtype), options, providers=["CPUExecutionProvider"])
    return Engine(session, toy_manifest("float16" if kv_dtype == np.float16 else "float32"))


def windows(cache: str, prompt: int, length: int, block: int, shift: bool):
    """(start, end) of the window steps of each block, as the Decoder schedules them."""
    for block_start in range(prompt, length, block):
        start = block_start - (1 if shift else 0)
        yield start, (length if cache == "prefix" else block_start + block)


class TestEngine:
    @pytest.mark.parametrize("cache", ["prefix", "dual"])
    @pytest.mark.parametrize("shift", [False, True])
    @pytest.mark.parametrize("batch", [1, 2])
    def test_window_logits_equal_full_pass(self, cache, shift, batch):
        engine = engine_for()
        prompt, length, block = 5, 17, 4
        rng = np.random.default_rng(1)
        ids = rng.integers(0, VOCAB - 1, size=(batch, length)).astype(np.int64)
        run = engine.begin(batch=batch, length=length, cache=cache, max_window=length, max_rows=length - prompt)
        reference = engine.begin(batch=batch, length=length, cache="none", max_window=length, max_rows=length)
        for start, end in windows(cache, prompt, length, block, shift):
            every_row = np.arange(length, dtype=np.int64)
            full, _ = reference.forward(Request(0, length, every_row), ids)
            full = full.copy()
            rows = np.arange(end - start, dtype=np.int64)[::-1].copy()  # any subset, any order
            refreshed, _ = run.forward(refresh_request(length, rows + start), ids)
            np.testing.assert_allclose(refreshed, full[:, rows + start], rtol=1e-5, atol=1e-5)
            for _ in range(2):  # later steps of the block: the past is reused
                request = window_request(start, end, rows, length)
                window, seconds = run.forward(request, np.ascontiguousarray(ids[:, start:end]))
                np.testing.assert_allclose(window, full[:, rows + start], rtol=1e-5, atol=1e-5)
                assert seconds > 0

    def test_past_of_the_positions_before_the_window(self):
        # past_length = window start: the window sees only what precedes it (a block-diffusion
        # step against its finished blocks), as a full pass over the sequence cut at the window end.
        engine = engine_for()
        length, start, end = 14, 6, 10
        ids = np.random.default_rng(3).integers(0, VOCAB - 1, size=(1, length)).astype(np.int64)
        cut = engine.begin(batch=1, length=end, cache="none", max_window=end, max_rows=end)
        expected, _ = cut.forward(Request(0, end, np.arange(start, end)), np.ascontiguousarray(ids[:, :end]))
        expected = expected.copy()
        run = engine.begin(batch=1, length=length, cache="dual", max_window=end - start, max_rows=length)
        run.forward(refresh_request(length, np.arange(2)), ids)
        got, _ = run.forward(Request(start, end, np.arange(end - start), past_length=start),
                             np.ascontiguousarray(ids[:, start:end]))
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    def test_past_longer_than_the_cache_is_an_error(self):
        run = engine_for().begin(batch=1, length=12, cache="dual", max_window=4, max_rows=8)
        ids = np.zeros((1, 12), dtype=np.int64)
        run.forward(refresh_request(12, np.arange(2)), ids)
        with pytest.raises(RuntimeError, match="past of 9"):
            run.forward(Request(4, 8, np.arange(2), past_length=9), ids[:, 4:8].copy())

    def test_float16_cache(self):
        engine = engine_for(np.float16)
        length = 12
        ids = np.arange(length, dtype=np.int64)[None] % (VOCAB - 1)
        run = engine.begin(batch=1, length=length, cache="dual", max_window=4, max_rows=8)
        full = engine.begin(batch=1, length=length, cache="none", max_window=length, max_rows=length)
        expected, _ = full.forward(Request(0, length, np.arange(4, 8)), ids)
        expected = expected.copy()
        run.forward(refresh_request(length, np.arange(4, 8)), ids)
        got, _ = run.forward(window_request(4, 8, np.arange(4), length), np.ascontiguousarray(ids[:, 4:8]))
        np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2)

    def test_window_larger_than_buffers_is_an_error(self):
        run = engine_for().begin(batch=1, length=12, cache="dual", max_window=4, max_rows=8)
        ids = np.zeros((1, 12), dtype=np.int64)
        run.forward(refresh_request(12, np.arange(2)), ids)
        with pytest.raises(RuntimeError):
            run.forward(window_request(2, 10, np.arange(2), 12), ids[:, 2:10].copy())
