"""The exported graph: logits vs the PyTorch reference, and the cache contract (window/past splits)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from unmask.export import export_model
from unmask.export.reference import load_reference
from unmask.export.testing import make_dream_checkpoint, make_llada_checkpoint
from unmask.manifest import read_manifest

CHECKPOINTS = {
    "llada": lambda p: make_llada_checkpoint(p, n_heads=4, n_kv_heads=4),
    "llada_gqa_tied_bias": lambda p: make_llada_checkpoint(p, n_kv_heads=2, weight_tying=True, include_qkv_bias=True,
                                                           dtype="bfloat16", shards=2),
    "dream": lambda p: make_dream_checkpoint(p, dtype="float16"),
}


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def checkpoint(request, tmp_path_factory):
    return CHECKPOINTS[request.param](tmp_path_factory.mktemp(request.param) / "hf")


@pytest.fixture(scope="module")
def reference(checkpoint):
    return load_reference(checkpoint)


def _export(checkpoint, tmp_path, **settings):
    out = tmp_path / "pkg"
    export_model(checkpoint, out, quiet=True, validate=False, **settings)
    return out, read_manifest(out)


class Runner:
    """Feeds the graph contract: window ids/positions, past K/V, logits rows."""

    def __init__(self, package, manifest):
        self.m = manifest
        self.session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])

    def __call__(self, ids, positions, past=None, rows=None):
        d, b = self.m.dims, ids.shape[0]
        rows = np.arange(ids.shape[1]) if rows is None else np.asarray(rows)
        feeds = {"input_ids": ids, "position_ids": positions, "logits_index": rows.astype(np.int64)}
        for i in range(d.num_layers):
            for t in ("key", "value"):
                empty = np.zeros((b, d.num_kv_heads, 0, d.head_dim), np.float32)
                feeds[f"past_{t}.{i}"] = empty if past is None else past[f"{t}.{i}"]
        names = ["logits"] + [f"present_{t}.{i}" for i in range(d.num_layers) for t in ("key", "value")]
        out = self.session.run(names, feeds)
        return out[0], {n.removeprefix("present_"): v for n, v in zip(names[1:], out[1:])}


def _positions(ids, start=0):
    return np.broadcast_to(np.arange(start, start + ids.shape[1], dtype=np.int64), ids.shape).copy()


class TestAgainstReference:
    @pytest.mark.parametrize("length", [1, 7, 64, 100])  # 100 > the fixture's nominal context of 64
    def test_fp32_logits_match(self, checkpoint, reference, tmp_path, length):
        out, m = _export(checkpoint, tmp_path)
        ids = np.random.default_rng(length).integers(0, m.dims.vocab_size, (2, length))
        logits, _ = Runner(out, m)(ids, _positions(ids))
        with torch.no_grad():
            want = reference(torch.from_numpy(ids)).numpy()
        assert logits.shape == (2, length, m.dims.vocab_size)
        assert np.abs(logits - want).max() <= 1e-4

    @pytest.mark.parametrize("attention", ["plain", "mha", "attention23", "gqa"])
    def test_every_attention_kernel(self, checkpoint, reference, tmp_path, attention):
        out, m = _export(checkpoint, tmp_path, attention=attention)
        ids = np.random.default_rng(3).integers(0, m.dims.vocab_size, (1, 20))
        logits, _ = Runner(out, m)(ids, _positions(ids, start=5), rows=[0, 19, 4])
        with torch.no_grad():
            want = reference(torch.from_numpy(ids), position_ids=torch.from_numpy(_positions(ids, 5))).numpy()
        assert np.abs(logits - want[:, [0, 19, 4]]).max() <= 1e-4

    @pytest.mark.parametrize("precision", ["fp32", "int8"])
    def test_fused_projections_match_separate_ones(self, checkpoint, tmp_path, precision):
        """One stacked q/k/v and gate/up product per layer, split afterwards: the same logits as
        three and two separate products (GQA widths and q/k/v biases included)."""
        fused, m = _export(checkpoint, tmp_path / "fused", precision=precision)
        separate, _ = _export(checkpoint, tmp_path / "separate", precision=precision, fuse_projections=False)
        ops = {name: [n.op_type for n in onnx.load(str(pkg / "model.onnx")).graph.node if n.name.startswith(
            "layers.0/") and n.op_type in ("Gemm", "MatMulInteger")] for name, pkg in (("f", fused), ("s", separate))}
        assert (len(ops["f"]), len(ops["s"])) == (4, 7)  # q_k_v, o, gate_up, down against q, k, v, o, gate, up, down
        ids = np.random.default_rng(11).integers(0, m.dims.vocab_size, (2, 30))
        a, kv_a = Runner(fused, m)(ids, _positions(ids))
        b, kv_b = Runner(separate, m)(ids, _positions(ids))
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
        for name in kv_a:
            np.testing.assert_allclose(kv_a[name], kv_b[name], atol=1e-5, rtol=0)


    @pytest.mark.parametrize("target, emitted", [("cpu", "contrib"), ("cuda", "contrib"), ("dml", "ops"),
                                                 ("coreml", "ops")])
    def test_rope_default_per_target(self, checkpoint, tmp_path, target, emitted):
        out, m = _export(checkpoint, tmp_path, target=target, precision="fp32")
        ops = [n.op_type for n in onnx.load(str(out / "model.onnx")).graph.node]
        rotary = ops.count("RotaryEmbedding")
        assert rotary == (2 * m.dims.num_layers if emitted == "contrib" else 0)  # one for q, one for k
        assert m.provenance["rope"] == emitted

    def test_rope_kernel_matches_rope_ops_with_a_past(self, checkpoint, tmp_path):
        """ORT's RotaryEmbedding (tables grown to max(position_ids)+1) against the elementwise
        rotation: same logits and presents for a window at scattered positions after a past."""
        contrib, m = _export(checkpoint, tmp_path / "contrib", rope="contrib")
        ops, _ = _export(checkpoint, tmp_path / "ops", rope="ops")
        rng = np.random.default_rng(5)
        ids = rng.integers(0, m.dims.vocab_size, (2, 12))
        positions = np.stack([rng.permutation(90)[:12] for _ in range(2)]).astype(np.int64)
        past_ids = rng.integers(0, m.dims.vocab_size, (2, 9))
        _, past = Runner(ops, m)(past_ids, _positions(past_ids, start=90))
        a, kv_a = Runner(contrib, m)(ids, positions, past)
        b, kv_b = Runner(ops, m)(ids, positions, past)
        np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
        for name in kv_a:
            np.testing.assert_allclose(kv_a[name], kv_b[name], atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def package(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("pkg") / "pkg"
    export_model(checkpoint, out, quiet=True, validate=False)
    return out, read_manifest(out)


class TestCacheContract:
    @pytest.mark.parametrize("window", [(0, 40), (8, 40), (8, 16), (39, 40), (0, 1), (16, 24)])
    @pytest.mark.parametrize("attention", ["auto", "plain", "gqa"])
    def test_split_reproduces_full_pass(self, checkpoint, tmp_path, window, attention):
        out, m = _export(checkpoint, tmp_path, attention=attention)
        run, rng = Runner(out, m), np.random.default_rng(7)
        batch = 1 if attention == "gqa" else 2  # ORT's GQA refuses batch > 1 with a past and W > 1
        ids = rng.integers(0, m.dims.vocab_size, (batch, 40))
        full_logits, full_kv = run(ids, _positions(ids))
        start, stop = window
        outside = np.r_[0:start, stop:40]
        rng.shuffle(outside)  # attention is bidirectional and RoPE is pre-applied: key order is free
        past = {n: np.ascontiguousarray(kv[:, :, outside]) for n, kv in full_kv.items()}
        rows = np.arange(stop - start)[::-1][: max(1, (stop - start) // 2)]
        logits, present = run(ids[:, start:stop], _positions(ids)[:, start:stop].copy(), past, rows)
        np.testing.assert_allclose(logits, full_logits[:, start + rows], atol=1e-4, rtol=0)
        for name, kv in present.items():
            np.testing.assert_allclose(kv, full_kv[name][:, :, start:stop], atol=1e-5, rtol=0)

    def test_logits_index_gathers_before_the_head(self, package):
        out, m = package
        model = onnx.load(str(out / "model.onnx"), load_external_data=False)
        gather = next(n for n in model.graph.node if "logits_index" in n.input)
        head = next(n for n in model.graph.node if n.name.startswith("head/") and n.op_type in ("Gemm", "MatMulNBits"))
        order = [n.name for n in model.graph.node]
        assert order.index(gather.name) < order.index(head.name)

    def test_contract_names(self, package):
        out, m = package
        session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
        inputs = {i.name: i for i in session.get_inputs()}
        assert {"input_ids", "position_ids", "logits_index"} <= set(inputs)
        d = m.dims
        for i in range(d.num_layers):
            assert inputs[f"past_key.{i}"].shape == ["batch", d.num_kv_heads, "past", d.head_dim]
        outputs = [o.name for o in session.get_outputs()]
        assert outputs[0] == "logits" or "logits" in outputs
        assert {f"present_value.{i}" for i in range(d.num_layers)} <= set(outputs)
