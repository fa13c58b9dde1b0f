"""export_torch: any PyTorch denoiser `ids [B, L] -> logits [B, L, V]` as a generic package.

The graph is the module traced as-is (input_ids -> logits over every position), so the
package has no K/V inputs: its manifest says cache_reuse false and the runtime runs it with
cache "none". torch is needed only here (the test extra), never by export_model.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from ..config import GenerationConfig
from ..errors import ConfigError, ModelFormatError
from ..manifest import Dims, GraphFiles, Manifest, SpecialIds, generation_defaults, sha256_file, write_manifest
from .checkpoint import read_tokenizer_files
from .package import ExportResult, check_output, exporter_version, publish, staging
from .validate import compare


def export_torch(module, out: str | os.PathLike, *, tokenizer: str | os.PathLike, mask_id: int,
                 eos_id: int | None = None, eot_id: int | None = None, bos_id: int | None = None,
                 shift_logits: bool = False, max_sequence_length: int = 4096,
                 generation: GenerationConfig | None = None, example_length: int = 16, force: bool = False,
                 validate: bool = True, quiet: bool = True) -> ExportResult:
    """Trace `module` to model.onnx and write a package with cache_reuse false.

    tokenizer: a tokenizer.json file, or a folder holding tokenizer.json (+ tokenizer_config.json
    for the chat template and BOS/EOS strings).
    """
    import torch

    out = Path(out)
    check_output(out, force)
    tok_path = Path(tokenizer)
    tok = read_tokenizer_files(tok_path if tok_path.is_dir() else _folder_with(tok_path))
    if eos_id is None:
        eos_id = tok.id_of(tok.eos_token)
    if eos_id is None:
        raise ConfigError("export_torch: eos_id not given and the tokenizer names no EOS token")
    module = module.eval()
    example = torch.zeros((1, example_length), dtype=torch.int64)
    with torch.no_grad():
        probe = module(example)
    if not isinstance(probe, torch.Tensor) or probe.dim() != 3 or probe.shape[:2] != example.shape:
        raise ModelFormatError(f"export_torch: module must map ids [B, L] to logits [B, L, V], got {_shape(probe)}")
    vocab = int(probe.shape[-1])
    if not 0 <= mask_id < vocab:
        raise ConfigError(f"export_torch: mask_id {mask_id} is not below the logits width {vocab}")
    with staging(out) as tmp:
        graph = tmp / "model.onnx"
        _trace(module, example, graph)
        shutil.copyfile(tok.path, tmp / "tokenizer.json")
        manifest = Manifest(
            architecture="generic",
            dims=Dims(vocab_size=vocab, hidden_size=0, num_layers=0, num_heads=0, num_kv_heads=0, head_dim=0,
                      max_sequence_length=max_sequence_length),
            special_ids=SpecialIds(mask_id=mask_id, eos_id=eos_id, eot_id=eot_id, bos_id=bos_id),
            shift_logits=shift_logits, precision="fp32", target="cpu", kv_dtype="float32", cache_reuse=False,
            graph=GraphFiles(file="model.onnx", files={"model.onnx": sha256_file(graph)}),
            size_bytes=graph.stat().st_size,
            generation=generation_defaults(generation or GenerationConfig()),
            chat_template=tok.chat_template, bos_token=tok.bos_token, eos_token=tok.eos_token,
            tokenizer_sha256=sha256_file(tmp / "tokenizer.json"),
            provenance={"exporter_version": exporter_version(), "source": f"torch module {type(module).__name__}",
                        "source_files": {"tokenizer.json": sha256_file(tok.path)}},
        )
        write_manifest(manifest, tmp)
        report = ()
        if validate:
            from .validate import run_package

            ids = np.random.default_rng(0).integers(0, vocab, size=(2, example_length + 3), dtype=np.int64)
            with torch.no_grad():
                want = module(torch.from_numpy(ids)).float().numpy()
            report = (compare(run_package(tmp, ids, manifest), want, "torch"),)
        publish(tmp, out, force)
    return ExportResult(out, manifest, report)


def _trace(module, example, path: Path) -> None:
    import torch

    with warnings.catch_warnings():
        # the TorchScript exporter is the one that needs no extra packages; silence its deprecation notices
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, (example,), str(path), dynamo=False, input_names=["input_ids"],
                              output_names=["logits"], opset_version=17,
                              dynamic_axes={"input_ids": {0: "batch", 1: "length"},
                                            "logits": {0: "batch", 1: "length"}})
        except Exception as exc:  # torch raises many types; the module is what cannot be exported
            raise ModelFormatError(f"export_torch: torch.onnx.export failed ({type(exc).__name__}: {exc})") from exc


def _folder_with(tokenizer_json: Path) -> Path:
    if tokenizer_json.name != "tokenizer.json":
        raise ConfigError(f"tokenizer must be a tokenizer.json file or a folder holding one, got {tokenizer_json}")
    return tokenizer_json.parent


def _shape(value) -> str:
    return str(tuple(value.shape)) if hasattr(value, "shape") else type(value).__name__
