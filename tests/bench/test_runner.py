"""The load generator with an injected request function: bounds, phases, caps, errors, cancellation."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from llmroute.bench.runner import LoadPlan, ProgressMeter, client_send, error_fields, poisson_schedule, run_bench
from llmroute.bench.stats import RequestRecord
from llmroute.bench.workload import Prompt
from llmroute.errors import AllDeploymentsFailedError, ConfigError, RateLimitError, RoutingError, ServerError

PROMPTS = [Prompt(messages=({"role": "user", "content": f"p{i}"},), source=f"t:{i}") for i in range(3)]


class FakeSend:
    """Sleeps `delay_s` per request and tracks how many are in flight; `fail` picks failures."""

    def __init__(self, delay_s=0.005, fail=None):
        self.delay_s = delay_s
        self.fail = fail or (lambda n: None)
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self.max_tokens_seen = []

    async def __call__(self, target, prompt, max_tokens):
        self.calls += 1
        n = self.calls
        self.max_tokens_seen.append(max_tokens)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        start = time.perf_counter()
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.in_flight -= 1
        error = self.fail(n)
        end = time.perf_counter()
        if error:
            return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=False,
                                 e2e_s=end - start, error_type=error)
        return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=True, e2e_s=end - start,
                             ttft_s=(end - start) / 2, output_tokens=4, input_tokens=2, tokens_source="usage")


def run(send, plan):
    return asyncio.run(run_bench(send, PROMPTS, plan, progress=None))


def phases(result, target, level):
    return [r.phase for r in result.records if r.target == target and r.level == level]


def test_closed_loop_sweep_counts_phases_and_caps_concurrency():
    send = FakeSend()
    result = run(send, LoadPlan(targets=["a", "b"], concurrency=[1, 4], requests=12, warmup=3, max_tokens=7))
    for target in ("a", "b"):
        assert [r.phase for r in result.records if r.target == target][0] == "first"
        for level in (1, 4):
            assert phases(result, target, level).count("warmup") == 3
            assert phases(result, target, level).count("measured") == 12
    assert send.calls == 2 * (1 + 2 * 15)
    assert send.peak <= 4
    assert [lv.level for lv in result.levels] == [1, 4, 1, 4]
    assert all(lv.stopped_by == "requests" for lv in result.levels)
    assert set(send.max_tokens_seen) == {7}
    # levels run one after another: each window starts after the last one ended
    windows = [(lv.window_start_s, lv.window_end_s) for lv in result.levels]
    assert all(b[0] >= a[1] for a, b in zip(windows, windows[1:]))


def test_warmup_defaults_to_one_per_slot_and_prompt_max_tokens_wins():
    send = FakeSend()
    prompts = [Prompt(messages=({"role": "user", "content": "x"},), max_tokens=3)]
    result = asyncio.run(run_bench(send, prompts, LoadPlan(targets=["a"], concurrency=[5], requests=5,
                                                            first_request=False), progress=None))
    assert phases(result, "a", 5).count("warmup") == 5
    assert set(send.max_tokens_seen) == {3}


def test_duration_bound_stops_dispatching_at_the_deadline():
    send = FakeSend(delay_s=0.01)
    result = run(send, LoadPlan(targets=["a"], concurrency=[3], duration_s=0.3, warmup=0, first_request=False))
    (lv,) = result.levels
    measured = [r for r in result.records if r.phase == "measured"]
    assert lv.stopped_by == "duration" and len(measured) > 3
    assert all(r.start_s < lv.window_start_s + 0.3 for r in measured)


def test_requests_bound_wins_when_it_comes_first():
    result = run(FakeSend(), LoadPlan(targets=["a"], concurrency=[2], requests=5, duration_s=60, warmup=0))
    assert result.levels[0].stopped_by == "requests"
    assert len([r for r in result.records if r.phase == "measured"]) == 5


def test_open_loop_respects_the_cap_and_records_queueing():
    send = FakeSend(delay_s=0.05)
    plan = LoadPlan(targets=["a"], rates=[200.0], max_concurrency=2, requests=20, warmup=0, first_request=False)
    result = run(send, plan)
    measured = [r for r in result.records if r.phase == "measured"]
    assert len(measured) == 20 and send.peak <= 2
    assert all(r.queue_s is not None for r in measured)
    assert max(r.queue_s for r in measured) > 0.05  # 200/s offered into 2 slots of 50 ms: arrivals wait
    assert len(result.levels[0].dispatch_lag_s) == 20


def test_poisson_schedule_is_seeded_bounded_and_has_the_asked_rate():
    one = list(poisson_schedule(10.0, seed="7:a:10", limit=2000, horizon_s=None))
    assert one == list(poisson_schedule(10.0, seed="7:a:10", limit=2000, horizon_s=None))
    assert one != list(poisson_schedule(10.0, seed="8:a:10", limit=2000, horizon_s=None))
    assert len(one) == 2000 and all(b > a for a, b in zip(one, one[1:]))
    gaps = [b - a for a, b in zip([0.0] + one, one)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(0.1, rel=0.1)  # exponential: the sd of the mean of 2000 is ~2%
    var = sum((g - mean) ** 2 for g in gaps) / len(gaps)
    assert var ** 0.5 == pytest.approx(mean, rel=0.15)  # an exponential's sd equals its mean
    short = list(poisson_schedule(10.0, seed="x", limit=None, horizon_s=5.0))
    assert short and short[-1] < 5.0 and 25 < len(short) < 80
    with pytest.raises(ValueError):
        list(poisson_schedule(1.0, seed="x", limit=None, horizon_s=None))


def test_failed_requests_are_recorded_not_raised():
    send = FakeSend(fail=lambda n: "RateLimitError" if n % 3 == 0 else None)
    result = run(send, LoadPlan(targets=["a"], concurrency=[2], requests=9, warmup=0, first_request=False))
    errors = [r for r in result.records if not r.ok]
    assert len(errors) == 3 and {r.error_type for r in errors} == {"RateLimitError"}


def test_fatal_errors_stop_the_run():
    async def send(target, prompt, max_tokens):
        raise RoutingError(f"{target!r} names no tier")

    with pytest.raises(RoutingError):
        run(send, LoadPlan(targets=["nope"], concurrency=[2], requests=4))


def test_requests_still_running_after_the_grace_period_are_cut_off_and_counted():
    async def send(target, prompt, max_tokens):
        start = time.perf_counter()
        await asyncio.sleep(30)
        return RequestRecord(target=target, level=0, phase="", index=0, start_s=start, ok=True, e2e_s=30)

    plan = LoadPlan(targets=["a"], concurrency=[3], duration_s=0.05, grace_s=0.05, warmup=0, first_request=False)
    result = run(send, plan)
    assert result.levels[0].cancelled == 3
    assert [r for r in result.records if r.phase == "measured"] == []


def test_plan_validation():
    with pytest.raises(ConfigError):
        LoadPlan(targets=["a"], concurrency=[1], rates=[1.0], requests=1)
    with pytest.raises(ConfigError):
        LoadPlan(targets=["a"], concurrency=[1])
    with pytest.raises(ConfigError):
        LoadPlan(targets=[], concurrency=[1], requests=1)


def test_progress_meter_rate_limits_lines():
    meter = ProgressMeter("small", "c=5", start=0.0, every_s=1.0)
    for i in range(10):
        meter.add(RequestRecord(target="small", level=5, phase="measured", index=i, start_s=0, ok=i != 3,
                                ttft_s=0.1 * (i + 1), e2e_s=1.0, error_type=None if i != 3 else "ServerError"))
    line = meter.line(2.0)
    assert "done 10" in line and "errors 1" in line and "5.0 req/s" in line and "p95 TTFT" in line
    assert meter.line(2.5) is None
    assert meter.line(3.0) is not None
    assert meter.line(3.1, force=True) is not None


def test_progress_meter_shows_an_eta_for_the_level_and_the_run():
    rec = RequestRecord(target="small", level=5, phase="measured", index=0, start_s=0, ok=True, ttft_s=0.1, e2e_s=1.0)
    # 100 requests per level, 3 more levels after this one; 25 done in 60 s -> 180 s left in the level,
    # and each later level assumed as long as this one (240 s): 180 + 3 x 240 = 900 s for the run.
    meter = ProgressMeter("small", "c=5", start=0.0, total=100, levels_after=3)
    for _ in range(25):
        meter.add(rec)
    assert meter.eta_s(60.0) == (180.0, 900.0)
    line = meter.line(60.0)
    assert "done 25/100" in line and "ETA 03:00 (run ~15:00)" in line
    # A duration bound that comes first wins: 4-minute levels, 60 s in -> 180 s left whatever the rate.
    timed = ProgressMeter("small", "c=5", start=0.0, total=10_000, duration_s=240.0)
    timed.add(rec)
    assert timed.eta_s(60.0) == (180.0, 180.0) and "ETA 03:00" in timed.line(60.0)
    assert ProgressMeter("small", "c=5", start=0.0, total=10).eta_s(5.0) is None  # nothing done yet: no guess


def test_error_fields_name_the_cause_of_a_failover():
    inner = RateLimitError("slow down", deployment="p:m", status=429)
    attempt = type("A", (), {"error": inner})()
    fields = error_fields(AllDeploymentsFailedError("all failed", attempts=[attempt]))
    assert fields["error_type"] == "AllDeploymentsFailedError(RateLimitError)" and fields["status"] == 429
    assert error_fields(ServerError("boom", status=502))["status"] == 502
    assert error_fields(ValueError("odd"))["error_type"] == "ValueError"


class _Delta:
    def __init__(self, content):
        self.content = content


class _Chunk:
    def __init__(self, content):
        self.choices = [type("C", (), {"delta": _Delta(content)})()] if content is not None else []


class _FakeStream:
    def __init__(self, pieces, usage):
        self.pieces = pieces
        self.response = type("R", (), {"usage": usage, "route": None})()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    def __aiter__(self):
        return self._gen()

    async def _gen(self):
        for p in self.pieces:
            yield _Chunk(p)


class _FakeClient:
    def __init__(self, stream):
        completions = type("Co", (), {})()

        async def create(**kwargs):
            return stream

        completions.create = create
        self.chat = type("Ch", (), {"completions": completions})()


def test_client_send_counts_tokens_when_no_usage_comes():
    stream = _FakeStream(["", "Hello", " world", None], usage=None)
    record = asyncio.run(client_send(_FakeClient(stream))("small", PROMPTS[0], 10))
    assert record.ok and record.output_tokens == 2 and record.tokens_source == "tokenizer"
    assert record.ttft_s is not None and len(record.itl_s) == 1
    usage = type("U", (), {"completion_tokens": 9, "prompt_tokens": 4})()
    record = asyncio.run(client_send(_FakeClient(_FakeStream(["a", "b"], usage)))("small", PROMPTS[0], 10))
    assert (record.output_tokens, record.input_tokens, record.tokens_source) == (9, 4, "usage")


def test_progress_goes_to_the_given_stream():
    out = io.StringIO()
    asyncio.run(run_bench(FakeSend(), PROMPTS, LoadPlan(targets=["a"], concurrency=[2], requests=4, warmup=1),
                          progress=out))
    text = out.getvalue()
    assert "a first request" in text and "done 4" in text
