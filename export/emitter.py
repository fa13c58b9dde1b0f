"""Emitter: the ONNX bookkeeping under the graph builder (nodes, names, weights on disk).

Weights are streamed: each one is written to the external-data file the moment it is
converted, and the graph keeps only a reference (location, offset, length), so building
a 1.3 B-parameter graph holds a few tensors in memory, not the model. When the weights
total less than a threshold they are folded back into model.onnx at the end (one file).

Every `make_*` helper has the same shape — `make_x(name, *inputs, **attrs)` — and returns
the name of its output (a tuple for several outputs), so the builder reads like the math.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import ModelFormatError

_ALIGN = 4096  # page-aligned tensors let ORT map external data without copying
_INLINE_BYTES = 1024  # constants below this stay inside the graph proto

ONNX_DTYPE = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
}


class WeightFile:
    """Append-only external-data file; returns TensorProtos that point into it."""

    def __init__(self, path: Path):
        self.path = path
        self._f = open(path, "wb")
        self.size = 0

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        writer = self.stream(name, array.dtype, array.shape)
        writer.write(array)
        return writer.close()

    def stream(self, name: str, dtype, shape: Sequence[int]) -> "_TensorWriter":
        """Write one tensor in row chunks (first axis); the proto is returned by close()."""
        pad = -self.size % _ALIGN
        if pad:
            self._write(b"\0" * pad)
        return _TensorWriter(self, name, np.dtype(dtype), tuple(int(d) for d in shape))

    def _write(self, data) -> None:
        try:
            self._f.write(data)
        except OSError as exc:  # disk full, quota: the caller removes the partial package
            raise ModelFormatError(f"{self.path}: cannot write weights ({exc})") from exc
        self.size += len(data) if isinstance(data, bytes) else memoryview(data).nbytes

    def close(self) -> None:
        if self._f.closed:
            return
        try:
            self._f.close()
        except OSError as exc:
            raise ModelFormatError(f"{self.path}: cannot write weights ({exc})") from exc


class _TensorWriter:
    def __init__(self, sink: WeightFile, name: str, dtype: np.dtype, shape: tuple[int, ...]):
        self.sink, self.name, self.dtype, self.shape = sink, name, dtype, shape
        self.offset = sink.size
        self.expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.written = 0

    def write(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        self.sink._write(memoryview(chunk).cast("B"))
        self.written += chunk.nbytes

    def close(self) -> TensorProto:
        if self.written != self.expected:
            raise AssertionError(f"{self.name}: wrote {self.written} bytes, shape needs {self.expected}")
        t = TensorProto(name=self.name, data_type=helper.np_dtype_to_tensor_dtype(self.dtype))
        t.dims.extend(self.shape)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.sink.path.name), ("offset", str(self.offset)),
                           ("length", str(self.written))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        return t


class Emitter:
    """Collects nodes, graph inputs/outputs and initializers; unique, readable node names."""

    def __init__(self, weights: WeightFile, *, opset: int = 21):
        self.weights = weights
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.domains: set[str] = set()
        self._consts: dict[tuple, str] = {}
        self._used: set[str] = set()

    # ---- graph interface
    def add_input(self, name: str, dtype: str, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, ONNX_DTYPE[dtype], list(shape)))
        return name

    def add_output(self, name: str, dtype: str, shape: Sequence[int | str]) -> str:
        self.outputs.append(helper.make_tensor_value_info(name, ONNX_DTYPE[dtype], list(shape)))
        return name

    # ---- initializers
    def weight(self, name: str, array: np.ndarray) -> str:
        """A (large) initializer, written to the weight file now."""
        self.initializers.append(self.weights.add(name, array))
        return name

    def weight_stream(self, name: str, dtype, shape):
        """Start a row-chunked initializer; call .write(chunk)… then finish_weight(writer)."""
        return self.weights.stream(name, dtype, shape)

    def finish_weight(self, writer: _TensorWriter) -> str:
        self.initializers.append(writer.close())
        return writer.name

    def const(self, value, dtype: str = "int64", name: str | None = None) -> str:
        """A small constant (shapes, axes, scalars), shared by value."""
        array = np.asarray(value, dtype=dtype)
        key = (dtype, array.shape, array.tobytes())
        if key in self._consts:
            return self._consts[key]
        if array.nbytes > _INLINE_BYTES:
            return self.weight(self._unique(name or "const"), array)
        cname = self._unique(name or f"const_{dtype}_{'x'.join(map(str, array.shape)) or 's'}")
        self.initializers.append(numpy_helper.from_array(array, cname))
        self._consts[key] = cname
        return cname

    # ---- nodes
    def make(self, op: str, name: str, inputs: Iterable[str], *, outputs: int = 1, domain: str = "",
             output: str | None = None, **attrs) -> str | tuple[str, ...]:
        """One node; `output` names its (single) output, e.g. a graph output of the contract."""
        node_name = self._unique(name)
        outs = [f"{node_name}/out{i}" if outputs > 1 else f"{node_name}/out" for i in range(outputs)]
        if output is not None:
            outs = [output]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=node_name, domain=domain or None,
                                           **{k: v for k, v in attrs.items() if v is not None}))
        if domain:
            self.domains.add(domain)
        return outs[0] if outputs == 1 else tuple(outs)

    def make_add(self, name, a, b): return self.make("Add", name, [a, b])
    def make_sub(self, name, a, b): return self.make("Sub", name, [a, b])
    def make_mul(self, name, a, b): return self.make("Mul", name, [a, b])
    def make_div(self, name, a, b): return self.make("Div", name, [a, b])
    def make_matmul(self, name, a, b): return self.make("MatMul", name, [a, b])
    def make_sigmoid(self, name, x): return self.make("Sigmoid", name, [x])
    def make_softmax(self, name, x, axis=-1): return self.make("Softmax", name, [x], axis=axis)
    def make_cast(self, name, x, dtype, output=None):
        return self.make("Cast", name, [x], to=ONNX_DTYPE[dtype], output=output)
    def make_shape(self, name, x, start=None, end=None): return self.make("Shape", name, [x], start=start, end=end)
    def make_transpose(self, name, x, perm): return self.make("Transpose", name, [x], perm=list(perm))
    def make_concat(self, name, inputs, axis): return self.make("Concat", name, inputs, axis=axis)
    def make_gather(self, name, data, index, axis=0): return self.make("Gather", name, [data, index], axis=axis)
    def make_unsqueeze(self, name, x, axes): return self.make("Unsqueeze", name, [x, self.const(axes)])

    def make_reshape(self, name, x, shape, output=None):
        """shape: a tensor name, or a list of ints (0 copies the input dim, -1 infers)."""
        shape_name = shape if isinstance(shape, str) else self.const(shape)
        return self.make("Reshape", name, [x, shape_name], output=output)

    def make_split(self, name, x, sizes, axis):
        return self.make("Split", name, [x, self.const(sizes)], outputs=len(sizes), axis=axis)

    def make_slice(self, name, x, starts, ends, axes):
        return self.make("Slice", name, [x, self.const(starts), self.const(ends), self.const(axes)])

    # ---- result
    def model(self, graph_name: str, *, producer_version: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, graph_name, self.inputs, self.outputs, self.initializers)
        opsets = [helper.make_opsetid("", self.opset)] + [helper.make_opsetid(d, 1) for d in sorted(self.domains)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="unmask",
                                  producer_version=producer_version)
        model.ir_version = 10
        return model

    def _unique(self, name: str) -> str:
        candidate, i = name, 1
        while candidate in self._used:
            i += 1
            candidate = f"{name}_{i}"
        self._used.add(candidate)
        return candidate


def save_model(model: onnx.ModelProto, weights: WeightFile, folder: Path, *, inline_below: int) -> list[str]:
    """Write model.onnx; fold small weight files into it. Returns the graph file names."""
    weights.close()
    graph_path = folder / "model.onnx"
    if weights.size < inline_below:
        _inline_external(model, weights.path)
        weights.path.unlink()
        files = [graph_path.name]
    else:
        files = [graph_path.name, weights.path.name]
    try:
        with open(graph_path, "wb") as f:
            f.write(model.SerializeToString())
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"{graph_path}: cannot write the graph ({exc})") from exc
    return files


def _inline_external(model: onnx.ModelProto, data_path: Path) -> None:
    with open(data_path, "rb") as f:
        for t in model.graph.initializer:
            if t.data_location != TensorProto.EXTERNAL:
                continue
            ref = {e.key: e.value for e in t.external_data}
            f.seek(int(ref["offset"]))
            t.raw_data = f.read(int(ref["length"]))
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT


def remove_quietly(path: os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
