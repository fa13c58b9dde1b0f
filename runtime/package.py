"""Opening a model package safely: manifest, hashes, and what ONNX Runtime will open.

A package is a folder a user may have downloaded from anywhere. Before a session is
built we check that
- the manifest's format version is one this unmask reads (read_manifest);
- every graph file is listed with its sha256 and matches it;
- every file ORT or the tokenizer will open stays inside the folder: the ONNX graph's
  external-data `location` entries (read straight from the protobuf, so the check does
  not need the optional `onnx` package) are relative, free of "..", and not symlinks
  leading out, and each is one of the hashed graph files.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from .errors import ModelFormatError
from .manifest import MANIFEST_NAME, Manifest, read_manifest, verify_graph_files


@dataclass(frozen=True)
class Package:
    """A checked package: where it is, its manifest, and the paths to open."""

    folder: Path
    manifest: Manifest
    graph_path: Path
    tokenizer_path: Path


def open_package(folder: str | os.PathLike) -> Package:
    """Check `folder` (see module doc) and return its paths; ModelFormatError on any problem."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFormatError(f"{folder}: not a folder (expected a model package with {MANIFEST_NAME})")
    manifest = read_manifest(folder)
    graph = manifest.graph
    if graph.file not in graph.files:
        raise ModelFormatError(f"{folder / MANIFEST_NAME}: graph.files must list {graph.file!r} with its sha256")
    for name in [*graph.files, manifest.tokenizer]:
        inside(folder, name)
    graph_path = folder / graph.file
    for location in _graph_locations(graph_path):
        target = inside(folder, location, what=f"external data of {graph.file}")
        if location not in graph.files:
            raise ModelFormatError(
                f"{graph_path}: external data {location!r} is not listed (with its sha256) in graph.files"
            )
        if not target.is_file():
            raise ModelFormatError(f"{graph_path}: external data file {location!r} is missing")
    verify_graph_files(manifest, folder)
    return Package(folder, manifest, graph_path, folder / manifest.tokenizer)


def _graph_locations(graph_path: Path) -> list[str]:
    with open(graph_path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ModelFormatError(f"{graph_path}: empty graph file")
        # Mapped, not read: an inline-weights graph can be gigabytes. The map is
        # released with its last view (an explicit close would fail while a
        # traceback still holds slices of it).
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return external_data_locations(memoryview(mapped))
    except ModelFormatError as exc:  # the parser sees bytes only: say which file they came from
        raise ModelFormatError(f"{graph_path}: {exc}") from exc


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
    view = memoryview(model_bytes)
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
            _walk_graph(value, found)
        elif number == _MODEL_FUNCTIONS:
            _walk_nodes(value, _FUNCTION_NODE, found)
        elif number == _MODEL_TRAINING:
            for n, w, v in _fields(value):
                if w == 2 and n in _TRAINING_GRAPHS:
                    _walk_graph(v, found)


def _walk_graph(buf, found):
    for number, wire, value in _fields(buf):
        if wire != 2:
            continue
        if number == _GRAPH_NODE:
            _walk_node(value, found)
        elif number == _GRAPH_INIT:
            _walk_tensor(value, found)
        elif number == _GRAPH_SPARSE_INIT:
            _walk_sparse(value, found)


def _walk_nodes(buf, node_field, found):
    for number, wire, value in _fields(buf):
        if wire == 2 and number == node_field:
            _walk_node(value, found)


def _walk_node(buf, found):
    for number, wire, value in _fields(buf):
        if wire == 2 and number == _NODE_ATTRIBUTE:
            for n, w, v in _fields(value):
                if w != 2:
                    continue
                if n in (_ATTR_TENSOR, _ATTR_TENSORS):
                    _walk_tensor(v, found)
                elif n in (_ATTR_GRAPH, _ATTR_GRAPHS):
                    _walk_graph(v, found)
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
                found.append(entry.get(_ENTRY_VALUE, b"").decode("utf-8", errors="replace"))
