"""LLaDA2 (llada2_moe) export: the router and each form of the experts against numpy, whole
packages against the PyTorch reference, routing ties, the shared expert, device fallbacks and
the configs and checkpoints it refuses.

Ties are crafted with a zero router (every score sigmoid(0) = 0.5), so the expert bias alone
decides, and experts that differ: choosing another tied expert would change the output.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from unmask.errors import ConfigError, ModelFormatError
from unmask.export import export_model
from unmask.export.emitter import Emitter, WeightFile, save_model
from unmask.export.moe import (MoeNames, MoeSpec, dequantize_rows, emit_experts, emit_router, expert_op,
                               numpy_route, quantize_rows)
from unmask.export.reference import load_reference
from unmask.export.reference_llada2 import Llada2Config, route
from unmask.export.testing import llada2_weight_shapes, make_llada2_checkpoint
from unmask.manifest import BLOCK_CAUSAL, read_manifest

from test_export_sdar import Graph, _full, window_error  # the graph-contract runner, the reference's forward

D, F, E = 64, 64, 8
SPEC = MoeSpec(num_experts=E, experts_per_token=2, expert_size=F, shared_size=0, n_group=4, topk_group=2,
               routed_scaling_factor=2.5, first_dense_layers=0)
NAMES = MoeNames("router", "bias", lambda e: (f"gate{e}", f"up{e}", f"down{e}"), None)
# (op, bits, block, relative tolerance): every form of the experts the exporter emits. Blocked 8-bit
# QMoE always quantizes its activations to int8 too (measured 1e-2 of the output): a looser bound.
FORMS = [("MoE", 0, None, 2e-5), ("dense", 0, None, 2e-5), ("QMoE", 8, None, 2e-5), ("QMoE", 8, 32, 4e-2),
         ("QMoE", 4, 16, 2e-5)]


def _weights(seed=0, router_scale=1 / 8, bias=None):
    rng = np.random.default_rng(seed)
    w = {"router": (router_scale * rng.standard_normal((E, D))).astype(np.float32),
         "bias": (0.05 * rng.standard_normal(E) if bias is None else np.asarray(bias)).astype(np.float32)}
    for e in range(E):
        w |= {f"gate{e}": rng.standard_normal((F, D)).astype(np.float32) / 8,
              f"up{e}": rng.standard_normal((F, D)).astype(np.float32) / 8,
              f"down{e}": rng.standard_normal((D, F)).astype(np.float32) / 6}
    return w


def _layer(tmp, weights, op, bits, block):
    """A session of one MoE layer's routed experts, x [T, D] -> y [T, D] (before the scaling factor)."""
    em = Emitter(WeightFile(Path(tmp) / "w.data"))
    x = em.add_input("x", "float32", ["tokens", D])
    scores, selected = emit_router(em, "moe", x, weights["router"], weights["bias"], SPEC)
    y = emit_experts(em, "moe", x, scores, selected, op, SPEC, NAMES, weights.__getitem__, dtype="float32",
                     bits=bits, block=block)
    em.make("Identity", "out", [y], output="y")
    em.add_output("y", "float32", ["tokens", D])
    save_model(em.model("moe", producer_version="0"), em.weights, Path(tmp), inline_below=1 << 40)
    return ort.InferenceSession(str(Path(tmp) / "model.onnx"), providers=["CPUExecutionProvider"])


def _expected(x, weights, experts, mix, bits=0, block=None):
    """sum_k mix[t, k] expert_{experts[t, k]}(x_t) with the weights the op multiplies by."""
    def w(name):
        return weights[name] if not bits else dequantize_rows(*quantize_rows(weights[name], bits, block), bits, block)

    out = np.zeros(x.shape, np.float64)
    for t in range(x.shape[0]):
        for e, m in zip(experts[t], mix[t]):
            g, u = w(f"gate{e}") @ x[t], w(f"up{e}") @ x[t]
            out[t] += m * (w(f"down{e}") @ (g / (1 + np.exp(-g)) * u))
    return out


class TestRouter:
    def test_reference_and_numpy_route_agree(self):
        weights = _weights()
        x = np.random.default_rng(1).standard_normal((16, D)).astype(np.float32)
        cfg = Llada2Config(vocab_size=1, hidden_size=D, num_layers=1, num_heads=1, num_kv_heads=1,
                           intermediate_size=1, rope_theta=1.0, rms_norm_eps=1e-6, qkv_bias=False,
                           tie_embeddings=False, num_experts=E, experts_per_token=2, n_group=4, topk_group=2,
                           routed_scaling_factor=2.5)
        experts, mix = route(torch.from_numpy(x), torch.from_numpy(weights["router"]),
                             torch.from_numpy(weights["bias"]), cfg)
        n_experts, n_mix = numpy_route(x.astype(np.float64), weights["router"], weights["bias"], SPEC)
        np.testing.assert_array_equal(experts.numpy(), n_experts)
        np.testing.assert_allclose(mix.numpy(), n_mix, rtol=1e-6)
        assert np.allclose(n_mix.sum(-1), 2.5)  # normalised, then scaled

    def test_ties_go_to_the_lower_index(self):
        # groups {0,1} {2,3} {4,5} {6,7}: groups 1 and 3 tie on top, every expert in them ties
        bias = [0, 0, 0.1, 0.1, 0, 0, 0.1, 0.1]
        experts, mix = numpy_route(np.zeros((1, D)), np.zeros((E, D)), np.asarray(bias), SPEC)
        assert experts.tolist() == [[2, 3]]  # ORT's own top-k would take 7 and 6
        assert mix.tolist() == [[1.25, 1.25]]  # the bias selects, the unbiased 0.5s weigh


class TestExpertForms:
    @pytest.mark.parametrize("op, bits, block, tolerance", FORMS)
    def test_layer_matches_numpy_with_the_weights_it_stores(self, tmp_path, op, bits, block, tolerance):
        weights = _weights()
        x = np.random.default_rng(2).standard_normal((12, D)).astype(np.float32)
        got = _layer(tmp_path, weights, op, bits, block).run(None, {"x": x})[0]
        experts, mix = numpy_route(x.astype(np.float64), weights["router"], weights["bias"], SPEC)
        want = _expected(x, weights, experts, mix / 2.5, bits, block)
        assert np.abs(got - want).max() <= tolerance * np.abs(want).max()

    @pytest.mark.parametrize("op, bits, block, tolerance", FORMS)
    def test_tied_scores_select_the_lower_experts(self, tmp_path, op, bits, block, tolerance):
        weights = _weights(router_scale=0.0, bias=[0, 0, 0.1, 0.1, 0, 0, 0.1, 0.1])
        x = np.random.default_rng(3).standard_normal((3, D)).astype(np.float32)
        got = _layer(tmp_path, weights, op, bits, block).run(None, {"x": x})[0]
        lower = _expected(x, weights, [[2, 3]] * 3, [[0.5, 0.5]] * 3, bits, block)
        higher = _expected(x, weights, [[6, 7]] * 3, [[0.5, 0.5]] * 3, bits, block)
        assert np.abs(got - lower).max() <= tolerance * np.abs(lower).max()
        assert np.abs(got - higher).max() > 0.1 * np.abs(lower).max()

    def test_quantized_codes_round_trip(self):
        w = np.random.default_rng(4).standard_normal((6, 64)).astype(np.float32)
        for bits, block, step in ((8, None, 1 / 127), (4, 16, 1 / 7)):
            codes, scales = quantize_rows(w, bits, block)
            assert codes.shape == (6, 64 * bits // 8) and codes.dtype == np.uint8
            error = np.abs(dequantize_rows(codes, scales, bits, block) - w)
            assert error.max() <= 0.5 * step * np.abs(w).max() + 1e-6


# ---------------------------------------------------------------------- whole packages

CHECKPOINTS = {
    "bf16_sharded": dict(dtype="bfloat16", shards=3),
    "no_shared_expert": dict(num_shared_experts=0, first_k_dense_replace=0, num_hidden_layers=2),
}


@pytest.fixture(scope="module", params=sorted(CHECKPOINTS))
def checkpoint(request, tmp_path_factory):
    return make_llada2_checkpoint(tmp_path_factory.mktemp(request.param) / "hf", **CHECKPOINTS[request.param])


@pytest.fixture(scope="module")
def reference(checkpoint):
    return load_reference(checkpoint)


@pytest.fixture(scope="module")
def package(checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("pkg") / "llada2"
    return out, export_model(checkpoint, out, quiet=True, reference="torch")


class TestPackage:
    def test_logits_match_the_reference(self, package, reference):
        folder, result = package
        ids = np.random.default_rng(5).integers(0, 320, (2, 14))
        assert np.abs(Graph(folder)(ids, 0)[0] - _full(reference, ids)).max() <= 1e-4
        assert [a.baseline for a in result.validation] == ["fp32", "torch"]
        assert all(a.max_abs_error <= 1e-4 for a in result.validation)

    def test_window_after_cached_blocks_matches_the_full_forward(self, package, reference):
        folder, result = package
        block = result.manifest.block_size
        ids = np.random.default_rng(6).integers(0, 320, (1, 4 * block))
        assert window_error(folder, reference, ids, 2 * block) <= 1e-4

    def test_manifest(self, package, checkpoint):
        _, result = package
        m, hf = result.manifest, json.loads((checkpoint / "config.json").read_text())
        assert (m.architecture, m.attention_kind, m.block_size, m.shift_logits) == ("llada2", BLOCK_CAUSAL, 4, False)
        assert m.dims.head_dim == 16
        moe = m.provenance["moe"]
        assert moe["expert_op"] == "MoE" and moe["num_experts"] == 8 and moe["experts_per_token"] == 2
        assert moe["shared_size"] == 16 * hf["num_shared_experts"]

    def test_runtime_generates_with_the_block_cache(self, package):
        """It generates with its defaults: LLaDA2's sampler on the block cache (tests/test_runtime_llada2.py)."""
        import unmask

        folder, _ = package
        model = unmask.load(folder, device="cpu")
        assert (model.manifest.architecture, model.manifest.attention_kind) == ("llada2", BLOCK_CAUSAL)
        config = model.resolve_config(gen_length=8)
        assert (config.algorithm, config.cache, config.block_length) == ("llada2", "block", 4)
        result = model.generate("Hello", config=config)
        assert 8 <= len(result.token_ids) < 8 + 4  # generation ends where the block holding its end ends
        with pytest.raises(ConfigError, match="block"):
            model.generate("Hello", gen_length=8, cache="dual")

    def test_info_shows_the_experts(self, package):
        from click.testing import CliRunner

        from unmask.cli import cli

        out = CliRunner().invoke(cli, ["info", str(package[0])])
        assert out.exit_code == 0, out.output
        assert "experts        expert_op MoE, num_experts 8, experts_per_token 2" in out.output

    def test_graph_has_one_expert_op_per_moe_layer(self, package, checkpoint):
        folder, _ = package
        hf = json.loads((checkpoint / "config.json").read_text())
        ops = [n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node]
        assert ops.count("MoE") == hf["num_hidden_layers"] - hf["first_k_dense_replace"]
        assert ops.count("RotaryEmbedding") == 2 * hf["num_hidden_layers"]


def test_shared_expert_is_added_unweighted(checkpoint, reference):
    """The reference's MoE block is routed + shared: the graph matching it (above) covers both."""
    layer = reference.layers[-1].mlp
    x = torch.randn(5, 32)
    with torch.no_grad():
        shared = layer.shared_experts(x) if layer.shared_experts is not None else 0
        torch.testing.assert_close(layer(x), layer.routed(x) + shared)
        if layer.shared_experts is not None:
            assert layer.shared_experts(x).abs().max() > 1e-3  # the case is not vacuous


# measured on the random bf16 model (rel RMS / KL / top-1): int8 0.16 / 0.011 / 92 %, int4 0.38 / 0.067 / 58 %
QUANTIZED = {"int8": (8, 0.05), "int4": (4, 0.25)}


@pytest.mark.parametrize("precision", sorted(QUANTIZED))
def test_quantized_experts_use_qmoe(tmp_path, precision):
    src = make_llada2_checkpoint(tmp_path / "hf", hidden_size=64, moe_intermediate_size=64, intermediate_size=64)
    bits, max_kl = QUANTIZED[precision]
    result = export_model(src, tmp_path / "pkg", precision, quiet=True, block_size=16)
    nodes = [n for n in onnx.load(str(tmp_path / "pkg" / "model.onnx"), load_external_data=False).graph.node
             if n.op_type == "QMoE"]
    assert len(nodes) == 2
    attributes = {a.name: a.i for a in nodes[0].attribute}
    assert (attributes["expert_weight_bits"], attributes["block_size"]) == (bits, 16)
    assert result.manifest.provenance["moe"]["expert_op"] == "QMoE"
    assert result.validation[0].kl_divergence <= max_kl


class TestTargets:
    def test_profiles_decide_the_expert_op(self):
        assert [expert_op(p, "cpu") for p in ("fp32", "int8", "int4")] == ["MoE", "QMoE", "QMoE"]
        assert expert_op("fp32", "dml") == "dense" and expert_op("fp16", "coreml") == "dense"
        with pytest.raises(ConfigError, match="QMoE.*moe_ops: none"):
            expert_op("int4", "dml")
        with pytest.raises(ConfigError, match="QMoE"):
            expert_op("int4", "cuda")

    def test_the_device_profiles_say_the_same(self):
        """Every profile that exports for a target lists exactly the ops the exporter counts on there."""
        from unmask.devices import load_profiles
        from unmask.export.config import TARGET_MOE_OPS

        for p in load_profiles():
            assert set(p.moe_ops) == set(TARGET_MOE_OPS[p.package.target]), p.name

    def test_dense_fallback_package_matches_the_reference(self, tmp_path):
        src = make_llada2_checkpoint(tmp_path / "hf")
        result = export_model(src, tmp_path / "pkg", "fp32", "dml", quiet=True)
        ops = {n.op_type for n in onnx.load(str(tmp_path / "pkg" / "model.onnx"), load_external_data=False).graph.node}
        assert not ops & {"MoE", "QMoE", "RotaryEmbedding"}
        assert result.manifest.provenance["moe"]["expert_op"] == "dense"
        ids = np.random.default_rng(7).integers(0, 320, (1, 10))
        assert np.abs(Graph(tmp_path / "pkg")(ids, 0)[0] - _full(load_reference(src), ids)).max() <= 1e-4


class TestRefusals:
    @pytest.mark.parametrize("key, value", [("score_function", "softmax"), ("n_group", 3), ("topk_group", 5),
                                            ("norm_topk_prob", False), ("num_experts_per_tok", 9)])
    def test_routing_parameters_not_implemented(self, tmp_path, key, value):
        src = make_llada2_checkpoint(tmp_path / "hf", **{key: value})
        with pytest.raises(ConfigError, match=key):
            export_model(src, tmp_path / "pkg", quiet=True)
        assert not (tmp_path / "pkg").exists()

    def test_missing_expert_tensor(self, tmp_path):
        shapes = llada2_weight_shapes(json.loads(make_llada2_checkpoint(tmp_path / "ok").joinpath("config.json")
                                                 .read_text()))
        del shapes["model.layers.2.mlp.experts.5.up_proj.weight"]
        src = make_llada2_checkpoint(tmp_path / "hf", shapes=shapes)
        with pytest.raises(ModelFormatError, match=r"model\.layers\.2\.mlp\.experts\.5\.up_proj\.weight"):
            export_model(src, tmp_path / "pkg", quiet=True)

    @pytest.mark.parametrize("name", ["model.layers.1.mlp.experts.3.down_proj.weight",
                                      "model.layers.1.attention.query_key_value.weight",
                                      "model.layers.2.mlp.gate.expert_bias"])
    def test_mis_shaped_tensor(self, tmp_path, name):
        shapes = llada2_weight_shapes(json.loads(make_llada2_checkpoint(tmp_path / "ok").joinpath("config.json")
                                                 .read_text()))
        shapes[name] = (shapes[name][0] + 1, *shapes[name][1:])
        src = make_llada2_checkpoint(tmp_path / "hf", shapes=shapes)
        with pytest.raises(ModelFormatError, match=name.replace(".", r"\.")):
            export_model(src, tmp_path / "pkg", quiet=True)


class TestDevices:
    """`unmask devices --model PKG` says how a mixture-of-experts package's experts run, and why."""

    @staticmethod
    def _package(folder, op, target="cpu", precision="int4"):
        from unmask.manifest import Dims, GraphFiles, Manifest, SpecialIds, write_manifest

        moe = {"expert_op": op, "num_experts": 256, "experts_per_token": 8}
        write_manifest(Manifest(architecture="llada2", dims=Dims(64, 32, 2, 4, 2, 8, 128),
                                special_ids=SpecialIds(mask_id=3, eos_id=2), precision=precision, target=target,
                                graph=GraphFiles(), size_bytes=1 << 20, provenance={"moe": moe}), folder)
        return read_manifest(folder)

    def test_cli_explains_the_expert_op(self, tmp_path):
        from click.testing import CliRunner

        from unmask.cli import cli

        self._package(tmp_path, "QMoE")
        result = CliRunner().invoke(cli, ["devices", "--model", str(tmp_path), "--device", "cpu", "--json"])
        assert result.exit_code == 0, result.output
        explanation = json.loads(result.output)["choice"]["explanation"]
        assert "experts: com.microsoft QMoE (8 of 256 experts per token) on CPUExecutionProvider" in explanation
        assert "moe_ops: MoE, QMoE" in explanation

    def test_provider_without_the_op_is_named(self, tmp_path):
        from unmask.devices import load_profiles
        from unmask.devices.select import moe_line, package_notes

        profiles = {p.name: p for p in load_profiles()}
        manifest = self._package(tmp_path, "QMoE")
        notes = package_notes(profiles["directml"], manifest)
        assert any("QMoE nodes, which DmlExecutionProvider does not run" in n for n in notes)
        dense = self._package(tmp_path, "dense", target="dml", precision="fp16")
        assert "plain MatMuls over all experts" in moe_line(profiles["directml"], dense)
        assert moe_line(profiles["directml"], None) is None

    def test_profile_moe_ops_are_checked(self):
        from unmask.devices.profile import profile_from_dict

        with pytest.raises(ConfigError, match="moe_ops"):
            profile_from_dict({"moe_ops": ["SparseMoE"]}, name="x", source="x.toml")
