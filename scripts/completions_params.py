"""The parameters of `chat.completions.create()`: one table, from which `scripts/gen_completions.py`
writes llmroute/completions.py (for `Completions` and `AsyncCompletions`: the three `stream`
overloads and the implementation each). A data module: no logic, imports nothing.

To add or change a parameter: edit a row here, run `.venv/bin/python scripts/gen_completions.py`,
commit both files. `scripts/gen_completions.py --check` (run by scripts/test.sh) fails while
llmroute/completions.py is stale; tests/test_completions_table.py checks that the OpenAI rows are the
parameters `llmroute._call.validate` checks and sends, and the llmroute rows the ones it keeps.

Every parameter is keyword-only. A row is (name, annotation as written in the signature); every
parameter but the required ones defaults to None, meaning "not given" (`create()` drops it). `stream`
is not a row: the generator writes its overloads (Literal[False] -> ChatCompletion, Literal[True] ->
the client's stream class, bool -> either).
"""

# Required, before `stream`.
REQUIRED = (
    ("messages", "Messages"),
    ("model", "str"),
)

# OpenAI Chat Completions parameters: checked by llmroute._call.validate and sent on (OPENAI_PARAMS).
OPENAI = (
    ("audio", "Mapping[str, Any] | None"),
    ("frequency_penalty", "float | None"),
    ("function_call", "str | Mapping[str, Any] | None"),
    ("functions", "Sequence[Mapping[str, Any]] | None"),
    ("logit_bias", "Mapping[str, float] | None"),
    ("logprobs", "bool | None"),
    ("max_completion_tokens", "int | None"),
    ("max_tokens", "int | None"),
    ("modalities", "Sequence[str] | None"),
    ("n", "int | None"),
    ("parallel_tool_calls", "bool | None"),
    ("prediction", "Mapping[str, Any] | None"),
    ("presence_penalty", "float | None"),
    ("prompt_cache_key", "str | None"),
    ("reasoning_effort", "str | None"),
    ("response_format", "Mapping[str, Any] | None"),
    ("safety_identifier", "str | None"),
    ("seed", "int | None"),
    ("service_tier", "str | None"),
    ("stop", "str | Sequence[str] | None"),
    ("store", "bool | None"),
    ("stream_options", "Mapping[str, Any] | None"),
    ("temperature", "float | None"),
    ("tool_choice", "str | Mapping[str, Any] | None"),
    ("tools", "Sequence[Mapping[str, Any]] | None"),
    ("top_logprobs", "int | None"),
    ("top_p", "float | None"),
    ("user", "str | None"),
    ("verbosity", "str | None"),
    ("web_search_options", "Mapping[str, Any] | None"),
)

# llmroute's own: read by llmroute, never sent as body fields (validate.LLMROUTE_ARGS, and the cache's
# arguments, which cache.cache_policy.pop_cache_args takes out first).
LLMROUTE = (
    ("feature", "str | None"),
    ("metadata", "Mapping[str, str] | None"),
    ("pool", "str | None"),
    ("timeout", "float | None"),
    ("extra_body", "Mapping[str, Any] | None"),
    ("extra_headers", "Mapping[str, str] | None"),
    ("extra_query", "Mapping[str, Any] | None"),
    ("cache", 'bool | Literal["always"] | None'),
    ("cache_ttl_s", "float | None"),
)

# The implementation's docstring (both classes).
DOC = """An OpenAI Chat Completions call (see `llmroute._call.validate` for what is checked). llmroute's
own: `feature` and `metadata` (kept in the ledger), `pool`, `timeout` (seconds for the whole
call), `extra_body` (more body fields), `extra_headers`, `extra_query` (URL query parameters),
`cache` (True, False or "always") and `cache_ttl_s` (docs/cache.md)."""
