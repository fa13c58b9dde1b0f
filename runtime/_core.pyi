"""Type stub of unmask._core, the C++ decoding core (csrc/bindings.cpp).

Private: use unmask.decode / unmask.decoding.make_decoder, which build DecodeParams from a
GenerationConfig. Errors (unmask.errors): ConfigError / ModelFormatError for bad settings,
InputError (a ValueError) for bad input arrays, StateError (a RuntimeError) for calls out of
order or from a second thread while advance() runs: a Decoder serves one call at a time.
"""

from typing import ClassVar

import numpy as np
import numpy.typing as npt

ABI_VERSION: int
MAX_LENGTH: int  # largest gen_length and steps the core accepts
MIN_TEMPERATURE: float  # smallest positive temperature (below it 1/T overflows float32)

def max_threads() -> int:
    """Largest thread count the core accepts: max(256, this machine's hardware threads)."""

class _Enum:
    """What every pybind11 enum below offers (a typing aid: no such base class exists at runtime)."""

    def __init__(self, value: int) -> None: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...

class Algorithm(_Enum):
    """Which positions to commit: LOW_CONFIDENCE and RANDOM follow LLaDA's block schedule,
    the next four Dream's timestep schedule, the last five the block-diffusion schedule (SDAR's
    four, then LLaDA2's sampler)."""

    LOW_CONFIDENCE: ClassVar[Algorithm]
    RANDOM: ClassVar[Algorithm]
    ORIGIN: ClassVar[Algorithm]
    MASKGIT_PLUS: ClassVar[Algorithm]
    TOPK_MARGIN: ClassVar[Algorithm]
    ENTROPY: ClassVar[Algorithm]
    SEQUENTIAL: ClassVar[Algorithm]
    LOW_CONFIDENCE_STATIC: ClassVar[Algorithm]
    LOW_CONFIDENCE_DYNAMIC: ClassVar[Algorithm]
    ENTROPY_BOUNDED: ClassVar[Algorithm]
    LLADA2: ClassVar[Algorithm]
    __members__: ClassVar[dict[str, Algorithm]]

class CacheMode(_Enum):
    """Key/value reuse policy of Decoder.next_request()."""

    NONE: ClassVar[CacheMode]
    PREFIX: ClassVar[CacheMode]
    DUAL: ClassVar[CacheMode]
    BLOCK: ClassVar[CacheMode]
    __members__: ClassVar[dict[str, CacheMode]]

class StepKind(_Enum):
    """Which forward pass a Request is (a label: what to do is spelled out by past_length and
    stores_cache). FULL: no cache, the whole sequence; REFRESH: a block's first cached pass over
    the whole sequence, its presents become the cache; WINDOW: a later step of the block, the
    window against the cached past. Cache `block` (block-causal models): PREFILL: the complete
    prompt blocks, stored, no logits; DENOISE: one block against the stored blocks before it;
    STORE: a finished block with its final tokens, stored, no logits."""

    FULL: ClassVar[StepKind]
    REFRESH: ClassVar[StepKind]
    WINDOW: ClassVar[StepKind]
    PREFILL: ClassVar[StepKind]
    DENOISE: ClassVar[StepKind]
    STORE: ClassVar[StepKind]
    __members__: ClassVar[dict[str, StepKind]]

class DecodeParams:
    """The sampler's settings (csrc/params.h holds the defaults and a line on each field)."""

    gen_length: int
    steps: int
    block_length: int
    algorithm: Algorithm
    threshold: float | None
    factor: float | None
    minimal_topk: int
    temperature: float
    top_k: int | None
    top_p: float | None
    alg_temp: float
    eps: float
    cfg_scale: float
    logits_eos_inf: bool
    confidence_eos_eot_inf: bool
    early_stop: bool
    seed: int
    cache: CacheMode
    mask_id: int
    eos_id: int | None
    eot_id: int | None
    shift_logits: bool
    threads: int
    def __init__(self) -> None: ...

class Request:
    """What the next forward pass must compute."""

    @property
    def kind(self) -> StepKind: ...
    @property
    def window_start(self) -> int:
        """Absolute positions [window_start, window_end) are recomputed."""
    @property
    def window_end(self) -> int: ...
    @property
    def past_length(self) -> int:
        """Cached positions the window attends to: the first past_length outside the window, in order."""
    @property
    def stores_cache(self) -> bool:
        """The window's presents become the cache at [window_start, window_end)."""
    @property
    def logits_index(self) -> npt.NDArray[np.int64]:
        """Window-relative rows whose logits are needed (shift_logits already applied)."""
    @property
    def batch(self) -> int: ...
    @property
    def block(self) -> int: ...
    @property
    def step(self) -> int: ...

class StepEvent:
    """What one advance() committed: model commits (ascending), then `filled` early-stop EOS fills."""

    @property
    def positions(self) -> npt.NDArray[np.int64]: ...
    @property
    def tokens(self) -> npt.NDArray[np.int64]: ...
    @property
    def block(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def filled(self) -> int: ...
    @property
    def final_end(self) -> int:
        """Generation positions before this are final: every block there finished (length once done)."""
    @property
    def block_done(self) -> bool: ...
    @property
    def done(self) -> bool: ...

class Decoder:
    """The decoding state machine: next_request() says what to compute, advance() takes the logits."""

    def __init__(
        self,
        params: DecodeParams,
        prompt_ids: npt.NDArray[np.int64],
        template: npt.NDArray[np.int64] | None,
        infill: bool,
    ) -> None: ...
    @property
    def done(self) -> bool: ...
    @property
    def ids(self) -> npt.NDArray[np.int64]:
        """A copy of the sequence: prompt + generation region."""
    @property
    def prompt_length(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def batch(self) -> int:
        """Rows of every request: 2 with classifier-free guidance, else 1."""
    @property
    def max_window(self) -> int:
        """Widest window of any step but a whole-sequence refresh (sizes scratch buffers)."""
    @property
    def block_ends(self) -> npt.NDArray[np.int64]:
        """Absolute end of each block's part of the generation region."""
    def next_request(self) -> Request: ...
    def input_ids(self) -> npt.NDArray[np.int64]:
        """int64 [batch, window] for the current request."""
    def advance(self, logits: npt.NDArray[np.float32] | npt.NDArray[np.float16]) -> StepEvent:
        """logits [batch, K, V] for the rows in logits_index, in that order."""
    def advance_window(self, logits: npt.NDArray[np.float32] | npt.NDArray[np.float16]) -> StepEvent:
        """logits [batch, W, V] for the whole window; the decoder picks the logits_index rows."""

def score(
    params: DecodeParams,
    logits: npt.NDArray[np.float32] | npt.NDArray[np.float16],
    step: int = 0,
    threads: int = 1,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Scores rows [R, V] (or [2, R, V] with cfg_scale > 0) as the decoder would at `step`,
    row r keyed as position r: (tokens int64[R], confidence float64[R]). For tests and benchmarks."""

def dream_timesteps(steps: int, eps: float) -> npt.NDArray[np.float32]:
    """torch.linspace(1, eps, steps + 1) with torch's float32 arithmetic."""


def row_pass_isa() -> str:
    """The scoring kernel this process uses: "avx512", "avx2" or "portable" (UNMASK_SIMD caps it)."""
    ...
