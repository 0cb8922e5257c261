"""`accounting.frozen.Fill` and `types._CallRecord._filled`/`_set`: the one-step constructors the call
core uses on its hot path give exactly what the ordinary constructors give."""

from __future__ import annotations

import copy
import pickle
from dataclasses import FrozenInstanceError, asdict, dataclass, field, replace
from decimal import Decimal

import pytest

from llmroute.accounting.cost_value import Cost
from llmroute.accounting.frozen import Fill
from llmroute.accounting.ledger import LedgerRecord
from llmroute.types import Attempt, Route, Usage


def test_a_cost_filled_with_every_field_is_the_cost_init_makes() -> None:
    values = dict(amount=Decimal("0.5"), currency="USD", input_tokens=3, output_tokens=4, cached_tokens=1,
                  reasoning_tokens=0, input_amount=Decimal("0.2"), cached_amount=Decimal("0.0"),
                  output_amount=Decimal("0.3"), estimated=True, priced=True, price_version="v1",
                  price_confirmed=False, by_currency={"USD": Decimal("0.5")}, cache_write_tokens=0,
                  cache_write_amount=Decimal(0), explicit_cache=False, thinking=True, tier_above=None)
    made = Fill(Cost).make(dict(values))
    plain = Cost(**values)
    assert made == plain
    assert asdict(made) == asdict(plain) and repr(made) == repr(plain) and str(made) == str(plain)
    assert replace(made, currency="EUR") == replace(plain, currency="EUR")
    assert pickle.loads(pickle.dumps(made)) == plain and copy.deepcopy(made) == plain
    with pytest.raises(FrozenInstanceError):
        made.amount = Decimal(1)  # type: ignore[misc]


def test_a_record_filled_with_some_fields_takes_the_defaults_and_fresh_factories() -> None:
    fill = Fill(LedgerRecord)
    first = fill.make({"ts": 1.0, "request_id": "r", "status": "error"})
    second = fill.make({"ts": 1.0, "request_id": "r", "status": "error"})
    assert first == LedgerRecord(ts=1.0, request_id="r", status="error")
    assert first.to_row() == LedgerRecord(ts=1.0, request_id="r", status="error").to_row()
    assert first.metadata == {} and first.metadata is not second.metadata  # default_factory: one each


def test_unknown_and_missing_fields_are_refused_as_init_would() -> None:
    fill = Fill(LedgerRecord)
    with pytest.raises(TypeError, match="unknown fields \\['nope'\\]"):
        fill.make({"ts": 1.0, "request_id": "r", "nope": 1})
    with pytest.raises(TypeError, match="missing fields \\['request_id'\\]"):
        fill.make({"ts": 1.0})


def test_a_dataclass_with_post_init_is_not_filled() -> None:
    @dataclass(frozen=True)
    class Checked:
        n: int
        tags: list[int] = field(default_factory=list)

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("n")

    with pytest.raises(TypeError, match="__post_init__"):
        Fill(Checked)


def test_record_from_cost_is_the_record_init_makes() -> None:
    cost = Cost(amount=Decimal("0.1"), currency="USD", input_tokens=5, output_tokens=2, price_version="p")
    kw = dict(ts=2.0, request_id="q", attempt=2, metadata={"a": "b"}, status="ok", cost_saved=None)
    made = LedgerRecord.from_cost(cost, **kw)
    plain = LedgerRecord(input_tokens=5, output_tokens=2, cached_tokens=0, reasoning_tokens=0, cost=Decimal("0.1"),
                         currency="USD", estimated=False, priced=True, price_version="p", cache_write_tokens=0,
                         price_detail=None, **kw)  # type: ignore[arg-type]
    assert made == plain and made.to_json() == plain.to_json()


def test_attempt_and_route_filled_dump_and_set_as_validated_ones() -> None:
    values = dict(deployment="p:m", provider="p", model="m", tier="t", number=2, started_at=5.0, note=None)
    filled, validated = Attempt._filled(**values), Attempt(**values)  # type: ignore[arg-type]
    assert filled == validated and filled.model_dump() == validated.model_dump()
    assert filled.model_fields_set == validated.model_fields_set
    assert list(filled.model_dump()) == list(validated.model_dump())  # the declared order
    usage = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    filled._set(usage=usage, billed=True)
    validated.usage, validated.billed = usage, True
    filled.status = validated.status = "error"
    assert filled.model_dump() == validated.model_dump()
    assert filled.model_fields_set == validated.model_fields_set
    assert filled.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)

    route, plain_route = Route._filled(pool="batch", tier="t"), Route(pool="batch", tier="t")
    route.attempts.append(filled)
    assert Route._filled(pool="batch").attempts == []  # default factories: a list of its own each
    plain_route.attempts.append(validated)
    assert route.model_dump() == plain_route.model_dump() and route.model_dump_json() == plain_route.model_dump_json()
    with pytest.raises(ValueError):
        route.not_a_field = 1  # pydantic's own refusal, as before
