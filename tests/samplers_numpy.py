"""Plain-numpy reference samplers, written from docs/models.md (sampler rules, temperature 0).

They run the reference loops literally (every scheduled step is a forward, even one that
commits nothing) so they check the C++ loop's shortcuts as well as its arithmetic.
Shared rules (docs/models.md): the mask id is never a token (its logit is -inf),
ties go to the lowest token id and the lowest position, early stop fills with EOS.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32


def softmax64(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def dream_timesteps(steps: int, eps: float) -> np.ndarray:
    """torch.linspace(1, eps, steps + 1) in float32 (one rounding per value, as its CPU kernel)."""
    n = steps + 1
    start, end = f32(1.0), f32(eps)
    step = f32((end - start) / f32(n - 1)) if n > 1 else f32(0)
    idx = np.arange(n, dtype=np.float64)
    first = np.float64(start) + np.float64(step) * idx
    second = np.float64(end) - np.float64(step) * (n - 1 - idx)
    return np.where(np.arange(n) < n // 2, first, second).astype(f32)


def order_by_confidence(confidence: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Positions sorted by confidence descending, ties lowest position first."""
    order = np.lexsort((positions, -confidence))
    return positions[order]


def threshold_count(sorted_conf: np.ndarray, threshold: float) -> int:
    n = 1
    while n < len(sorted_conf) and sorted_conf[n] >= threshold:
        n += 1
    return n


def factor_count(sorted_conf: np.ndarray, factor: float) -> int:
    """Fast-dLLM get_transfer_index_dynamic, including its 'last rank fails -> take all' quirk."""
    count = len(sorted_conf)
    threshs = [1 - factor / (n + 1) for n in range(1, count + 1)]
    threshs[0] = -1
    top_i = 0
    for top_i in range(count):
        if sorted_conf[top_i] < threshs[top_i]:
            break
    if top_i == 0 or top_i == count - 1:
        top_i += 1
    return top_i


def parallel_count(conf_sorted, threshold, factor, masked, steps, step):
    n = threshold_count(conf_sorted, threshold) if threshold is not None else factor_count(conf_sorted, factor)
    remaining = max(1, steps - step)
    return min(masked, max(n, -(-masked // remaining)))


class Sequence:
    """x, holes, block ranges: the common setup of every sampler."""

    def __init__(self, prompt, gen_length, block_length, mask_id, template=None):
        self.P = len(prompt)
        self.mask_id = mask_id
        self.x = np.concatenate([prompt, np.full(gen_length, mask_id, dtype=np.int64)])
        if template is not None:
            self.x[self.P :] = template
        self.hole = self.x == mask_id
        pinned = np.nonzero(~self.hole[self.P :])[0]
        self.last_pinned = self.P + int(pinned.max()) if len(pinned) else -1
        first_hole = int(np.argmax(self.hole[: self.P])) if self.hole[: self.P].any() else self.P
        self.blocks = []
        for b in range(gen_length // block_length):
            gs = self.P + b * block_length
            self.blocks.append((first_hole if b == 0 else gs, gs + block_length, gs, gs + block_length))

    def masked(self, b):
        start, end = self.blocks[b][:2]
        return np.array([p for p in range(start, end) if self.x[p] == self.mask_id], dtype=np.int64)

    def early_stop(self, b, eos_id) -> bool:
        _, _, gs, ge = self.blocks[b]
        if b + 1 >= len(self.blocks) or self.last_pinned >= ge or not (self.x[gs:ge] == eos_id).any():
            return False
        tail = self.x[ge:]
        tail[tail == self.mask_id] = eos_id
        return True


def cfg_logits(forward, x, hole, mask_id, cfg_scale):
    if cfg_scale <= 0:
        return forward(x[None])[0].astype(f32)
    un_x = x.copy()
    un_x[~hole] = mask_id
    both = forward(np.stack([x, un_x]))
    c, u = both[0].astype(f32), both[1].astype(f32)
    return u + f32(cfg_scale + 1) * (c - u)


def llada_generate(forward, prompt, *, steps, gen_length, block_length, mask_id, cfg_scale=0.0,
                   remasking="low_confidence", eos_id=None, eot_id=None, logits_eos_inf=False,
                   confidence_eos_eot_inf=False, threshold=None, factor=None, early_stop=True,
                   template=None):
    """LLaDA generate (block schedule) at T = 0, with Fast-dLLM threshold/factor."""
    assert remasking == "low_confidence"  # `random` draws from an RNG; checked by property tests
    seq = Sequence(prompt, gen_length, block_length, mask_id, template)
    S = steps // (gen_length // block_length)
    for b in range(len(seq.blocks)):
        M = len(seq.masked(b))
        counts = [M // S + (1 if i < M % S else 0) for i in range(S)]
        for i in range(S):
            masked = seq.masked(b)
            if len(masked) == 0:
                break
            logits = cfg_logits(forward, seq.x, seq.hole, mask_id, cfg_scale)
            logits[:, mask_id] = -np.inf
            if logits_eos_inf:
                logits[:, eos_id] = -np.inf
            x0 = np.argmax(logits, axis=-1)
            if confidence_eos_eot_inf:  # at T = 0 both assignments hit the same tensor
                if eos_id is not None:
                    logits[:, eos_id] = -np.inf
                if eot_id is not None:
                    logits[:, eot_id] = -np.inf
            p = softmax64(logits)
            conf = p[masked, x0[masked]]
            if threshold is None and factor is None:
                n = counts[i]
            else:
                n = parallel_count(np.sort(conf)[::-1], threshold, factor, len(masked), S, i)
            chosen = order_by_confidence(conf, masked)[:n]
            seq.x[chosen] = x0[chosen]
        if early_stop and eos_id is not None and seq.early_stop(b, eos_id):
            break
    return seq.x


def dream_sample_tokens(logits, top_p=None, top_k=None):
    """Dream sample_tokens at T = 0: (x0, probs) after top-p then top-k."""
    logits = logits.astype(np.float64).copy()
    if top_p is not None and top_p < 1:
        for r in range(logits.shape[0]):
            order = np.lexsort((np.arange(logits.shape[1]), -logits[r]))
            probs = softmax64(logits[r][order])
            cum = np.cumsum(probs)
            remove = np.zeros_like(cum, dtype=bool)
            remove[1:] = cum[:-1] > top_p
            logits[r, order[remove]] = -np.inf
    if top_k is not None:
        k = min(top_k, logits.shape[1])
        kth = np.sort(logits, axis=-1)[:, ::-1][:, k - 1 : k]
        logits[logits < kth] = -np.inf
    probs = softmax64(logits)
    return np.argmax(probs, axis=-1), probs


def dream_confidence(alg, probs, x0):
    if alg == "maskgit_plus":
        return probs[np.arange(len(x0)), x0]
    if alg == "topk_margin":
        s = np.sort(probs, axis=-1)[:, ::-1]
        return s[:, 0] - s[:, 1]
    if alg == "entropy":
        return np.sum(probs * np.log(probs + 1e-10), axis=-1)
    raise ValueError(alg)


def dream_generate(forward, prompt, *, steps, gen_length, mask_id, alg="maskgit_plus", eps=1e-3,
                   block_length=None, top_p=None, top_k=None, shift_logits=True, cfg_scale=0.0,
                   eos_id=None, logits_eos_inf=False, threshold=None, factor=None, early_stop=True,
                   template=None):
    """Dream diffusion_generate (timestep schedule) at T = 0; blocks = per-block timesteps."""
    block_length = block_length or gen_length
    seq = Sequence(prompt, gen_length, block_length, mask_id, template)
    S = steps // (gen_length // block_length)
    t = dream_timesteps(S, eps)
    for b in range(len(seq.blocks)):
        for i in range(S):
            masked = seq.masked(b)
            if len(masked) == 0:
                break
            logits = cfg_logits(forward, seq.x, seq.hole, mask_id, cfg_scale)
            if shift_logits:
                logits = np.concatenate([logits[:1], logits[:-1]], axis=0)
            logits[:, mask_id] = -np.inf
            if logits_eos_inf:
                logits[:, eos_id] = -np.inf
            x0, probs = dream_sample_tokens(logits[masked], top_p, top_k)
            conf = dream_confidence(alg, probs, x0)
            M = len(masked)
            if threshold is not None or factor is not None:
                n = parallel_count(np.sort(conf)[::-1], threshold, factor, M, S, i)
            elif i < S - 1:
                n = int(f32(M) * (f32(1) - t[i + 1] / t[i]))
            else:
                n = M
            if n == 0:
                continue
            order = np.lexsort((masked, -conf))[:n]
            seq.x[masked[order]] = x0[order]
        if early_stop and eos_id is not None and seq.early_stop(b, eos_id):
            break
    return seq.x


def softmax_t(logits: np.ndarray, temperature: float) -> np.ndarray:
    return softmax64(logits.astype(np.float64) / temperature)




class FakeModel:
    """Logits row of position i = a fixed random table row chosen by a hash of (ids, i).

    Values are continuous (float32 normal * scale), so confidences of different rows are
    well separated; `eos_bias` raises EOS in the generation region to exercise early stop.
    """

    def __init__(self, vocab=40, mask_id=39, seed=0, table_rows=97, scale=2.5, eos_id=None, eos_bias=0.0,
                 mask_bias=-1.0, prompt_length=0):
        rng = np.random.default_rng(seed)
        self.table = (rng.standard_normal((table_rows, vocab)) * scale).astype(np.float32)
        self.table[:, mask_id] += np.float32(mask_bias)
        if eos_id is not None:
            self.table[:, eos_id] += np.float32(eos_bias)
        self.weights = rng.integers(1, 1 << 20, size=4096, dtype=np.int64)
        self.calls = 0
        self.dtype = np.float32

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        self.calls += 1
        B, L = ids.shape
        h = (ids * self.weights[:L]).sum(axis=1, keepdims=True)  # [B, 1]
        rows = (h + np.arange(L)[None, :] * 7919) % len(self.table)
        return self.table[rows].astype(self.dtype)
