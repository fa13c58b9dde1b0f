"""Engine: runs the package graph for the Decoder's requests, with key/value reuse.

One ONNX Runtime session, one IOBinding per generation, and every buffer allocated
once per generation (`begin`), so a step only rebinds the few small inputs that
change (window ids, logits rows) and the logits output view. The engine does what the
request says and decides nothing itself (the Decoder's step kinds, csrc/decoder.h):

    stores_cache   the presents ARE the cache at the window's positions: a whole-sequence
                   refresh binds them straight into `cache_key[l]` / `cache_value[l]`
                   ([B, H_kv, L, D]); a narrower window (cache `block`: prefill, store)
                   writes them to scratch, copied into its slice of the cache after the run
    past_length    the window attends to the first past_length cached positions outside
                   it, gathered once per window into a preallocated buffer (the window is
                   the same for every later step of a block); 0 = no past
    logits_index   may be empty (prefill, store): the graph computes one row, none is returned
    otherwise      presents go to a scratch buffer nobody reads, sized by the Decoder's
                   max_window

Attention is bidirectional and K/V are cached after RoPE, so the past's order does not
matter: for dual the past is prefix followed by suffix. A block-causal graph masks by
position_ids, so under cache `block` its past is exactly the stored blocks before the window.

A generic graph (export_torch: input_ids -> logits for every row) runs without cache;
its rows are picked after the run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state

from .errors import ModelFormatError
from .manifest import Manifest, SpecialIds

_ORT_FLOAT = {"tensor(float)": np.float32, "tensor(float16)": np.float16}
_KV_DTYPES = {"float32": np.float32, "float16": np.float16}
# What a failing session.run raises: the pybind layer's RuntimeError and ORT's own status types
# (Fail, InvalidArgument, RuntimeException, ...), which derive from Exception only.
ORT_ERRORS = (RuntimeError, *(e for e in vars(_ort_state).values()
                              if isinstance(e, type) and issubclass(e, Exception)))


@dataclass
class GraphLayout:
    """What the session's graph takes and gives, checked against the manifest."""

    cache_inputs: bool  # full contract (past/present, position_ids, logits_index) or generic
    num_layers: int
    kv_heads: int
    head_dim: int
    kv_dtype: type
    logits_dtype: type

    @classmethod
    def of(cls, session: ort.InferenceSession, manifest: Manifest) -> "GraphLayout":
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = {o.name: o for o in session.get_outputs()}
        if "input_ids" not in inputs or "logits" not in outputs:
            raise ModelFormatError("graph must take 'input_ids' and give 'logits' (see the graph contract)")
        dims = manifest.dims
        cache_inputs = "past_key.0" in inputs
        if cache_inputs:
            wanted = ["position_ids", "logits_index"] + [
                f"past_{kv}.{l}" for l in range(dims.num_layers) for kv in ("key", "value")
            ]
            missing = [n for n in wanted if n not in inputs]
            missing += [
                f"present_{kv}.{l}" for l in range(dims.num_layers) for kv in ("key", "value")
                if f"present_{kv}.{l}" not in outputs
            ]
            if missing:
                raise ModelFormatError(f"graph lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}")
        kv_dtype = _KV_DTYPES[manifest.kv_dtype]
        if cache_inputs and _ORT_FLOAT.get(inputs["past_key.0"].type) is not kv_dtype:
            raise ModelFormatError(
                f"manifest kv_dtype {manifest.kv_dtype} but the graph's past_key.0 is {inputs['past_key.0'].type}"
            )
        logits_dtype = _ORT_FLOAT.get(outputs["logits"].type)
        if logits_dtype is None:
            raise ModelFormatError(f"graph logits are {outputs['logits'].type}; expected float or float16")
        return cls(cache_inputs, dims.num_layers, dims.num_kv_heads, dims.head_dim, kv_dtype, logits_dtype)


def check_declared_shapes(session: ort.InferenceSession, manifest: Manifest, source: str) -> None:
    """ModelFormatError when the graph's declared shapes or the special ids contradict the manifest.

    A logits width other than the manifest's vocab_size would make the decoder pick ids the
    tokenizer does not have (or ORT fail at the first step), so it is refused at load; symbolic
    dimensions (strings, None) are checked per run by `check_logits`.
    """
    dims = manifest.dims
    declared = {a.name: a.shape for a in [*session.get_inputs(), *session.get_outputs()]}
    wanted = {"input_ids": ("B", "W"), "logits": ("B", "K", dims.vocab_size)}
    if "past_key.0" in declared:
        kv = ("B", dims.num_kv_heads, "P", dims.head_dim)
        wanted.update({f"{io}_{kv_name}.{l}": kv for io in ("past", "present") for kv_name in ("key", "value")
                       for l in range(dims.num_layers)})
    for name, expected in wanted.items():
        shape = declared.get(name)
        if not shape:
            continue  # absent (GraphLayout names what is missing) or rank unknown (checked per run)
        if len(shape) != len(expected):
            raise ModelFormatError(f"{source}: graph {name} has rank {len(shape)} {list(shape)}, expected "
                                   f"{len(expected)} ({', '.join(map(str, expected))})")
        for axis, (got, want) in enumerate(zip(shape, expected)):
            if isinstance(got, int) and isinstance(want, int) and got != want:
                raise ModelFormatError(f"{source}: graph {name} has {got} on axis {axis} but the manifest says "
                                       f"{want} ({_dim_name(name, axis)}); the manifest and graph disagree: "
                                       "re-export the package")
    check_special_ids(manifest.special_ids, dims.vocab_size, source)


def _dim_name(tensor: str, axis: int) -> str:
    return "dims.vocab_size" if tensor == "logits" else "dims.num_kv_heads" if axis == 1 else "dims.head_dim"


def check_special_ids(ids: SpecialIds, vocab_size: int, source: str) -> None:
    """Every special id must be a row of the logits (the decoder indexes them)."""
    for name in ("mask_id", "eos_id", "eot_id", "bos_id", "pad_id"):
        value = getattr(ids, name)
        if value is not None and not 0 <= value < vocab_size:
            raise ModelFormatError(f"{source}: special_ids.{name} {value} lies outside the vocabulary "
                                   f"[0, {vocab_size}) of dims.vocab_size")


def check_logits(logits: np.ndarray, expected: tuple[int, ...], source: str) -> None:
    """The returned logits have the shape the run asked for (a symbolic width can still lie)."""
    if tuple(logits.shape) != expected:
        raise ModelFormatError(f"{source}: graph returned logits of shape {tuple(logits.shape)}, expected "
                               f"{expected} (batch, rows, dims.vocab_size); the manifest and graph disagree")


_QUIET_RUN = ort.RunOptions()
_QUIET_RUN.log_severity_level = 4  # a failed run is raised with ORT's message: its log line would repeat it


def run_session(session: ort.InferenceSession, binding, source: str) -> float:
    """session.run_with_iobinding; ORT's failures become ModelFormatError naming the graph. Seconds spent."""
    t0 = time.perf_counter()
    try:
        session.run_with_iobinding(binding, _QUIET_RUN)
    except ORT_ERRORS as exc:
        # ORT's text: "Error in execution: ... [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : <what went wrong>"
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFormatError(f"{source}: ONNX Runtime failed running the graph: "
                               f"{detail.rsplit(' : ', 1)[-1]}") from exc
    return time.perf_counter() - t0


class Engine:
    """One graph's session; `begin` prepares the buffers of one generation."""

    def __init__(self, session: ort.InferenceSession, manifest: Manifest, source: str = "graph"):
        self.session = session
        self.source = str(source)  # the graph file, for error messages
        check_declared_shapes(session, manifest, self.source)
        self.layout = GraphLayout.of(session, manifest)
        self.vocab_size = manifest.dims.vocab_size

    def begin(self, *, batch: int, length: int, cache: str, max_window: int, max_rows: int) -> "EngineRun":
        return EngineRun(self, batch=batch, length=length, cache=cache, max_window=max_window, max_rows=max_rows)


class EngineRun:
    """The buffers and IOBinding of one generation; `forward` serves one Decoder request.

    Owned by one generation only, so an interrupted generation leaves nothing shared
    half-updated: the next generation simply begins a new run.
    """

    def __init__(self, engine: Engine, *, batch: int, length: int, cache: str, max_window: int, max_rows: int):
        lay = self.layout = engine.layout
        self.session, self.vocab_size, self.source = engine.session, engine.vocab_size, engine.source
        self.batch, self.length, self.cache = batch, length, cache
        self._binding = self.session.io_binding()
        self._logits = np.empty(batch * max_rows * self.vocab_size, dtype=lay.logits_dtype)
        self._bound_window: tuple | None = None
        self._gathered: tuple | None = None  # (start, end, past_length) whose past the _past buffers hold
        if not lay.cache_inputs:
            return
        layers = range(lay.num_layers)
        kinds = ("key", "value")
        kv = (batch, lay.kv_heads, length, lay.head_dim)
        self._empty_past = np.empty((batch, lay.kv_heads, 0, lay.head_dim), dtype=lay.kv_dtype)
        self._cache = self._past = None
        if cache != "none":
            self._cache = {(k, l): np.empty(kv, dtype=lay.kv_dtype) for k in kinds for l in layers}
            self._past = {(k, l): np.empty(int(np.prod(kv)), dtype=lay.kv_dtype) for k in kinds for l in layers}
        scratch = batch * lay.kv_heads * max_window * lay.head_dim
        self._scratch = {(k, l): np.empty(scratch, dtype=lay.kv_dtype) for k in kinds for l in layers}

    def forward(self, request, input_ids: np.ndarray) -> tuple[np.ndarray, float]:
        """Logits [B, K, V] for the request's rows and the seconds spent in session.run.

        The logits array is a view of this run's buffer: valid until the next forward.
        """
        if not self.layout.cache_inputs:
            return self._forward_generic(request, input_ids)
        binding = self._binding
        start, end = int(request.window_start), int(request.window_end)
        past, stores = int(request.past_length), bool(request.stores_cache)
        if stores and self.cache == "none":
            raise RuntimeError(f"storing [{start}, {end}) needs a cache; this run has none")
        if past and (self.cache == "none" or past > self.length - (end - start)):
            raise RuntimeError(f"a past of {past} positions around [{start}, {end}) does not fit this run's cache")
        key = (start, end, past, stores)
        if key != self._bound_window:
            self._bind_window(start, end, past, stores)
            self._bound_window = None if stores else key  # the cache changes at every store
        binding.bind_cpu_input("input_ids", input_ids)
        rows = np.ascontiguousarray(request.logits_index, dtype=np.int64)
        wanted = len(rows)
        if not wanted:  # a pass that only stores keys/values: the head runs on one row, dropped
            rows = np.zeros(1, dtype=np.int64)
        binding.bind_cpu_input("logits_index", rows)
        shape = (self.batch, len(rows), self.vocab_size)
        if self._logits.size < np.prod(shape):  # more rows than begin() was told: grow once
            self._logits = np.empty(int(np.prod(shape)), dtype=self._logits.dtype)
        logits = self._logits[: int(np.prod(shape))].reshape(shape)
        binding.bind_output("logits", "cpu", 0, logits.dtype, list(logits.shape), logits.ctypes.data)
        seconds = run_session(self.session, binding, self.source)
        if stores:
            if (start, end) != (0, self.length):
                self._store_slice(start, end)
            if self._gathered is not None and self._gathered[:2] != (start, end):
                self._gathered = None  # the store may have written inside the gathered past
        return logits[:, :wanted], seconds

    def _store_slice(self, start: int, end: int) -> None:
        """Copy the window's presents (in scratch) into the cache at [start, end)."""
        for (kind, layer), cache in self._cache.items():
            cache[:, :, start:end] = self._view(self._scratch[kind, layer], end - start)

    def _bind_window(self, start: int, end: int, past_length: int, stores: bool) -> None:
        lay, binding = self.layout, self._binding
        width = end - start
        positions = np.ascontiguousarray(np.broadcast_to(np.arange(start, end, dtype=np.int64), (self.batch, width)))
        binding.bind_cpu_input("position_ids", positions)
        # A store of this same window (SDAR's pass after a block's last step) leaves the past
        # outside it as it was: bind the copy gathered for the block's steps again
        regather = self._gathered != (start, end, past_length)
        for l in range(lay.num_layers):
            for kind in ("key", "value"):
                if not past_length:
                    past = self._empty_past
                elif regather:
                    past = self._gather_past(kind, l, start, end, past_length)
                else:
                    past = self._view(self._past[kind, l], past_length)
                binding.bind_cpu_input(f"past_{kind}.{l}", past)
                whole = stores and (start, end) == (0, self.length)
                present = self._cache[kind, l] if whole else self._view(self._scratch[kind, l], width)
                binding.bind_output(f"present_{kind}.{l}", "cpu", 0, present.dtype, list(present.shape),
                                    present.ctypes.data)
        self._gathered = (start, end, past_length) if past_length else None

    def _gather_past(self, kind: str, layer: int, start: int, end: int, past_length: int) -> np.ndarray:
        """The cached K or V of the first past_length positions outside [start, end), contiguous."""
        cache = self._cache[kind, layer]
        past = self._view(self._past[kind, layer], past_length)
        before = min(start, past_length)
        past[:, :, :before] = cache[:, :, :before]
        past[:, :, before:] = cache[:, :, end : end + past_length - before]
        return past

    def _view(self, flat: np.ndarray, positions: int) -> np.ndarray:
        lay = self.layout
        shape = (self.batch, lay.kv_heads, positions, lay.head_dim)
        size = int(np.prod(shape))
        if size > flat.size:
            raise RuntimeError(f"window of {positions} positions exceeds the buffer sized at begin()")
        return flat[:size].reshape(shape)

    def _forward_generic(self, request, input_ids: np.ndarray) -> tuple[np.ndarray, float]:
        binding = self._binding
        binding.bind_cpu_input("input_ids", input_ids)
        binding.bind_output("logits", "cpu")
        seconds = run_session(self.session, binding, self.source)
        full = binding.get_outputs()[0].numpy()
        check_logits(full, (self.batch, input_ids.shape[1], self.vocab_size), self.source)
        rows = np.asarray(request.logits_index, dtype=np.int64)
        return np.ascontiguousarray(full[:, rows, :]), seconds
