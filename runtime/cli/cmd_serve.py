"""`unmask serve [MODEL]`: a local OpenAI- and Ollama-compatible endpoint (needs the serve extra)."""

from __future__ import annotations

from pathlib import Path

import click

from .options import echo_err, open_model

EXAMPLES = """\b
Examples:
  unmask serve                                  # the embedded model on http://127.0.0.1:8080
  unmask serve ./llada-int4 --port 11434        # where Ollama clients look
  unmask serve --host 0.0.0.0 --api-key "$KEY"  # reachable from the network: set a key
\b
  curl http://127.0.0.1:8080/v1/chat/completions -d '{"messages": [{"role": "user", "content": "What is 12 + 30?"}]}'
"""


@click.command("serve", epilog=EXAMPLES)
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback is reachable from other machines (a warning is printed).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="Port to bind.")
@click.option("--api-key", envvar="UNMASK_API_KEY", default=None,
              help="Require `Authorization: Bearer KEY` on every route but /health [env: UNMASK_API_KEY].")
@click.option("--name", default=None, help="Model id shown to clients [default: the package folder's name].")
@click.option("--queue", "queue_limit", type=click.IntRange(min=0), default=8, show_default=True,
              help="Requests that may wait behind the running one; one more gets 503 with Retry-After.")
@click.option("--max-body", "max_body_bytes", type=click.IntRange(min=1024), default=1 << 20, show_default=True,
              help="Largest request body in bytes (413 above).")
@click.option("--tool-prompt", type=click.Choice(["auto", "system", "none"]), default="auto", show_default=True,
              help="How `tools` reach the model: a system turn listing them, not at all, or auto "
                   "(none for the embedded model, system otherwise).")
@click.option("--device", default="auto", show_default=True, help="Execution provider (see `unmask devices`).")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="CPU threads [default: the device profile's].")
def command(model, host, port, api_key, name, queue_limit, max_body_bytes, tool_prompt, device, threads):
    """Serve MODEL over HTTP in the OpenAI and Ollama dialects, streaming each step's committed text.

    Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, POST /api/chat,
    POST /api/generate, GET /api/tags, GET /health, GET /metrics. Every generation setting is
    accepted in a request body under its own name (OpenAI) or in `options` (Ollama).
    """
    try:
        from ..serve import ServeOptions, serve
        from ..serve.app import warn_if_exposed
    except ImportError as exc:
        raise click.ClickException(str(exc)) from None
    options = ServeOptions(host=host, port=port, api_key=api_key, model_name=name, queue_limit=queue_limit,
                           max_body_bytes=max_body_bytes, tool_prompt=tool_prompt).validate()
    loaded = open_model(model, device, threads)
    warning = warn_if_exposed(options)
    if warning:
        echo_err(f"warning: {warning}")
    echo_err(f"serving {options.model_name or loaded.package.folder.name} on http://{host}:{port} "
             f"(OpenAI: /v1, Ollama: /api; Ctrl+C stops)")
    serve(loaded, options, warn=False)
