"""int8 / int4 / fp16 packages against the fp32 package, on a model trained inside the test.

Random weights make quantization look ~10x worse than on trained weights, so a tiny
LLaDA is trained for a few hundred Adam steps on a two-symbol fill task (masked-diffusion loss) first.
"""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from unmask.export import export_model
from unmask.export.reference import LladaModel
from unmask.export.testing import llada_config, make_tokenizer
from unmask.export.validate import compare
from unmask.manifest import read_manifest

HALF = 8  # task: [a]*8 + [b]*8 for symbols a, b in 0..63; masked positions recover their half's symbol


def _batch(rng, n, mask_id):
    a, b = rng.integers(0, 64, (n, 1)), rng.integers(0, 64, (n, 1))
    clean = np.concatenate([np.repeat(a, HALF, 1), np.repeat(b, HALF, 1)], axis=1)
    ratio = rng.uniform(0.1, 0.9, (n, 1))
    masked = rng.uniform(size=clean.shape) < ratio
    return np.where(masked, mask_id, clean), clean, masked


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained") / "hf"
    ids = make_tokenizer(folder, "llada", 320)
    mask_id = ids["<|mdm_mask|>"]
    cfg = llada_config(vocab_size=320, d_model=64, n_layers=2, n_heads=4, mlp_hidden_size=96,
                       mask_token_id=mask_id, eos_token_id=ids["<|endoftext|>"])
    torch.manual_seed(0)
    model = LladaModel(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    rng = np.random.default_rng(0)
    for _ in range(150):
        noisy, clean, masked = (torch.from_numpy(a) for a in _batch(rng, 32, mask_id))
        logits = model(noisy)
        loss = torch.nn.functional.cross_entropy(logits[masked], clean[masked])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(folder)
    noisy, clean, masked = _batch(np.random.default_rng(1), 16, mask_id)
    return folder, noisy, loss.item()


def _logits(package, ids):
    m = read_manifest(package)
    session = ort.InferenceSession(str(package / "model.onnx"), providers=["CPUExecutionProvider"])
    d = m.dims
    kv = np.zeros((ids.shape[0], d.num_kv_heads, 0, d.head_dim), m.kv_dtype)
    feeds = {"input_ids": ids, "position_ids": np.broadcast_to(np.arange(ids.shape[1]), ids.shape).copy(),
             "logits_index": np.arange(ids.shape[1])}
    feeds |= {f"past_{t}.{i}": kv for i in range(d.num_layers) for t in ("key", "value")}
    return session.run(["logits"], feeds)[0]


@pytest.fixture(scope="module")
def fp32_logits(trained, tmp_path_factory):
    folder, probes, _ = trained
    out = tmp_path_factory.mktemp("fp32") / "pkg"
    export_model(folder, out, quiet=True, validate=False)
    return _logits(out, probes)


# (precision, target) -> (max relative RMS error, max KL in nats); measured int8 (7-bit weights) 0.012 / 1.8e-4,
# int4 (blocks of 128, zero points) 0.030 / 1.9e-3, fp16 3.6e-4 / 5.7e-7 (top-1 99.6 %, 98.0 %, 100 %): bounds
# ~3-4x that (int4 in symmetric blocks of 32: 0.024 / 2.3e-3)
BOUNDS = {("int8", "cpu"): (0.04, 1e-3), ("int4", "cpu"): (0.08, 1e-2), ("fp16", "cuda"): (2e-3, 1e-5)}


@pytest.mark.parametrize("precision, target", sorted(BOUNDS))
def test_quantized_error_is_bounded(trained, fp32_logits, tmp_path, precision, target):
    folder, probes, loss = trained
    assert loss < 2.5  # learned (chance: ln 64 = 4.2; fully masked halves keep the floor above 0)
    result = export_model(folder, tmp_path / "pkg", precision=precision, target=target, quiet=True)
    agreement = compare(_logits(tmp_path / "pkg", probes), fp32_logits, "fp32")
    max_rms, max_kl = BOUNDS[precision, target]
    assert agreement.relative_rms_error <= max_rms
    assert agreement.kl_divergence <= max_kl
    assert agreement.top1_agreement >= 0.9
    assert result.validation and result.validation[0].baseline == "fp32"  # export validated itself


def test_int4_uses_matmulnbits_and_keeps_head_at_8_bits(trained, tmp_path):
    import onnx

    folder, _, _ = trained
    result = export_model(folder, tmp_path / "pkg", precision="int4", quiet=True, validate=False)
    model = onnx.load(str(tmp_path / "pkg" / "model.onnx"))
    nodes = {n.name: n for n in model.graph.node if n.op_type == "MatMulNBits"}
    nbits = {name: {a.name: a.i for a in n.attribute} for name, n in nodes.items()}
    assert len(nbits) == 2 * 4 + 1  # per layer: fused q/k/v, o, fused gate/up, down
    assert nbits["head/MatMulNBits"]["bits"] == 8
    layer = nbits["layers.0/mlp/gate_up/MatMulNBits"]
    # the measured defaults (export/config.py): blocks of 128, int8 activations (accuracy level 4)
    assert (layer["bits"], layer["block_size"], layer["accuracy_level"]) == (4, 128, 4)
    assert (layer["K"], layer["N"]) == (64, 2 * 96)  # gate and up stacked: one product
    assert (nbits["layers.0/attn/q_k_v/MatMulNBits"]["N"], nbits["layers.0/attn/o/MatMulNBits"]["N"]) == (3 * 64, 64)
    # int4 layers carry zero points (4th input), the 8-bit head stays symmetric
    assert len(nodes["layers.0/mlp/gate_up/MatMulNBits"].input) == 4
    assert len(nodes["head/MatMulNBits"].input) == 3
    recorded = result.manifest.provenance
    assert (recorded["block_size"], recorded["accuracy_level"], recorded["symmetric"]) == (128, 4, False)
    embed = next(t for t in model.graph.initializer if t.name == "embed.weight")
    assert embed.data_type == onnx.TensorProto.FLOAT16


@pytest.mark.parametrize("block_size, symmetric", [(32, True), (64, False)])
def test_int4_block_size_and_zero_points_follow_the_config(trained, fp32_logits, tmp_path, block_size, symmetric):
    import onnx

    folder, probes, _ = trained
    export_model(folder, tmp_path / "pkg", precision="int4", quiet=True, validate=False, block_size=block_size,
                 symmetric=symmetric)
    model = onnx.load(str(tmp_path / "pkg" / "model.onnx"))
    down = next(n for n in model.graph.node if n.name == "layers.1/mlp/down/MatMulNBits")
    assert {a.name: a.i for a in down.attribute}["block_size"] == block_size
    assert len(down.input) == (3 if symmetric else 4)
    agreement = compare(_logits(tmp_path / "pkg", probes), fp32_logits, "fp32")
    max_rms, max_kl = BOUNDS["int4", "cpu"]
    assert agreement.relative_rms_error <= max_rms and agreement.kl_divergence <= max_kl


def test_symmetric_must_be_a_bool():
    from unmask import ConfigError
    from unmask.export import ExportConfig

    with pytest.raises(ConfigError, match="symmetric must be True or False"):
        ExportConfig(precision="int4", symmetric="no").resolve()
