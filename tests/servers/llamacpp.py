"""The real llama.cpp server for the self-hosted tests: `llmroute.cli.local.LocalServer` in a child process.

One server per test session (starting one costs a few seconds), with two slots; tests that kill a
server (the chaos tests) start their own. Every server stops itself when its fixture ends.
"""

from __future__ import annotations

import os
import tempfile

from llmroute.cli.local import MODEL_ALIAS, LocalServer

__all__ = ["start_llama_server", "MODEL_ALIAS", "llama_config"]


def start_llama_server(**kwargs) -> LocalServer:
    log = os.path.join(tempfile.gettempdir(), f"llmroute-llama-{os.getpid()}.log")
    kwargs.setdefault("log_path", log)
    return LocalServer(**kwargs).start()


def llama_config(base_url: str, *, kind: str = "llamacpp", name: str = "local") -> dict:
    """A config with one provider of `kind` on the server and tiers small and large on it."""
    return {
        "providers": {name: {"kind": kind, "base_url": base_url}},
        "tiers": {
            "small": {"deployments": [f"{name}:{MODEL_ALIAS}"]},
            "large": {"deployments": [f"{name}:{MODEL_ALIAS}"]},
        },
        # Self-hosted: priced at what the user says their hardware costs (here: nominal rates).
        "pricing": {f"{name}:*": {"input_per_million": 0.05, "output_per_million": 0.10, "currency": "USD"}},
        "ledger": {"sink": "memory"},
    }
