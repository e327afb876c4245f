"""The dashboard's sessions and the server's secrets (`Sessions`, `Secrets`),
on every backend; API keys are in test_contract.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chit.jobs import NewApiKey
from chit.store.capabilities import ApiKeys, NewSession, Secrets, Sessions
from support.store_backends import needs


def at(seconds: float) -> datetime:
    return datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


@needs(Sessions)
def test_a_session_is_touched_within_its_bounds_and_ends(store: Sessions) -> None:
    store.create_session(NewSession("s1", "k1", idle_seconds=60, max_seconds=200), now=at(0))
    touched = store.touch_session("s1", 60, now=at(50))
    assert touched is not None and touched.key_hash == "k1"
    assert touched.created_at == at(0) and touched.expires_at == at(200)
    assert at(60) <= touched.idle_expires_at <= at(110)
    assert store.touch_session("s1", 60, now=at(170)) is None  # idle past 110 at most
    store.create_session(NewSession("s2", "k1", idle_seconds=60, max_seconds=100), now=at(0))
    for seconds in (50, 90):
        assert store.touch_session("s2", 60, now=at(seconds)) is not None
    assert store.touch_session("s2", 60, now=at(100)) is None  # its absolute expiry
    assert store.touch_session("nope", 60, now=at(1)) is None


@needs(Sessions)
def test_signing_out_deletes_the_session_once(store: Sessions) -> None:
    store.create_session(NewSession("s1", "k1", idle_seconds=60, max_seconds=200))
    assert store.touch_session("s1", 60) is not None
    assert store.delete_session("s1") is True
    assert store.delete_session("s1") is False
    assert store.touch_session("s1", 60) is None


@needs(Sessions, ApiKeys)
def test_revoking_a_key_ends_its_sessions(store: Sessions) -> None:
    assert isinstance(store, ApiKeys)
    store.create_api_key(NewApiKey("key1", "h1", "*", ("jobs:read",)))
    store.create_session(NewSession("s1", "h1", idle_seconds=60, max_seconds=200))
    assert store.revoke_api_key("key1") is True
    assert store.touch_session("s1", 60) is None


@needs(Secrets)
def test_the_first_secret_stored_is_everyones(store: Secrets) -> None:
    first = store.server_secret("signing", "aa")
    assert first == "aa"
    assert store.server_secret("signing", "bb") == "aa"
    assert store.server_secret("other", "cc") == "cc"


@needs(ApiKeys)
def test_a_new_key_never_replaces_a_stored_one_of_the_same_id_or_hash(store: ApiKeys) -> None:
    # Redis wrote over the stored record: the revoked key's hash then found
    # the new key's record, its tenant and its scopes.
    store.create_api_key(NewApiKey(id="k1", key_hash="h1", tenant="acme", scopes=("read",)))
    assert store.revoke_api_key("k1")
    for taken in (
        NewApiKey(id="k1", key_hash="h2", tenant="*", scopes=("admin",)),
        NewApiKey(id="k2", key_hash="h1", tenant="*", scopes=("admin",)),
    ):
        with pytest.raises(Exception):  # noqa: B017 - each store's own error for a duplicate
            store.create_api_key(taken)
    assert store.find_api_key("h1") is None  # the revoked key stays revoked
    assert store.find_api_key("h2") is None
    assert [k.id for k in store.list_api_keys(include_revoked=True)] == ["k1"]
