"""`llmroute cache stats|clear`: the size of a config's cache backend, and invalidation.

    llmroute cache stats --config llmroute.toml
    llmroute cache clear --config llmroute.toml [--namespace NS | --feature F [--meta tenant=acme ...]]

`stats` prints the backend's entries and bytes as JSON (hit and miss counts live in the ledger:
`llmroute report --by feature,tier` shows the hit rate and the money saved). `clear` drops every
entry, or one namespace's.
"""

from __future__ import annotations

import argparse
import json
from typing import Sequence
from llmroute.config import load_config
from llmroute._runtime.cli_help import with_defaults

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmroute cache", description="Inspect or clear the response cache.")
    p.add_argument("action", choices=["stats", "clear"], help="stats: the backend's entries and size; clear: drop entries")
    p.add_argument("--config", default="llmroute.toml", help="config file whose [cache] to use")
    p.add_argument("--namespace", help="clear only this namespace (as `client.cache.namespace(...)` writes it)")
    p.add_argument("--feature", help="clear the namespace of this feature (with --meta for tenant keys)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="metadata of the namespace")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from llmroute._call.cache_step import open_cache  # loaded when the command runs, not at import

    args = with_defaults(_parser()).parse_args(list(argv) if argv is not None else None)
    cache = open_cache(load_config(args.config))
    try:
        if args.action == "stats":
            stats = dict(cache.backend.stats(cache.clock()))
            if cache.config.backend == "memory":
                # This command is a process of its own: it cannot see another process's memory.
                stats["note"] = ("the memory backend lives inside each client's process: this command sees a "
                                 "new, empty one; ask client.cache.stats() in the process, or use backend = "
                                 "\"sqlite\" or \"redis\" to share and inspect the cache")
            print(json.dumps(stats, indent=2, sort_keys=True))
            return 0
        metadata = {}
        for item in args.meta:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"llmroute cache: --meta takes KEY=VALUE, not {item!r}")
            metadata[key] = value
        namespace: str | None = args.namespace
        if namespace is None and (args.feature is not None or metadata):
            namespace = cache.namespace(args.feature, metadata)
        dropped = cache.clear(namespace)
        where = f"namespace {namespace!r}" if namespace is not None else "all namespaces"
        print(f"cleared {dropped} entries from {where}")
        return 0
    finally:
        cache.close()
