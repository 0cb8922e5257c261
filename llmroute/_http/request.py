"""`HttpRequest`: one request as an adapter builds it and a transport sends it. A value; no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["HttpRequest"]


@dataclass
class HttpRequest:
    method: str
    url: str
    headers: Dict[str, str]
    json: Optional[Dict[str, Any]]  # None: no body (a GET)
    stream: bool
    content: Optional[bytes] = None  # `json` encoded once, checked before sending (providers.sendable)

    def __repr__(self) -> str:  # headers hold the key: never show them
        return f"HttpRequest({self.method} {self.url}, stream={self.stream})"
