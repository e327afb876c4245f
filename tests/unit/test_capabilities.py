"""A store declares its capabilities by their interfaces; code that needs one
the store lacks gets one line naming both."""

from __future__ import annotations

from pathlib import Path

import pytest

from chit.errors import ConfigError, Unsupported
from chit.store import capabilities
from chit.store.capabilities import (
    CallerTransactions,
    FlowControl,
    Schedules,
    WriteLock,
)
from chit.store.sqlite import SQLiteStore


def test_of_hands_back_the_store_that_has_the_capability(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "chit.db"))
    try:
        for capability in (WriteLock, CallerTransactions, FlowControl, Schedules):
            assert capability.of(store) is store
    finally:
        store.close()


def test_a_missing_capability_is_one_line_naming_the_store_and_what_it_lacks() -> None:
    class BareStore:
        pass

    with pytest.raises(Unsupported) as raised:
        Schedules.of(BareStore())
    assert str(raised.value) == "BareStore does not offer schedules"
    assert isinstance(raised.value, ConfigError)  # the CLI's one-line errors


def test_every_capability_says_what_it_is() -> None:
    interfaces = [
        value
        for value in vars(capabilities).values()
        if isinstance(value, type)
        and value.__module__ == capabilities.__name__
        and getattr(value, "__abstractmethods__", None)
        and value not in (capabilities.FullStore, capabilities.Capability)
    ]
    assert len(interfaces) >= 10
    for interface in interfaces:
        what = interface.__dict__.get("what")
        assert isinstance(what, str) and what, interface
