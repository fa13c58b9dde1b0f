"""export_model: HF checkpoint folder -> model package (unmask.json, model.onnx [+ data], tokenizer.json).

Everything is written into a hidden staging folder beside OUT and renamed into place at the
end, so a failure (bad weight, full disk, Ctrl-C, SIGTERM, SIGHUP) leaves no partial package
behind; after a SIGKILL the next export beside OUT removes the dead process's staging folder.
All checks that need only headers (config values, weight names and shapes, the tokenizer
loading within the runtime's limits) run before the first byte is written, and OUT may
never be the source folder or hold it.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version as dist_version
from pathlib import Path

from ..errors import ConfigError, ModelFormatError
from ..manifest import (BIDIRECTIONAL, BLOCK_CAUSAL, Dims, GraphFiles, Manifest, SpecialIds, generation_defaults,
                        read_tokenizer_json, sha256_file, write_manifest)
from .attention import OPSET
from .builder import GraphBuilder
from .checkpoint import read_config, read_tokenizer_files
from .config import ExportConfig
from .emitter import Emitter, WeightFile, save_model
from .families import family_for
from .precision import INT8_WEIGHT_MAX
from .progress import Progress
from .provenance import source_label
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
    """Convert the LLaDA/Dream/SDAR/LLaDA2 checkpoint folder `src` into the package folder `out`.

    settings are ExportConfig fields (block_size, validate, reference, force, quiet, attention, ...).
    Raises ConfigError (bad setting, unsupported config value, existing OUT without force) or
    ModelFormatError (missing/bad files, shapes, NaN weights, write failures).
    """
    cfg = (config or ExportConfig(precision=precision, target=target, **settings)).resolve()
    src, out = Path(src), Path(out)
    check_output(out, cfg.force, sources=(src,))
    hf = read_config(src)
    family = family_for(hf)
    tokenizer = read_tokenizer_files(src)
    check_tokenizer(tokenizer.path)  # the package must load: refuse an unusable tokenizer before writing
    spec = family.parse_config(hf, tokenizer)
    tensors = CheckpointTensors(src)
    builder = family(spec, tensors, cfg)
    builder.check_weights()
    with staging(out) as tmp, Progress(builder.weight_reads(), f"export {spec.architecture} {cfg.precision}",
                                       quiet=cfg.quiet) as progress:
        builder.on_tensor = progress.advance
        files = build_graph(builder, tmp, cfg)
        copy_file(tokenizer.path, tmp / "tokenizer.json")
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
        attention_kind=BIDIRECTIONAL if s.block_size is None else BLOCK_CAUSAL,
        block_size=s.block_size,
        graph=GraphFiles(file="model.onnx", files=hashes),
        size_bytes=sum((folder / name).stat().st_size for name in files),
        generation=generation_defaults(builder.generation),
        chat_template=tokenizer.chat_template,
        tokenizer_sha256=sha256_file(folder / "tokenizer.json"),
        bos_token=tokenizer.bos_token,
        eos_token=tokenizer.eos_token,
        provenance={
            "exporter_version": exporter_version(),
            "source": source_label(src),  # a name for people; the path below is for this machine
            "source_path": str(src.resolve()),
            "source_files": {n: sha256_file(src / n) for n in sources if (src / n).is_file()},
            "attention": builder.kernel,
            "rope": cfg.rope,
            "fuse_projections": cfg.fuse_projections,
            "int8_weight_max": INT8_WEIGHT_MAX if cfg.precision == "int8" else None,
            "block_size": cfg.block_size if cfg.precision == "int4" else None,
            "accuracy_level": cfg.accuracy_level if cfg.precision == "int4" else None,
            "symmetric": cfg.symmetric if cfg.precision == "int4" else None,
            **builder.provenance(),
        },
    )


# ---------------------------------------------------------------------- folders

STAGING_MARK = ".unmask-staging"  # inside every staging folder: only marked folders are ever cleaned up


def check_output(out: Path, force: bool, sources: tuple[Path, ...] = ()) -> None:
    """ConfigError unless `out` may be written: absent, or a folder and `force`; never a source or above one."""
    for src in sources:
        target, source = out.resolve(), src.resolve()
        if target == source or target in source.parents:
            raise ConfigError(f"{out} is {'the source' if target == source else 'a folder holding the source'} "
                              f"{src}; replacing it would delete the checkpoint: choose another OUT")
    exists = out.exists() or out.is_symlink()
    if exists and not force:
        raise ConfigError(f"{out} already exists; pass --force (force=True) to replace it")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} exists and is not a folder")


@contextmanager
def staging(out: Path):
    """A hidden folder beside `out`, removed on any failure: an exception, Ctrl-C, SIGTERM or SIGHUP.
    SIGKILL cannot be caught: the next export beside `out` removes staging folders of dead processes."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(out.parent)
        tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        (tmp / STAGING_MARK).touch()
    except OSError as exc:
        raise ModelFormatError(f"cannot create a staging folder beside {out} ({exc})") from exc
    try:
        with _signals_raise():
            yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    else:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when publish() renamed it


class ExportInterrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived during an export (a KeyboardInterrupt, so the same cleanup runs)."""


@contextmanager
def _signals_raise():
    """Turn SIGTERM/SIGHUP into ExportInterrupted for the duration (main thread only: Python's rule)."""
    import signal
    import threading

    names = [n for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n)]
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise ExportInterrupted(f"export stopped by {signal.Signals(signum).name}")

    previous = {n: signal.signal(getattr(signal, n), interrupt) for n in names}
    try:
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(getattr(signal, n), handler)


def clean_stale(folder: Path) -> list[Path]:
    """Remove staging folders (`.NAME.partial-PID`, holding STAGING_MARK) whose process is gone."""
    removed = []
    for path in folder.glob(".*.partial-*"):
        pid = path.name.rpartition("-")[2]
        if not (pid.isdigit() and path.is_dir() and not path.is_symlink()):
            continue
        if (path / STAGING_MARK).is_file() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # no safe liveness probe (os.kill would terminate): never remove
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def copy_file(src: Path, dst: Path) -> None:
    """shutil.copyfile; a failed read or write (disk full) is a ModelFormatError naming both files."""
    try:
        shutil.copyfile(src, dst)
    except OSError as exc:
        raise ModelFormatError(f"cannot copy {src} to {dst} ({exc.strerror or exc})") from exc


def publish(tmp: Path, out: Path, force: bool) -> None:
    """Rename the finished staging folder to `out` (replacing it only with force; a symlink is replaced, not
    followed)."""
    check_output(out, force)
    (tmp / STAGING_MARK).unlink(missing_ok=True)  # a finished package is no longer a staging folder
    old = None
    if out.exists() or out.is_symlink():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    try:
        os.replace(tmp, out)
    except OSError as exc:
        if old is not None:
            os.replace(old, out)
        raise ModelFormatError(f"cannot move the package into {out} ({exc})") from exc
    if old is None:
        return
    if old.is_symlink():
        old.unlink()
    else:
        shutil.rmtree(old, ignore_errors=True)


def check_tokenizer(path: Path) -> None:
    """Refuse a tokenizer.json that `unmask.load` would refuse: the same limits, then the library parses it."""
    import tokenizers

    text = read_tokenizer_json(path)
    try:
        tokenizers.Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise ModelFormatError(f"cannot read tokenizer {path}: {exc}") from exc
