"""The `llmroute` command: `demo`, `local`, `bench`, `plan`, `report`, `prices`, `health`, `calibrate`,
`router`, `cache`, `batch`.

Each subcommand lives in the module of its concept and is imported only when it runs, so
`llmroute --help` stays fast and no subcommand pays for another's imports.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from typing import Iterator, List
from llmroute.errors import LLMRouteError

__all__ = ["main", "COMMANDS", "CLOSED_PIPE_STATUS"]

# name -> (module:function, one-line help)
COMMANDS = {
    "demo": ("llmroute.cli.demo:main", "run the no-key demo on two local llama.cpp servers"),
    "local": ("llmroute.cli.local:main", "serve the bundled model with llama.cpp on 127.0.0.1"),
    "bench": ("llmroute.cli.bench_command:main", "load-test deployments: TTFT/TPOT/ITL/E2E percentiles, throughput"),
    "plan": ("llmroute.cli.plan_command:main", "instances and monthly cost needed to hold a peak rate"),
    "report": ("llmroute.cli.report_command:main", "cost-per-feature reports from the ledger"),
    "prices": ("llmroute.cli.prices_command:main", "the shipped price table, or what a config is charged"),
    "health": ("llmroute.cli.health:main", "breaker state of every deployment in a config"),
    "calibrate": ("llmroute.cli.calibrate_command:main", "router threshold that sends a share to the large tier"),
    "router": ("llmroute.cli.router_command:main", "fit and evaluate a router on your own outcome data"),
    "cache": ("llmroute.cli.cache_command:main", "response cache: backend stats, clear a namespace or all"),
    "batch": ("llmroute.cli.batch_command:main", "batch jobs on the platforms' batch APIs: submit, status, wait, fetch"),
}


# The status a shell reports for a process that SIGPIPE ended (128 + 13): what `head` leaves behind.
CLOSED_PIPE_STATUS = 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail on the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file (captured): nothing to redirect
        pass


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: llmroute <command> [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'llmroute <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: List[str] | None = None) -> int:
    """Run one command; a reader that closed the pipe (`llmroute ... | head`) ends it quietly, with
    `CLOSED_PIPE_STATUS`, whether it went away during the command, its `--help` or its last flush."""
    try:
        try:
            status = _dispatch(list(sys.argv[1:] if argv is None else argv))
        except SystemExit:  # argparse's --help and usage errors: flush here, where a closed pipe is caught
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _silence_stdout()
        return CLOSED_PIPE_STATUS


@contextlib.contextmanager
def _warnings_shown(name: str) -> Iterator[None]:
    """While a command runs, llmroute's own warnings go to stderr: a torn ledger line `report` skipped,
    ledger records lost, shared state gone. The library logs to a NullHandler (llmroute/__init__.py);
    a command is the application, so it shows them, each once. A process that configured logging keeps its own."""
    logger = logging.getLogger("llmroute")
    if logging.getLogger().handlers or any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(f"llmroute {name}: %(message)s"))
    shown: set[str] = set()

    def first_time(record: logging.LogRecord) -> bool:  # `report` reads a ledger more than once
        message = record.getMessage()
        if message in shown:
            return False
        shown.add(message)
        return True

    handler.addFilter(first_time)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _dispatch(args: List[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] in ("-V", "--version"):
        from llmroute import __version__  # loaded when the command runs, not at import

        print(f"llmroute {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        from llmroute._runtime.suggest import did_you_mean  # loaded only for this message

        print(f"llmroute: unknown command {name!r}{did_you_mean(name, COMMANDS)}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = COMMANDS[name]
    module_name, func_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"llmroute {name}: not available ({exc})", file=sys.stderr)
        return 2

    try:
        with _warnings_shown(name):
            return int(getattr(module, func_name)(rest) or 0)
    except BrokenPipeError:  # `llmroute health --json | head`: the reader left; `main` stops quietly
        raise
    except LLMRouteError as exc:
        print(f"llmroute {name}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file problem a command did not check up front: one line, not a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"llmroute {name}: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # a file a command read without checking its encoding: one line
        print(f"llmroute {name}: a file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
              f"{exc.start}); llmroute reads UTF-8", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
