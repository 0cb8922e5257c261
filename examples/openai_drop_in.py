"""Code written for openai-python, run with llmroute: only the client line differs.

    llmroute local serve &                       # a llama.cpp server on 127.0.0.1:8080
    python examples/openai_drop_in.py [http://127.0.0.1:8080/v1]
"""

import sys

from pydantic import BaseModel

import llmroute

base_url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/v1"


class City(BaseModel):
    name: str
    country: str


# was: client = openai.OpenAI(base_url=base_url, api_key="sk-no-key-required")
with llmroute.Client(base_url=base_url, api_key="sk-no-key-required", max_retries=1,
                     prices={"gemma-3-270m": {"input_per_million": 0, "output_per_million": 0}}) as client:
    model = client.models.list().data[0].id
    resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello."}],
                                          max_tokens=16)
    print(model, "->", resp.choices[0].message.content)
    print("tokens:", resp.usage.total_tokens, "cost:", resp.cost.amount, resp.cost.currency)

    stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to 3."}],
                                            max_tokens=16, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()

    raw = client.chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                                           max_tokens=4)
    print("status", raw.status_code, "server", raw.headers.get("server"))

    try:
        city = client.chat.completions.parse(model=model, response_format=City, max_tokens=200, temperature=0,
                                             messages=[{"role": "user", "content": "A city in France, as JSON."}])
        print("parsed:", city.choices[0].message.parsed)
    except llmroute.LengthFinishReasonError as exc:  # a tiny model may ramble past max_tokens
        print("not parsed:", exc)
