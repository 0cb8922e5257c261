"""Every fenced block in README.md and docs/*.md is executed, so an example that stops working fails CI.

How each block is run (by the language after the opening fence):

- ``toml``: loaded with `Config.from_dict` (API-key variables set to test values). A block with a
  ``[providers...]`` table is a whole config and must load as written. A block without one is a
  fragment: it is merged over the README's main config (the block marked ``main-config``) and the
  result must load.
- ``python``: run as a script (`python -c`), in a directory whose ``llmroute.toml`` is the README's
  main config with every provider pointed at its loopback server in tests/servers (same kind, same
  wire format), and which holds a ledger with a few calls (``llmroute-ledger.db``), ``prompts.jsonl``
  and a bench result (``results.json``, also as ``baseline.json``, ``today.json``, ...).
- ``bash``/``sh``/``shell``/``console``/``cron``: every ``llmroute ...`` command in the block (also
  ``.venv/bin/llmroute``, and inside ``cd X && llmroute ... || mail ...`` lines: the command is cut at
  ``&&``, ``||``, ``|``, ``;``, ``>``) runs in that same directory and must exit 0. Other commands in the
  block are not run. A shell block with no ``llmroute`` command must carry a ``skip`` directive.
- ``sql``: every statement runs against the directory's ledger (SQLite).
- ``jsonl``: the block is a prompts file; `llmroute.bench.workload.load_prompts` must accept it.
- ``text``: not run (command synopses, formulas, sample output). A block with no language fails:
  label it.

Directives: HTML comments on the lines directly above the opening fence, one per comment::

    <!-- test: skip: needs a real API key -->     not run; the reason is required
    <!-- test: main-config -->                    this TOML block is the config the others run against
    <!-- test: args --requests 2 --concurrency 1 -->   appended to every llmroute command of the block
                                                  (argparse keeps the last value, so this bounds a
                                                  10-minute bench to a few requests)
    <!-- test: exit 0,1 -->                       accepted exit codes (default 0), e.g. a regression gate

Each block is one test whose id is ``FILE:LINE``; a failure prints the block and the output.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"bash", "sh", "shell", "console", "cron"}
KNOWN_LANGS = SHELL_LANGS | {"toml", "python", "sql", "jsonl", "text"}
# Platform kind -> the loopback server (tests/servers/registry.py) that speaks its wire format.
LOOPBACK = {
    "together": "together", "fireworks": "fireworks", "siliconflow": "siliconflow", "bailian": "bailian",
    "vllm": "vllm", "sglang": "sglang", "tgi": "tgi", "ollama": "ollama", "llamacpp": "openai",
    "openai-compatible": "openai",
}
# Environment variables the README's configs name, set to test values (never real keys).
KEY_VARS = ("TOGETHER_API_KEY", "FIREWORKS_API_KEY", "SILICONFLOW_API_KEY", "DASHSCOPE_API_KEY")
TIMEOUT_S = 240


@dataclass
class Block:
    path: Path
    line: int  # line of the opening fence, 1-based
    lang: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def describe(self) -> str:
        return f"{self.name} ({self.lang or 'no language'}):\n{self.code}"


_FENCE = re.compile(r"^```(\S*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*test:\s*(.*?)\s*-->\s*$")


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the `<!-- test: ... -->` directives above each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1).lower()
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: code block is never closed")
        directives: dict[str, str] = {}
        k = start - 1
        while k >= 0 and _DIRECTIVE.match(lines[k]):
            body = _DIRECTIVE.match(lines[k]).group(1)  # type: ignore[union-attr]
            key, _, value = body.partition(" ")
            key = key.rstrip(":")
            if key not in ("skip", "main-config", "args", "exit"):
                raise AssertionError(f"{path.relative_to(ROOT)}:{k + 1}: unknown test directive {key!r}")
            directives[key] = value.strip().lstrip(":").strip()
            k -= 1
        blocks.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:j]) + "\n", directives))
        i = j + 1
    return blocks


ALL_BLOCKS = [b for p in DOCS for b in parse_blocks(p)]
# `text` blocks are not run, so they are not tests either.
RUN_BLOCKS = [b for b in ALL_BLOCKS if b.lang != "text"]


def _main_config_block() -> Block:
    marked = [b for b in ALL_BLOCKS if "main-config" in b.directives]
    assert len(marked) == 1, f"exactly one block must be marked <!-- test: main-config -->, found {len(marked)}"
    return marked[0]


# -- loopback rewrite -------------------------------------------------------------------------------
def loopback_config_text(text: str, servers: Any) -> str:
    """The config text with every [providers.X] table's base_url and api_key set to X's loopback server."""
    doc = tomllib.loads(text)
    out: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        header = re.match(r"^\s*\[providers\.([A-Za-z0-9_-]+)\]\s*(#.*)?$", line)
        if header:
            current = header.group(1)
            prov = doc["providers"][current]
            platform = LOOPBACK.get(prov["kind"])
            assert platform, f"no loopback server for provider kind {prov['kind']!r}: add it to LOOPBACK"
            server = servers.get(platform)
            url = server.native_url if prov.get("protocol") == "native" else server.base_url
            out.append(line)
            out.append(f'base_url = "{url}"')
            key = getattr(server, "api_key", None) or getattr(server, "default_api_key", None)
            if key:
                out.append(f'api_key = "{key}"')
            continue
        if re.match(r"^\s*\[", line):
            current = None
        if current is not None and re.match(r"^\s*(base_url|api_key)\s*=", line):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for var in KEY_VARS:
        env[var] = "sk-test-readme"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(args: list[str], cwd: Path, block: Block, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                              input=stdin)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: timed out after {TIMEOUT_S}s: {args}\n{block.describe()}")


@pytest.fixture(scope="module")
def workspace(loopback_servers, tmp_path_factory):
    """A directory laid out as the README assumes: llmroute.toml (loopback), a ledger, prompts, bench results.

    Blocks run in a copy of it (see test_block).
    """
    ws = tmp_path_factory.mktemp("readme")
    main = _main_config_block()
    (ws / "llmroute.toml").write_text(loopback_config_text(main.code, loopback_servers))
    (ws / "prompts.jsonl").write_text(
        '{"prompt": "Summarise the French revolution in three sentences."}\n'
        '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}\n'
    )
    calls = (
        "from llmroute import Client\n"
        "with Client.from_config('llmroute.toml') as c:\n"
        "    for feature, model in (('keyword-extraction', 'small'), ('report-generation', 'large'), (None, 'small')):\n"
        "        c.chat.completions.create(model=model, feature=feature, metadata={'tenant': 'acme'},\n"
        "                                  messages=[{'role': 'user', 'content': 'say hello there'}], max_tokens=16)\n"
    )
    setup = Block(ws, 0, "python", calls)
    out = _run([sys.executable, "-c", calls], ws, setup)
    assert out.returncode == 0, f"workspace ledger set-up failed:\n{out.stderr}"
    out = _run([sys.executable, "-m", "llmroute.cli", "bench", "--config", "llmroute.toml", "--target", "small",
                "--concurrency", "1", "--requests", "3", "--warmup", "0", "--max-tokens", "16", "--quiet",
                "--out", "results.json"], ws, setup)
    assert out.returncode == 0, f"workspace bench set-up failed:\n{out.stdout}\n{out.stderr}"
    for name in ("baseline.json", "bench-baseline.json", "last-week.json", "today.json", "nightly.json"):
        shutil.copy(ws / "results.json", ws / name)
    return ws


# -- the llmroute commands of a shell block -----------------------------------------------------------
_CUT = {"&&", "||", "|", ";", ">", ">>", "<", "2>&1"}


def llmroute_commands(code: str) -> list[list[str]]:
    """Each `llmroute ...` command in a shell/cron block, as argv after `llmroute`."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands: list[list[str]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError as e:
            raise AssertionError(f"cannot split shell line {line!r}: {e}") from None
        for i, word in enumerate(words):
            if word == "llmroute" or word.endswith("/llmroute"):
                argv: list[str] = []
                for w in words[i + 1:]:
                    if w in _CUT or w.startswith(">"):
                        break
                    argv.append(w)
                commands.append(argv)
    return commands


# -- one test per block -------------------------------------------------------------------------------
@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.name for b in RUN_BLOCKS])
def test_block(block: Block, request: pytest.FixtureRequest) -> None:
    if "skip" in block.directives:
        assert block.directives["skip"], f"{block.name}: a skip directive needs a reason (<!-- test: skip: why -->)"
        pytest.skip(f"{block.name}: {block.directives['skip']}")
    assert block.lang, f"{block.name}: fenced block has no language; label it (toml, python, bash, sql, jsonl, text)"
    assert block.lang in KNOWN_LANGS, (
        f"{block.name}: language {block.lang!r} is not run by tests/test_readme.py; use one of "
        f"{sorted(KNOWN_LANGS)} or add <!-- test: skip: why -->"
    )
    if block.lang == "toml":
        _check_toml(block)
        return
    if block.lang == "jsonl":
        from llmroute.bench.workload import load_prompts

        path = request.getfixturevalue("tmp_path") / "block.jsonl"
        path.write_text(block.code)
        assert load_prompts(path), f"{block.name}: no prompts read"
        return
    # Each block gets its own copy, so what one block writes (results.json, a report) never feeds another.
    ws = request.getfixturevalue("tmp_path") / "ws"
    shutil.copytree(request.getfixturevalue("workspace"), ws)
    if block.lang == "python":
        out = _run([sys.executable, "-c", block.code], ws, block)
        assert out.returncode == 0, f"{block.describe()}\n--- stderr:\n{out.stderr[-4000:]}"
    elif block.lang == "sql":
        db = sqlite3.connect(ws / "llmroute-ledger.db")
        try:
            for statement in _sql_statements(block.code):
                db.execute(statement).fetchall()
        except sqlite3.Error as e:
            pytest.fail(f"{block.describe()}\n--- {e}")
        finally:
            db.close()
    else:
        commands = llmroute_commands(block.code)
        assert commands, (f"{block.name}: shell block has no llmroute command; add "
                          f"<!-- test: skip: why --> above it\n{block.describe()}")
        extra = shlex.split(block.directives.get("args", ""))
        accepted = {int(c) for c in block.directives.get("exit", "0").split(",")}
        for argv in commands:
            full = [sys.executable, "-m", "llmroute.cli", *argv, *extra]
            out = _run(full, ws, block)
            assert out.returncode in accepted, (
                f"{block.name}: `llmroute {' '.join(argv + extra)}` exited {out.returncode} "
                f"(accepted: {sorted(accepted)})\n--- stdout:\n{out.stdout[-3000:]}\n--- stderr:\n{out.stderr[-3000:]}"
            )


def _sql_statements(code: str) -> list[str]:
    text = "\n".join(line for line in code.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


def _check_toml(block: Block) -> None:
    from llmroute.config import Config
    from llmroute.errors import ConfigError

    try:
        data = tomllib.loads(block.code)
    except tomllib.TOMLDecodeError as e:
        pytest.fail(f"{block.describe()}\n--- not valid TOML: {e}")
    if "providers" not in data:
        data = _merge(tomllib.loads(_main_config_block().code), data)
    saved = {v: os.environ.get(v) for v in KEY_VARS}
    os.environ.update({v: "sk-test-readme" for v in KEY_VARS})
    try:
        Config.from_dict(data, source=block.name)
    except ConfigError as e:
        pytest.fail(f"{block.describe()}\n--- {e}")
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def test_harness_reads_directives_and_cuts_commands(tmp_path: Path) -> None:
    """The harness itself: directives attach to the next block, commands are cut at shell operators."""
    doc = tmp_path / "x.md"
    doc.write_text("text\n<!-- test: skip: needs a GPU -->\n```bash\nnvidia-smi\n```\n\n```toml\na = 1\n```\n")
    first, second = parse_blocks(doc)
    assert first.directives == {"skip": "needs a GPU"} and first.lang == "bash" and first.line == 3
    assert second.directives == {} and second.lang == "toml"
    cmds = llmroute_commands("0 3 * * * cd /srv && .venv/bin/llmroute bench --target small \\\n  --out x.json "
                             "|| mail -s x a@b < /dev/null\nllmroute plan --help  # sizing\necho done\n")
    assert cmds == [["bench", "--target", "small", "--out", "x.json"], ["plan", "--help"]]


def test_a_broken_block_fails_naming_the_block(tmp_path: Path) -> None:
    """The README's own bug, replayed: a tier naming a provider the config lacks fails with FILE:LINE."""
    doc = tmp_path / "x.md"
    doc.write_text('```toml\n[providers.together]\nkind = "together"\n[tiers.t]\n'
                   'deployments = ["fireworks:accounts/fireworks/models/llama-v3p3-70b-instruct"]\n```\n')
    (block,) = parse_blocks(doc)
    block.path = ROOT / "README.md"  # names are relative to the repository
    with pytest.raises(pytest.fail.Exception) as info:
        _check_toml(block)
    assert "README.md:1" in str(info.value) and "unknown provider 'fireworks'" in str(info.value)
