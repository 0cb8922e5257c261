"""A streamed call: `python examples/stream.py [config.toml]`."""

import sys

from llmroute import Client, LLMRouteError

config = sys.argv[1] if len(sys.argv) > 1 else "examples/local.toml"
try:
    with Client.from_config(config) as client:
        with client.chat.completions.create(
            model="large",
            messages=[{"role": "user", "content": "Write a haiku about failover."}],
            max_tokens=48,
            stream=True,
            feature="poetry",
        ) as stream:
            for chunk in stream:
                if chunk.choices:
                    print(chunk.choices[0].delta.content or "", end="", flush=True)
        final = stream.response  # assembled, with usage, route and cost
except LLMRouteError as exc:
    sys.exit(f"\n{type(exc).__name__}: {exc}")
print(f"\n{final.usage.completion_tokens} tokens from {final.route.deployment}, "
      f"first token after {final.route.attempts[-1].ttft_s:.3f}s")
