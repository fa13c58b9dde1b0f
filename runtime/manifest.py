"""The model package manifest (`unmask.json`): what a package holds and how to run it.

Written by `unmask export`, read by the runtime (session setup, decoder facts) and by
`unmask.devices` (precision, target, size for the RAM check). The manifest is the single
home of a model's facts: dims, special token ids, shift_logits, default generation
settings (only those that differ from `GenerationConfig()`), and the chat template.

    from unmask.manifest import read_manifest
    m = read_manifest("llada-int4")
    cfg = m.generation_config()          # GenerationConfig with the package's defaults
    facts = m.model_facts()              # ModelFacts: mask/eos/eot ids, shift_logits
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterator, Mapping

from .config import GenerationConfig, ModelFacts
from .errors import ConfigError, ModelFormatError

FORMAT_VERSION = 1
MANIFEST_NAME = "unmask.json"

ARCHITECTURES = ("llada", "dream", "generic")
# The one home of the precision and target names: the exporter's ExportConfig and the device
# profiles import these (which precisions each target can run is export.config.TARGET_PRECISIONS).
PRECISIONS = ("fp32", "fp16", "int8", "int4")
TARGETS = ("cpu", "cuda", "dml", "coreml")
KV_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Dims:
    """Model dimensions; the runtime sizes past_key/past_value from num_kv_heads and head_dim.
    Generic packages (cache_reuse false) know only vocab_size and max_sequence_length; the rest are 0."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_sequence_length: int  # nominal context of the checkpoint (RoPE itself has no table limit)


@dataclass(frozen=True)
class SpecialIds:
    """Token ids the decoder needs; None where the model has no such token."""

    mask_id: int
    eos_id: int
    eot_id: int | None = None  # end of turn (LLaDA <|eot_id|>, Dream <|im_end|>)
    bos_id: int | None = None
    pad_id: int | None = None


@dataclass(frozen=True)
class GraphFiles:
    """The ONNX graph file and every file it needs, each with its sha256."""

    file: str = "model.onnx"
    files: dict[str, str] = field(default_factory=dict)  # file name -> sha256 hex


@dataclass
class Manifest:
    """Contents of unmask.json (every key is described in docs/manifest.md)."""

    architecture: str
    dims: Dims
    special_ids: SpecialIds
    precision: str
    target: str
    graph: GraphFiles
    shift_logits: bool = False  # Dream: the distribution of position i is row i-1
    kv_dtype: str = "float32"  # dtype of past_*/present_* tensors
    cache_reuse: bool = True  # False: the graph has no past inputs, run with cache "none"
    size_bytes: int = 0  # total bytes of graph files (for the device RAM check)
    generation: dict[str, Any] = field(default_factory=dict)  # GenerationConfig fields that differ
    chat_template: str | None = None
    tokenizer: str = "tokenizer.json"
    bos_token: str | None = None  # strings the chat template refers to
    eos_token: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def generation_config(self, **overrides: Any) -> GenerationConfig:
        """GenerationConfig = defaults <- package defaults <- overrides."""
        return GenerationConfig.from_dict(self.generation).replace(**overrides)

    def model_facts(self) -> ModelFacts:
        """What the decoder needs to know about this model (its token ids, the logit shift)."""
        ids = self.special_ids
        return ModelFacts(mask_id=ids.mask_id, eos_id=ids.eos_id, eot_id=ids.eot_id, shift_logits=self.shift_logits)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        # format_version first: it is what a reader checks before anything else
        return {"format_version": out.pop("format_version"), **out}


# ---------------------------------------------------------------------- writing


def write_manifest(manifest: Manifest, path: str | os.PathLike) -> Path:
    """Write `manifest` as JSON. `path` is the package folder or the unmask.json file itself."""
    _check(manifest, source="manifest")
    target = Path(path)
    if target.is_dir():
        target = target / MANIFEST_NAME
    write_text_atomic(target, json.dumps(manifest.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return target


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary name beside `path`; once the block succeeds, move it onto `path` in one
    step (os.replace), so a reader never sees a half-written file. On failure it is removed."""
    target = Path(path)
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp{target.suffix}")  # suffix kept: savefig reads it
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through `replacing`."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def generation_defaults(config: GenerationConfig) -> dict[str, Any]:
    """The fields of `config` that differ from GenerationConfig() (what a manifest stores)."""
    base = GenerationConfig().to_dict()
    return {k: v for k, v in config.to_dict().items() if v != base[k]}


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------- reading


def read_manifest(package_dir: str | os.PathLike) -> Manifest:
    """Read and check `package_dir/unmask.json`; ModelFormatError names the file and key."""
    folder = Path(package_dir)
    path = folder / MANIFEST_NAME if folder.is_dir() or not folder.suffix else folder
    if not path.is_file():
        raise ModelFormatError(f"{path}: not found (is {folder} an unmask model package?)")
    return manifest_from_dict(read_json_object(path), source=str(path))


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object stored in `path`; ModelFormatError naming the file when it is unreadable,
    not JSON, or not an object. Callers check existence themselves (their messages differ)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path}: not readable JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ModelFormatError(f"{path}: expected a JSON object at the top level")
    return raw


def manifest_from_dict(raw: Mapping[str, Any], *, source: str = "manifest") -> Manifest:
    version = raw.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelFormatError(f"{source}: key 'format_version' missing or not an integer")
    if version > FORMAT_VERSION:
        raise ModelFormatError(
            f"{source}: format_version {version} is newer than this unmask reads ({FORMAT_VERSION}); "
            "upgrade unmask"
        )
    values = dict(raw)
    values["dims"] = _sub(Dims, raw, "dims", source)
    values["special_ids"] = _sub(SpecialIds, raw, "special_ids", source)
    values["graph"] = _sub(GraphFiles, raw, "graph", source)
    known = {f.name for f in fields(Manifest)}
    missing = sorted(f.name for f in fields(Manifest) if f.name not in values and _required(f))
    if missing:
        raise ModelFormatError(f"{source}: missing key(s) {', '.join(missing)}")
    # unknown keys are ignored: a newer exporter may add optional fields
    manifest = Manifest(**{k: v for k, v in values.items() if k in known})
    _check(manifest, source=source)
    return manifest


def verify_graph_files(manifest: Manifest, package_dir: str | os.PathLike) -> None:
    """Hash every graph file and compare with the manifest (slow for big models: opt-in)."""
    for name, expected in manifest.graph.files.items():
        path = Path(package_dir) / name
        if not path.is_file():
            raise ModelFormatError(f"{path}: listed in {MANIFEST_NAME} graph.files but missing")
        if sha256_file(path) != expected:
            raise ModelFormatError(f"{path}: sha256 differs from {MANIFEST_NAME} (file corrupted or replaced)")


def _required(f) -> bool:
    from dataclasses import MISSING

    return f.default is MISSING and f.default_factory is MISSING


def _sub(cls, raw: Mapping[str, Any], key: str, source: str):
    value = raw.get(key)
    if not isinstance(value, dict):
        raise ModelFormatError(f"{source}: key '{key}' missing or not an object")
    names = {f.name for f in fields(cls)}
    missing = sorted(f.name for f in fields(cls) if f.name not in value and _required(f))
    if missing:
        raise ModelFormatError(f"{source}: missing key(s) {', '.join(f'{key}.{m}' for m in missing)}")
    return cls(**{k: v for k, v in value.items() if k in names})


def _check(m: Manifest, *, source: str) -> None:
    def bad(key: str, value: Any, why: str) -> ModelFormatError:
        return ModelFormatError(f"{source}: {key} = {value!r}: {why}")

    for key, value, allowed in (
        ("architecture", m.architecture, ARCHITECTURES),
        ("precision", m.precision, PRECISIONS),
        ("target", m.target, TARGETS),
        ("kv_dtype", m.kv_dtype, KV_DTYPES),
    ):
        if value not in allowed:
            raise bad(key, value, f"expected one of {', '.join(allowed)}")
    for f in fields(Dims):
        value = getattr(m.dims, f.name)
        # a generic (export_torch) graph is opaque: only its vocabulary and context are known (others 0)
        minimum = 0 if m.architecture == "generic" and f.name not in ("vocab_size", "max_sequence_length") else 1
        if not _is_int(value) or value < minimum:
            raise bad(f"dims.{f.name}", value, f"expected an integer >= {minimum}")
    for f in fields(SpecialIds):
        value = getattr(m.special_ids, f.name)
        if value is None and f.name not in ("mask_id", "eos_id"):
            continue
        if not _is_int(value) or value < 0:
            raise bad(f"special_ids.{f.name}", value, "expected a non-negative integer")
    for key in ("shift_logits", "cache_reuse"):
        if not isinstance(getattr(m, key), bool):
            raise bad(key, getattr(m, key), "expected true or false")
    if not isinstance(m.graph.file, str) or not m.graph.file or not isinstance(m.graph.files, dict):
        raise bad("graph", asdict(m.graph), "expected {file: name, files: {name: sha256}}")
    for name in [m.graph.file, *m.graph.files, m.tokenizer]:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise bad("graph/tokenizer file name", name, "must be a plain file name inside the package")
    if m.graph.files and m.graph.file not in m.graph.files:
        raise bad("graph.files", sorted(m.graph.files), f"does not list graph.file {m.graph.file!r}")
    if not _is_int(m.size_bytes) or m.size_bytes < 0:
        raise bad("size_bytes", m.size_bytes, "expected a non-negative integer")
    if not isinstance(m.generation, dict):
        raise bad("generation", m.generation, "expected an object of GenerationConfig fields")
    try:
        GenerationConfig.from_dict(m.generation)
    except ConfigError as exc:
        raise ModelFormatError(f"{source}: generation: {exc}") from exc
    if m.chat_template is not None and not isinstance(m.chat_template, str):
        raise bad("chat_template", m.chat_template, "expected a string or null")
    if not isinstance(m.provenance, dict):
        raise bad("provenance", m.provenance, "expected an object")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
