"""The limits of one attempt, as the call state machine sets them and the transports apply them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Timeouts"]


@dataclass(frozen=True)
class Timeouts:
    """Limits for one attempt. `read_s` bounds each wait for bytes: until the first token it is the
    time-to-first-token limit (or what is left of the total, if less); `total_s` is checked between reads."""

    connect_s: float
    ttft_s: float
    total_s: float
    read_s: float
    read_kind: str  # "ttft", "total" or "read" (file transfers: each wait, no first token): what a read timeout means
    stall_s: float | None = None  # streams: no content for this long after content started
