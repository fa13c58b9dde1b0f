"""ServeOptions: every setting of the local server, each with a default and a reason."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..errors import ConfigError

TOOL_PROMPTS = ("auto", "system", "none")


@dataclass
class ServeOptions:
    """How the server listens, whom it lets in and how much it takes on."""

    host: str = "127.0.0.1"  # loopback: only this machine can connect unless told otherwise
    port: int = 8080  # 0 picks a free port (tests); the bound one is in Server.port
    api_key: str | None = None  # when set, every route but /health needs `Authorization: Bearer KEY`
    model_name: str | None = None  # the id /v1/models and /api/tags list; None -> the package folder name
    queue_limit: int = 8  # requests waiting behind the running one; one more gets 503 + Retry-After
    max_body_bytes: int = 1 << 20  # request bodies above this get 413 (a chat fits in far less)
    retry_after_seconds: int = 1  # the Retry-After a full queue answers with
    tool_prompt: str = "auto"  # how tools reach the model: system (a system turn lists them), none, auto (none
    # for the embedded model, which was trained to call its tools from the request alone; system otherwise)
    step_delay_seconds: float = 0.0  # sleep after every denoising step: simulates a slower device (tests, demos)

    def validate(self) -> "ServeOptions":
        if not isinstance(self.port, int) or isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be an integer in 0..65535, got {self.port!r}")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise ConfigError("api_key must be a non-empty string (or unset)")
        if not isinstance(self.queue_limit, int) or self.queue_limit < 0:
            raise ConfigError(f"queue_limit must be an integer >= 0, got {self.queue_limit!r}")
        if not isinstance(self.max_body_bytes, int) or self.max_body_bytes < 1024:
            raise ConfigError(f"max_body_bytes must be an integer >= 1024, got {self.max_body_bytes!r}")
        if not isinstance(self.retry_after_seconds, int) or self.retry_after_seconds < 1:
            raise ConfigError(f"retry_after_seconds must be an integer >= 1, got {self.retry_after_seconds!r}")
        if not isinstance(self.step_delay_seconds, (int, float)) or not 0 <= self.step_delay_seconds <= 10:
            raise ConfigError(f"step_delay_seconds must be a number in [0, 10], got {self.step_delay_seconds!r}")
        if self.tool_prompt not in TOOL_PROMPTS:
            raise ConfigError(f"tool_prompt must be one of {', '.join(TOOL_PROMPTS)}, got {self.tool_prompt!r}")
        return self

    @property
    def loopback(self) -> bool:
        """True when only this machine can reach the server."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:  # a host name other than localhost: assume it is reachable
            return False
