"""The server's only door into the runtime: model facts, settings + prompt, and the step loop.

Everything the server needs from `unmask.Model` goes through the three functions here,
so a change of the runtime's API (how a config is resolved, what a StreamEvent holds)
is adapted in one file:

    facts = model_facts(model)                               # name, context, ids, decode
    prompt_ids, config = prepare(model, overrides, messages=[...])
    run_steps(model, prompt_ids, config, on_step, template=None, mask_logits=None)

Two paths run a generation. The plain one is `Model.stream(config=...)`. A fixed-token
template with a per-position vocabulary (JSON schema answers, see `structured`) needs
what `Model.stream` does not take, so it runs the public `unmask.decode` loop with a
forward over the model's own engine (cache "none": every step sees the whole sequence)
that masks the logits of constrained positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, UnmaskError


class ContextLengthError(ConfigError):
    """The prompt plus the generated region does not fit the model's context."""


class StopGeneration(Exception):
    """Raised by an on_step callback: the answer is complete or its client left."""


@dataclass(frozen=True)
class ServedModel:
    """What the server tells clients about the model and needs to turn ids into text."""

    name: str
    architecture: str
    precision: str
    size_bytes: int
    context_length: int
    vocab_size: int
    mask_id: int
    stop_ids: tuple[int, ...]  # EOS and end-of-turn: the answer ends at the first
    special_ids: frozenset[int]
    decode: Callable[[Sequence[int]], str]  # ids -> text, special tokens dropped
    encode: Callable[[str], list[int]]  # text -> ids, as ordinary text
    has_chat_template: bool
    embedded: bool  # the model shipped inside unmask (unmask.load() without a path)


@dataclass(frozen=True)
class Step:
    """One denoising step: positions (relative to the generated region) committed now."""

    index: int
    block: int
    positions: np.ndarray
    tokens: np.ndarray
    block_done: bool
    done: bool


def model_facts(model: Any, name: str | None = None) -> ServedModel:
    m = model.manifest
    ids = m.special_ids
    tokenizer = model.tokenizer
    return ServedModel(
        name=name or Path(str(model.package.folder)).name,
        architecture=m.architecture,
        precision=m.precision,
        size_bytes=int(m.size_bytes),
        context_length=int(m.dims.max_sequence_length),
        vocab_size=int(m.dims.vocab_size),
        mask_id=int(ids.mask_id),
        stop_ids=tuple(int(i) for i in (ids.eos_id, ids.eot_id) if i is not None),
        special_ids=frozenset(int(i) for i in tokenizer.special_tokens.values()),
        decode=lambda token_ids: tokenizer.decode(token_ids, skip_special_tokens=True),
        encode=tokenizer.encode,
        has_chat_template=model.chat_template is not None,
        embedded=_is_embedded(model),
    )


def _is_embedded(model: Any) -> bool:
    from ..model import default_package_dir

    try:
        return Path(str(model.package.folder)).resolve() == default_package_dir().resolve()
    except UnmaskError:  # an install without the embedded model
        return False


def prepare(model: Any, overrides: Mapping[str, Any], *, messages: Sequence[Mapping[str, str]] | None = None,
            prompt: str | None = None, raw: bool = False, max_tokens: int | None = None) -> tuple[np.ndarray, Any]:
    """Prompt ids and the resolved GenerationConfig, or ConfigError before anything runs.

    `max_tokens` sets gen_length, rounded up to a whole number of blocks (the answer is cut
    at max_tokens); the steps budget then follows gen_length unless `steps` is given.
    """
    overrides = dict(overrides)
    if max_tokens is not None:
        if "gen_length" in overrides:
            raise ConfigError("give max_tokens or gen_length, not both")
        block = (overrides["block_length"] if "block_length" in overrides
                 else model.default_config.for_model(model.facts).block_length)  # SDAR: the package's block size
        whole = isinstance(block, int) and block > 0  # a bad block_length is left to resolve_config to refuse
        overrides = {"steps": None, **overrides, "gen_length": -(-max_tokens // block) * block if whole else max_tokens}
    config = model.resolve_config(**overrides)
    if raw:
        prompt_ids = model.encode_prompt(prompt_ids=model.tokenizer.encode(prompt, add_special_tokens=True))
    elif messages is not None:
        prompt_ids = model.encode_prompt(messages=messages)
    else:
        prompt_ids = model.encode_prompt(prompt)
    limit = int(model.manifest.dims.max_sequence_length)
    total = config.canvas_length(len(prompt_ids))  # SDAR: up to the end of a block
    if total > limit:
        raise ContextLengthError(
            f"the prompt has {len(prompt_ids)} tokens and the answer {config.gen_length} (max_tokens / gen_length): "
            f"{total} tokens, over the model's context of {limit}; shorten the conversation or ask for fewer tokens"
        )
    return prompt_ids, config


def run_steps(model: Any, prompt_ids: np.ndarray, config: Any, on_step: Callable[[Step], None],
              template: np.ndarray | None = None,
              mask_logits: Callable[[np.ndarray, int], None] | None = None) -> None:
    """Run one generation, calling on_step after every forward pass; on_step may raise StopGeneration.

    `template` (int64[gen_length], mask id in the holes) pins tokens; `mask_logits(logits, start)`
    edits every step's logits [B, L, V] in place: region position k is decided by row start + k
    (already shifted for models that read a position's distribution from the row before).
    """
    try:
        if template is None:
            _run_stream(model, prompt_ids, config, on_step)
        else:
            _run_constrained(model, prompt_ids, config, on_step, template, mask_logits)
    except StopGeneration:
        return


def _run_stream(model: Any, prompt_ids: np.ndarray, config: Any, on_step: Callable[[Step], None]) -> None:
    start = len(prompt_ids)
    for event in model.stream(prompt_ids=prompt_ids, config=config):
        on_step(Step(int(event.step), int(event.block), np.asarray(event.positions) - start,
                     np.asarray(event.tokens), bool(event.block_done), bool(event.done)))


def _run_constrained(model: Any, prompt_ids: np.ndarray, config: Any, on_step: Callable[[Step], None],
                     template: np.ndarray, mask_logits: Callable[[np.ndarray, int], None] | None) -> None:
    from .. import decode  # the public bring-your-own-forward loop: it takes a template

    start = len(prompt_ids)
    length = start + config.gen_length
    batch = 2 if config.cfg_scale > 0 else 1
    shift = 1 if model.facts.shift_logits else 0  # Dream: position i reads row i-1
    first = max(0, start - 1)  # the LM head runs for the region (and the row before it: Dream reads i-1)
    run = model.engine.begin(batch=batch, length=length, cache="none", max_window=length, max_rows=length - first)
    window = SimpleNamespace(window_start=0, window_end=length, past_length=0, stores_cache=False,
                             logits_index=np.arange(first, length, dtype=np.int64))

    def forward(ids: np.ndarray) -> np.ndarray:
        rows, _ = run.forward(window, ids)
        logits = np.zeros((batch, length, rows.shape[2]), dtype=np.float32)  # prompt rows: never read
        logits[:, first:] = rows  # a copy: the engine reuses its buffer at the next step
        if mask_logits is not None:
            mask_logits(logits, start - shift)  # the row each position's distribution is read from
        return logits

    def step(event: Any) -> None:
        on_step(Step(int(event.step), int(event.block), np.asarray(event.positions) - start,
                     np.asarray(event.tokens), bool(event.block_done), bool(event.done)))

    decode(forward, np.asarray(prompt_ids, dtype=np.int64), config, step, facts=model.facts, template=template,
           threads=model.threads)
