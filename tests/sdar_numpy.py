"""Plain-numpy reference of SDAR's block_diffusion_generate (docs/models.md, SDAR sampler rules).

Written from the reference loop at temperature 0 (its greedy path: argmax of the raw logits,
confidence from their softmax, no top-k/top-p), with the reference's clamp of the step count
to the masked positions and its stopping rule: after a finished block, any stop id in the
generated region ends the loop and later blocks stay masked. Shared unmask rule: the mask id
is never a token (its logit is -inf). Ties go to the lowest position.

`BlockCausalFake` is a fake block-causal model: row i depends on the ids of every block up to
and including i's own (absolute blocks of `block` positions) and on i. `CachedForward` serves
it window by window from a cache of stored ids and asserts the rules of cache `block`.
"""

from __future__ import annotations

import numpy as np

from samplers_numpy import FakeModel, order_by_confidence, softmax64


def entropies(probs: np.ndarray) -> np.ndarray:
    """Per-row entropy over the vocabulary, 0 * log 0 terms dropped (the reference's where(isfinite))."""
    logs = np.where(probs > 0, np.log(np.where(probs > 0, probs, 1.0)), 0.0)
    return -(probs * logs).sum(axis=-1)


def select(strategy, positions, conf, ent, count, threshold):
    """The reference's select_transfer for one row: absolute positions to commit."""
    if strategy == "sequential":
        return positions[:count]
    if strategy == "entropy_bounded":
        order = np.lexsort((positions, ent))
        budget = int(np.searchsorted(np.cumsum(ent[order]), threshold, side="left"))
        return positions[order[: min(max(count, budget, 1), len(positions))]]
    ranked = order_by_confidence(conf, positions)
    if strategy == "low_confidence_dynamic":
        high = int((conf > threshold).sum())
        return ranked[:high] if high >= count else ranked[:count]
    assert strategy == "low_confidence_static"
    return ranked[:count]


def sdar_generate(forward, prompt, *, gen_length, block_length, steps, mask_id, strategy="low_confidence_dynamic",
                  threshold=0.85, stop_ids=None):
    """block_diffusion_generate at T = 0; `steps` is its denoising_steps (per block).

    Block-causal attention makes the prefix up to the block's end the whole context, so each
    step runs forward(x[:, :block end]) where the reference runs the block against its cache.
    """
    P, B, S = len(prompt), block_length, steps
    blocks = -(-(P + gen_length) // B)
    x = np.full(blocks * B, mask_id, dtype=np.int64)
    x[:P] = prompt
    schedule = [B // S + (1 if s < B % S else 0) for s in range(S)]
    for blk in range(P // B, blocks):
        lo, hi = blk * B, (blk + 1) * B
        for step in range(S + 1):
            positions = lo + np.flatnonzero(x[lo:hi] == mask_id)
            if len(positions) == 0:
                break  # the reference stores the block's keys/values here
            assert step < S, "masks left after the block's steps"
            logits = forward(x[None, :hi])[0][lo:hi].astype(np.float64)
            logits[:, mask_id] = -np.inf
            x0 = np.argmax(logits, axis=-1)
            probs = softmax64(logits)
            rows = positions - lo
            conf = probs[rows, x0[rows]]
            ent = entropies(probs[rows])
            chosen = select(strategy, positions, conf, ent, min(schedule[step], len(positions)), threshold)
            x[chosen] = x0[chosen - lo]
        if stop_ids and np.isin(x[P:], stop_ids).any():
            break
    return x


class BlockCausalFake(FakeModel):
    """FakeModel whose row i hashes the ids of positions [0, end of i's block) and i."""

    def __init__(self, block, **kw):
        super().__init__(**kw)
        self.block = block

    def rows(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Logits [B, W, V] of `positions` (absolute) given ids of every position up to their last block's end."""
        weighted = np.cumsum(ids * self.weights[: ids.shape[1]], axis=1)  # [B, L]
        ends = (positions // self.block + 1) * self.block - 1
        h = weighted[:, ends]
        return self.table[(h + positions[None, :] * 7919) % len(self.table)].astype(self.dtype)

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        self.calls += 1
        length = ids.shape[1]
        assert length % self.block == 0, "block-causal forwards see whole blocks"
        return self.rows(ids, np.arange(length))


class CachedForward:
    """`forward(ids, request)` for unmask.decode with cache 'block': keeps the stored ids as its
    cache and asserts every request is legal (one aligned block, or the prefill from 0; a past
    of exactly the stored, finished blocks before the window; nothing stored twice)."""

    def __init__(self, model: BlockCausalFake, mask_id: int):
        self.model, self.mask_id, self.block = model, mask_id, model.block
        self.cache: np.ndarray | None = None  # ids of stored positions
        self.stored = 0  # positions [0, stored) hold final ids
        self.log: list[tuple[str, int, int, int]] = []  # (kind, start, end, past)

    def __call__(self, ids: np.ndarray, request) -> np.ndarray:
        start, end, past = int(request.window_start), int(request.window_end), int(request.past_length)
        kind = request.kind.name.lower()
        self.log.append((kind, start, end, past))
        assert kind in ("prefill", "denoise", "store"), kind
        assert past == start == self.stored, f"{kind} [{start}, {end}) past {past}, stored {self.stored}"
        if kind == "prefill":
            assert start == 0 and end % self.block == 0 and request.stores_cache
            assert len(request.logits_index) == 0
        else:
            assert end - start == self.block and start % self.block == 0
            assert request.stores_cache == (kind == "store")
            assert (kind == "store") == (len(request.logits_index) == 0)
        if self.cache is None:
            self.cache = np.zeros((ids.shape[0], 0), dtype=np.int64)
        assert (self.cache[0] != self.mask_id).all(), "the cache holds a position that was not final"
        full = np.concatenate([self.cache[:, :past], ids], axis=1)
        logits = self.model.rows(full, np.arange(start, end))
        if request.stores_cache:
            assert (ids[0] != self.mask_id).all(), "stored a block that still holds masks"
            self.cache = full
            self.stored = end
        return logits
