"""The Python API: load a package, generate, stream, chat.

    import unmask
    model = unmask.load("llada-int4")              # or unmask.load() for the embedded model
    result = model.generate("What is 12 + 30?", gen_length=64)
    print(result.text, result.stats.tokens_per_second)
    for event in model.stream("Tell me a story"):  # events per step; text per finished block
        print(event.text, end="")
    chat = model.chat(system="Be brief.")
    chat.send("Hi!").text

The loop per generation: the C++ Decoder says which window to compute, the Engine
runs the graph for it, the Decoder scores and commits. Everything is checked
(config, prompt length, cache mode) before the first forward pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import onnxruntime as ort

from .chat import ChatTemplate, check_messages
from .config import GenerationConfig, ModelFacts, check_threads
from .engine import Engine
from .errors import ConfigError, ModelFormatError
from .manifest import Manifest, auto_cache, read_manifest
from .package import Package, read_package
from .stats import GenerationStats, peak_rss_bytes
from .store import resolve as resolve_model
from .tokenizer import Tokenizer

DEFAULT_MODEL = ("models", "default")  # inside the installed package: unmask/models/default/


# ---------------------------------------------------------------------- results and events


@dataclass
class Result:
    """One generation: the answer text, the generated ids and what it cost."""

    text: str  # decoded generation up to the first EOS/EoT, special tokens dropped
    token_ids: np.ndarray  # int64: the whole generated region (gen_length; SDAR: up to the end of its block)
    prompt_ids: np.ndarray  # int64 [P]: what the model was conditioned on
    stats: GenerationStats
    config: GenerationConfig  # the resolved settings this generation ran with


@dataclass
class StreamEvent:
    """What one decoding step did. The last event has done=True and carries the Result."""

    step: int  # 0-based forward pass number
    block: int  # block the step worked on
    positions: np.ndarray  # int64: absolute positions committed this step
    tokens: np.ndarray  # int64: the tokens committed there
    block_done: bool  # the block finished with this step
    done: bool  # generation finished
    text: str = ""  # newly finished text (only when a block finished), up to EOS/EoT
    result: Result | None = None  # set on the final event
    # absolute position of the first generated token (the prompt length): positions - gen_start
    # index the generated region, so views need not encode the prompt themselves
    gen_start: int = field(kw_only=True)


# ---------------------------------------------------------------------- loading


def load(path: str | os.PathLike | None = None, device: str = "auto", threads: int | None = None, *,
         spinning: bool | None = None, profile_prefix: str | os.PathLike | None = None) -> "Model":
    """Open a model package (a folder, a name in the model store, or None: the embedded model) on `device`.

    threads / spinning: CPU threads and whether ORT's idle pool threads spin; None takes the
    device profile's rule (unmask.devices.threads: the cores the load leaves free, no spinning).

    profile_prefix turns on ONNX Runtime's profiler (`unmask bench --profile`): the trace is written
    to `<prefix>_<time>.json` by `model.engine.session.end_profiling()`.
    """
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path must be a package folder (str or os.PathLike) or None, got {type(path).__name__}")
    folder = resolve_model(path) if path is not None else default_package_dir()  # a path or a stored name
    if not folder.is_dir():
        raise ModelFormatError(f"{folder}: not a folder (expected a model package with unmask.json)")
    manifest = read_manifest(folder)
    placement = select_device(manifest, device, check_threads(threads), spinning)  # refuses a model too big before reading it
    package, graph = read_package(folder, manifest)
    options = placement.session_options()
    if profile_prefix is not None:
        options.enable_profiling, options.profile_file_prefix = True, str(profile_prefix)
    try:  # the bytes that were hashed, not the paths: nothing can be swapped in between
        session = placement.create_session(graph.model, sess_options=options, external_data=graph.external)
    except Exception as exc:  # ORT raises its own types (Fail, InvalidGraph, ...)
        raise ModelFormatError(f"{package.graph_path}: ONNX Runtime cannot load it: {exc}") from exc
    return Model(package, session, threads=placement.threads, device=placement.device, placement=placement)


def default_package_dir() -> Path:
    # Beside this module, not importlib.resources: in an editable install (README, Development)
    # resources.files("unmask") spans the sources and site-packages and is no single folder.
    folder = Path(__file__).parent.joinpath(*DEFAULT_MODEL)
    if not folder.joinpath("unmask.json").is_file():
        raise ModelFormatError(
            "this unmask install has no embedded default model; export one with "
            "`unmask export HF_CHECKPOINT_DIR OUT_DIR` and load it with unmask.load(OUT_DIR)"
        )
    return Path(str(folder))


def select_device(manifest: Manifest, device: str, threads: int | None, spinning: bool | None = None):
    """unmask.devices' Placement for this package: provider, session options, threads."""
    from .devices import select

    return select(manifest, device, threads=threads, spinning=spinning)  # DeviceError / ConfigError


# ---------------------------------------------------------------------- the model


class Model:
    """A loaded package: tokenizer, chat template, engine. Use generate/stream/chat."""

    def __init__(self, package: Package, session: ort.InferenceSession, *, threads: int, device: str = "cpu",
                 placement: Any = None):
        self.package = package
        self.placement = placement  # unmask.devices.Placement (explanation, providers), when loaded by load()
        self.manifest: Manifest = package.manifest
        self.threads = threads
        self.device = device
        self.tokenizer = Tokenizer.from_json(package.tokenizer_json, package.tokenizer_path)  # the hashed text
        m = self.manifest
        self.chat_template = (
            ChatTemplate(m.chat_template, bos_token=m.bos_token, eos_token=m.eos_token) if m.chat_template else None
        )
        self.engine = Engine(session, m, source=package.graph_path)
        self.facts: ModelFacts = m.model_facts()
        self.cache_reuse = m.cache_reuse and self.engine.layout.cache_inputs
        self._stop_ids = {i for i in (m.special_ids.eos_id, m.special_ids.eot_id) if i is not None}

    def __repr__(self) -> str:
        m = self.manifest
        return f"<unmask.Model {m.architecture} {m.precision} from {self.package.folder}>"

    @property
    def default_config(self) -> GenerationConfig:
        """GenerationConfig() <- the package's generation defaults (nothing resolved yet)."""
        return self.manifest.generation_config()

    # ------------------------------------------------------------------ settings and prompt
    def resolve_config(self, config: GenerationConfig | None = None, **overrides: Any) -> GenerationConfig:
        """The finished settings of a generation: validated against this model, cache mode decided.

        Without `config`: GenerationConfig() <- package defaults <- overrides; a `factor` given
        replaces the package's default `threshold` and the other way round (one parallel-decoding
        rule at a time). With `config`: it is taken as complete (package defaults are not
        applied), then overrides. The result passed back as `generate(config=...)` runs exactly
        as it is.
        """
        if config is None:
            cfg = self.default_config
            for rule, other in (("threshold", "factor"), ("factor", "threshold")):
                if overrides.get(rule) is not None and other not in overrides and getattr(cfg, other) is not None:
                    cfg = cfg.replace(**{other: None})  # the caller's parallel-decoding rule replaces the package's
        elif isinstance(config, GenerationConfig):
            cfg = config
        else:
            raise ConfigError(f"config must be a GenerationConfig, got {type(config).__name__}")
        cfg = (cfg.replace(**overrides) if overrides else cfg).for_model(self.facts)
        if cfg.cache is None:
            cfg = cfg.replace(cache=auto_cache(self.cache_reuse, self.facts.block_size))
        cfg.validate(self.facts)
        context = self.manifest.dims.max_sequence_length
        if cfg.gen_length >= context:  # refused when set (chat's /set), not at the first generation
            raise ConfigError(f"gen_length {cfg.gen_length} leaves no room for a prompt in the model's context of "
                              f"{context} tokens; use a gen_length below {context}")
        if cfg.cache != "none" and not self.cache_reuse:
            raise ConfigError(
                f"cache {cfg.cache!r} needs a package exported with key/value reuse; this one has none "
                "(use cache='none')"
            )
        return cfg

    def encode_prompt(self, prompt: str | None = None, *, messages: Sequence[Mapping[str, str]] | None = None,
                      prompt_ids: Any = None) -> np.ndarray:
        """Prompt ids (int64) from exactly one of: text, a conversation, or ids."""
        given = [name for name, value in (("prompt", prompt), ("messages", messages), ("prompt_ids", prompt_ids))
                 if value is not None]
        if len(given) != 1:
            raise ConfigError(f"give exactly one of prompt, messages, prompt_ids (got {', '.join(given) or 'none'})")
        if prompt_ids is not None:
            ids = self._check_ids(prompt_ids)
        elif messages is not None:
            if self.chat_template is None:
                raise ConfigError("this package has no chat template; pass a plain prompt or prompt_ids")
            ids = self.chat_template.encode(check_messages(messages), self.tokenizer, add_generation_prompt=True)
        else:
            if not isinstance(prompt, str):
                raise ConfigError(f"prompt must be a string, got {type(prompt).__name__}")
            if not prompt.strip():
                raise ConfigError("the prompt is empty")
            if self.chat_template is not None:
                ids = self.chat_template.encode([{"role": "user", "content": prompt}], self.tokenizer)
            else:
                ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            raise ConfigError("the prompt is empty")
        return ids

    def _check_ids(self, prompt_ids: Any) -> np.ndarray:
        ids = np.asarray(prompt_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ConfigError(f"prompt_ids must be a 1-D sequence of integers, got shape {ids.shape} {ids.dtype}")
        ids = ids.astype(np.int64)
        vocab = self.manifest.dims.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= vocab):
            raise ConfigError(f"prompt_ids must lie in [0, {vocab}) (the model's vocabulary)")
        return ids

    def _check_length(self, prompt_ids: np.ndarray, cfg: GenerationConfig) -> None:
        limit = self.manifest.dims.max_sequence_length
        total = cfg.canvas_length(len(prompt_ids))
        if total > limit:
            raise ConfigError(
                f"prompt of {len(prompt_ids)} tokens + gen_length {cfg.gen_length} = {total} tokens"
                f"{' (up to the end of a block)' if total > len(prompt_ids) + cfg.gen_length else ''} exceeds "
                f"the model's maximum sequence length {limit}"
            )

    # ------------------------------------------------------------------ generation
    def generate(self, prompt: str | None = None, *, messages=None, prompt_ids=None,
                 config: GenerationConfig | None = None, **overrides: Any) -> Result:
        """Generate an answer; see `stream` for the arguments."""
        result = None
        for event in self.stream(prompt, messages=messages, prompt_ids=prompt_ids, config=config, **overrides):
            result = event.result
        assert result is not None
        return result

    def stream(self, prompt: str | None = None, *, messages=None, prompt_ids=None,
               config: GenerationConfig | None = None, **overrides: Any) -> Iterator[StreamEvent]:
        """Yield a StreamEvent per forward pass; the last one (done=True) carries the Result.

        Exactly one of `prompt` (text; wrapped as one user turn with the chat template when
        the package has one), `messages` ([{role, content}], rendered with the template) or
        `prompt_ids` (used as is). `config` and keyword overrides (GenerationConfig field
        names) go on top of the package defaults; a finished `config` (from resolve_config)
        runs as it is. Everything is checked before this returns, so errors surface at the
        call, not at the first next().
        """
        cfg = self.resolve_config(config, **overrides)
        ids = self.encode_prompt(prompt, messages=messages, prompt_ids=prompt_ids)
        self._check_length(ids, cfg)
        from .decoding import make_decoder  # the C++ core loads on first generation

        decoder = make_decoder(cfg, self.facts, ids, threads=self.threads)
        return self._run(decoder, cfg, ids)

    def _run(self, decoder, cfg: GenerationConfig, prompt_ids: np.ndarray) -> Iterator[StreamEvent]:
        """Run what the decoder asks for; every window, past and block end comes from it."""
        started = time.perf_counter()
        gen_start = decoder.prompt_length
        stats = GenerationStats(cache=cfg.cache)
        run = self.engine.begin(batch=decoder.batch, length=decoder.length, cache=cfg.cache,
                                max_window=decoder.max_window, max_rows=cfg.gen_length)
        shown = ""
        step = 0
        while not decoder.done:
            t0 = time.perf_counter()
            request = decoder.next_request()
            logits, forward_seconds = run.forward(request, decoder.input_ids())
            event = decoder.advance(logits)
            committed = len(event.positions) - int(event.filled)  # early-stop fill excluded
            stats.record_step(request.kind.name.lower(), int(request.window_end) - int(request.window_start),
                              int(request.past_length), logits.shape[1], forward_seconds,
                              time.perf_counter() - t0 - forward_seconds, committed)
            text = ""
            if event.block_done or event.done:
                if stats.first_block_seconds is None:
                    stats.first_block_seconds = time.perf_counter() - started
                visible = self._text(decoder.ids[gen_start:int(event.final_end)])
                text, shown = visible[len(shown):], visible
            result = None
            if event.done:
                result = self._result(decoder, cfg, prompt_ids, stats, started)
            yield StreamEvent(step, int(event.block), np.asarray(event.positions, dtype=np.int64),
                              np.asarray(event.tokens, dtype=np.int64), bool(event.block_done),
                              result is not None, text, result, gen_start=gen_start)
            step += 1

    def _result(self, decoder, cfg, prompt_ids, stats: GenerationStats, started: float) -> Result:
        generated = np.asarray(decoder.ids[decoder.prompt_length:], dtype=np.int64)
        stats.total_seconds = time.perf_counter() - started
        stats.peak_rss_bytes = peak_rss_bytes()
        return Result(self._text(generated), generated, prompt_ids, stats, cfg)

    def _text(self, generated: np.ndarray) -> str:
        """Decode up to the first EOS/EoT."""
        stops = np.flatnonzero(np.isin(generated, list(self._stop_ids))) if self._stop_ids else []
        end = int(stops[0]) if len(stops) else len(generated)
        return self.tokenizer.decode(generated[:end])

    # ------------------------------------------------------------------ chat
    def chat(self, system: str | None = None, config: GenerationConfig | None = None,
             **overrides: Any) -> "ChatSession":
        """A conversation that keeps its history across turns (settings as in resolve_config)."""
        return ChatSession(self, system=system, config=config, **overrides)


# ---------------------------------------------------------------------- chat sessions


class ChatSession:
    """Multi-turn chat: history of {role, content}, an optional system prompt, the session's settings."""

    def __init__(self, model: Model, system: str | None = None, config: GenerationConfig | None = None,
                 **overrides: Any):
        if model.chat_template is None:
            raise ConfigError("this package has no chat template, so it cannot chat; use generate()")
        self.model, self.system, self.history = model, system, []
        self.config = model.resolve_config(config, **overrides)  # bad settings fail now, not at the first turn

    def messages(self, text: str) -> list[dict[str, str]]:
        """The conversation the model would see if `text` were sent now."""
        if not isinstance(text, str) or not text.strip():
            raise ConfigError("the message is empty")
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + [dict(m) for m in self.history] + [{"role": "user", "content": text}]

    def send(self, text: str, config: GenerationConfig | None = None, **overrides: Any) -> Result:
        result = None
        for event in self.stream(text, config, **overrides):
            result = event.result
        assert result is not None
        return result

    def stream(self, text: str, config: GenerationConfig | None = None, **overrides: Any) -> Iterator[StreamEvent]:
        """Stream one turn with the session's settings (or `config`), overrides on top; the turn
        enters the history only once it finished."""
        events = self.model.stream(messages=self.messages(text), config=config or self.config, **overrides)
        return self._record(text, events)

    def _record(self, text: str, events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
        for event in events:
            if event.result is not None:
                self.history += [{"role": "user", "content": text},
                                 {"role": "assistant", "content": event.result.text}]
            yield event

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays)."""
        self.history = []
