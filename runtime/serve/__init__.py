"""`unmask serve`: a local OpenAI- and Ollama-compatible HTTP endpoint that really streams.

    from unmask.serve import ServeOptions, create_app, serve
    serve(unmask.load(), ServeOptions(port=8080))        # blocks; or mount create_app(...) yourself

Installed with the `serve` extra (`pip install "unmask[serve]"`); nothing else in unmask
imports this package, so the plain install stays small. Module map: `options` (server
settings), `adapter` (the only calls into the runtime), `fields` (request bodies ->
`Job`), `prefix` (the committed left-to-right prefix as text), `structured` (JSON schema
-> fixed-token template), `tools` (tool calls), `answer` (one generation's outgoing
events), `worker` (the FIFO queue), `openai_api` / `ollama_api` (the two dialects),
`app` (routes, auth, limits, health, metrics).
"""

try:
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # the extra is missing: say how to get it, in one line
    raise ImportError('unmask serve needs its extra: pip install "unmask[serve]"') from exc

from .app import create_app, serve
from .options import ServeOptions

__all__ = ["ServeOptions", "create_app", "serve"]
