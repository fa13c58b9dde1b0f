"""The Ollama dialect: /api/chat, /api/generate, /api/tags.

Ollama streams by default: newline-delimited JSON, one object per step that extends the
committed prefix (`message.content` or `response` holds the new text), the last with
`done: true`, `done_reason`, the token counts and durations (nanoseconds) and unmask's
own stats (`unmask`). Sampling options go in `options` (num_predict, temperature, top_p,
top_k, seed, stop, and every GenerationConfig setting by name). `format` is "json" or a
JSON schema (as response_format json_object / json_schema in the OpenAI dialect).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .answer import Outcome
from .errors import FieldError, from_exception, ollama_body
from .fields import Fields, GenerationRequest, stop_list, take_conversation


def routes(server) -> list[Route]:
    from .app import endpoint

    return [Route("/api/chat", endpoint(server, chat, ollama_body), methods=["POST"]),
            Route("/api/generate", endpoint(server, generate, ollama_body), methods=["POST"]),
            Route("/api/tags", endpoint(server, tags, ollama_body), methods=["GET"])]


# Ollama options that choose how a model is loaded: the server decided those at start.
_LOAD_OPTIONS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap", "numa", "num_keep")
# Ollama samplers unmask does not have: accepted only at the value that turns them off.
_NEUTRAL_OPTIONS = {"repeat_penalty": (1, None), "presence_penalty": (0, None), "frequency_penalty": (0, None),
                    "min_p": (0, None), "typical_p": (1, None), "repeat_last_n": (0, 64, None),
                    "penalize_newline": (False, True, None)}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------- reading requests


def _common(server, body: Fields) -> dict[str, Any]:
    server.check_model(body.take("model", str))
    body.ignore("keep_alive")
    body.neutral("think", (False, None))
    response, schema = _format(body.take("format", object))
    options = Fields(body.take("options", dict) or {}, "options")
    options.ignore(*_LOAD_OPTIONS)
    for name, neutral in _NEUTRAL_OPTIONS.items():
        options.neutral(name, neutral)
    predict = options.take("num_predict", int)
    if predict is not None and predict < 1 and predict not in (-1, -2):
        raise FieldError("options.num_predict", "must be >= 1, or -1 for the package's length")
    stops = stop_list(options.take("stop", object), "options.stop")
    overrides = options.settings()
    options.finish()
    return {"stream": body.take("stream", bool, True), "canvas": body.take("stream_canvas", bool, False),
            "max_tokens": predict if predict is not None and predict > 0 else None, "stops": stops,
            "response": response, "schema": schema, "overrides": overrides}


def _format(value: Any) -> tuple[str, dict | None]:
    if value in (None, ""):
        return "text", None
    if value == "json":
        return "json_object", None
    if isinstance(value, dict):
        return "json_schema", value
    raise FieldError("format", 'expected "json" or a JSON schema object')


async def _chat_request(server, request: Request) -> GenerationRequest:
    body = Fields(await server.read_json(request))
    common = _common(server, body)
    messages, tools = take_conversation(body)
    body.finish()
    return GenerationRequest(messages=messages, tools=tools, **common)


async def _generate_request(server, request: Request) -> GenerationRequest:
    body = Fields(await server.read_json(request))
    common = _common(server, body)
    prompt = body.require("prompt", str)
    if not prompt.strip():
        raise FieldError("prompt", "is empty")
    system = body.take("system", str)
    raw = body.take("raw", bool, False)
    for name in ("images", "context", "template", "suffix"):
        body.neutral(name, (None, [], ""))
    body.finish()
    if system is not None and not raw:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        return GenerationRequest(messages=messages, **common)
    return GenerationRequest(prompt=prompt, raw=raw, **common)


# ---------------------------------------------------------------------- routes


async def tags(server, request: Request) -> Response:
    f = server.facts
    stamp = datetime.fromtimestamp(server.created, timezone.utc).isoformat().replace("+00:00", "Z")
    return JSONResponse({"models": [{
        "name": f.name, "model": f.name, "modified_at": stamp, "size": f.size_bytes, "digest": "",
        "details": {"format": "onnx", "family": f.architecture, "families": [f.architecture],
                    "parameter_size": "", "quantization_level": f.precision}}]})


async def chat(server, request: Request) -> Response:
    return await _answer(server, request, await _chat_request(server, request), field="message")


async def generate(server, request: Request) -> Response:
    return await _answer(server, request, await _generate_request(server, request), field="response")


def _content(field: str, text: str, outcome: Outcome | None = None) -> dict[str, Any]:
    if field == "response":
        return {"response": text}
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if outcome is not None and outcome.tool_calls:
        message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in outcome.tool_calls]
    return {"message": message}


def _final(outcome: Outcome) -> dict[str, Any]:
    nanos = int(outcome.seconds * 1e9)
    return {"done": True, "done_reason": "stop" if outcome.finish_reason == "tool_calls" else outcome.finish_reason,
            "total_duration": nanos, "load_duration": 0, "prompt_eval_count": outcome.prompt_tokens,
            "prompt_eval_duration": 0, "eval_count": outcome.completion_tokens, "eval_duration": nanos,
            "unmask": outcome.stats()}


async def _answer(server, request: Request, asked: GenerationRequest, *, field: str) -> Response:
    job = await server.start(asked)
    name = server.facts.name
    if asked.stream:
        return StreamingResponse(_stream(server, job, name, field), media_type="application/x-ndjson")
    outcome = await server.outcome(job, request)
    if outcome is None:
        return Response(status_code=499)
    return JSONResponse({"model": name, "created_at": _now(), **_content(field, outcome.text or "", outcome),
                         **_final(outcome)})


def _line(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False) + "\n"


async def _stream(server, job, name: str, field: str) -> AsyncIterator[str]:
    try:
        async for kind, payload in server.events(job):
            if kind == "delta":
                yield _line({"model": name, "created_at": _now(), **_content(field, payload), "done": False})
            elif kind == "canvas":
                yield _line({"model": name, "created_at": _now(), "unmask_canvas": payload, "done": False})
            elif kind == "done":
                yield _line({"model": name, "created_at": _now(), **_content(field, "", payload), **_final(payload)})
    except Exception as exc:  # mid-stream: the status line is gone, so the error is the last line
        yield _line(ollama_body(from_exception(exc)))
