"""The graph builder: the transformer of docs/models.md as one ONNX graph (docs/graph-contract.md).

    h = embed[input_ids]
    per layer:  h += attention(rmsnorm(h)) ; h += mlp(rmsnorm(h))
    logits = head(rmsnorm(h[:, logits_index]))

The residual stream is kept 2-D [B*W, D] so every projection is one Gemm/MatMulNBits;
attention sees [B, H, W, D]. Projections that read the same input are fused (ExportConfig.
fuse_projections): q/k/v become one [D, (H + 2 Hkv) hd] product and gate/up one [D, 2F],
split afterwards. In int8 that quantizes each activation once instead of two or three
times (dual cache +3% tok/s on the 58m benchmark); in fp32 it measured within noise.
Keys are cached post-RoPE, and attention is bidirectional, so the past K/V of any
positions can simply be concatenated with the window's.

Family subclasses (families.py) override the named hooks only: config parsing, weight
names (q/k/v biases among them), extra per-layer weight shapes, package generation
defaults and the attention mask. GQA and weight tying come from the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from ..config import GenerationConfig
from ..errors import ModelFormatError
from .attention import ATTENTION_KERNELS, AttentionInputs, check_mask, choose_kernel
from .checkpoint import ModelSpec, TokenizerFiles
from .config import ExportConfig
from .emitter import Emitter
from .precision import Role, emit_linear, store_float, weight_format
from .safetensors_io import CheckpointTensors


@dataclass(frozen=True)
class LayerWeights:
    """Checkpoint names of one layer's weights (biases None when absent)."""

    attn_norm: str
    q: str
    k: str
    v: str
    o: str
    ff_norm: str
    gate: str
    up: str
    down: str
    q_bias: str | None = None
    k_bias: str | None = None
    v_bias: str | None = None


@dataclass(frozen=True)
class Window:
    """Tensors of the graph's window that every layer reads, made once at the start of build()."""

    positions: str  # position_ids [B, W]
    shape_q: str  # [B, W, H, hd]
    shape_kv: str  # [B, W, Hkv, hd]
    shape_flat: str  # [B, W, -1]
    cos: str  # RoPE tables (rope_tables) or angles (rope_angles), activation dtype
    sin: str
    attention: AttentionInputs


class GraphBuilder:
    """Base emitter of the shared math; one instance builds one graph."""

    architecture: ClassVar[str]
    model_types: ClassVar[tuple[str, ...]]  # config.json model_type values (lower case)
    shift_logits: ClassVar[bool] = False
    # Package defaults that differ from GenerationConfig() (the manifest stores only those).
    generation: ClassVar[GenerationConfig] = GenerationConfig()

    # ------------------------------------------------------------------ family hooks
    @classmethod
    def parse_config(cls, hf: dict[str, Any], tokenizer: TokenizerFiles) -> ModelSpec:
        raise NotImplementedError

    def embedding_name(self) -> str:
        raise NotImplementedError

    def final_norm_name(self) -> str:
        raise NotImplementedError

    def head_name(self) -> str:
        """LM head weight; the embedding's name when the checkpoint ties them."""
        raise NotImplementedError

    def layer_names(self, i: int) -> LayerWeights:
        raise NotImplementedError

    def layer_shapes(self, i: int) -> dict[str, tuple[int, ...]]:
        """Every weight of layer i with the shape the config implies. A family with more weights
        per layer (q/k norms, experts) extends this; check_weights and the progress count follow."""
        s, n = self.spec, self.layer_names(i)
        d, hd, f = s.hidden_size, s.head_dim, s.intermediate_size
        shapes = {n.attn_norm: (d,), n.ff_norm: (d,), n.q: (s.num_heads * hd, d), n.k: (s.num_kv_heads * hd, d),
                  n.v: (s.num_kv_heads * hd, d), n.o: (d, s.num_heads * hd), n.gate: (f, d), n.up: (f, d),
                  n.down: (d, f)}
        for bias, rows in ((n.q_bias, s.num_heads), (n.k_bias, s.num_kv_heads), (n.v_bias, s.num_kv_heads)):
            if bias is not None:
                shapes[bias] = (rows * hd,)
        return shapes

    def qk_norm(self, i: int, name: str, q: str, k: str) -> tuple[str, str]:
        """Layer i's q [B*W, H*hd] and k [B*W, Hkv*hd] between projection and RoPE: where a family
        with per-head q/k norms (the Qwen3 layout) applies them. The shared math has none."""
        return q, k

    def attention_mask(self, positions: str) -> str | None:
        """The mask every layer's attention applies, built from position_ids; None: bidirectional."""
        return None

    # ------------------------------------------------------------------ setup
    def __init__(self, spec: ModelSpec, tensors: CheckpointTensors, config: ExportConfig,
                 on_tensor: Callable[[str], None] = lambda name: None):
        self.spec, self.tensors, self.config = spec, tensors, config
        self.on_tensor = on_tensor
        self.dtype = config.float_dtype  # activations and K/V
        self.em: Emitter | None = None
        # the attention kernel actually emitted (config.attention may be "auto")
        self.kernel = choose_kernel(config.attention, config.target, spec.num_heads, spec.num_kv_heads)

    def expected_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every checkpoint weight the graph reads, with its shape (a tied head shares the table's name)."""
        s = self.spec
        shapes = {self.embedding_name(): (s.vocab_size, s.hidden_size), self.final_norm_name(): (s.hidden_size,),
                  self.head_name(): (s.vocab_size, s.hidden_size)}
        for i in range(s.num_layers):
            shapes |= self.layer_shapes(i)
        return shapes

    def head_shares_table(self) -> bool:
        """A tied head multiplies by the embedding's stored table when both have the same format;
        otherwise it reads the checkpoint's table a second time, in its own format."""
        return self.spec.tie_embeddings and (weight_format(Role.HEAD, self.config)
                                             == weight_format(Role.EMBEDDING, self.config))

    def weight_reads(self) -> int:
        """How many checkpoint reads build() makes (progress ticks): each declared weight once,
        plus the second read of a tied table the head does not share."""
        return len(self.expected_shapes()) + int(self.spec.tie_embeddings and not self.head_shares_table())

    def check_weights(self) -> None:
        """Every weight present with the shape the config implies (headers only, before any output)."""
        for name, shape in self.expected_shapes().items():
            actual = self.tensors.info(name).shape
            if tuple(actual) != shape:
                raise ModelFormatError(f"weight {name} has shape {list(actual)} but config.json implies {list(shape)}")

    # ------------------------------------------------------------------ reading
    def read(self, name: str) -> np.ndarray:
        self.on_tensor(name)
        return self.tensors.read(name)

    def reader(self, name: str):
        self.on_tensor(name)
        return lambda start, stop: self.tensors.read(name, rows=(start, stop))

    def linear(self, name: str, x: str, weight: str, role: Role = Role.LAYER, bias: str | None = None) -> str:
        shape = self.tensors.info(weight).shape
        b = None if bias is None else self.read(bias)
        return emit_linear(self.em, name, x, self.reader(weight), shape, weight_format(role, self.config), b,
                           act_dtype=self.dtype)

    def linears(self, name: str, x: str, parts: dict[str, tuple[str, str | None]]) -> list[str]:
        """x W_i^T (+ b_i) for several weights {part: (weight, bias)} of the same input.

        Fused: the weights are stacked row-wise into one [sum N_i, K] matrix (streamed part by
        part, so no copy of the whole stack is held), multiplied once and split on the last axis.
        Per-output-channel int8 scales and K-blocked int4 scales are per row, so stacking
        changes no quantized value."""
        if not self.config.fuse_projections:
            return [self.linear(f"{name}/{part}", x, w, bias=b) for part, (w, b) in parts.items()]
        weights = [w for w, _ in parts.values()]
        sizes = [self.tensors.info(w).shape[0] for w in weights]
        k = self.tensors.info(weights[0]).shape[1]
        readers = [self.reader(w) for w in weights]
        offsets = np.cumsum([0] + sizes)

        def read(start: int, stop: int) -> np.ndarray:
            pieces = []
            for i, part_reader in enumerate(readers):
                lo, hi = max(start, offsets[i]), min(stop, offsets[i + 1])
                if lo < hi:
                    pieces.append(part_reader(int(lo - offsets[i]), int(hi - offsets[i])))
            return np.concatenate(pieces, axis=0)

        bias = None
        if any(b is not None for _, b in parts.values()):
            bias = np.concatenate([self.read(b) if b is not None else np.zeros(n, np.float32)
                                   for (_, b), n in zip(parts.values(), sizes)])
        fused = emit_linear(self.em, f"{name}/{'_'.join(parts)}", x, read, (int(offsets[-1]), k),
                            weight_format(Role.LAYER, self.config), bias, act_dtype=self.dtype)
        return self.em.make_split(f"{name}/{'_'.join(parts)}/Split", fused, sizes, axis=-1)

    # ------------------------------------------------------------------ the graph
    def build(self, em: Emitter) -> None:
        self.em, s = em, self.spec
        ids = em.add_input("input_ids", "int64", ["batch", "window"])
        pos = em.add_input("position_ids", "int64", ["batch", "window"])
        past = [(em.add_input(f"past_key.{i}", self.dtype, ["batch", s.num_kv_heads, "past", s.head_dim]),
                 em.add_input(f"past_value.{i}", self.dtype, ["batch", s.num_kv_heads, "past", s.head_dim]))
                for i in range(s.num_layers)]
        rows = em.add_input("logits_index", "int64", ["rows"])
        w = self.window(ids, pos, past[0][0])
        h, table = self.embed(ids)
        for i in range(s.num_layers):
            h = self.layer(i, h, w, *past[i])
        self.lm_head(h, rows, w, table)

    def window(self, ids: str, pos: str, past_k0: str) -> Window:
        """The window's shapes, RoPE tables and attention inputs (in that order in the graph)."""
        em, s = self.em, self.spec
        bw = em.make_shape("shape/bw", ids)  # [B, W]
        shape_q = em.make_concat("shape/bwhd", [bw, em.const([s.num_heads, s.head_dim])], axis=0)
        shape_kv = em.make_concat("shape/bwkd", [bw, em.const([s.num_kv_heads, s.head_dim])], axis=0)
        shape_flat = em.make_concat("shape/bw_flat", [bw, em.const([-1])], axis=0)
        cos, sin = self.rope_tables(pos) if self.config.rope == "contrib" else self.rope_angles(pos)
        mask = self.attention_mask(pos)
        check_mask(self.kernel, mask)
        attention = AttentionInputs(em, s.num_heads, s.num_kv_heads, s.head_dim, self.dtype, shape_flat,
                                    lengths=self.gqa_lengths(ids, past_k0) if self.kernel == "gqa" else None,
                                    mask=mask)
        return Window(pos, shape_q, shape_kv, shape_flat, cos, sin, attention)

    def gqa_lengths(self, ids: str, past_k0: str) -> tuple[str, str]:
        """GroupQueryAttention's seqlens_k (int32 [B], total - 1 per row) and total_sequence_length
        (int32 scalar): the past plus the window, the same for every row."""
        em = self.em
        past = em.make_shape("gqa/past_len", past_k0, start=2, end=3)
        window = em.make_shape("gqa/window_len", ids, start=1, end=2)
        total = em.make_add("gqa/total", past, window)  # [1] int64
        batch = em.make_shape("gqa/batch", ids, start=0, end=1)
        seqlens = em.make("Expand", "gqa/seqlens", [em.make_sub("gqa/last", total, em.const([1])), batch])
        return (em.make_cast("gqa/seqlens_i32", seqlens, "int32"),
                em.make_cast("gqa/total_i32", em.make("Squeeze", "gqa/total_scalar", [total, em.const([0])]),
                             "int32"))

    def embed(self, ids: str) -> tuple[str, str]:
        """Hidden states [T, D] of the ids, and the stored table (a tied head may share it)."""
        em, fmt = self.em, weight_format(Role.EMBEDDING, self.config)
        shape = self.tensors.info(self.embedding_name()).shape
        table = store_float(em, "embed.weight", self.reader(self.embedding_name()), shape, fmt.dtype)
        h = em.make_gather("embed/Gather", table, ids)  # [B, W, D]
        if fmt.dtype != self.dtype:
            h = em.make_cast("embed/Cast", h, self.dtype)
        return em.make_reshape("embed/flatten", h, [-1, self.spec.hidden_size]), table  # [T, D]

    def layer(self, i: int, h: str, w: Window, past_k: str, past_v: str) -> str:
        n = self.layer_names(i)
        a = self.attention(i, self.rmsnorm(f"layers.{i}/attn_norm", h, n.attn_norm), w, past_k, past_v)
        h = self.em.make_add(f"layers.{i}/attn_residual", h, a)
        m = self.mlp(i, self.rmsnorm(f"layers.{i}/ff_norm", h, n.ff_norm))
        return self.em.make_add(f"layers.{i}/ff_residual", h, m)

    def rmsnorm(self, name: str, x: str, weight: str) -> str:
        """x * rsqrt(mean(x^2) + eps) * w in fp32 (ORT fuses this into SimplifiedLayerNormalization)."""
        em = self.em
        x32 = x if self.dtype == "float32" else em.make_cast(f"{name}/to_fp32", x, "float32")
        square = em.make("Pow", f"{name}/Pow", [x32, em.const(2.0, "float32")])
        ms = em.make("ReduceMean", f"{name}/ReduceMean", [square, em.const([-1])], keepdims=1)
        denom = em.make("Sqrt", f"{name}/Sqrt", [em.make_add(f"{name}/eps", ms, em.const(self.spec.rms_norm_eps,
                                                                                            "float32"))])
        y = em.make_div(f"{name}/Div", x32, denom)
        if self.dtype != "float32":
            y = em.make_cast(f"{name}/to_act", y, self.dtype)
        return em.make_mul(f"{name}/scale", y, em.weight(f"{weight}", self.read(weight).astype(self.dtype)))

    def rope_angles(self, pos: str) -> tuple[str, str]:
        """cos, sin [B, W, 1, hd/2] of pos * inv_freq, inv_freq_j = theta^(-2j/hd), in fp32, from position_ids."""
        p = self.em.make_unsqueeze("rope/positions", self.em.make_cast("rope/pos_fp32", pos, "float32"), [-1, -2])
        return self._cos_sin(p)

    def rope_tables(self, pos: str) -> tuple[str, str]:
        """cos, sin caches [N, hd/2] for p = 0 .. max(position_ids): the tables com.microsoft
        RotaryEmbedding looks position_ids up in (N follows the sequence, nothing is stored)."""
        em = self.em
        count = em.make_add("rope/count", em.make("ReduceMax", "rope/max_position", [pos], keepdims=0),
                            em.const(1))  # int64 scalar
        table = em.make("Range", "rope/table_positions", [em.const(0), count, em.const(1)])  # [N]
        return self._cos_sin(em.make_unsqueeze("rope/table_column", em.make_cast("rope/table_fp32", table,
                                                                                   "float32"), [-1]))

    def _cos_sin(self, positions: str) -> tuple[str, str]:
        """cos and sin of positions (fp32, last axis 1) * inv_freq, in the activation dtype."""
        em, hd = self.em, self.spec.head_dim
        inv_freq = 1.0 / (np.float32(self.spec.rope_theta) ** (np.arange(0, hd, 2, dtype=np.float32) / np.float32(hd)))
        angles = em.make_mul("rope/angles", positions, em.const(inv_freq.astype(np.float32), "float32",
                                                                "rope.inv_freq"))
        cos, sin = em.make("Cos", "rope/Cos", [angles]), em.make("Sin", "rope/Sin", [angles])
        if self.dtype != "float32":
            cos, sin = em.make_cast("rope/cos_act", cos, self.dtype), em.make_cast("rope/sin_act", sin, self.dtype)
        return cos, sin

    def rotate(self, name: str, x: str, heads: int, shape: str, w: Window) -> str:
        """RoPE of a projection x [B*W, heads*hd] -> [B, W, heads, hd] (`shape`), by ExportConfig.rope:
        one com.microsoft RotaryEmbedding (half-split, tables from rope_tables) or elementwise ops."""
        em = self.em
        if self.config.rope != "contrib":
            return self.rope(name, em.make_reshape(f"{name}/heads", x, shape), w.cos, w.sin)
        x3 = em.make_reshape(f"{name}/bsd", x, w.shape_flat)
        rotated = em.make("RotaryEmbedding", f"{name}/RotaryEmbedding", [x3, w.positions, w.cos, w.sin],
                          domain="com.microsoft", interleaved=0, num_heads=heads)
        return em.make_reshape(f"{name}/heads", rotated, shape)

    def rope(self, name: str, x: str, cos: str, sin: str) -> str:
        """Half-split rotation of x [B, W, H, hd]: [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin]."""
        em, half = self.em, self.spec.head_dim // 2
        x1, x2 = em.make_split(f"{name}/Split", x, [half, half], axis=-1)
        r1 = em.make_sub(f"{name}/r1", em.make_mul(f"{name}/x1cos", x1, cos), em.make_mul(f"{name}/x2sin", x2, sin))
        r2 = em.make_add(f"{name}/r2", em.make_mul(f"{name}/x2cos", x2, cos), em.make_mul(f"{name}/x1sin", x1, sin))
        return em.make_concat(f"{name}/Concat", [r1, r2], axis=-1)

    def mlp(self, i: int, x: str) -> str:
        """(silu(x Wgate^T) * (x Wup^T)) Wdown^T."""
        em, n = self.em, self.layer_names(i)
        gate, up = self.linears(f"layers.{i}/mlp", x, {"gate": (n.gate, None), "up": (n.up, None)})
        silu = em.make_mul(f"layers.{i}/mlp/silu", gate, em.make_sigmoid(f"layers.{i}/mlp/Sigmoid", gate))
        return self.linear(f"layers.{i}/mlp/down", em.make_mul(f"layers.{i}/mlp/gated", silu, up), n.down)

    def attention(self, i: int, x: str, w: Window, past_k: str, past_v: str) -> str:
        """softmax(q k^T / sqrt(hd)) v over past + window keys (no causal mask); writes present_*.{i}."""
        em, s, n = self.em, self.spec, self.layer_names(i)
        name = f"layers.{i}/attn"
        q, k, v = self.linears(name, x, {"q": (n.q, n.q_bias), "k": (n.k, n.k_bias), "v": (n.v, n.v_bias)})
        q, k = self.qk_norm(i, name, q, k)
        q = self.rotate(f"{name}/rope_q", q, s.num_heads, w.shape_q, w)  # [B, W, H, hd]
        k = self.rotate(f"{name}/rope_k", k, s.num_kv_heads, w.shape_kv, w)
        v = em.make_reshape(f"{name}/v_heads", v, w.shape_kv)
        present_k, present_v = (  # [B, Hkv, W, hd], post-RoPE: the window's part of the cache
            em.add_output(em.make("Transpose", f"{name}/present_{t}", [x], perm=[0, 2, 1, 3],
                                  output=f"present_{t}.{i}"),
                          self.dtype, ["batch", s.num_kv_heads, "window", s.head_dim])
            for t, x in (("key", k), ("value", v))
        )
        kernel = ATTENTION_KERNELS[self.kernel]
        out = kernel(w.attention, name, q, k, v, present_k, present_v, past_k, past_v)  # [T, H*hd]
        return self.linear(f"{name}/o", out, n.o)

    def lm_head(self, h: str, rows: str, w: Window, table: str) -> None:
        """Logits for the requested window rows only: gather first, then norm and head."""
        em, s = self.em, self.spec
        h3 = em.make_reshape("head/unflatten", h, w.shape_flat)  # [B, W, D]
        picked = em.make_gather("head/select_rows", h3, rows, axis=1)  # [B, K, D]
        out_shape = em.make_concat("shape/bkv", [em.make_shape("head/shape_bk", picked, end=2),
                                                 em.const([s.vocab_size])], axis=0)
        flat = em.make_reshape("head/flatten", picked, [-1, s.hidden_size])
        normed = self.rmsnorm("final_norm", flat, self.final_norm_name())
        if self.head_shares_table():
            logits = em.make("Gemm", "head/Gemm", [normed, table], transB=1)  # one shared table
        else:
            logits = self.linear("head", normed, self.head_name(), role=Role.HEAD)
        if self.dtype == "float32":
            em.make_reshape("head/logits", logits, out_shape, output="logits")
        else:
            em.make_cast("head/logits_fp32", em.make_reshape("head/logits", logits, out_shape), "float32",
                         output="logits")
        em.add_output("logits", "float32", ["batch", "rows", s.vocab_size])
