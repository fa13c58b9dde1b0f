"""CUDA checks: the probe, auto selection, and fp16 generation on CUDA against CPU.

Skipped unless onnxruntime lists CUDAExecutionProvider and its probe session runs.
Sized for a GPU machine to finish `python -m pytest tests/gpu` in well under 5 minutes:
one tiny LLaDA fixture, exported once in fp16 for the cuda target.
"""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

from unmask.devices import PROBE_MODEL, DeviceFallbackWarning, detect, load_profiles, probe, select


def _cuda_probe():
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None
    cuda = next(p for p in load_profiles() if p.device == "cuda")
    return probe(cuda)


_PROBE = _cuda_probe()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        _PROBE is None or not _PROBE.ok,
        reason="CUDAExecutionProvider not usable here"
        + ("" if _PROBE is None else f" ({_PROBE.reason})"),
    ),
]


class TestCudaDevice:
    def test_explicit_cuda_runs_on_the_gpu(self):
        placement = select(None, "cuda")
        assert placement.provider_names == ["CUDAExecutionProvider", "CPUExecutionProvider"]
        session = placement.create_session(PROBE_MODEL)
        assert session.get_providers()[0] == "CUDAExecutionProvider"
        (y,) = session.run(None, {"x": np.full((1, 4), 1.5, np.float32)})
        np.testing.assert_array_equal(y, np.full((1, 4), 3.0, np.float32))

    def test_auto_picks_cuda_without_fallback(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeviceFallbackWarning)
            assert select(None).device == "cuda"

    def test_gpu_memory_is_reported(self):
        if shutil.which("nvidia-smi") is None:
            pytest.skip("nvidia-smi not on PATH: GPU memory comes only from get_ep_devices")
        (first, *_) = detect().gpus
        assert first.memory_total_bytes >= first.memory_free_bytes > 0


# ---------------------------------------------------------------------- fp16 generation


@pytest.fixture(scope="module")
def fp16_package(tmp_path_factory):
    """The tiny LLaDA fixture exported in fp16 for the cuda target."""
    testing = pytest.importorskip("unmask.export.testing")
    from unmask.export import export_model

    root = tmp_path_factory.mktemp("cuda-fp16")
    src, out = root / "hf", root / "pkg"
    testing.make_llada_checkpoint(src)
    export_model(src, out, precision="fp16", target="cuda", quiet=True)
    return out


def _forward_inputs(manifest, ids: np.ndarray) -> dict[str, np.ndarray]:
    """A whole-sequence pass with an empty past (cache mode "none") for the graph contract."""
    d, batch, width = manifest.dims, ids.shape[0], ids.shape[1]
    kv = np.float16 if manifest.kv_dtype == "float16" else np.float32
    feeds = {
        "input_ids": ids.astype(np.int64),
        "position_ids": np.tile(np.arange(width, dtype=np.int64), (batch, 1)),
        "logits_index": np.arange(width, dtype=np.int64),
    }
    for layer in range(d.num_layers):
        empty = np.zeros((batch, d.num_kv_heads, 0, d.head_dim), kv)
        feeds[f"past_key.{layer}"] = empty
        feeds[f"past_value.{layer}"] = empty
    return feeds


class TestFp16OnCuda:
    def test_logits_match_cpu(self, fp16_package):
        from unmask.manifest import read_manifest

        manifest = read_manifest(fp16_package)
        graph = fp16_package / manifest.graph.file
        rng = np.random.default_rng(0)
        ids = rng.integers(0, manifest.dims.vocab_size, size=(1, 24))
        ids[0, 12:] = manifest.special_ids.mask_id
        feeds = _forward_inputs(manifest, ids)
        cuda = select(manifest, "cuda").create_session(graph)
        cpu = select(manifest, "cpu").create_session(graph)
        assert cuda.get_providers()[0] == "CUDAExecutionProvider"
        (on_gpu,) = cuda.run(["logits"], feeds)
        (on_cpu,) = cpu.run(["logits"], feeds)
        on_gpu, on_cpu = on_gpu.astype(np.float32), on_cpu.astype(np.float32)
        scale = float(np.abs(on_cpu).max())
        assert np.abs(on_gpu - on_cpu).max() <= 2e-2 * scale  # fp16 sums in a different order
        assert (on_gpu.argmax(-1) == on_cpu.argmax(-1)).mean() >= 0.9

    @pytest.mark.parametrize("cache", ["none", "dual"])
    def test_tokens_match_cpu(self, fp16_package, cache):
        import unmask

        on_gpu = unmask.load(fp16_package, device="cuda")
        on_cpu = unmask.load(fp16_package, device="cpu")
        config = unmask.GenerationConfig(gen_length=32, steps=32, block_length=8, cache=cache, temperature=0.0, seed=0)
        prompt_ids = np.arange(3, 11, dtype=np.int64) % on_cpu.manifest.dims.vocab_size
        gpu_tokens = on_gpu.generate(prompt_ids=prompt_ids, config=config).token_ids
        cpu_tokens = on_cpu.generate(prompt_ids=prompt_ids, config=config).token_ids
        agreement = float((gpu_tokens == cpu_tokens).mean())
        # greedy decoding of random weights has near-ties that fp16 rounding can flip; most must agree
        assert agreement >= 0.9, f"{agreement:.0%} of tokens agree\ncuda {gpu_tokens}\ncpu  {cpu_tokens}"
