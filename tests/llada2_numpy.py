"""Plain-numpy reference of LLaDA2's block sampler (dllm's LLaDA2Sampler; docs/models.md, LLaDA2 rules).

Written from the reference loop at temperature 0 (its greedy path: the logits filtered by top-k
then top-p, softmax, argmax; the confidence is the token's probability under that renormalised
distribution). Its rules, kept as they are:
- steps per block = min(steps, gen_length // minimal_topk), from the whole generation's length;
- blocks aligned to absolute position 0, the canvas padded to a block end, complete prompt
  blocks never denoised (the first decoded block carries the prompt's tail);
- the count of step s from the block length: B // S, plus one for the first B % S steps;
- every masked position with confidence strictly above `threshold` is committed when at least
  that count pass, else the count's most confident (clamped to the masks left);
- `eos_early_stop`: after a step, a block holding EOS anywhere (its prompt tail too) ends its
  steps, masks and all; the later blocks are decoded anyway.
Shared unmask rule: the mask id is never a token (its logit is -inf before the filters). Ties go
to the lowest position (and the lowest token id in the argmax).
"""

from __future__ import annotations

import numpy as np

from samplers_numpy import order_by_confidence, softmax64


def filter_logits(logits: np.ndarray, top_k: int | None, top_p: float | None) -> np.ndarray:
    """The reference's top_k_top_p on rows [N, V]: top-k keeps values >= the k-th largest, then
    top-p drops a token once the probability mass ranked before it exceeds top_p (the first stays)."""
    x = np.array(logits, dtype=np.float64)
    if top_k:
        k = min(top_k, x.shape[-1])
        kth = -np.sort(-x, axis=-1)[:, k - 1 : k]
        x[x < kth] = -np.inf
    if top_p is not None and 0.0 < top_p < 1.0:
        order = np.argsort(-x, axis=-1, kind="stable")
        ranked = np.take_along_axis(x, order, axis=-1)
        cum = np.cumsum(softmax64(ranked), axis=-1)
        drop = np.zeros_like(ranked, dtype=bool)
        drop[:, 1:] = cum[:, :-1] > top_p  # the mass ranked before the token
        np.put_along_axis(x, order, np.where(drop, -np.inf, ranked), axis=-1)
    return x


def block_schedule(block_length: int, steps: int) -> list[int]:
    """even_transfer_schedule: the block's positions split over its steps, the remainder first."""
    return [block_length // steps + (1 if s < block_length % steps else 0) for s in range(steps)]


def llada2_generate(forward, prompt, *, gen_length, block_length, steps, mask_id, eos_id=None, threshold=0.95,
                    minimal_topk=1, eos_early_stop=False, top_k=None, top_p=None):
    """LLaDA2Sampler.sample at T = 0 for one prompt; `steps` is its steps_per_block. Returns the canvas.

    Each step runs forward(x[:, :block end]) with the block-causal model, as the reference does
    (it keeps no cache); the block's rows are the last block_length of them.
    """
    P, B = len(prompt), block_length
    S = min(steps, gen_length // minimal_topk)
    blocks = -(-(P + gen_length) // B)
    x = np.full(blocks * B, mask_id, dtype=np.int64)
    x[:P] = prompt
    schedule = block_schedule(B, S)
    for blk in range(P // B, blocks):
        lo, hi = blk * B, (blk + 1) * B
        for step in range(S):
            active = x[lo:hi] == mask_id
            if not active.any():
                break
            logits = forward(x[None, :hi])[0][lo:hi].astype(np.float64)
            logits[:, mask_id] = -np.inf
            probs = softmax64(filter_logits(logits, top_k, top_p))
            tokens = np.argmax(probs, axis=-1)
            conf = np.where(active, probs[np.arange(B), tokens], -np.inf)
            n = schedule[step]
            high = np.flatnonzero(conf > threshold)
            if len(high) >= n:
                chosen = high
            else:
                rows = np.flatnonzero(active)
                chosen = order_by_confidence(conf[rows], rows)[: min(n, len(rows))]
            x[lo + chosen] = tokens[chosen]
            if eos_early_stop and eos_id is not None and (x[lo:hi] == eos_id).any():
                break
    return x
