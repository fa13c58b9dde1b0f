"""Read safetensors checkpoints one tensor (or one row range) at a time, without torch.

Each read maps only the bytes it needs and copies them out, so peak memory follows the
largest tensor read, not the model (mapped file pages count in RSS while mapped). bf16 is
widened to float32 by shifting the raw 16-bit words (`uint16 << 16`). Nothing in the folder
is executed: the format is a JSON header plus raw little-endian arrays.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelFormatError

_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_MAX_HEADER = 100 << 20  # the format caps headers at 100 MB
INDEX_NAME = "model.safetensors.index.json"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    file: Path
    dtype: str  # safetensors dtype code: F32 | F16 | BF16
    shape: tuple[int, ...]
    offset: int  # absolute byte offset of the data in the file

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _DTYPES[self.dtype].itemsize

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Parse and check one file's header: names, dtypes, shapes, offsets within the file."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ModelFormatError(f"{path}: truncated safetensors file (no header)")
            (length,) = struct.unpack("<Q", head)
            if length > min(_MAX_HEADER, size - 8):
                raise ModelFormatError(f"{path}: header length {length} exceeds the file ({size} bytes); truncated?")
            header = json.loads(f.read(length).decode("utf-8"))
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot read ({exc})") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{path}: not a safetensors file (bad JSON header: {exc})") from exc
    if not isinstance(header, dict):
        raise ModelFormatError(f"{path}: not a safetensors file (header is not an object)")
    base = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], tuple(int(d) for d in entry["shape"]), entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{path}: tensor {name}: malformed header entry {entry!r}") from exc
        if dtype not in _DTYPES:
            raise ModelFormatError(
                f"{path}: tensor {name} has dtype {dtype}; supported: F32, F16, BF16"
            )
        info = TensorInfo(name, path, dtype, shape, base + int(begin))
        if int(end) - int(begin) != info.nbytes or int(begin) < 0:
            raise ModelFormatError(f"{path}: tensor {name}: byte range {begin}..{end} does not fit shape {shape} {dtype}")
        if base + int(end) > size:
            raise ModelFormatError(
                f"{path}: tensor {name} ends at byte {base + int(end)} but the file has {size}: truncated file"
            )
        tensors[name] = info
    return tensors


class CheckpointTensors:
    """Every tensor of an HF folder: one model.safetensors, or shards listed in the index."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.files = self._files()
        self.tensors: dict[str, TensorInfo] = {}
        for file in self.files:
            for name, info in read_header(file).items():
                if name in self.tensors:
                    raise ModelFormatError(f"{file}: tensor {name} also appears in {self.tensors[name].file.name}")
                self.tensors[name] = info

    def _files(self) -> list[Path]:
        index = self.folder / INDEX_NAME
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                names = sorted(set(weight_map.values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ModelFormatError(f"{index}: unreadable shard index ({exc})") from exc
            for name in names:
                if not isinstance(name, str) or Path(name).name != name:
                    raise ModelFormatError(f"{index}: shard name {name!r} is not a file in the folder")
                if not (self.folder / name).is_file():
                    raise ModelFormatError(f"{index}: lists shard {name}, which is missing")
            return [self.folder / n for n in names]
        files = sorted(self.folder.glob("*.safetensors"))
        if not files:
            raise ModelFormatError(f"{self.folder}: no *.safetensors weights (pickled .bin checkpoints are not read)")
        return files

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFormatError(f"{self.folder}: weight {name} is missing") from None

    def read(self, name: str, rows: tuple[int, int] | None = None) -> np.ndarray:
        """Tensor `name` (or rows [start, stop) of its first axis) as float32; NaN/Inf is an error."""
        info = self.info(name)
        start, stop = rows if rows is not None else (0, info.shape[0] if info.shape else 1)
        row_elems = math.prod(info.shape[1:]) if info.shape else 1
        itemsize = _DTYPES[info.dtype].itemsize
        begin = info.offset + start * row_elems * itemsize
        count = (stop - start) * row_elems
        raw = _read_bytes(info.file, begin, count * itemsize)
        words = np.frombuffer(raw, dtype=_DTYPES[info.dtype], count=count)
        if info.dtype == "BF16":
            values = (words.astype(np.uint32) << 16).view(np.float32)
        else:
            values = words.astype(np.float32)
        shape = (stop - start, *info.shape[1:]) if info.shape else ()
        values = values.reshape(shape)
        if not np.isfinite(values).all():
            raise ModelFormatError(f"weight {name} contains NaN or Inf values")
        return values


def _read_bytes(path: Path, begin: int, length: int) -> bytes | memoryview:
    """Copy `length` bytes at `begin` through a temporary read-only map of just that range."""
    if length == 0:
        return b""
    gran = mmap.ALLOCATIONGRANULARITY
    aligned = begin - begin % gran
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), length + begin - aligned, access=mmap.ACCESS_READ,
                                              offset=aligned) as view:
            return view[begin - aligned:begin - aligned + length]  # a copy; the map closes here
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"{path}: cannot read bytes {begin}..{begin + length} ({exc}); truncated file?") from exc
