"""The exporter's seams: one vocabulary, one `auto` attention decision, kernels on explicit
inputs, generation defaults on the family classes, the progress count equal to the reads."""

import numpy as np
import onnxruntime as ort
import pytest

from unmask import ConfigError
from unmask import manifest as manifest_module
from unmask.config import GenerationConfig
from unmask.export import export_model
from unmask.export.attention import ATTENTION_KERNELS, ATTENTIONS, AttentionInputs, check_attention, choose_kernel
from unmask.export.checkpoint import read_config, read_tokenizer_files
from unmask.export.config import PRECISIONS, TARGET_PRECISIONS, TARGETS, ExportConfig
from unmask.export.emitter import Emitter, WeightFile
from unmask.export.families import DreamBuilder, LladaBuilder, family_for
from unmask.export.package import build_graph
from unmask.export.safetensors_io import CheckpointTensors
from unmask.export.testing import make_dream_checkpoint, make_llada_checkpoint
from unmask.manifest import generation_defaults, read_manifest


class TestVocabulary:
    def test_export_uses_the_manifest_names(self):
        assert PRECISIONS is manifest_module.PRECISIONS and TARGETS is manifest_module.TARGETS
        assert tuple(TARGET_PRECISIONS) == TARGETS
        assert all(set(allowed) <= set(PRECISIONS) for allowed in TARGET_PRECISIONS.values())

    @pytest.mark.parametrize("field, allowed", [("precision", PRECISIONS), ("target", TARGETS)])
    def test_unknown_name_lists_the_valid_ones(self, field, allowed):
        with pytest.raises(ConfigError, match=f"unknown {field} 'int3'; choose one of {', '.join(allowed)}$"):
            ExportConfig(**{field: "int3"}).resolve()

    def test_every_accepted_pair_is_one_the_manifest_accepts(self):
        for target in TARGETS:
            for precision in PRECISIONS:
                config = ExportConfig(precision=precision, target=target)
                if precision in TARGET_PRECISIONS[target]:
                    assert config.resolve().precision == precision
                else:
                    with pytest.raises(ConfigError, match=f"choose one of {', '.join(TARGET_PRECISIONS[target])}"):
                        config.resolve()


class TestAttentionDecision:
    # (requested, target, heads, kv heads) -> kernel: the whole `auto` table plus explicit choices
    TABLE = [
        ("auto", "cpu", 4, 4, "mha"),
        ("auto", "cpu", 4, 2, "attention23"),
        ("auto", "cpu", 8, 1, "attention23"),
        ("auto", "cuda", 4, 4, "mha"),
        ("auto", "cuda", 4, 2, "mha"),
        ("auto", "dml", 4, 2, "plain"),
        ("auto", "coreml", 4, 4, "plain"),
        ("gqa", "cpu", 4, 2, "gqa"),
        ("plain", "cuda", 4, 4, "plain"),
        ("attention23", "dml", 4, 4, "attention23"),
    ]

    @pytest.mark.parametrize("requested, target, heads, kv, kernel", TABLE)
    def test_decision_table(self, requested, target, heads, kv, kernel):
        assert choose_kernel(requested, target, heads, kv) == kernel

    def test_names_are_the_kernels(self):
        assert ATTENTIONS == ("auto", "gqa", "mha", "attention23", "plain")
        assert set(ATTENTIONS) - {"auto"} == set(ATTENTION_KERNELS)

    def test_resolve_leaves_auto_to_the_one_decision(self):
        assert ExportConfig(target="cuda").resolve().attention == "auto"
        assert ExportConfig(attention="mha").resolve().attention == "mha"

    def test_refusals(self):
        with pytest.raises(ConfigError, match="unknown attention 'flash'; choose one of auto, gqa, mha, attention23, plain"):
            check_attention("flash", "cpu")
        with pytest.raises(ConfigError, match="'mha' is a contrib/opset-23 kernel coreml does not run; use plain"):
            ExportConfig(target="coreml", precision="fp16", attention="mha").resolve()
        check_attention("auto", "coreml")  # auto is always allowed: it resolves to plain there

    @pytest.mark.parametrize("kv, target, want", [(4, "cpu", "mha"), (2, "cpu", "attention23"), (2, "dml", "plain")])
    def test_package_records_the_decision(self, tmp_path, kv, target, want):
        src = make_llada_checkpoint(tmp_path / "hf", n_kv_heads=kv)
        precision = "fp32" if target == "cpu" else "fp16"
        result = export_model(src, tmp_path / "pkg", precision, target, quiet=True, validate=False)
        assert result.manifest.provenance["attention"] == want


def _attention_numpy(q, k, v):
    """q [B,W,H,hd], k/v [B,T,Hkv,hd] -> [B*W, H*hd], query head h reading K/V head h // G."""
    group = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, group, axis=2), np.repeat(v, group, axis=2)
    scores = np.einsum("bwhd,bthd->bhwt", q, k) / np.sqrt(q.shape[-1])
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhwt,bthd->bwhd", probs, v).reshape(-1, q.shape[2] * q.shape[3])


@pytest.mark.parametrize("kernel", sorted(ATTENTION_KERNELS))
def test_kernel_runs_on_explicit_inputs(tmp_path, kernel):
    """A kernel needs only its AttentionInputs and tensors: no builder. Batch 1 (gqa refuses 2 with a past)."""
    heads, kv, hd, window, past = 4, 2, 8, 3, 5
    em = Emitter(WeightFile(tmp_path / "w.data"), opset=23 if kernel == "attention23" else 21)
    q = em.add_input("q", "float32", [1, window, heads, hd])
    k = em.add_input("k", "float32", [1, window, kv, hd])
    v = em.add_input("v", "float32", [1, window, kv, hd])
    past_k = em.add_input("past_k", "float32", [1, kv, past, hd])
    past_v = em.add_input("past_v", "float32", [1, kv, past, hd])
    lengths = None
    if kernel == "gqa":  # explicit inputs: the lengths are just tensors here
        lengths = (em.add_input("seqlens", "int32", [1]), em.add_input("total", "int32", []))
    inputs = AttentionInputs(em, heads, kv, hd, "float32", em.const([1, window, -1]), lengths=lengths)
    present_k, present_v = (em.make_transpose(f"present_{t}", x, [0, 2, 1, 3]) for t, x in (("k", k), ("v", v)))
    out = ATTENTION_KERNELS[kernel](inputs, "attn", q, k, v, present_k, present_v, past_k, past_v)
    em.make("Identity", "out", [out], output="out")
    em.add_output("out", "float32", [window, heads * hd])
    (tmp_path / "m.onnx").write_bytes(em.model("t", producer_version="test").SerializeToString())
    em.weights.close()
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
             (("q", (1, window, heads, hd)), ("k", (1, window, kv, hd)), ("v", (1, window, kv, hd)),
              ("past_k", (1, kv, past, hd)), ("past_v", (1, kv, past, hd)))}
    if kernel == "gqa":
        feeds |= {"seqlens": np.array([past + window - 1], np.int32), "total": np.array(past + window, np.int32)}
    got = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    keys = np.concatenate([feeds["past_k"].transpose(0, 2, 1, 3), feeds["k"]], axis=1)
    values = np.concatenate([feeds["past_v"].transpose(0, 2, 1, 3), feeds["v"]], axis=1)
    np.testing.assert_allclose(got, _attention_numpy(feeds["q"], keys, values), rtol=1e-5, atol=1e-5)


class TestGenerationDefaults:
    def test_on_the_family_classes(self):
        assert LladaBuilder.generation == GenerationConfig(block_length=32)
        assert DreamBuilder.generation == GenerationConfig(algorithm="entropy")

    @pytest.mark.parametrize("make, want", [(make_llada_checkpoint, {"block_length": 32}),
                                            (make_dream_checkpoint, {"algorithm": "entropy"})])
    def test_manifest_carries_the_family_defaults(self, tmp_path, make, want):
        src = make(tmp_path / "hf")
        export_model(src, tmp_path / "pkg", quiet=True, validate=False)
        m = read_manifest(tmp_path / "pkg")
        assert m.generation == want == generation_defaults(family_for(read_config(src)).generation)


def _builder(src, **settings):
    hf, tokenizer = read_config(src), read_tokenizer_files(src)
    family = family_for(hf)
    return family(family.parse_config(hf, tokenizer), CheckpointTensors(src), ExportConfig(**settings).resolve())


class TestReadCount:
    # 2 layers; per layer 9 matrices/norms (+3 q/k/v biases); embedding, final norm, head
    @pytest.mark.parametrize("make, settings, want", [
        (lambda p: make_llada_checkpoint(p), {}, 3 + 2 * 9),
        (lambda p: make_llada_checkpoint(p, weight_tying=True, include_qkv_bias=True), {}, 2 + 2 * 12),
        # int8: the tied head is 8-bit blocks, the embedding fp16, so the table is read twice
        (lambda p: make_llada_checkpoint(p, weight_tying=True), {"precision": "int8"}, 3 + 2 * 9),
        (lambda p: make_dream_checkpoint(p), {"fuse_projections": False}, 3 + 2 * 12),
    ])
    def test_count_equals_the_reads(self, tmp_path, make, settings, want):
        builder = _builder(make(tmp_path / "hf"), **settings)
        reads = []
        builder.on_tensor = reads.append
        (tmp_path / "out").mkdir()
        build_graph(builder, tmp_path / "out", builder.config)
        assert builder.weight_reads() == len(reads) == want
        assert set(reads) == set(builder.expected_shapes())


def test_a_mask_no_kernel_applies_is_refused(tmp_path):
    """A block-causal family returns a mask from attention_mask; until a kernel applies it, export refuses."""

    class MaskedLlada(LladaBuilder):
        def attention_mask(self, positions):
            return positions

    src = make_llada_checkpoint(tmp_path / "hf")
    plain = _builder(src)
    builder = MaskedLlada(plain.spec, plain.tensors, plain.config)
    (tmp_path / "out").mkdir()
    with pytest.raises(ConfigError, match="needs an attention mask, which the mha kernel does not apply"):
        build_graph(builder, tmp_path / "out", builder.config)


def test_qk_norm_hook_sits_between_projection_and_rope(tmp_path):
    """The hook a per-head q/k norm family overrides: once per layer, on the flat projections."""
    seen = []

    class Recording(LladaBuilder):
        def qk_norm(self, i, name, q, k):
            seen.append((i, name, self.em.nodes[-1].op_type))
            return q, k

    src = make_llada_checkpoint(tmp_path / "hf", n_kv_heads=2)
    base = _builder(src, fuse_projections=False)
    builder = Recording(base.spec, base.tensors, base.config)
    (tmp_path / "out").mkdir()
    build_graph(builder, tmp_path / "out", builder.config)
    # the last node before each call is the v projection's Gemm; RoPE comes after
    assert seen == [(0, "layers.0/attn", "Gemm"), (1, "layers.1/attn", "Gemm")]
