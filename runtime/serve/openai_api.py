"""The OpenAI dialect: /v1/chat/completions, /v1/completions, /v1/models.

Streaming is server-sent events: one `chat.completion.chunk` per step that extends
the committed prefix, the last one with finish_reason, usage and unmask's own stats
(`unmask`), then `data: [DONE]`. `stream_canvas: true` adds an `unmask.canvas` event per
step with the whole canvas (null where still masked) for visualisers; leave it off for
ordinary clients.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .answer import Outcome
from .errors import FieldError, from_exception, openai_body
from .fields import Fields, GenerationRequest, positive, stop_list, take_conversation
from .tools import ToolCall


def routes(server) -> list[Route]:
    from .app import endpoint

    return [Route("/v1/chat/completions", endpoint(server, chat, openai_body), methods=["POST"]),
            Route("/v1/completions", endpoint(server, completions, openai_body), methods=["POST"]),
            Route("/v1/models", endpoint(server, models, openai_body), methods=["GET"])]


# ---------------------------------------------------------------------- reading requests


def _common(server, body: Fields) -> dict[str, Any]:
    """The fields both completion routes share."""
    server.check_model(body.take("model", str))
    body.ignore("user", "store", "metadata", "parallel_tool_calls", "service_tier")
    for name in ("frequency_penalty", "presence_penalty"):
        body.neutral(name, (0, None))
    body.neutral("n", (1, None))
    body.neutral("logprobs", (False, None))
    body.neutral("logit_bias", (None, {}))
    max_tokens = body.take("max_completion_tokens", int)
    max_tokens = positive("max_tokens", body.take("max_tokens", int, max_tokens))
    stream = body.take("stream", bool, False)
    options = body.take("stream_options", dict) or {}
    if set(options) - {"include_usage"}:
        raise FieldError("stream_options", "only include_usage is known (usage is always in the last chunk)")
    return {"max_tokens": max_tokens, "stops": stop_list(body.take("stop", object)), "stream": stream,
            "canvas": body.take("stream_canvas", bool, False)}


def _response_format(value: Any) -> tuple[str, dict | None]:
    if value is None:
        return "text", None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text" or kind == "json_object":
        return kind, None
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise FieldError("response_format", "json_schema needs {'name': ..., 'schema': {...}}")
        return kind, spec["schema"]
    raise FieldError("response_format", "type must be text, json_object or json_schema")


async def _chat_request(server, request: Request) -> GenerationRequest:
    body = Fields(await server.read_json(request))
    common = _common(server, body)
    messages, tools = take_conversation(body)
    choice = body.take("tool_choice", object)
    response, schema = _response_format(body.take("response_format", object))
    overrides = body.settings()
    body.finish()
    return GenerationRequest(messages=messages, overrides=overrides, tools=tools, tool_choice=choice,
                             response=response, schema=schema, **common)


async def _completion_request(server, request: Request) -> GenerationRequest:
    body = Fields(await server.read_json(request))
    common = _common(server, body)
    prompt = body.require("prompt", object)
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise FieldError("prompt", "expected one non-empty string")
    body.neutral("echo", (False, None))
    body.neutral("best_of", (1, None))
    body.neutral("suffix", (None, ""))
    raw = body.take("raw", bool, False)
    overrides = body.settings()
    body.finish()
    return GenerationRequest(prompt=prompt, raw=raw, overrides=overrides, **common)


# ---------------------------------------------------------------------- routes


async def models(server, request: Request) -> Response:
    f = server.facts
    return JSONResponse({"object": "list", "data": [
        {"id": f.name, "object": "model", "created": server.created, "owned_by": "unmask",
         "context_length": f.context_length, "architecture": f.architecture, "precision": f.precision}]})


async def chat(server, request: Request) -> Response:
    return await _complete(server, request, await _chat_request(server, request), chat=True)


async def completions(server, request: Request) -> Response:
    return await _complete(server, request, await _completion_request(server, request), chat=False)


async def _complete(server, request: Request, asked: GenerationRequest, *, chat: bool) -> Response:
    job = await server.start(asked)
    ident = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
    head = {"id": ident, "created": int(time.time()), "model": server.facts.name}
    if asked.stream:
        return StreamingResponse(_stream(server, job, head, chat), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    outcome = await server.outcome(job, request)
    if outcome is None:  # the client left; nobody reads this
        return Response(status_code=499)
    choice = {"index": 0, "finish_reason": outcome.finish_reason, "logprobs": None}
    if chat:
        choice["message"] = _message(outcome)
    else:
        choice["text"] = outcome.text or ""
    return JSONResponse({**head, "object": "chat.completion" if chat else "text_completion",
                         "choices": [choice], "usage": _usage(outcome), "unmask": outcome.stats()})


def _message(outcome: Outcome) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": outcome.text}
    if outcome.tool_calls:
        message["tool_calls"] = [_tool_call(call) for call in outcome.tool_calls]
    return message


def _tool_call(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out = {"id": call.id, "type": "function",
           "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)}}
    return out if index is None else {"index": index, **out}


def _usage(outcome: Outcome) -> dict[str, int]:
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens}


def _sse(payload: dict, event: str | None = None) -> str:
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def _stream(server, job, head: dict, chat: bool) -> AsyncIterator[str]:
    kind_name = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta: dict | None = None, text: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "finish_reason": extra.pop("finish_reason", None), "logprobs": None}
        if chat:
            choice["delta"] = delta or {}
        else:
            choice["text"] = text or ""
        return _sse({**head, "object": kind_name, "choices": [choice], **extra})

    if chat:
        yield chunk({"role": "assistant", "content": ""})
    try:
        async for kind, payload in server.events(job):
            if kind == "delta":
                yield chunk({"content": payload}, payload)
            elif kind == "canvas":
                yield _sse(payload, event="unmask.canvas")
            elif kind == "done":
                if payload.tool_calls and chat:
                    yield chunk({"tool_calls": [_tool_call(c, i) for i, c in enumerate(payload.tool_calls)]})
                yield chunk(finish_reason=payload.finish_reason, usage=_usage(payload), unmask=payload.stats())
    except Exception as exc:  # a failure mid-stream: the status line is gone, so send the error object
        yield _sse(openai_body(from_exception(exc)))
    yield "data: [DONE]\n\n"
