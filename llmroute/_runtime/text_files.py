"""The text files llmroute is given (configs, prompts, outcomes): UTF-8, or one clear error.

`not_utf8` turns the `UnicodeDecodeError` of a file that is not UTF-8 into a `ConfigError` of one line
naming the file and the first bad byte, for every reader (the config loader, `calibrate --write`,
`report --config`, the router's config reader). It never reads a file itself.
"""

from __future__ import annotations

from llmroute.errors import ConfigError

__all__ = ["not_utf8"]


def not_utf8(exc: UnicodeDecodeError, path: str) -> ConfigError:
    """A TOML file that is not UTF-8, in one line naming the file and the first bad byte."""
    return ConfigError(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                       "TOML files must be UTF-8", path=path)
