"""`except` clauses written for openai-python catch llmroute's errors by the same names, side by side on a
loopback server that answers with the platform's error statuses. (openai-python's full tree, held
deployments and the names llmroute lacks are another part of issue 22.)"""

from __future__ import annotations

import pytest

from tests.openai_compat.conftest import make
from tests.servers.fault import status

MESSAGES = [{"role": "user", "content": "x"}]


@pytest.mark.parametrize("code, name", [(400, "BadRequestError"), (401, "AuthenticationError"),
                                        (403, "PermissionDeniedError"), (404, "NotFoundError"),
                                        (429, "RateLimitError")])
def test_an_error_status_raises_the_class_of_the_same_name(sdk, fault_server, code, name):
    with make(sdk, fault_server.base_url, "fault-model", max_retries=0) as client:
        fault_server.push(status(code, message="scripted refusal"))
        try:
            client.chat.completions.create(model="fault-model", messages=MESSAGES)
        except getattr(sdk.module, name) as e:  # the user's except clause, unchanged
            caught = e
        assert caught.status_code == code and "scripted refusal" in str(caught)
