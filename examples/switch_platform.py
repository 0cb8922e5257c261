"""One application, two platforms: switching Together to Fireworks is a config edit.

    python examples/switch_platform.py examples/together.toml
    python examples/switch_platform.py examples/fireworks.toml

The code below never names a platform; the tiers in the config do.
"""

import sys

from llmroute import Client, LLMRouteError

config = sys.argv[1] if len(sys.argv) > 1 else "examples/together.toml"
try:
    client = Client.from_config(config)
except LLMRouteError as exc:  # e.g. the platform's key variable is not set
    sys.exit(f"{type(exc).__name__}: {exc}")
with client:
    for tier in ("small", "large"):
        try:
            resp = client.chat.completions.create(
                model=tier, messages=[{"role": "user", "content": "In one sentence: what is a circuit breaker?"}],
                max_tokens=60, feature="switch-demo",
            )
        except LLMRouteError as exc:
            print(f"{tier}: {type(exc).__name__}: {exc}")
            continue
        print(f"{tier}: {resp.route.deployment}: {resp.choices[0].message.content}")
        print(f"      cost {resp.cost}")
