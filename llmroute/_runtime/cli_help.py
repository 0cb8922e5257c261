"""How every `llmroute` command prints its help: descriptions as written, and each option's default.

`with_defaults(parser)` gives a parser (and its subcommands' parsers) the formatter that appends
"(default: ...)" to every option that has one; `missing_help(parser)` lists the options without help
text (tests/test_cli_help.py keeps it empty). Plain argparse; no I/O.
"""

from __future__ import annotations

import argparse
from typing import List

__all__ = ["HelpFormatter", "with_defaults", "missing_help", "subparsers_of"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions and epilogs as written; "(default: X)" after each option's help when X is a value."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS) or action.default == []:
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text + " (default: %(default)s)"
        return text


def subparsers_of(parser: argparse.ArgumentParser) -> List[argparse.ArgumentParser]:
    found: List[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found.append(sub)
                found.extend(subparsers_of(sub))
    return found


def with_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, and every subcommand parser under it, printing defaults in their help."""
    for p in [parser, *subparsers_of(parser)]:
        p.formatter_class = HelpFormatter
    return parser


def missing_help(parser: argparse.ArgumentParser) -> List[str]:
    """'prog: --option' for each option or argument (of `parser` and its subcommands) without help."""
    out = []
    for p in [parser, *subparsers_of(parser)]:
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)):
                continue
            if not action.help:
                out.append(f"{p.prog}: {'/'.join(action.option_strings) or action.dest}")
    return out
