"""The cold start of a client: `from llmroute import Client` + `Client(config)`, and the first call after it.

Fresh interpreters with bytecode cached (the first run of each row fills the cache and is not counted),
the plain config of benchmarks/client_overhead.py (`_full_config`: one provider, one tier, a price, a memory
ledger), medians of `--runs`:

* `import llmroute`, `from llmroute import Client` and `from llmroute import Client` + `Client(config)`: wall
  time from before the import, and the peak RSS added over a bare interpreter;
* in one interpreter, `Client(config)` and then its first and second plain call (read as a stream, the
  default) against a loopback server in another process: where the work a client leaves to first use went;
* the floor pydantic sets under any of that: `from pydantic import BaseModel` alone, and with one model
  validated (pydantic's first schema build also loads its plugin scan: importlib.metadata, email, zipfile);
* with `--importtime N`, the N largest cumulative `-X importtime` entries of `Client(config)`.

    python benchmarks/client_cold.py [--runs 7] [--importtime 30] [--json benchmarks/out/client_cold.json]

Bounded: (rows x (runs + 1)) interpreters, two calls each on the call row. Only 127.0.0.1 is contacted: the
audit hook of client_overhead.py runs in every interpreter and the run prints how many attempts it refused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.client_overhead import (GUARD_SRC, MESSAGES, PEAK_RSS_KB, _bytecode_env,  # noqa: E402
                                        _full_config, start_server, write_json)

PLAIN_PIECES = 16  # content pieces of the loopback server's answer (sent as that many chunks when streamed)

# Each row's code calls `mark(phase)` at the end of each phase: wall and CPU time (the process's, every
# thread) since the previous mark, the first phase timed from just before the row's first import.
ROWS = {
    "import llmroute": "import llmroute\nmark('start')",
    "from llmroute import Client": "from llmroute import Client\nmark('start')",
    "from llmroute import Client; Client(config)":
        "from llmroute import Client\nc = Client(config={config!r})\nmark('start')\nc.close()",
    "Client(config), then its first and second call":
        "from llmroute import Client\nc = Client(config={served!r})\nmark('start')\n"
        "c.chat.completions.create(model='small', messages={messages!r}, max_tokens=64)\nmark('first call')\n"
        "c.chat.completions.create(model='small', messages={messages!r}, max_tokens=64)\nmark('second call')\n"
        "c.close()",
    "floor: from pydantic import BaseModel": "from pydantic import BaseModel\nmark('start')",
    "floor: pydantic + one model validated":
        "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int = 1\nM(x=2)\nmark('start')",
}

PROBE = GUARD_SRC + """
import json, time
marks = {{}}
def mark(name):
    global _wall, _cpu
    wall, cpu = time.perf_counter(), time.process_time()
    marks[name] = [wall - _wall, cpu - _cpu]
    _wall, _cpu = wall, cpu
_wall, _cpu = time.perf_counter(), time.process_time()
{body}
print(json.dumps({{"marks": marks, "peak_kb": """ + PEAK_RSS_KB + """, "refused": len(_blocked)}}))
"""


def _run(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    got = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=_bytecode_env(), timeout=120)
    if got.returncode != 0:
        raise SystemExit(f"a cold interpreter failed: {got.stderr.strip()[-600:]}")
    return got


def measure(runs: int, url: str) -> Dict[str, Any]:
    """Every row, `runs` times each (plus the one that fills the bytecode cache): medians and ranges."""
    config, served = _full_config("http://127.0.0.1:9/v1", 4), _full_config(url, 4)
    bare = [int(_run(GUARD_SRC + f"print({PEAK_RSS_KB})").stdout) for _ in range(runs + 1)][1:]
    base_kb = statistics.median(bare)
    out: Dict[str, Any] = {"bare_peak_mib": base_kb / 1024, "refused": 0}
    for label, body in ROWS.items():
        code = PROBE.format(body=body.format(config=config, served=served, messages=MESSAGES))
        walls: Dict[str, List[float]] = {}
        cpus: Dict[str, List[float]] = {}
        kbs: List[int] = []
        for run in range(runs + 1):
            got = json.loads(_run(code).stdout.strip().splitlines()[-1])
            out["refused"] += got["refused"]
            if run:
                for name, (wall, cpu) in got["marks"].items():
                    walls.setdefault(name, []).append(wall * 1000)
                    cpus.setdefault(name, []).append(cpu * 1000)
                kbs.append(got["peak_kb"])
        out[label] = {"phases": {name: {"wall_ms": statistics.median(v), "wall_ms_range": [min(v), max(v)],
                                        "cpu_ms": statistics.median(cpus[name])} for name, v in walls.items()},
                      "rss_added_mib": (statistics.median(kbs) - base_kb) / 1024}
    return out


def importtime(top: int, config: Dict[str, Any]) -> List[tuple[int, int, str]]:
    """(cumulative µs, self µs, indented name) of the `top` largest entries of `Client(config)`'s imports."""
    code = GUARD_SRC + f"from llmroute import Client\nClient(config={config!r}).close()\n"
    _run(code)  # fills the bytecode cache
    rows = []
    for line in _run(code, "-X", "importtime").stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:"):].split("|")
        rows.append((int(cumulative_us), int(self_us), name.rstrip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per row (default 7)")
    parser.add_argument("--importtime", type=int, default=0, help="print the N largest -X importtime entries")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "client_cold.json"))
    args = parser.parse_args(argv)
    proc, url = start_server(PLAIN_PIECES)
    try:
        results = measure(args.runs, url)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)
    results["loadavg"] = list(os.getloadavg())
    print(f"Cold start, {args.runs} fresh interpreters per row (bytecode cached; load average "
          f"{results['loadavg'][0]:.1f}): median wall (min-max) and median CPU ms per phase, peak RSS added over a bare "
          f"interpreter "
          f"({results['bare_peak_mib']:.1f} MiB)")
    for label, got in results.items():
        if not isinstance(got, dict):
            continue
        phases = "; ".join(f"{name} {p['wall_ms']:.0f} ({p['wall_ms_range'][0]:.0f}-{p['wall_ms_range'][1]:.0f}), "
                           f"CPU {p['cpu_ms']:.0f}" for name, p in got["phases"].items())
        print(f"  {label:<48} {phases} ms; +{got['rss_added_mib']:.1f} MiB")
    if args.importtime:
        print(f"\n-X importtime of `from llmroute import Client; Client(config)`, {args.importtime} largest "
              "(cumulative / self ms):")
        for cumulative, own, name in importtime(args.importtime, _full_config("http://127.0.0.1:9/v1", 4)):
            print(f"  {cumulative / 1000:7.1f} {own / 1000:6.1f}  {name}")
    print(f"network: refused non-loopback attempts: {results['refused']}")
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
