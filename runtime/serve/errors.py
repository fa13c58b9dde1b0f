"""Errors as each dialect writes them: OpenAI's error object, Ollama's {"error": text}.

Every failure a client can cause becomes an ApiError with a 4xx status before any
generation starts; a failure inside a generation becomes a 500 (or, mid-stream, an
error event) and never reaches the server loop.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, UnmaskError

_OPENAI_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                 413: "invalid_request_error", 415: "invalid_request_error", 503: "overloaded_error",
                 500: "server_error"}


class ApiError(Exception):
    """A request the server answers with an error status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}


def from_exception(exc: BaseException) -> ApiError:
    """An exception raised while reading a request or setting up its generation, as an ApiError."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ConfigError):
        code = "context_length_exceeded" if type(exc).__name__ == "ContextLengthError" else None
        return ApiError(400, str(exc), param=getattr(exc, "param", None), code=code)
    if isinstance(exc, UnmaskError):
        return ApiError(500, str(exc), code="model_error")
    return ApiError(500, f"internal error ({type(exc).__name__}); the server log has the details",
                    code="internal_error")


def openai_body(err: ApiError) -> dict[str, Any]:
    return {"error": {"message": err.message, "type": _OPENAI_TYPES.get(err.status, "invalid_request_error"),
                      "param": err.param, "code": err.code}}


def ollama_body(err: ApiError) -> dict[str, Any]:
    return {"error": err.message}


class FieldError(ConfigError):
    """A request field with a wrong type or value; `param` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param = param
