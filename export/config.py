"""ExportConfig: every choice of one export, resolved once before anything is read.

The CLI and `export_model` fill it; `resolve()` checks the combination and fills the
target-dependent defaults (rope, accuracy level), so the builder and the precision
dispatch read plain fields and never re-decide. `attention="auto"` stays as it is: the
kernel depends on the model's heads too, and attention.choose_kernel decides it, once,
when the builder knows them. Precision and target names are the manifest's vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ConfigError
from ..manifest import PRECISIONS, TARGETS
from .attention import ATTENTIONS, check_attention

__all__ = ["ATTENTIONS", "DEFAULT_BLOCK_SIZE", "PRECISIONS", "ROPES", "TARGETS", "ExportConfig", "TARGET_MOE_OPS", "TARGET_PRECISIONS"]

ROPES = ("auto", "contrib", "ops")

# Which precisions each target can run: int8 needs ORT's CPU integer kernels; CoreML runs
# almost no contrib ops (MatMulNBits would fall back to CPU), so it gets float graphs only.
TARGET_PRECISIONS = {
    "cpu": ("fp32", "int8", "int4"),
    "cuda": ("fp32", "fp16", "int4"),
    "dml": ("fp32", "fp16", "int4"),
    "coreml": ("fp32", "fp16"),
}

# The com.microsoft mixture-of-experts ops each target's providers run (MoE: fp32 experts, QMoE:
# 4/8-bit experts); export/moe.py emits plain MatMuls for float experts where MoE is missing and
# refuses quantized experts without QMoE. The device profiles say the same per provider
# (`moe_ops`, devices/profiles/*.toml; tests/test_export_llada2.py keeps the two in step).
TARGET_MOE_OPS = {"cpu": ("MoE", "QMoE"), "cuda": ("MoE",), "dml": (), "coreml": ()}

# Rotary embedding per target when rope="auto": com.microsoft RotaryEmbedding, one kernel per q
# and k instead of eight elementwise nodes, where ORT has it (CPU, CUDA); elsewhere the ops
# (Split/Mul/Sub/Add/Concat) that every EP runs. On CPU it cut the kernel time of RoPE in an
# ORT profile of the 58m fp32 dual-cache run from ~9% to 2%, but without the profiler the
# median window step moved only within noise (33.1 against 33.6 ms, interleaved runs): small
# elementwise nodes are cheap on CPU. Node count matters more on GPUs (one launch per node).
# int4 MatMulNBits block: at accuracy level 4 (int8 activations, ORT 1.32 on an AVX-512 VNNI EPYC) blocks of
# 128 ran the 0.13B random LLaDA's forwards 1.2-1.3x faster than blocks of 32, since the kernel rescales once
# per block (2 threads, single forwards in turn: window step 53.7 against 64.0 ms, full step 121.3 against
# 145.2; dual cache 31.9 against 25.6 tok/s; benchmarks/bench_quant.py); blocks of 256 gained only ~10% more
# in a lone MatMulNBits. With zero points (asymmetric blocks: same speed) a 2-layer d=256 LLaDA trained in a
# test lost little: KL to fp32 9.4e-4 against 6.7e-4 for symmetric blocks of 32 (symmetric 128: 1.3e-3).
DEFAULT_BLOCK_SIZE = 128

_DEFAULT_ROPE = {"cpu": "contrib", "cuda": "contrib", "dml": "ops", "coreml": "ops"}


@dataclass
class ExportConfig:
    """Settings of one export. Every field has a default; call resolve() before use."""

    precision: str = "fp32"  # storage/compute of the transformer's linear layers
    target: str = "cpu"  # execution provider family the graph is shaped for
    block_size: int = DEFAULT_BLOCK_SIZE  # int4 layers and the 8-bit LM head: weights per quantization block along K
    accuracy_level: int | None = None  # int4 MatMulNBits compute type; None -> 4 (int8 compute) on CPU, 0 elsewhere
    symmetric: bool = False  # int4: blocks without zero points (True) or with one zero point per block
    attention: str = "auto"  # attention kernel; auto -> the measured best for the target and model
    rope: str = "auto"  # rotary embedding: contrib (RotaryEmbedding kernel) or ops; auto -> per target
    fuse_projections: bool = True  # one q/k/v product and one gate/up product per layer (bench_cache --no-fuse)
    validate: bool = True  # run the exported graph on probe inputs against the fp32 graph
    reference: str | None = None  # "torch": also compare with the PyTorch reference forward
    force: bool = False  # replace an existing output folder
    quiet: bool = False  # no progress bar / report on stderr
    # graphs with more weight bytes keep them in model.onnx.data: ORT parses an inline graph's weights into
    # a protobuf copy before it copies them into tensors, an extra copy at load (0.13B int4 package of 115 MiB:
    # peak RSS 416 MiB inline, 357 MiB external; benchmarks/bench_quant.py); tiny graphs stay one file
    external_data_threshold: int = 16 << 20
    probe_length: int = 24  # tokens per probe sequence in validation

    def resolve(self) -> "ExportConfig":
        """Check the combination and fill target defaults; returns a new, resolved config."""
        if self.precision not in PRECISIONS:
            raise ConfigError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.target not in TARGETS:
            raise ConfigError(f"unknown target {self.target!r}; choose one of {', '.join(TARGETS)}")
        allowed = TARGET_PRECISIONS[self.target]
        if self.precision not in allowed:
            raise ConfigError(
                f"precision {self.precision} does not run on target {self.target}; "
                f"choose one of {', '.join(allowed)}"
            )
        check_attention(self.attention, self.target)
        if self.rope not in ROPES:
            raise ConfigError(f"unknown rope {self.rope!r}; choose one of {', '.join(ROPES)}")
        if self.target == "coreml" and self.rope == "contrib":
            raise ConfigError("rope 'contrib' is an ONNX Runtime contrib kernel CoreML does not run; use ops")
        if not isinstance(self.block_size, int) or self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ConfigError(f"block_size must be a power of two >= 16, got {self.block_size!r}")
        if not isinstance(self.symmetric, bool):
            raise ConfigError(f"symmetric must be True or False, got {self.symmetric!r}")
        if self.reference not in (None, "torch"):
            raise ConfigError(f"unknown reference {self.reference!r}; the only reference is 'torch'")
        if self.probe_length < 2:
            raise ConfigError(f"probe_length must be >= 2, got {self.probe_length}")
        level = self.accuracy_level
        if level is None:
            level = 4 if self.target == "cpu" else 0
        if level not in (0, 1, 2, 3, 4):
            raise ConfigError(f"accuracy_level must be 0..4, got {level!r}")
        rope = _DEFAULT_ROPE[self.target] if self.rope == "auto" else self.rope
        return dataclasses.replace(self, rope=rope, accuracy_level=level)

    @property
    def float_dtype(self) -> str:
        """Dtype of activations, K/V and float weights."""
        return "float16" if self.precision == "fp16" else "float32"
