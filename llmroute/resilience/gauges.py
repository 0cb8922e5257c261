"""Queue gauges of self-hosted servers, read from their Prometheus text (`/metrics`): parsing only.

Which names mean what, per server (sources in docs/platforms.md, "Queue gauges"):

| server | running | waiting | KV-cache usage (0..1) |
|---|---|---|---|
| vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` | `vllm:kv_cache_usage_perc` (older: `vllm:gpu_cache_usage_perc`) |
| SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` | `sglang:token_usage` |
| TGI | `tgi_batch_current_size` | `tgi_queue_size` | none |
| llama.cpp (`--metrics`) | `llamacpp:requests_processing` | `llamacpp:requests_deferred` | `llamacpp:kv_cache_usage_ratio` (older builds) |

Series of one name are summed (vLLM's data-parallel engines, label `engine`), except SGLang's
tensor-parallel ranks other than `tp_rank="0"` (each rank repeats the scheduler's figures); KV
usage is the highest series. Never does I/O: `parse_gauges(text)` takes what a scraper read.
"""

from __future__ import annotations


from llmroute.resilience.balance import QueueGauges

__all__ = ["parse_gauges", "GAUGE_NAMES", "GAUGE_KINDS"]

# name -> which gauge it is
GAUGE_NAMES: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache",
    "vllm:gpu_cache_usage_perc": "kv_cache",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_cache",
    "tgi_batch_current_size": "running",
    "tgi_queue_size": "waiting",
    "llamacpp:requests_processing": "running",
    "llamacpp:requests_deferred": "waiting",
    "llamacpp:kv_cache_usage_ratio": "kv_cache",
}

# Provider kinds whose gauges are read by default (`queue_gauges = true` turns others on).
GAUGE_KINDS = frozenset({"vllm", "sglang", "tgi"})


def parse_gauges(text: str) -> QueueGauges | None:
    """The queue gauges in a Prometheus text exposition; None when it holds none of the known names."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            close = line.rfind("}")
            labels, rest = line[brace + 1:close], line[close + 1:]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        what = GAUGE_NAMES.get(name.strip())
        if what is None or ('tp_rank="' in labels and 'tp_rank="0"' not in labels):
            continue
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if value != value or value < 0:  # NaN or negative: not a queue length
            continue
        if what == "kv_cache":
            found[what] = max(found.get(what, 0.0), min(1.0, value))
        else:
            found[what] = found.get(what, 0.0) + value
    if not found:
        return None
    return QueueGauges(running=found.get("running"), waiting=found.get("waiting"), kv_cache=found.get("kv_cache"))
