"""Async use: several calls at once, one of them streamed. `python examples/async_calls.py [config.toml]`."""

import asyncio
import sys

from llmroute import AsyncClient


async def main(config: str) -> None:
    async with AsyncClient.from_config(config) as client:
        questions = ["Classify the sentiment: 'great battery life'", "把这句话翻译成英文：谢谢你的帮助"]
        answers = await asyncio.gather(*[
            client.chat.completions.create(model="small", messages=[{"role": "user", "content": q}], max_tokens=16)
            for q in questions
        ])
        for q, a in zip(questions, answers):
            print(f"{q} -> {a.choices[0].message.content!r} ({a.route.deployment})")
        stream = await client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, stream=True
        )
        async with stream:
            async for chunk in stream:
                if chunk.choices:
                    print(chunk.choices[0].delta.content or "", end="", flush=True)
        print(f"\nusage: {stream.response.usage.total_tokens} tokens")


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "examples/local.toml"))
