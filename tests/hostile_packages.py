"""A corpus of hostile model packages, each built from a copy of a valid one.

Every case damages one thing the way an attacker with write access to a package folder
could, then re-hashes the manifest (the attacker controls it too) unless the case is about
the hash itself, so that only the defence under test can catch it. `build(case, folder)`
writes the package; CASES names them all. Used by test_hostile_packages.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from unmask.model import default_package_dir

MiB = 1 << 20


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "unmask.json").read_text(encoding="utf-8"))


def _write_manifest(folder: Path, raw: dict) -> None:
    (folder / "unmask.json").write_text(json.dumps(raw, indent=1), encoding="utf-8")


def rehash(folder: Path) -> None:
    """Make unmask.json agree with the files as they are now (what an attacker would do)."""
    raw = _manifest(folder)
    raw["graph"]["files"] = {n: _sha(folder / n) for n in raw["graph"]["files"] if (folder / n).is_file()}
    if (folder / "tokenizer.json").is_file():
        raw["tokenizer_sha256"] = _sha(folder / "tokenizer.json")
    _write_manifest(folder, raw)


def _sparse(path: Path, size: int) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # no blocks written: cheap to make, and huge to whoever reads it


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


# ---------------------------------------------------------------------- ONNX bytes


def _graph_with_location(location: bytes) -> bytes:
    """A tiny valid model whose one weight lives in external data at `location` (raw bytes)."""
    weight = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    placeholder = "L" * len(location)
    for key, value in (("location", placeholder), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    # protobuf will not store invalid UTF-8 in a string field; ORT reads the bytes as they are
    return model.replace(placeholder.encode(), location)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def nested_subgraphs(depth: int) -> bytes:
    """A ModelProto whose graph holds an If-style node whose graph attribute holds ... `depth` deep."""
    graph = b""
    for _ in range(depth):
        attribute = _field(1, b"then_branch") + _field(6, graph)  # AttributeProto.name, .g
        graph = _field(1, _field(5, attribute))  # GraphProto.node -> NodeProto.attribute
    return _varint(1 << 3) + _varint(8) + _field(7, graph)  # ir_version 8, ModelProto.graph


# ---------------------------------------------------------------------- the cases


def location_not_utf8(folder: Path) -> None:
    """Issue 35 1(a): the manifest hashes `w\\ufffd.data`, ORT would open the raw `w\\xff.data`."""
    (folder / "model.onnx").write_bytes(_graph_with_location(b"w\xff.data"))
    (folder / "w\ufffd.data").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    with open(os.path.join(os.fsencode(folder), b"w\xff.data"), "wb") as f:
        f.write(np.full(4, 666, np.float32).tobytes())  # the unverified weights
    raw = _manifest(folder)
    raw["graph"]["files"]["w\ufffd.data"] = ""
    _write_manifest(folder, raw)
    rehash(folder)


def tokenizer_swapped(folder: Path) -> None:
    """Issue 35 1(b): tokenizer.json changed after export, manifest untouched."""
    raw = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = raw["model"]["vocab"]
    a, b = list(vocab)[40:42]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (folder / "tokenizer.json").write_text(json.dumps(raw), encoding="utf-8")


def giant_added_token(folder: Path) -> None:
    """One 25 MB added token: 1.9 GB of RSS inside the tokenizers library without a limit."""
    raw = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    raw["added_tokens"].append({"id": len(raw["model"]["vocab"]) + len(raw["added_tokens"]),
                                "content": "a" * (25 * MiB), "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    (folder / "tokenizer.json").write_text(json.dumps(raw), encoding="utf-8")
    rehash(folder)


def giant_tokenizer(folder: Path) -> None:
    _sparse(folder / "tokenizer.json", 400 * MiB)
    rehash(folder)


def giant_graph(folder: Path) -> None:
    _sparse(folder / "model.onnx", 2100 * MiB)
    raw = _manifest(folder)
    raw["graph"]["files"]["model.onnx"] = "0" * 64  # hashing 2 GB of zeros would only slow the corpus down
    _write_manifest(folder, raw)


def fifo_graph(folder: Path) -> None:
    _fifo(folder / "model.onnx")


def fifo_tokenizer(folder: Path) -> None:
    _fifo(folder / "tokenizer.json")


def deep_manifest(folder: Path) -> None:
    text = (folder / "unmask.json").read_text(encoding="utf-8")
    deep = "[" * 100_000 + "]" * 100_000
    (folder / "unmask.json").write_text(text.replace('"provenance": {', f'"deep": {deep}, "provenance": {{', 1),
                                        encoding="utf-8")


def deep_tokenizer(folder: Path) -> None:
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    deep = "[" * 100_000 + "]" * 100_000
    (folder / "tokenizer.json").write_text(text.replace("{", f'{{"deep": {deep}, ', 1), encoding="utf-8")
    rehash(folder)


def nested_graph(folder: Path) -> None:
    (folder / "model.onnx").write_bytes(nested_subgraphs(3000))
    rehash(folder)


def _template(source: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        raw = _manifest(folder)
        raw["chat_template"] = source
        _write_manifest(folder, raw)
    return damage


TEMPLATE_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
TEMPLATE_DEEP = "{% if 1 %}" * 3000 + "x" + "{% endif %}" * 3000
TEMPLATE_HUGE = "{{ 'x' * 1000000000 }}"

CASES: dict[str, Callable[[Path], None]] = {
    "location_not_utf8": location_not_utf8,
    "tokenizer_swapped": tokenizer_swapped,
    "giant_added_token": giant_added_token,
    "giant_tokenizer": giant_tokenizer,
    "giant_graph": giant_graph,
    "fifo_graph": fifo_graph,
    "fifo_tokenizer": fifo_tokenizer,
    "deep_manifest": deep_manifest,
    "deep_tokenizer": deep_tokenizer,
    "nested_graph": nested_graph,
    "template_loops": _template(TEMPLATE_LOOPS),
    "template_deep": _template(TEMPLATE_DEEP),
    "template_huge": _template(TEMPLATE_HUGE),
}


def build(case: str, folder: Path) -> Path:
    """A copy of the embedded default package at `folder`, damaged as `case` says."""
    shutil.copytree(default_package_dir(), folder)
    CASES[case](folder)
    return folder
