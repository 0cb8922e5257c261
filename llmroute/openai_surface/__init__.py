"""What makes code written for openai-python run with llmroute, beyond `create()`.

`construction` (what a client is built from: `Client(base_url=..., api_key=...)`, `Client()` from
`$LLMROUTE_CONFIG` or `./llmroute.toml`, the call options of `with_options`), `resources`
(`chat.completions` with `parse`, `stream`, `with_raw_response`, `with_streaming_response`),
`raw_responses` and `structured`. Public API layer: these modules wrap `create()`, never send
anything of their own, and are loaded with the first client (or on first use), not by `import llmroute`.
"""
