"""Opening a model package safely: manifest, hashes, and exactly the bytes ONNX Runtime will run.

A package is a folder a user may have downloaded from anywhere. Before a session is
built we check that
- the manifest's format version is one this unmask reads (read_manifest);
- every graph file and tokenizer.json is listed with its sha256 and matches it;
- every file ORT or the tokenizer will use stays inside the folder: the ONNX graph's
  external-data `location` entries (read straight from the protobuf, so the check does
  not need the optional `onnx` package) must be valid UTF-8 and name exactly one of the
  hashed graph files;
- every file is a regular file within the limits of unmask.limits (no FIFO, no giant
  tokenizer, no deeply nested graph), and the chat template compiles and renders a
  sample conversation within its limits.

Each file is read once: the bytes that were hashed are the bytes that run. `read_package`
keeps them (GraphBytes) for `Placement.create_session`, which hands ORT the graph as bytes
and its external data from memory, so nothing can be swapped on disk between the check
and the load; the tokenizer is built from the hashed text kept in Package.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from .chat import ChatTemplate
from .errors import ModelFormatError
from .limits import MAX_GRAPH_BYTES, MAX_GRAPH_NESTING, MAX_TOKENIZER_BYTES, hash_bounded, read_bounded
from .manifest import MANIFEST_NAME, Manifest, read_manifest
from .manifest import checked_tokenizer_json


@dataclass(frozen=True)
class Package:
    """A checked package: where it is, its manifest, the paths it was read from."""

    folder: Path
    manifest: Manifest
    graph_path: Path
    tokenizer_path: Path
    tokenizer_json: str = ""  # the hashed tokenizer.json text: what the Tokenizer is built from


@dataclass(frozen=True)
class GraphBytes:
    """The graph and the external data it names, exactly as hashed: what ONNX Runtime is handed."""

    model: bytes
    external: dict[str, bytes]  # location -> file contents


def open_package(folder: str | os.PathLike) -> Package:
    """Check `folder` (see module doc), hashing every file; ModelFormatError on any problem.
    External data is hashed in a stream and not kept (`unmask info --verify`)."""
    return _open(Path(folder), keep=False)[0]


def read_package(folder: str | os.PathLike, manifest: Manifest | None = None) -> tuple[Package, GraphBytes]:
    """open_package, keeping the graph bytes it hashed: the only bytes ORT should be given.
    `manifest`: this folder's manifest when the caller has read it already (load checks the
    device's free memory against it before the weights are read)."""
    return _open(Path(folder), keep=True, manifest=manifest)


def _open(folder: Path, keep: bool, manifest: Manifest | None = None) -> tuple[Package, GraphBytes]:
    manifest = _checked_manifest(folder, manifest)
    graph_path = folder / manifest.graph.file
    model, locations = _read_graph(graph_path, manifest)
    external = _hash_external(folder, manifest, locations if keep else set())
    tokenizer_path = folder / manifest.tokenizer
    data = read_bounded(tokenizer_path, MAX_TOKENIZER_BYTES, "tokenizer")
    _compare(tokenizer_path, hashlib.sha256(data).hexdigest(), manifest.tokenizer_sha256)
    tokenizer_json = checked_tokenizer_json(data, tokenizer_path)
    if manifest.chat_template is not None:  # compiles and test-renders it within the template limits
        ChatTemplate(manifest.chat_template, bos_token=manifest.bos_token, eos_token=manifest.eos_token)
    return Package(folder, manifest, graph_path, tokenizer_path, tokenizer_json), GraphBytes(model, external)


def _checked_manifest(folder: Path, manifest: Manifest | None) -> Manifest:
    """The manifest, if it hashes every file it names and names only files inside `folder`."""
    if not folder.is_dir():
        raise ModelFormatError(f"{folder}: not a folder (expected a model package with {MANIFEST_NAME})")
    manifest = manifest or read_manifest(folder)
    graph = manifest.graph
    if graph.file not in graph.files:
        raise ModelFormatError(f"{folder / MANIFEST_NAME}: graph.files must list {graph.file!r} with its sha256")
    if not isinstance(manifest.tokenizer_sha256, str):
        raise ModelFormatError(
            f"{folder / MANIFEST_NAME}: no tokenizer_sha256, so tokenizer.json cannot be verified; the package was "
            "written by an older unmask: export it again with `unmask export`"
        )
    for name in [*graph.files, manifest.tokenizer]:
        inside(folder, name)
    return manifest


def _read_graph(graph_path: Path, manifest: Manifest) -> tuple[bytes, set[str]]:
    """The graph's bytes, checked against its sha256, and the external-data files it names (all listed)."""
    model = read_bounded(graph_path, MAX_GRAPH_BYTES, "ONNX graph")
    _compare(graph_path, hashlib.sha256(model).hexdigest(), manifest.graph.files[manifest.graph.file])
    if not model:
        raise ModelFormatError(f"{graph_path}: empty graph file")
    locations = set(external_data_locations(model))
    for location in sorted(locations):
        if location not in manifest.graph.files:
            raise ModelFormatError(
                f"{graph_path}: external data {location!r} is not listed (with its sha256) in graph.files"
            )
    return model, locations


def _hash_external(folder: Path, manifest: Manifest, keep: set[str]) -> dict[str, bytes]:
    """Check the sha256 of every listed file besides the graph; return the contents of those in `keep`."""
    kept = {}
    for name, expected in manifest.graph.files.items():
        if name == manifest.graph.file:
            continue
        path = folder / name
        if name in keep:
            kept[name] = read_bounded(path, None, "external data file")
            digest = hashlib.sha256(kept[name]).hexdigest()
        else:
            digest = hash_bounded(path, None, "external data file")
        _compare(path, digest, expected)
    return kept


def _compare(path: Path, digest: str, expected: str) -> None:
    if digest != expected:
        raise ModelFormatError(f"{path}: sha256 differs from {MANIFEST_NAME} (file corrupted or replaced)")


def inside(folder: Path, name: str, *, what: str = "package file") -> Path:
    """`folder/name` if `name` is a relative path that stays in `folder`; ModelFormatError otherwise."""
    if not name or "\x00" in name:
        raise ModelFormatError(f"{folder}: {what} has an empty or invalid name {name!r}")
    for flavour in (PurePosixPath, PureWindowsPath):
        pure = flavour(name)
        if pure.is_absolute() or pure.anchor or ".." in pure.parts:
            raise ModelFormatError(f"{folder}: {what} {name!r} points outside the package (absolute or '..')")
    path = folder / name
    root = folder.resolve()
    # A symlink anywhere between the folder and the file may lead out of it.
    probe = path
    while probe != folder:
        if probe.is_symlink():
            if not _is_within(probe.resolve(), root):
                raise ModelFormatError(f"{folder}: {what} {name!r} is a symlink leading outside the package")
        probe = probe.parent
    if not _is_within(path.resolve(), root):
        raise ModelFormatError(f"{folder}: {what} {name!r} resolves outside the package")
    return path


def _is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# ---------------------------------------------------------------------- ONNX protobuf walk
# Field numbers from onnx.proto3. Only the messages that can hold a TensorProto are walked.
_MODEL_GRAPH, _MODEL_TRAINING, _MODEL_FUNCTIONS = 7, 20, 25
_TRAINING_GRAPHS = (1, 2)  # TrainingInfoProto.initialization, .algorithm
_GRAPH_NODE, _GRAPH_INIT, _GRAPH_SPARSE_INIT = 1, 5, 15
_NODE_ATTRIBUTE = 5
_ATTR_TENSOR, _ATTR_GRAPH, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES = 5, 6, 10, 11, 22, 23
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_FUNCTION_NODE = 7
_TENSOR_EXTERNAL_DATA = 13
_ENTRY_KEY, _ENTRY_VALUE = 1, 2


def external_data_locations(model_bytes: bytes | memoryview) -> list[str]:
    """Every external-data `location` named by any tensor of a serialized ModelProto."""
    found: list[str] = []
    view = memoryview(model_bytes)  # slices of a memoryview are views: nothing is copied
    try:
        _walk_model(view, found)
    except (IndexError, ValueError) as exc:
        raise ModelFormatError(f"graph file is not a valid ONNX protobuf ({exc})") from exc
    return found


def _fields(buf: memoryview):
    """(field number, wire type, value) of one message; value is a memoryview for wire type 2."""
    pos, end = 0, len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = None, pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("length-delimited field runs past the end")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = None, pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("truncated field")
        yield number, wire, value


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _walk_model(buf, found):
    for number, wire, value in _fields(buf):
        if wire != 2:
            continue
        if number == _MODEL_GRAPH:
            _walk_graph(value, found, 1)
        elif number == _MODEL_FUNCTIONS:
            _walk_nodes(value, _FUNCTION_NODE, found, 1)
        elif number == _MODEL_TRAINING:
            for n, w, v in _fields(value):
                if w == 2 and n in _TRAINING_GRAPHS:
                    _walk_graph(v, found, 1)


def _walk_graph(buf, found, depth):
    if depth > MAX_GRAPH_NESTING:
        raise ModelFormatError(f"graph file nests subgraphs more than {MAX_GRAPH_NESTING} deep (the limit)")
    for number, wire, value in _fields(buf):
        if wire != 2:
            continue
        if number == _GRAPH_NODE:
            _walk_node(value, found, depth)
        elif number == _GRAPH_INIT:
            _walk_tensor(value, found)
        elif number == _GRAPH_SPARSE_INIT:
            _walk_sparse(value, found)


def _walk_nodes(buf, node_field, found, depth):
    for number, wire, value in _fields(buf):
        if wire == 2 and number == node_field:
            _walk_node(value, found, depth)


def _walk_node(buf, found, depth):
    for number, wire, value in _fields(buf):
        if wire == 2 and number == _NODE_ATTRIBUTE:
            for n, w, v in _fields(value):
                if w != 2:
                    continue
                if n in (_ATTR_TENSOR, _ATTR_TENSORS):
                    _walk_tensor(v, found)
                elif n in (_ATTR_GRAPH, _ATTR_GRAPHS):
                    _walk_graph(v, found, depth + 1)
                elif n in (_ATTR_SPARSE, _ATTR_SPARSES):
                    _walk_sparse(v, found)


def _walk_sparse(buf, found):
    for number, wire, value in _fields(buf):
        if wire == 2 and number in (_SPARSE_VALUES, _SPARSE_INDICES):
            _walk_tensor(value, found)


def _walk_tensor(buf, found):
    for number, wire, value in _fields(buf):
        if wire == 2 and number == _TENSOR_EXTERNAL_DATA:
            entry = dict((n, bytes(v)) for n, w, v in _fields(value) if w == 2)
            if entry.get(_ENTRY_KEY) == b"location":
                found.append(_location(entry.get(_ENTRY_VALUE, b"")))


def _location(raw: bytes) -> str:
    # Strict: a replacement character would make us check a name other than the bytes ORT opens.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFormatError(f"graph file names external data {raw!r}, which is not valid UTF-8") from None
