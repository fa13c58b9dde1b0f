"""One generation from request to outcome: plan it (everything checked), run it step by step.

`plan` runs in the request's handler, so every 4xx is known before the request queues.
`generate` runs on the worker thread: after each denoising step it reads the new
committed prefix and emits ("delta", text), ("canvas", {...}) when asked, and at the end
("done", Outcome). The answer text is held back only where it could still become
something else: a possible tool call (tools given) or a json_object answer, which is
checked as a whole.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from . import adapter
from .errors import ApiError
from .fields import GenerationRequest
from .prefix import CommittedPrefix, TemplatePrefix
from .structured import Layout, Vocabulary
from .tools import ToolCall, call_frame, could_be_call, forced_tool, read_call, system_prompt


@dataclass
class Plan:
    request: GenerationRequest
    prompt_ids: np.ndarray
    config: Any  # the resolved GenerationConfig
    layout: Layout | None = None  # a fixed-token template (json_schema, a forced tool call)

    @property
    def template(self) -> np.ndarray | None:
        return None if self.layout is None else self.layout.template(self.config.gen_length)


@dataclass
class Outcome:
    text: str | None  # the answer's content; None when it is a tool call
    finish_reason: str  # stop | length | tool_calls | cancelled
    prompt_tokens: int
    completion_tokens: int
    forward_passes: int
    committed_tokens: int
    seconds: float  # from the first step's start to the end
    first_delta_seconds: float | None  # from the request's arrival to its first text
    tool_calls: list[ToolCall] = field(default_factory=list)

    def stats(self) -> dict[str, Any]:
        """unmask's own figures, sent beside the dialect's usage."""
        per_forward = self.committed_tokens / self.forward_passes if self.forward_passes else 0.0
        return {"forward_passes": self.forward_passes, "committed_tokens": self.committed_tokens,
                "tokens_per_forward": round(per_forward, 3),
                "seconds": round(self.seconds, 6),
                "time_to_first_delta": None if self.first_delta_seconds is None else round(self.first_delta_seconds, 6)}


def plan(model: Any, facts: adapter.ServedModel, vocabulary: Callable[[], Vocabulary], request: GenerationRequest,
         tool_prompt: bool) -> Plan:
    """Check everything a request asks for and resolve its settings; ApiError/ConfigError otherwise."""
    forced = forced_tool(request.tools, request.tool_choice) if request.tools else None
    if request.tool_choice not in (None, "auto", "none") and not request.tools:
        raise ApiError(400, "tool_choice needs tools", param="tool_choice")
    if forced is not None and request.response != "text":
        raise ApiError(400, "a forced tool call and response_format cannot be combined", param="response_format")
    messages = request.messages
    if request.tools and tool_prompt and request.tool_choice != "none" and messages is not None:
        messages = with_system(messages, system_prompt(request.tools))
    source = {"messages": messages} if messages is not None else {"prompt": request.prompt, "raw": request.raw}
    layout, overrides, length = None, dict(request.overrides), request.max_tokens
    if request.response == "json_schema" or forced is not None:
        schema, frame = call_frame(forced) if forced is not None else (request.schema, ("", ""))
        layout = Layout(vocabulary(), facts.encode, facts.mask_id, schema, frame)
        overrides.pop("gen_length", None)  # the layout decides the length (whole blocks, end-of-text after it)
        length = layout.length
    prompt_ids, config = adapter.prepare(model, overrides, max_tokens=length, **source)
    return Plan(request, prompt_ids, config, layout)


class Answer:
    """The outgoing side of one generation: prefix text, held-back text, canvas events."""

    def __init__(self, facts: adapter.ServedModel, plan_: Plan, emit: Callable[[str, Any], None], arrived: float):
        self.facts, self.plan, self.emit, self.arrived = facts, plan_, emit, arrived
        request, config = plan_.request, plan_.config
        if plan_.layout is not None:
            self.prefix: CommittedPrefix = TemplatePrefix(facts.decode, plan_.layout, plan_.template, facts.mask_id)
        else:
            limit = request.max_tokens
            self.prefix = CommittedPrefix(facts.decode, length=config.gen_length, stop_ids=facts.stop_ids,
                                          stops=request.stops, limit=limit)
        forced = plan_.layout is not None and request.response == "text"
        self.tools = request.tools if request.tools and request.tool_choice != "none" else []
        self.hold_all = forced or request.response == "json_object"
        self.released = not self.tools  # tools given: text waits until it cannot be a call
        self.steps = self.committed = 0
        self.started = time.perf_counter()
        self.first_delta: float | None = None
        self._pieces: dict[int, str] = {}

    @property
    def done(self) -> bool:
        return self.prefix.done

    def step(self, step: adapter.Step) -> None:
        self.steps += 1
        self.committed += len(step.tokens)
        self.prefix.commit(step.positions, step.tokens)
        if self.plan.request.canvas:
            self.emit("canvas", self._canvas(step))
        # A non-streaming reply needs the text only once, at the end (and here until its first text, for the
        # time-to-first-delta metric): decoding the prefix at every step would be wasted work.
        if not self.prefix.done and (self.plan.request.stream or self.first_delta is None):
            self._send(self._releasable())

    def _releasable(self) -> bool:
        if self.hold_all:
            return False
        if not self.released and not could_be_call(self.prefix.stable_text()):
            self.released = True
        return self.released

    def _send(self, allowed: bool) -> None:
        if not allowed:
            return
        text = self.prefix.delta()
        if text:
            if self.first_delta is None:
                self.first_delta = time.perf_counter() - self.arrived
            if self.plan.request.stream:  # a non-streaming reply reads the text off the outcome
                self.emit("delta", text)

    def _canvas(self, step: adapter.Step) -> dict[str, Any]:
        pieces = [None if t < 0 else self._piece(int(t)) for t in self.prefix.canvas]
        return {"step": step.index, "block": step.block, "committed": int(self.prefix.frontier),
                "positions": [int(p) for p in step.positions], "tokens": pieces}

    def _piece(self, token: int) -> str:
        if token not in self._pieces:
            self._pieces[token] = self.facts.decode([token])
        return self._pieces[token]

    def finish(self, cancelled: bool) -> Outcome:
        """The answer as it stands; its last text is emitted as a delta (or becomes a tool call)."""
        prefix = self.prefix
        prefix.close()
        text, reason, calls = prefix.text, prefix.finish_reason, []
        call = read_call(text, self.tools) if self.tools and not self.released else None
        if call is not None:
            text, reason, calls = None, "tool_calls", [call]
        elif self.plan.request.response == "json_object" and not _is_object(text):
            text = json.dumps({"text": text}, ensure_ascii=False)  # the model wrote something else: wrap it
        if text is not None and not cancelled:
            if self.hold_all:
                prefix.sent = ""
                prefix.text = text
            self._send(True)
        if calls and self.first_delta is None:
            self.first_delta = time.perf_counter() - self.arrived
        return Outcome(text, "cancelled" if cancelled else reason, len(self.plan.prompt_ids),
                       int(len(prefix.answer_ids)), self.steps, self.committed,
                       time.perf_counter() - self.started, self.first_delta, calls)


def with_system(messages: list[dict], text: str) -> list[dict]:
    """`text` at the head of the conversation's system turn (one is added when there is none)."""
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": f"{text}\n\n{messages[0]['content']}"}] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def generate(model: Any, plan_: Plan, answer: Answer, cancelled: Callable[[], bool], step_delay: float) -> Outcome:
    """Run a planned generation to its end, its answer's end or its cancellation (worker thread)."""
    def on_step(step: adapter.Step) -> None:
        if cancelled():
            raise adapter.StopGeneration
        answer.step(step)
        if answer.done:
            raise adapter.StopGeneration  # the rest of the region cannot change the answer
        if step_delay:
            time.sleep(step_delay)

    layout = plan_.layout
    adapter.run_steps(model, plan_.prompt_ids, plan_.config, on_step, template=plan_.template,
                      mask_logits=None if layout is None else layout.mask_logits)
    return answer.finish(cancelled())
