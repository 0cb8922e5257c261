"""Probe issue 11's secrets, config, CLI-path and ledger cases against one checkout; print a table.

Run it on any checkout with that checkout first on the path, e.g. before/after a change:

    PYTHONPATH=/path/to/checkout python benchmarks/guarantees_probe.py --json out.json

Each case is held (the promise holds) or broken (with what happened). Every request goes to a loopback
server on 127.0.0.1; files go to a temporary folder; a read-only folder is a bind mount (root only).
Bounded: about 60 cases, a few seconds each at most.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import pickle
import pprint
import subprocess
import sys
import tempfile
import textwrap
import traceback
from pathlib import Path
from urllib.parse import quote

KEY = "live-key-0123456789abcdef"
HEADER_KEY = "hdr-token-fedcba9876543210"
FORMS = (KEY, quote(KEY, safe=""), HEADER_KEY)
MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "hi"}]
RESULTS: list[dict] = []


def case(group: str, name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append({"group": group, "case": name, "held": bool(ok), "detail": detail[:160]})


def leaks(text: object) -> bool:
    return any(form in str(text) for form in FORMS)


def attempt(group: str, name: str, fn) -> None:
    try:
        ok, detail = fn()
    except Exception as exc:  # noqa: BLE001 - a probe reports, never stops
        ok, detail = False, f"{type(exc).__name__}: {str(exc)[:120]}"
    case(group, name, ok, detail)


# -- secrets -----------------------------------------------------------------------------------------


def secrets_cases(tmp: Path) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    import llmroute as L
    from tests.servers.registry import SERVERS
    from tests.servers.script import Reply

    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    server = SERVERS["openai"](api_key=KEY).start()
    cfg = {"providers": {"p": {"kind": "together", "base_url": server.base_url, "api_key": KEY,
                               "headers": {"x-api-key": HEADER_KEY}}},
           "tiers": {"t": {"deployments": [f"p:{MODEL}"]}}, "resilience": {"max_retries": 0},
           "pricing": {"strict": False}, "ledger": {"sink": "memory"}}
    G = "secrets"
    try:
        client = L.Client(config=cfg)
        config = client.config
        for name, fn in (("repr(client.config)", lambda: repr(config)), ("str(client.config)", lambda: str(config)),
                         ("pprint(client.config)", lambda: pprint.pformat(config)),
                         ("config.raw.model_dump_json()", lambda: config.raw.model_dump_json()),
                         ("repr of a provider (x-api-key header)", lambda: repr(config.providers["p"]))):
            attempt(G, name, lambda fn=fn: (not leaks(fn()), "key shown" if leaks(fn()) else ""))

        def pickled():
            try:
                data = pickle.dumps(config)
            except Exception as exc:  # noqa: BLE001
                return False, f"pickling raises {type(exc).__name__}"
            return not leaks(data), "key in the pickle" if leaks(data) else ""

        attempt(G, "pickle of client.config", pickled)
        message = f"Incorrect API key provided: {KEY} (as sent: {quote(KEY, safe='')}; header {HEADER_KEY})"
        server.push(Reply(status=401, body={"error": {"message": message, "type": "invalid_request_error",
                                                      "code": "invalid_api_key"}}))
        try:
            client.chat.completions.create(model=f"p:{MODEL}", messages=MESSAGES)
            error = None
        except L.LLMRouteError as exc:
            error = exc
        if error is not None:
            surfaces = {
                "str(error) of an echoed key": lambda: str(error),
                "repr(error)": lambda: repr(error),
                "error.provider_message": lambda: error.provider_message,
                "pickled error": lambda: pickle.dumps(error),
                "formatted traceback": lambda: "".join(traceback.format_exception(error)),
                "traceback locals (llmroute frames)": lambda: "".join(
                    str(f.locals) for f in traceback.TracebackException.from_exception(error, capture_locals=True).stack
                    if "/llmroute/" in f.filename),
                "client.health()": lambda: repr(client.health()),
                "span status and attributes": lambda: json.dumps(
                    [[s.status.description, dict(s.attributes)] for s in exporter.get_finished_spans()], default=str),
            }
            for name, fn in surfaces.items():
                attempt(G, name, lambda fn=fn: (not leaks(fn()), "key shown" if leaks(fn()) else ""))
        client.close()
        attempt(G, "log records (httpx, httpcore, llmroute)", lambda: (not leaks(log.getvalue()), "key logged"
                                                                       if leaks(log.getvalue()) else ""))
        for name, base_url in (("base_url with user:key@", f"http://user:{KEY}@127.0.0.1:9/v1"),
                               ("base_url with ?key=", f"http://127.0.0.1:9/v1?key={KEY}")):
            def refused(base_url=base_url):
                try:
                    L.Client(config={**cfg, "providers": {"p": {"kind": "vllm", "base_url": base_url}}}).close()
                except L.ConfigError as exc:
                    return not leaks(str(exc)), "refused" + (", key in the message" if leaks(str(exc)) else "")
                return False, "accepted"

            attempt(G, name, refused)
        path = tmp / "health.toml"
        provider_table = (f'kind = "together"\nbase_url = "{server.base_url}"\napi_key = "{KEY}"\n'
                          f'headers = {{ "x-api-key" = "{HEADER_KEY}" }}\n')
        path.write_text(f"[providers.p]\n{provider_table}[tiers.t]\ndeployments = [\"p:{MODEL}\"]\n"
                        + "[resilience]\nmax_retries = 0\n" + PRICING + '[ledger]\nsink = "memory"\n', encoding="utf-8")
        for name, extra in (("llmroute health (table)", []), ("llmroute health --json", ["--json"])):
            server.push(Reply(status=401, body={"error": {"message": message, "code": "invalid_api_key"}}))
            out = subprocess.run([sys.executable, "-m", "llmroute", "health", "--config", str(path), *extra],
                                 capture_output=True, text=True, timeout=60)
            case(G, name, not leaks(out.stdout + out.stderr), "key shown" if leaks(out.stdout + out.stderr) else "")
    finally:
        server.stop()
        logging.getLogger().removeHandler(handler)


# -- config ------------------------------------------------------------------------------------------

PRICING = '[pricing]\nstrict = false\n'
PROVIDER = PRICING + '[providers.x]\nkind = "vllm"\nbase_url = "http://127.0.0.1:9/v1"\n'
TIER = '[tiers.t]\ndeployments = ["x:m"]\n'
MEMORY = '[ledger]\nsink = "memory"\n'


def config_cases(tmp: Path) -> None:
    from llmroute.config import load_config
    from llmroute.errors import ConfigError

    ro = tmp / "ro"
    ro.mkdir()
    (tmp / "notdb").write_text("hello\n")
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(ro), str(ro)], capture_output=True).returncode == 0
    texts = {
        "weight = inf": PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = inf }]\n' + MEMORY,
        "weight = nan": PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = nan }]\n' + MEMORY,
        "weight = -1": PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", weight = -1.0 }]\n' + MEMORY,
        "timeout_s = inf": PROVIDER + "timeout_s = inf\n" + TIER + MEMORY,
        "one deployment, other settings in two tiers": PROVIDER + '[tiers.a]\ndeployments = [{ id = "x:m", timeout_s = 30 }]\n'
        '[tiers.b]\ndeployments = [{ id = "x:m", timeout_s = 60 }]\n' + MEMORY,
        'api_key = "" on a cloud kind': PRICING + '[providers.x]\nkind = "together"\napi_key = ""\n' + TIER + MEMORY,
        "${VAR} unset in headers": PROVIDER + 'headers = { "X-T" = "${PROBE_UNSET_VAR}" }\n' + TIER + MEMORY,
        "${VAR} unset in ledger.path": PROVIDER + TIER + '[ledger]\npath = "${PROBE_UNSET_VAR}.db"\n',
        "ttft_timeout_s > timeout_s": PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", ttft_timeout_s = 90, timeout_s = 30 }]\n' + MEMORY,
        "timeout_s > deadline_s": PROVIDER + '[tiers.t]\ndeployments = [{ id = "x:m", timeout_s = 200 }]\n'
        '[resilience]\ndeadline_s = 100\n' + MEMORY,
        "header value with CR/LF": PROVIDER + 'headers = { "X-T" = "a\\r\\nB: 1" }\n' + TIER + MEMORY,
        "ledger.path is a folder": PROVIDER + TIER + f'[ledger]\npath = "{tmp}"\n',
        "ledger.path on a read-only mount": PROVIDER + TIER + f'[ledger]\npath = "{ro}/l.db"\n',
        "ledger.path is not SQLite": PROVIDER + TIER + f'[ledger]\npath = "{tmp / "notdb"}"\n',
    }
    for url in ("ftp://127.0.0.1/v1", "http:///v1", "http://127.0.0.1:9/v 1", "http://127.0.0.1:9/v1?x=1",
                "http://127.0.0.1:9/v1#f", "http://127.0.0.1:99999/v1"):
        texts[f"base_url {url!r}"] = PRICING + f'[providers.x]\nkind = "vllm"\nbase_url = "{url}"\n' + TIER + MEMORY
    for name, text in texts.items():
        if name == "ledger.path on a read-only mount" and not mounted:
            continue
        path = tmp / "c.toml"
        path.write_text(text, encoding="utf-8")
        try:
            load_config(path)
            case("config", name, False, "loads silently")
        except ConfigError as exc:
            case("config", name, exc.key is not None and str(path) in str(exc), str(exc).replace(str(tmp), "<tmp>"))
        except Exception as exc:  # noqa: BLE001
            case("config", name, False, f"{type(exc).__name__} (not a ConfigError)")
    path = tmp / "c.toml"
    path.write_bytes(PROVIDER.encode() + b"# caf\xe9\n" + TIER.encode())
    try:
        load_config(path)
        case("config", "non-UTF-8 config file", False, "loads")
    except ConfigError as exc:
        case("config", "non-UTF-8 config file", True, str(exc).replace(str(tmp), "<tmp>"))
    except Exception as exc:  # noqa: BLE001
        case("config", "non-UTF-8 config file", False, f"{type(exc).__name__} (not a ConfigError)")
    if mounted:
        subprocess.run(["umount", str(ro)], check=False)
    calibrate_cases(tmp)


def calibrate_cases(tmp: Path) -> None:
    import tomllib

    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"question {i} " * (i + 1)}) + "\n" for i in range(20)))
    configs = {
        "a [routing] line inside a multi-line string": '[tiers.t]\nnote = """\n[routing]\n"""\n[routing]\ndefault = "auto"\n',
        "an inline routing = {...} table": 'routing = { default = "auto" }\n',
        'a quoted "threshold" key': '[routing]\n"threshold" = 0.5\n',
        "a plain [routing] table": '[routing]\ndefault = "auto"\nthreshold = 0.1\n',
    }
    for name, text in configs.items():
        path = tmp / "cal.toml"
        path.write_text(text, encoding="utf-8")
        subprocess.run([sys.executable, "-m", "llmroute", "calibrate", "--prompts", str(prompts), "--large-share",
                        "0.3", "--config", str(path), "--write"], capture_output=True, text=True, timeout=60)
        after = path.read_text(encoding="utf-8")
        try:
            tomllib.loads(after)
            case("calibrate --write", name, True, "valid TOML" + (" (unchanged)" if after == text else ""))
        except tomllib.TOMLDecodeError as exc:
            case("calibrate --write", name, False, f"invalid TOML written: {exc}")
    missing = tmp / "missing.toml"
    subprocess.run([sys.executable, "-m", "llmroute", "calibrate", "--prompts", str(prompts), "--large-share", "0.3",
                    "--config", str(missing), "--write"], capture_output=True, text=True, timeout=60)
    case("calibrate --write", "a missing config", not missing.exists(), "created it" if missing.exists() else "")


# -- CLI paths ---------------------------------------------------------------------------------------


def cli_cases(tmp: Path) -> None:
    from tests.servers.registry import SERVERS

    server = SERVERS["vllm"]().start()
    try:
        os.chdir(tmp)
        Path("cfg.toml").write_text(f'[providers.v]\nkind = "vllm"\nbase_url = "{server.base_url}"\n[tiers.t]\n'
                                    'deployments = ["v:Qwen/Qwen2.5-7B-Instruct"]\n[pricing]\nstrict = false\n'
                                    '[ledger]\nsink = "memory"\n', encoding="utf-8")
        Path("led.jsonl").write_text('{"ts":1,"request_id":"a"}\n', encoding="utf-8")
        Path("dir").mkdir(exist_ok=True)
        Path("notes.txt").write_text("hello\n", encoding="utf-8")
        Path("rocli").mkdir(exist_ok=True)
        mounted = subprocess.run(["mount", "--bind", "-o", "ro", "rocli", "rocli"], capture_output=True).returncode == 0
        bench = ["bench", "--config", "cfg.toml", "--target", "v:Qwen/Qwen2.5-7B-Instruct", "--requests", "20",
                 "--quiet"]
        cases = {
            "report --out on a read-only mount": ["report", "--ledger", "led.jsonl", "--format", "csv", "--out",
                                                  "rocli/r.csv"],
            "report --out a folder": ["report", "--ledger", "led.jsonl", "--format", "html", "--out", "dir"],
            "report --out into a missing folder": ["report", "--ledger", "led.jsonl", "--format", "csv", "--out",
                                                   "missing/r.csv"],
            "report --ledger a folder": ["report", "--ledger", "dir"],
            "report --ledger a text file": ["report", "--ledger", "notes.txt"],
            "bench --out into a missing folder": [*bench, "--out", "missing/b.json"],
            "bench --html into a missing folder": [*bench, "--html", "missing/b.html"],
            "bench --out a folder": [*bench, "--out", "dir"],
            "bench smoke --json into a missing folder": ["bench", "smoke", "--config", "cfg.toml", "--json",
                                                         "missing/s.json"],
            "bench --baseline missing": [*bench, "--baseline", "nothere.json"],
            "calibrate --prompts a folder": ["calibrate", "--prompts", "dir", "--large-share", "0.3"],
        }
        for name, argv in cases.items():
            if "read-only" in name and not mounted:
                continue
            sent_before = len(server.requests)
            out = subprocess.run([sys.executable, "-m", "llmroute", *argv], capture_output=True, text=True, timeout=120)
            lines = out.stderr.strip().splitlines()
            sent = len(server.requests) - sent_before
            ok = out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr and sent == 0
            detail = f"exit {out.returncode}, {len(lines)} stderr line(s), {sent} requests sent first"
            if "Traceback" in out.stderr:
                detail += ", traceback"
            case("CLI paths", name, ok, detail)
        if mounted:
            subprocess.run(["umount", "rocli"], check=False)
    finally:
        server.stop()


# -- ledger ------------------------------------------------------------------------------------------

FULL_DISK_CHILD = textwrap.dedent("""
    import json, logging, os, resource, signal, sys, time
    from decimal import Decimal
    from llmroute.accounting.ledger import JSONLSink, LedgerRecord, SQLiteSink
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    kind, path, recover = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    errors = []
    class H(logging.Handler):
        def emit(self, r): errors.append(r.getMessage()) if r.levelno >= logging.ERROR else None
    logging.getLogger("llmroute.ledger").addHandler(H())
    sink = (SQLiteSink if kind == "sqlite" else JSONLSink)(path, flush_interval_s=3600)
    def rec(i):
        return LedgerRecord(ts=time.time(), request_id=f"r{i}", feature="f" * 200, input_tokens=1, cost=Decimal("0.1"),
                            currency="USD", priced=True)
    for i in range(10): sink.write(rec(i))
    sink.flush()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, hard))
    for i in range(10, 3010): sink.write(rec(i))
    sink.flush()
    if recover:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    sink.close()
    print(json.dumps({"errors": errors}))
""")


def ledger_cases(tmp: Path) -> None:
    from llmroute.accounting.sinks import read_records

    for kind in ("sqlite", "jsonl"):
        for recover in (False, True):
            path = tmp / f"full-{recover}.{kind}"
            out = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, kind, str(path), "1" if recover else "0"],
                                 capture_output=True, text=True, timeout=60)
            name = f"{kind}: disk full, then {'space again' if recover else 'still full at close'} (3,000 records)"
            try:
                errors = json.loads(out.stdout.strip().splitlines()[-1])["errors"]
                stored = len(list(read_records(path)))
            except Exception as exc:  # noqa: BLE001
                case("ledger", name, False, f"{type(exc).__name__}: {exc}"[:120])
                continue
            counted = any("3000" in e or "3,000" in e for e in errors)
            if recover:
                raw_ok = True
                if kind == "jsonl":
                    lines = path.read_text(encoding="utf-8").splitlines()
                    raw_ok = len(lines) == len(set(lines)) == 3010
                case("ledger", name, stored == 3010 and raw_ok,
                     f"{stored} of 3010 readable" + ("" if raw_ok else ", torn or duplicate lines in the file"))
            else:
                case("ledger", name, counted, f"{len(errors)} ERROR lines, loss count {'given' if counted else 'not given'}")
    budget_restart_case(tmp)


def budget_restart_case(tmp: Path) -> None:
    import llmroute as L
    from tests.servers.registry import SERVERS
    from tests.servers.script import Reply

    server = SERVERS["together"]().start()
    model = "meta-llama/Llama-3.3-70B-Instruct-Turbo"
    cfg = {"providers": {"tg": {"kind": "together", "base_url": server.base_url, "api_key": server.default_api_key}},
           "tiers": {"t": {"deployments": [f"tg:{model}"]}}, "resilience": {"max_retries": 0},
           "budgets": [{"name": "daily", "max_cost": "0.001", "currency": "USD"}],
           "ledger": {"sink": "jsonl", "path": str(tmp / "budget.jsonl"), "flush_interval_s": 0.05}}
    try:
        server.push(Reply(usage={"prompt_tokens": 1000}, pieces=["a", "b"]))
        with L.Client(config=cfg) as client:
            client.chat.completions.create(model="t", messages=MESSAGES, max_tokens=10)
        with L.Client(config=cfg) as client:
            try:
                server.push(Reply(pieces=["a"]))
                client.chat.completions.create(model="t", messages=MESSAGES, max_tokens=10)
                case("ledger", "JSONL restart restores the day's spend", False, "daily budget spent twice")
            except L.BudgetExceededError:
                case("ledger", "JSONL restart restores the day's spend", True, "refused after restart")
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if not os.environ.get("PYTHONPATH"):  # the checkout this script is in (its loopback servers and llmroute)
        os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, os.environ["PYTHONPATH"].split(os.pathsep)[0])
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        for fn in (secrets_cases, config_cases, cli_cases, ledger_cases):
            sub = Path(tmp) / fn.__name__
            sub.mkdir()
            try:
                fn(sub)
            except Exception as exc:  # noqa: BLE001
                case(fn.__name__, "(probe crashed)", False, f"{type(exc).__name__}: {exc}")
            finally:
                os.chdir(here)
    for r in RESULTS:
        print(f"{'held  ' if r['held'] else 'BROKEN'} {r['group']:18} {r['case']:55} {r['detail']}")
    held = sum(r["held"] for r in RESULTS)
    print(f"{held} of {len(RESULTS)} held")
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
