"""`HttpRequest`: one request as an adapter builds it and a transport sends it. A value; no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

__all__ = ["HttpRequest"]


@dataclass
class HttpRequest:
    method: str
    url: str
    headers: Dict[str, Any]  # str values, and keys as `SecretStr` until the transport writes them
    json: Dict[str, Any] | None  # None: no body (a GET)
    stream: bool
    content: bytes | None = None  # `json` encoded once, checked before sending (providers.sendable)

    def __repr__(self) -> str:  # headers hold the key: never show them
        return f"HttpRequest({self.method} {self.url}, stream={self.stream})"
