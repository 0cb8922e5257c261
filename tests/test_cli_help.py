"""Every `llmroute` command's options have help text and show their defaults (`--help`)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from llmroute.cli import COMMANDS, main
from llmroute._runtime.cli_help import HelpFormatter, missing_help

# Commands whose first argument picks a sub-parser built apart from the main one.
EXTRA = [["bench", "smoke"], ["bench", "compare"]]


class _Caught(Exception):
    pass


def _parser_of(monkeypatch, argv):
    """The parser a command builds, caught where it parses (the command itself does not run)."""
    seen = []

    def parse_args(self, args=None, namespace=None):
        seen.append(self)
        raise _Caught()

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(_Caught):
            main(argv)
    monkeypatch.undo()
    assert seen, f"llmroute {' '.join(argv)} built no parser"
    return seen[0]


@pytest.mark.parametrize("argv", [[name, "x"] for name in COMMANDS] + EXTRA, ids=lambda a: " ".join(a))
def test_every_option_has_help_and_shows_its_default(monkeypatch, argv):
    parser = _parser_of(monkeypatch, argv)
    assert missing_help(parser) == []
    assert parser.formatter_class is HelpFormatter


def test_help_prints_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["local", "serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--port" in out and "(default: 8080)" in out and "(default: 127.0.0.1)" in out
