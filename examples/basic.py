"""A basic call: `python examples/basic.py [config.toml]` (default: examples/local.toml)."""

import sys

from llmroute import Client, LLMRouteError

config = sys.argv[1] if len(sys.argv) > 1 else "examples/local.toml"
try:
    with Client.from_config(config) as client:
        resp = client.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "提取这句话的关键词：今天上海下雨了"}],
            feature="keyword-extraction",
            max_tokens=32,
        )
except LLMRouteError as exc:  # every failure is typed and says what is at fault
    sys.exit(f"{type(exc).__name__}: {exc}")
print(resp.choices[0].message.content)
print("route:", resp.route.deployment, resp.route.reason)
print("usage:", resp.usage.prompt_tokens, "in,", resp.usage.completion_tokens, "out")
print("cost:", resp.cost)
