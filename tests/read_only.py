"""A read-only folder for tests: a read-only bind mount when running as root with mount rights (root
ignores permission bits), else a chmod 555 folder. Skips the test when neither can stop writes."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[Path]:
    folder.mkdir(exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)],
                                                   capture_output=True).returncode == 0
    if not mounted:
        if os.geteuid() == 0:
            pytest.skip("root without mount rights: cannot make a read-only folder")
        folder.chmod(0o555)
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=False)
        else:
            folder.chmod(0o755)
