"""Hints and Quota act as frozen dataclasses with their slot-storing __init__; scope names."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from smoothclient.hints import Hints, Quota, model
from smoothclient.hints.sfv import Item


def test_defaults_and_fields_as_given() -> None:
    """Each field lands in its own slot; omitted ones take their declared defaults."""
    quota = Quota("ietf:d", 5.0, scope="d")
    assert (quota.source, quota.remaining, quota.limit, quota.unit, quota.scope) == (
        "ietf:d",
        5.0,
        None,
        "requests",
        "d",
    )
    hints = Hints(2.0, 1.0, quotas=(quota,), origin_wide=True)
    assert (hints.retry_after, hints.remaining, hints.unit, hints.quotas, hints.origin_wide) == (
        2.0,
        1.0,
        "requests",
        (quota,),
        True,
    )
    assert Hints() == Hints(None, None, None, None, None, None, "requests", (), False)


def test_still_frozen_hashable_and_replaceable() -> None:
    """Immutable, hashable, equal by value, and ``dataclasses.replace`` still works."""
    hints = Hints(remaining=3.0, quotas=(Quota("x", 3.0),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        hints.remaining = 1.0  # type: ignore[misc]
    assert hash(hints) == hash(Hints(remaining=3.0, quotas=(Quota("x", 3.0),)))
    assert dataclasses.replace(hints, limit=9.0).limit == 9.0
    assert pickle.loads(pickle.dumps(hints)) == hints


def test_signature_is_the_dataclass_one() -> None:
    """The constructor's parameters, order and defaults are the declared fields'."""
    params = inspect.signature(Quota).parameters
    assert list(params) == [f.name for f in dataclasses.fields(Quota)]
    assert params["unit"].default == "requests"
    assert params["source"].default is inspect.Parameter.empty
    with pytest.raises(TypeError):
        Quota()  # type: ignore[call-arg]


def test_a_default_factory_gives_each_instance_its_own() -> None:
    """A field with a default factory (an RFC 9651 item's parameters) is made per instance."""
    first, second = Item(1), Item(1)
    assert first == second
    assert first.params == {}
    assert first.params is not second.params
    assert Item(2, {"q": 5}).params == {"q": 5}
    assert repr(inspect.signature(Item).parameters["params"].default) == "<factory>"


def test_scope_names_are_remembered_boundedly_and_never_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model, "_NAMES", {})
    monkeypatch.setattr(model, "MAX_NAMES", 3)
    assert model.scope_name(" core ") == "core"
    assert model.scope_name("a b") is None  # not a token
    assert model.scope_name("x" * 65) is None  # too long a name
    assert model.scope_name(None) is None
    assert model._NAMES == {" core ": "core", "a b": None, "x" * 65: None}
    assert model.scope_name(" core ") == "core"  # remembered
    assert model.scope_name("y" * 5000) is None
    assert "y" * 5000 not in model._NAMES  # a hostile value is never kept
    assert model.scope_name("search") == "search"  # the table was full: forgotten at once
    assert model._NAMES == {"search": "search"}
