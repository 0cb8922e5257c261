"""The library logs through `logging` only: silent unless the app configures logging.

A real breaker event (a 401 takes the deployment out of rotation, logged at ERROR) from a loopback
server, in a fresh interpreter, once with no logging configured and once with `basicConfig`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import logging, sys
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING)
import llmroute
from tests.servers.together import TogetherServer
with TogetherServer() as srv:
    cfg = {"providers": {"tg": {"kind": "together", "base_url": srv.base_url, "api_key": "wrong-key"}},
           "tiers": {"t": {"deployments": ["tg:Qwen/Qwen2.5-7B-Instruct-Turbo"]}},
           "resilience": {"max_retries": 0}, "ledger": {"sink": "memory"}}
    with llmroute.Client(config=cfg) as client:
        try:
            client.chat.completions.create(model="t", messages=[{"role": "user", "content": "hi"}])
        except llmroute.AuthenticationError:
            print("raised AuthenticationError")
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_breaker_events_are_silent_without_logging_config():
    out = _run("unconfigured")
    assert out.returncode == 0 and "raised AuthenticationError" in out.stdout, out.stderr
    assert out.stderr == ""


def test_breaker_events_reach_an_app_that_configures_logging():
    out = _run("configured")
    assert out.returncode == 0, out.stderr
    assert "llmroute.resilience" in out.stderr and "out of rotation" in out.stderr


def test_demo_answers_are_clean_text():
    """What the real server sent in a demo run (`llmroute demo`, 2026-12-03): a ChatML marker the base
    model wrote out, cut by max_tokens after its first character."""
    from llmroute.cli.demo import clean_answer

    assert clean_answer("请写一篇2000字的报告，并给出三条投资建议。<") == "请写一篇2000字的报告，并给出三条投资建议。"
    assert clean_answer("<|im_end|>\n\n在上海下雨<|im_end|>user\nhi<|im_") == "在上海下雨user\nhi"
    assert clean_answer("a < b is true") == "a < b is true"  # only a trailing marker prefix goes
