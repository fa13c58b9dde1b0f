"""What a model package may ask of the machine: the limits, and the bounded reads that apply them.

A package is a folder from anywhere. Everything the loader reads from it is bounded here, so a
hostile package is refused with ModelFormatError instead of hanging the process (a FIFO named
model.onnx), exhausting memory (a 25 MB tokenizer token) or overflowing the stack (deep JSON).
The README's "Security" section lists these values; change both together.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import numpy as np

from .errors import ModelFormatError

MiB = 1 << 20

# Files
MAX_JSON_BYTES = 16 * MiB  # unmask.json, config.json, tasks.json hold kilobytes; a template is a few KB
MAX_TOKENIZER_BYTES = 64 * MiB  # the largest public tokenizer.json files are ~35 MB
MAX_GRAPH_BYTES = 2048 * MiB  # protobuf cannot serialize a larger ModelProto; bigger weights go to external data
MAX_JSON_DEPTH = 64  # real manifests and tokenizers nest < 10 levels; Python's parser recurses per level
MAX_GRAPH_NESTING = 64  # If/Loop bodies inside bodies; real graphs nest a few levels, the location walk recurses
# Tokenizer
MAX_TOKEN_CHARS = 1024  # longest vocabulary / added token; the tokenizers library needs ~80x a token's size
# Chat template
MAX_TEMPLATE_CHARS = 256 * 1024  # the longest public chat templates (tool calling) are ~20 KB
MAX_TEMPLATE_NESTING = 16  # blocks and brackets; Python refuses > 20 nested blocks in the code jinja generates
MAX_TEMPLATE_SECONDS = 2.0  # a real template renders in milliseconds; a loop bomb must not hang every turn
MAX_TEMPLATE_OUTPUT = 1 * MiB  # characters beyond the messages' own (+ 4x their length): no prompt needs more
MAX_TEMPLATE_NUMBER = 100_000  # largest repeat count / width / exponent a template may use (jinja's range cap)

_CHUNK = 4 * MiB


def open_regular(path: Path, limit: int | None, what: str) -> tuple[int, int]:
    """(file descriptor, size) of `path` if it is a regular file no larger than `limit` bytes.

    Opened non-blocking so a FIFO or device is refused instead of waiting forever for a writer.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot open the {what} ({exc.strerror or exc})") from exc
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file (a FIFO, device or folder); refusing to read it"
    elif limit is not None and info.st_size > limit:
        problem = f"is {info.st_size} bytes, above the {limit}-byte limit for a {what}"
    if problem:
        os.close(fd)
        raise ModelFormatError(f"{path}: the {what} {problem}")
    return fd, info.st_size


def read_bounded(path: Path, limit: int | None, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see open_regular), read once."""
    fd, size = open_regular(path, limit, what)
    chunks, got = [], 0
    with os.fdopen(fd, "rb", buffering=0) as f:
        while got <= size:  # one byte past size shows a file that grew since fstat
            block = f.read(size + 1 - got)
            if not block:
                break
            chunks.append(block)
            got += len(block)
    if got != size:
        raise ModelFormatError(f"{path}: the {what} changed size while it was read")
    return b"".join(chunks)  # one chunk: the same object, no copy


def hash_bounded(path: Path, limit: int | None, what: str) -> str:
    """sha256 of a regular file (see open_regular), streamed: nothing is kept."""
    fd, _ = open_regular(path, limit, what)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def json_depth(text: bytes | str) -> int:
    """Deepest nesting of [ ] / { } in a JSON text, outside strings (no recursion, linear time)."""
    import re

    data = text.encode("utf-8") if isinstance(text, str) else text
    data = re.sub(rb'\\.', b"", data)  # escapes first, so an escaped quote does not end a string
    data = re.sub(rb'"[^"]*"', b"", data)
    brackets = np.frombuffer(data.translate(None, _NOT_BRACKETS), dtype=np.uint8)
    if brackets.size == 0:
        return 0
    steps = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(np.cumsum(steps).max())


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def check_json_depth(text: bytes | str, source: object) -> None:
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ModelFormatError(f"{source}: JSON nested {depth} levels deep, above the limit of {MAX_JSON_DEPTH}")
