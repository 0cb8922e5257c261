"""A capacity-bound vLLM-like loopback server: `slots` requests served at once, each taking `service_s`,
the rest waiting in a FIFO queue; `/metrics` with vLLM's gauge names (running, waiting, KV-cache usage).

    CapacityServer(slots=8, service_s=0.1)        # in this process (tests)
    python -m tests.servers.capacity 8:0.1 8:0.1 1:0.4   # in a child process (benchmarks): prints one
        base URL per server, then reads commands on stdin: "slow <index> <factor>" changes a
        server's service time by a factor, "stats" prints each server's served count.

The wait for a slot happens before the answer starts (time to first token = queue + service time),
as a continuous-batching server queues a request it has no batch slot for. `slow_factor` multiplies
the service time of requests started after it is set. KV-cache usage is reported as
`kv_per_slot` x busy slots (a stand-in: it rises with the batch; 0.05 by default). Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import deque
from typing import Any

from tests.servers.base import Response
from tests.servers.script import RecordedRequest
from tests.servers.vllm import VLLMServer


class CapacityServer(VLLMServer):
    platform = "vllm"

    def __init__(self, *, slots: int = 1, service_s: float = 0.1, **kwargs: Any) -> None:
        kwargs.setdefault("record_limit", 1000)
        kwargs.setdefault("models", {"m": 32_768})
        super().__init__(**kwargs)
        if slots < 1 or service_s < 0:
            raise ValueError("slots >= 1 and service_s >= 0")
        self.slots = slots
        self.service_s = service_s
        self.slow_factor = 1.0
        self.busy = 0  # requests holding a slot
        self.waiting_fifo: deque[asyncio.Future[None]] = deque()
        self.served = 0
        self.metrics_reads = 0
        self.fail_metrics = False  # set True: /metrics answers 500
        self.kv_per_slot = 0.05

    async def chat(self, request: RecordedRequest) -> Response:
        if self.busy >= self.slots or self.waiting_fifo:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting_fifo.append(turn)
            try:
                await turn  # the slot is handed over by the request that frees it (FIFO)
            except asyncio.CancelledError:
                if turn in self.waiting_fifo:
                    self.waiting_fifo.remove(turn)
                elif turn.done() and not turn.cancelled():
                    self._free()
                raise
        else:
            self.busy += 1
        try:
            await asyncio.sleep(self.service_s * self.slow_factor)
        finally:
            self._free()
        self.served += 1
        return await super().chat(request)

    def _free(self) -> None:
        while self.waiting_fifo:
            turn = self.waiting_fifo.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes to the oldest waiter; busy stays
                return
        self.busy -= 1

    async def metrics(self, request: RecordedRequest) -> Response:
        self.metrics_reads += 1
        if self.fail_metrics:
            return Response.text("engine metrics unavailable\n", status=500)
        model = next(iter(self.models), "")
        labels = f'{{engine="0",model_name="{model}"}}'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{labels} {self.busy}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{labels} {len(self.waiting_fifo)}",
            "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{labels} {self.kv_per_slot * self.busy}",
        ]
        return Response.text("\n".join(lines) + "\n", headers={"Content-Type": "text/plain; version=0.0.4"})


def _serve(specs: list[str]) -> None:
    servers = []
    for spec in specs:
        slots, _, service = spec.partition(":")
        servers.append(CapacityServer(slots=int(slots), service_s=float(service)).start())
    for server in servers:
        print(server.base_url, flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["slow"]:
            server = servers[int(words[1])]
            server._loop.call_soon_threadsafe(setattr, server, "slow_factor", float(words[2]))  # type: ignore[union-attr]
            print("ok", flush=True)
        elif words[:1] == ["stats"]:
            print(" ".join(str(s.served) for s in servers), flush=True)
    for server in servers:
        server.stop()


if __name__ == "__main__":
    threading.current_thread().name = "capacity-servers"
    _serve(sys.argv[1:])
