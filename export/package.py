"""export_model: HF checkpoint folder -> model package (unmask.json, model.onnx [+ data], tokenizer.json).

Everything is written into a hidden staging folder beside OUT and renamed into place at the
end, so a failure (bad weight, full disk, Ctrl-C) leaves no partial package behind. All
checks that need only headers (config values, weight names and shapes) run before the first
byte is written.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version as dist_version
from pathlib import Path

from ..errors import ConfigError, ModelFormatError
from ..manifest import Dims, GraphFiles, Manifest, SpecialIds, generation_defaults, sha256_file, write_manifest
from .attention import OPSET
from .builder import GraphBuilder
from .checkpoint import read_config, read_tokenizer_files
from .config import ExportConfig
from .emitter import Emitter, WeightFile, save_model
from .families import family_for
from .precision import INT8_WEIGHT_MAX
from .progress import Progress
from .safetensors_io import INDEX_NAME, CheckpointTensors
from .validate import Agreement, validate

@dataclass(frozen=True)
class ExportResult:
    path: Path
    manifest: Manifest
    validation: tuple[Agreement, ...] = ()


def exporter_version() -> str:
    """The installed distribution's version (as `unmask.__version__`), read here so export needs no runtime module."""
    try:
        return dist_version("unmask")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0.0.0+unknown"


def export_model(src: str | os.PathLike, out: str | os.PathLike, precision: str = "fp32", target: str = "cpu", *,
                 config: ExportConfig | None = None, **settings) -> ExportResult:
    """Convert the LLaDA/Dream checkpoint folder `src` into the package folder `out`.

    settings are ExportConfig fields (block_size, validate, reference, force, quiet, attention, ...).
    Raises ConfigError (bad setting, unsupported config value, existing OUT without force) or
    ModelFormatError (missing/bad files, shapes, NaN weights, write failures).
    """
    cfg = (config or ExportConfig(precision=precision, target=target, **settings)).resolve()
    src, out = Path(src), Path(out)
    check_output(out, cfg.force)
    hf = read_config(src)
    family = family_for(hf)
    tokenizer = read_tokenizer_files(src)
    spec = family.parse_config(hf, tokenizer)
    tensors = CheckpointTensors(src)
    builder = family(spec, tensors, cfg)
    builder.check_weights()
    with staging(out) as tmp, Progress(builder.weight_reads(), f"export {spec.architecture} {cfg.precision}",
                                       quiet=cfg.quiet) as progress:
        builder.on_tensor = progress.advance
        files = build_graph(builder, tmp, cfg)
        shutil.copyfile(tokenizer.path, tmp / "tokenizer.json")
        manifest = make_manifest(builder, tokenizer, tmp, files, src, tensors)
        write_manifest(manifest, tmp)
        report = ()
        if cfg.validate:
            report = tuple(validate(tmp, manifest, builder, src, probe_length=cfg.probe_length,
                                    reference=cfg.reference))
            for agreement in report:
                progress.note(f"validation ({cfg.precision}, {cfg.probe_length}-token probes) {agreement.line()}")
        publish(tmp, out, cfg.force)
    return ExportResult(out, manifest, report)


def build_graph(builder: GraphBuilder, folder: Path, cfg: ExportConfig) -> list[str]:
    weights = WeightFile(folder / "model.onnx.data")
    em = Emitter(weights, opset=OPSET.get(builder.kernel, 21))
    try:
        builder.build(em)
        model = em.model(f"unmask_{builder.spec.architecture}", producer_version=exporter_version())
    finally:
        weights.close()
    return save_model(model, weights, folder, inline_below=cfg.external_data_threshold)


def make_manifest(builder: GraphBuilder, tokenizer, folder: Path, files: list[str], src: Path,
                  tensors: CheckpointTensors) -> Manifest:
    s, cfg = builder.spec, builder.config
    hashes = {name: sha256_file(folder / name) for name in files}
    sources = ["config.json", "tokenizer.json", "tokenizer_config.json", INDEX_NAME, *(f.name for f in tensors.files)]
    return Manifest(
        architecture=s.architecture,
        dims=Dims(vocab_size=s.vocab_size, hidden_size=s.hidden_size, num_layers=s.num_layers,
                  num_heads=s.num_heads, num_kv_heads=s.num_kv_heads, head_dim=s.head_dim,
                  max_sequence_length=s.max_sequence_length),
        special_ids=SpecialIds(mask_id=s.mask_id, eos_id=s.eos_id, eot_id=s.eot_id, bos_id=s.bos_id, pad_id=s.pad_id),
        shift_logits=builder.shift_logits,
        precision=cfg.precision,
        target=cfg.target,
        kv_dtype=cfg.float_dtype,
        cache_reuse=True,
        graph=GraphFiles(file="model.onnx", files=hashes),
        size_bytes=sum((folder / name).stat().st_size for name in files),
        generation=generation_defaults(builder.generation),
        chat_template=tokenizer.chat_template,
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        provenance={
            "exporter_version": exporter_version(),
            "source": str(src.resolve()),
            "source_files": {n: sha256_file(src / n) for n in sources if (src / n).is_file()},
            "attention": builder.kernel,
            "rope": cfg.rope,
            "fuse_projections": cfg.fuse_projections,
            "int8_weight_max": INT8_WEIGHT_MAX if cfg.precision == "int8" else None,
            "block_size": cfg.block_size if cfg.precision == "int4" else None,
            "accuracy_level": cfg.accuracy_level if cfg.precision == "int4" else None,
        },
    )


# ---------------------------------------------------------------------- folders


def check_output(out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise ConfigError(f"{out} already exists; pass --force (force=True) to replace it")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a folder")


@contextmanager
def staging(out: Path):
    """A hidden folder beside `out`, removed on any failure (including Ctrl-C)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
    except OSError as exc:
        raise ModelFormatError(f"cannot create a staging folder beside {out} ({exc})") from exc
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    else:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when publish() renamed it


def publish(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished staging folder to `out` (replacing it only with force)."""
    check_output(out, force)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError as exc:
        if old is not None:
            os.replace(old, out)
        raise ModelFormatError(f"cannot move the package into {out} ({exc})") from exc
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
