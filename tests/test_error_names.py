"""The errors renamed to openai-python's names (`APITimeoutError`, `APIConnectionError`): the old names
(`TimeoutError`, `ConnectionError`, which shadowed Python's builtins) still resolve, with a
DeprecationWarning, and `from llmroute import *` no longer shadows the builtins."""

from __future__ import annotations

import builtins
import subprocess
import sys
import warnings

import pytest

import llmroute
from llmroute import errors as E
from llmroute.bench.stats import RequestRecord, error_label


@pytest.mark.parametrize("old,new", [("TimeoutError", E.APITimeoutError), ("ConnectionError", E.APIConnectionError)])
def test_old_names_are_deprecated_aliases(old, new):
    for module in (llmroute, E):
        with pytest.warns(DeprecationWarning, match=f"llmroute.{old} is deprecated.*use llmroute.API"):
            assert getattr(module, old) is new
    with pytest.warns(DeprecationWarning) as caught:
        exec(f"from llmroute.errors import {old} as alias\nassert alias is new", {"new": new})
    assert caught[0].filename == "<string>"  # the warning points at the caller's line
    assert old not in llmroute.__all__ and old not in E.__all__
    assert new.__name__ in llmroute.__all__ and getattr(llmroute, new.__name__) is new


def test_the_renamed_classes_keep_their_place_in_the_tree():
    base = (E.ProviderError, E.APIError, E.LLMRouteError, Exception, BaseException, object)
    assert E.APIConnectionError.__mro__[1:] == base
    assert E.APITimeoutError.__mro__[1:] == (E.APIConnectionError, *base)  # as in openai-python
    for cls in (E.APITimeoutError, E.APIConnectionError):
        assert not issubclass(cls, (builtins.TimeoutError, builtins.ConnectionError))
    error = E.APITimeoutError("no first token", timeout="ttft", seconds=10.0, deployment="p:m")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(llmroute.TimeoutError):  # code written against the old name still catches it
            raise error


def test_star_import_leaves_the_builtins_alone():
    namespace: dict = {}
    exec("from llmroute import *", namespace)
    assert "TimeoutError" not in namespace and "ConnectionError" not in namespace
    assert namespace["APITimeoutError"] is E.APITimeoutError
    # In a fresh interpreter, with deprecation warnings as errors: the star import uses no old name.
    code = ("from llmroute import *\nassert TimeoutError is __builtins__.TimeoutError\n"
            "assert ConnectionError is __builtins__.ConnectionError")
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], check=True, timeout=60)


def test_other_names_still_raise_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'NopeError'"):
        llmroute.NopeError  # noqa: B018
    with pytest.raises(AttributeError, match="llmroute.errors' has no attribute 'NopeError'"):
        E.NopeError  # noqa: B018


def test_recorded_names_old_and_new_read_the_same():
    assert E.current_error_name("TimeoutError") == "APITimeoutError"
    assert E.current_error_name("ConnectionError") == "APIConnectionError"
    assert E.current_error_name("RateLimitError") == "RateLimitError"
    old = RequestRecord(target="t", level=1, phase="measured", index=0, start_s=0.0, ok=False, error_type="ConnectionError")
    new = RequestRecord(target="t", level=1, phase="measured", index=0, start_s=0.0, ok=False, error_type="APIConnectionError")
    assert error_label(old) == error_label(new) == "APIConnectionError"
