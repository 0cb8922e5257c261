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
    json: Dict[str, Any]
    stream: bool
    content: Optional[bytes] = None  # `json` encoded once, checked before sending (providers.sendable)

    def __repr__(self) -> str:  # headers hold the key: never show them
        return f"HttpRequest({self.method} {self.url}, stream={self.stream})"
