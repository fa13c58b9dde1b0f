"""How each weight is stored and multiplied: the one precision dispatch of the exporter.

`weight_format(role, config)` decides, for a role (embedding, layer matrix, LM head) and a
resolved ExportConfig, the storage; `emit_linear` writes the weight (streamed from the
checkpoint in row chunks) and the nodes that multiply by it:

    float  Gemm(x, W[N,K], bias, transB=1)           fp32 / fp16, no transpose needed
    int8   DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (ORT's dynamic quantization
           pattern, fused by ORT into DynamicQuantizeMatMul); per-output-channel symmetric 7-bit
           weights (reduce range): on AVX2 CPUs without VNNI, MLAS multiplies uint8 activations by
           int8 weights with vpmaddubsw, whose int16 pair sums saturate above 32767; 255 * 63 * 2
           stays below it. Measured on such a CPU (tests/test_export_quant.py): 8-bit weights
           KL 2.4e-3 to fp32, 7-bit 1.8e-4; uint8 weights (exact U8U8 kernel) 1.7e-4 but dual
           cache 15 % slower (bench_cache --precision int8)
    nbits  com.microsoft MatMulNBits, blockwise, quantized by ORT's own kernels; int4 layers in blocks
           of 128 with zero points by default (ExportConfig.block_size / symmetric say why)

Embedding and LM head stay above the layers' precision in quantized packages: the embedding
is a lookup (fp16 storage costs memory, not compute), and the LM head's error lands directly
on every logit, so it gets 8-bit blocks even in int4 packages.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .config import ExportConfig
from .emitter import Emitter

INT8_WEIGHT_MAX = 63  # 7-bit weights: no int16 saturation in MLAS's AVX2 U8S8 kernel (see above)
_CHUNK_BYTES = 64 << 20  # float32 bytes of one row chunk read from the checkpoint


class Role(enum.Enum):
    EMBEDDING = "embedding"
    LAYER = "layer"  # attention and MLP matrices
    HEAD = "head"


class Kind(enum.Enum):
    FLOAT = "float"
    DYNAMIC_INT8 = "dynamic_int8"
    NBITS = "nbits"


@dataclass(frozen=True)
class WeightFormat:
    kind: Kind
    dtype: str = "float32"  # FLOAT: storage dtype (also the activation dtype it meets)
    bits: int = 0  # NBITS: 4 or 8
    block_size: int = 32
    accuracy_level: int = 0
    symmetric: bool = True  # NBITS: no zero points (blocks centred on 0)


def weight_format(role: Role, config: ExportConfig) -> WeightFormat:
    """The single place where precision is decided."""
    if config.precision in ("fp32", "fp16"):
        return WeightFormat(Kind.FLOAT, dtype=config.float_dtype)
    if role is Role.EMBEDDING:
        return WeightFormat(Kind.FLOAT, dtype="float16")
    if role is Role.HEAD:
        return WeightFormat(Kind.NBITS, bits=8, block_size=config.block_size, accuracy_level=config.accuracy_level)
    if config.precision == "int8":
        return WeightFormat(Kind.DYNAMIC_INT8)
    return WeightFormat(Kind.NBITS, bits=4, block_size=config.block_size, accuracy_level=config.accuracy_level,
                        symmetric=config.symmetric)


# A reader returns rows [start, stop) of a [N, K] float32 weight.
RowReader = Callable[[int, int], np.ndarray]


def chunks(rows: int, cols: int):
    step = max(1, _CHUNK_BYTES // (4 * max(cols, 1)))
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


def store_float(em: Emitter, name: str, read: RowReader, shape: tuple[int, int], dtype: str) -> str:
    """Stream a [N, K] weight into the graph as `dtype`, chunk by chunk."""
    writer = em.weight_stream(name, dtype, shape)
    for start, stop in chunks(*shape):
        writer.write(read(start, stop).astype(dtype))
    return em.finish_weight(writer)


def emit_linear(em: Emitter, name: str, x: str, read: RowReader, shape: tuple[int, int], fmt: WeightFormat,
                bias: np.ndarray | None = None, act_dtype: str = "float32") -> str:
    """y = x W^T (+ b) for a 2-D activation x [T, K] and a checkpoint weight W [N, K]."""
    b = None if bias is None else em.weight(f"{name}.bias", bias.astype(act_dtype))
    if fmt.kind is Kind.FLOAT:
        w = store_float(em, f"{name}.weight", read, shape, fmt.dtype)
        return em.make("Gemm", f"{name}/Gemm", [x, w] + ([b] if b else []), transB=1)
    emit = {Kind.DYNAMIC_INT8: _emit_dynamic_int8, Kind.NBITS: _emit_nbits}[fmt.kind]
    y = emit(em, name, x, read, shape, fmt)
    return y if b is None else em.make_add(f"{name}/bias", y, b)


def _emit_dynamic_int8(em, name, x, read, shape, fmt):
    w = read(0, shape[0])  # one layer matrix at a time; transposed for MatMulInteger's [K, N]
    scale = np.maximum(np.abs(w).max(axis=1), 1e-12) / INT8_WEIGHT_MAX
    q = np.clip(np.rint(w / scale[:, None]), -INT8_WEIGHT_MAX, INT8_WEIGHT_MAX).astype(np.int8)
    del w
    wq = em.weight(f"{name}.weight_quantized", np.ascontiguousarray(q.T))
    del q
    ws = em.weight(f"{name}.weight_scale", scale.astype(np.float32))
    xq, xs, xzp = em.make("DynamicQuantizeLinear", f"{name}/DynamicQuantizeLinear", [x], outputs=3)
    acc = em.make("MatMulInteger", f"{name}/MatMulInteger", [xq, wq, xzp, em.const(0, "int8")])
    acc = em.make_cast(f"{name}/Cast", acc, "float32")
    return em.make_mul(f"{name}/Mul", acc, em.make_mul(f"{name}/scale", xs, ws))


def _emit_nbits(em, name, x, read, shape, fmt):
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits

    quantize = quantize_matmul_4bits if fmt.bits == 4 else quantize_matmul_8bits
    n, k = shape
    bs = fmt.block_size
    k_blocks = -(-k // bs)
    blob = bs * fmt.bits // 8
    zp_cols = -(-k_blocks * fmt.bits // 8)  # zero points packed like the weights: two 4-bit values a byte
    writer = em.weight_stream(f"{name}.weight_q{fmt.bits}", "uint8", (n, k_blocks, blob))
    scales = np.empty((n, k_blocks), np.float32)
    zero_points = np.zeros((n, zp_cols), np.uint8)  # stays unused (all mid-range) when symmetric
    for start, stop in chunks(n, k):
        rows = stop - start
        packed = np.zeros((rows, k_blocks, blob), np.uint8)
        weight_t = np.ascontiguousarray(read(start, stop).T)  # ORT's kernel takes MatMul's B = W^T [K, N]
        quantize(packed, weight_t, scales[start:stop], zero_points[start:stop], bs, rows, k, fmt.symmetric)
        writer.write(packed)
    inputs = [x, em.finish_weight(writer), em.weight(f"{name}.weight_scales", scales)]
    if not fmt.symmetric:
        inputs.append(em.weight(f"{name}.weight_zero_points", zero_points))
    return em.make("MatMulNBits", f"{name}/MatMulNBits", inputs, domain="com.microsoft",
                   K=k, N=n, bits=fmt.bits, block_size=bs, accuracy_level=fmt.accuracy_level)
