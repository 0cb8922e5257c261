"""The httpx values openai-python's API hands out, built for llmroute's: `client.base_url` (an
`httpx.URL`) and a raw response's `headers` (`httpx.Headers`, case-insensitive, repeated names kept).

Only this module (of those outside the transports) touches httpx's types; httpx is imported when one
is built, never at `import llmroute`. No I/O.
"""

from __future__ import annotations

from typing import Any

__all__ = ["url_value", "headers_value"]


def url_value(text: str) -> Any:
    """`text` as an `httpx.URL`, with the trailing slash openai-python's `base_url` has."""
    import httpx  # a core dependency, loaded when the value is asked for

    return httpx.URL(text.rstrip("/") + "/")


def headers_value(raw: Any) -> Any:
    """Response headers (httpx's, aiohttp's or None) as `httpx.Headers`, every repeated name kept."""
    import httpx  # a core dependency, loaded when the value is asked for

    if raw is None:
        return httpx.Headers()
    items = raw.multi_items() if hasattr(raw, "multi_items") else list(raw.items())
    return httpx.Headers(items)
