"""The ASGI app: shared request handling, /health, /metrics, and running it with uvicorn.

Starlette (not FastAPI): both dialects need their own error objects and a strict
unknown-field check that `fields` already does, so FastAPI's pydantic layer would only
add a dependency and a 422 shape to override. Each dialect module (`openai_api`,
`ollama_api`) lists its routes; `Server` is what they share: the model, the queue,
limits, auth and the metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from functools import cached_property
from typing import Any, AsyncIterator, Awaitable, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .. import __version__
from . import adapter
from .answer import Answer, Outcome, generate, plan
from .errors import ApiError, from_exception, ollama_body, openai_body
from .fields import GenerationRequest
from .metrics import Metrics
from .options import ServeOptions
from .structured import Vocabulary
from .worker import Job, QueueFull, Worker

log = logging.getLogger("unmask.serve")
_POLL_SECONDS = 0.1  # how often a non-streaming request checks that its client is still there


class Server:
    """What every route shares: one model, its facts, the generation queue, limits and metrics."""

    def __init__(self, model: Any, options: ServeOptions):
        self.model, self.options = model, options.validate()
        self.facts = adapter.model_facts(model, options.model_name)
        self.worker = Worker(options.queue_limit)
        self.metrics = Metrics(lambda: self.worker.waiting, lambda: self.worker.running)
        self.tool_prompt = options.tool_prompt == "system" or (
            options.tool_prompt == "auto" and not self.facts.embedded)
        self.created = int(time.time())

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """Every token's text (built on the first JSON-schema request, then kept)."""
        f = self.facts
        return Vocabulary(f.decode, f.vocab_size, set(f.special_ids), filler=f.stop_ids[0])

    # ------------------------------------------------------------------ request side
    def authorize(self, request: Request) -> None:
        key = self.options.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        token = given[7:] if given[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(token.encode(), key.encode()):
            raise ApiError(401, "missing or wrong API key (send Authorization: Bearer KEY)", code="invalid_api_key")

    async def read_json(self, request: Request) -> Any:
        limit = self.options.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ApiError(413, f"request body of {declared} bytes is over the limit of {limit}")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise ApiError(413, f"request body is over the limit of {limit} bytes")
        except ClientDisconnect:
            raise ApiError(400, "the client closed the connection while sending the body") from None
        try:
            return json.loads(body, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"malformed JSON in the request body: {exc}") from None
        except RecursionError:
            raise ApiError(400, "malformed JSON in the request body: nested too deeply") from None

    def check_model(self, name: str | None) -> None:
        if name not in (None, "", self.facts.name):
            raise ApiError(404, f"model {name!r} is not served here; this server serves {self.facts.name!r}",
                           param="model", code="model_not_found")

    # ------------------------------------------------------------------ generation
    async def start(self, request: GenerationRequest) -> Job:
        """Plan (every 4xx surfaces here), then queue; 503 when the queue is full."""
        self.metrics.count("requests")
        if (request.response == "json_schema" or request.tool_choice not in (None, "auto", "none")) \
                and "vocabulary" not in self.__dict__:
            await run_in_threadpool(lambda: self.vocabulary)  # the first scan of a large vocabulary takes a while
        # Planning itself (settings, tokenizing) takes well under a millisecond: on the loop, no thread hop.
        planned = plan(self.model, self.facts, lambda: self.vocabulary, request, self.tool_prompt)

        def run(job: Job) -> None:
            if job.cancelled():  # the client left while the job waited
                self.metrics.count("cancelled")
                return
            answer = Answer(self.facts, planned, job.emit, job.arrived)
            outcome = generate(self.model, planned, answer, job.cancelled, self.options.step_delay_seconds)
            self.metrics.record(outcome)
            job.emit("done", outcome)

        job = Job(run)
        try:
            self.worker.submit(job)
        except QueueFull:
            self.metrics.count("rejected")
            seconds = self.options.retry_after_seconds
            raise ApiError(503, "the server is busy: its generation queue is full; retry later",
                           code="queue_full", headers={"Retry-After": str(seconds)}) from None
        return job

    async def events(self, job: Job, request: Request | None = None) -> AsyncIterator[tuple[str, Any]]:
        """The job's events until done; a failure becomes ApiError. With `request`, a client that
        disconnects cancels the job (streaming responses get cancelled by Starlette instead)."""
        finished = False
        try:
            while True:
                try:
                    kind, payload = await asyncio.wait_for(job.events.get(), _POLL_SECONDS)
                except asyncio.TimeoutError:
                    if request is not None and await request.is_disconnected():
                        return
                    continue
                if kind == "error":
                    self.metrics.count("failed")
                    finished = True
                    raise from_exception(payload)
                yield kind, payload
                if kind == "done":
                    finished = True
                    return
        finally:
            if not finished:
                job.cancel()

    async def outcome(self, job: Job, request: Request) -> Outcome | None:
        """Wait for a non-streaming job; None when its client left."""
        async for kind, payload in self.events(job, request):
            if kind == "done":
                return payload
        return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


Handler = Callable[[Server, Request], Awaitable[Response]]


def endpoint(server: Server, handler: Handler, error_body: Callable[[ApiError], dict], *,
             auth: bool = True) -> Callable[[Request], Awaitable[Response]]:
    """A route: auth first, then the handler; any exception becomes the dialect's error object."""
    async def route(request: Request) -> Response:
        try:
            if auth:
                server.authorize(request)
            return await handler(server, request)
        except Exception as exc:
            err = from_exception(exc)
            if err.status >= 500 and not isinstance(exc, ApiError):  # generation failures are logged by the worker
                log.exception("request failed")
            return JSONResponse(error_body(err), status_code=err.status, headers=err.headers)

    return route


def create_app(model: Any, options: ServeOptions | None = None) -> Starlette:
    """The app for one loaded model; its worker thread runs while the app's lifespan does."""
    from . import ollama_api, openai_api

    server = Server(model, options or ServeOptions())

    async def health(_: Server, request: Request) -> Response:
        return JSONResponse({"status": "ok", "model": server.facts.name, "queue_depth": server.worker.waiting,
                             "running": server.worker.running})

    async def metrics(_: Server, request: Request) -> Response:
        return PlainTextResponse(server.metrics.render(), media_type="text/plain; version=0.0.4")

    async def banner(_: Server, request: Request) -> Response:  # what Ollama clients probe for
        return PlainTextResponse("unmask serve is running")

    async def version(_: Server, request: Request) -> Response:
        return JSONResponse({"version": __version__})

    routes = [Route("/health", endpoint(server, health, openai_body, auth=False)),
              Route("/metrics", endpoint(server, metrics, openai_body)),
              Route("/", endpoint(server, banner, ollama_body)),
              Route("/api/version", endpoint(server, version, ollama_body))]
    routes += openai_api.routes(server) + ollama_api.routes(server)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        body = ollama_body if request.url.path.startswith("/api/") else openai_body
        err = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")
        return JSONResponse(body(err), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    def lifespan(app: Starlette):
        return _Lifespan(server)

    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found}, lifespan=lifespan)
    app.state.server = server
    return app


class _Lifespan:
    """Start the worker with the app, stop it (after the running generation) at shutdown."""

    def __init__(self, server: Server):
        self.server = server

    async def __aenter__(self) -> None:
        self.server.worker.start()

    async def __aexit__(self, *exc: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.server.worker.stop)


def warn_if_exposed(options: ServeOptions) -> str | None:
    """The warning to print when the server is reachable from other machines."""
    if options.loopback:
        return None
    guard = "every route but /health needs the API key" if options.api_key else \
        "anyone who can reach it can use the model: set --api-key"
    return f"serving on {options.host}:{options.port}, outside loopback; {guard}"


def make_server(model: Any, options: ServeOptions) -> uvicorn.Server:
    """A uvicorn server for the app (not started); `serve` runs it, tests run it on a thread."""
    app = create_app(model, options)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning", ws="none",
                            timeout_graceful_shutdown=5, lifespan="on")  # no websocket routes: load no ws library
    return uvicorn.Server(config)


def serve(model: Any, options: ServeOptions, *, warn: bool = True) -> None:
    """Run until interrupted (blocks); `warn`: log a warning when bound outside loopback."""
    warning = warn_if_exposed(options) if warn else None
    if warning:
        log.warning(warning)
    make_server(model, options).run()
