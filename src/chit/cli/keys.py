"""`chit keys create|list|revoke`: API keys kept (hashed) in the database.

The key text is printed once, at creation; the database keeps only its SHA-256.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

from chit.api.auth import SCOPES, create_key
from chit.cli import output
from chit.cli.flags import AddCommand
from chit.cli.loading import Setup
from chit.errors import InvalidRequest
from chit.store import FullStore


def keys_create(
    store: FullStore,
    *,
    tenant: str = "",
    scopes: str | Iterable[str] = "submit+read",
    name: str = "",
    as_json: bool = False,
    env_keys: bool = False,
) -> int:
    """Scopes as `submit+read` (or a list): any of submit, read, admin; tenant
    `*` sees every tenant. `env_keys`: CHIT_API_KEYS configures keys too."""
    wanted = scopes.split("+") if isinstance(scopes, str) else list(scopes)
    was_open = not env_keys and not store.list_api_keys(include_revoked=True)
    key, text = create_key(store, tenant=tenant, scopes=wanted, name=name)
    if was_open:
        # Surprising otherwise: every client that sent no key starts getting 401.
        print(
            "chit: this is the first API key, so the API is no longer open: within 5 seconds"
            " every request must send a key (Authorization: Bearer KEY)",
            file=sys.stderr,
        )
    if as_json:
        output.print_json({"key": text} | output.to_json(key))
    else:
        print(text)
        print(
            f"\nkey {key.id}: tenant {key.tenant or '(default)'}, scopes {'+'.join(key.scopes)}"
            ". It is shown only now: store it; send it as `Authorization: Bearer KEY`.",
        )
    return 0


def keys_list(store: FullStore, *, include_revoked: bool = False, as_json: bool = False) -> int:
    keys = store.list_api_keys(include_revoked)
    if as_json:
        output.print_json({"keys": keys})
        return 0
    if not keys:
        print("no API keys in the database (CHIT_API_KEYS may still configure some)")
        return 0
    rows = [
        (
            k.id,
            k.name,
            k.tenant or "(default)",
            "+".join(s for s in SCOPES if s in k.scopes),
            output.when(k.created_at),
            output.when(k.revoked_at),
        )
        for k in keys
    ]
    print(output.table(["id", "name", "tenant", "scopes", "created", "revoked"], rows))
    return 0


def keys_revoke(store: FullStore, key_id: str, *, as_json: bool = False) -> int:
    if not store.revoke_api_key(key_id):
        known = {k.id for k in store.list_api_keys(include_revoked=True)}
        state = "was already revoked" if key_id in known else "is unknown (see `chit keys list`)"
        raise InvalidRequest(f"key {key_id!r} {state}")
    if as_json:
        output.print_json({"revoked": key_id})
    else:
        print(f"revoked key {key_id}; servers stop accepting it within 5 seconds")
        if not store.list_api_keys():
            print("no key is left: the API refuses every request until `chit keys create`")
    return 0


def add_parsers(command: AddCommand, action_common: argparse.ArgumentParser) -> None:
    """`chit keys create|list|revoke`; `action_common` is main's
    `common_flags(action=True)`."""
    p = command("keys", keys, "API keys: chit keys create|list|revoke")
    actions = p.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    k = actions.add_parser("create", parents=[action_common], help="create a key; printed once")
    k.add_argument("--tenant", default="", help="the tenant whose jobs it sees ('*': all)")
    k.add_argument("--scopes", default="submit+read", help="submit, read, admin, joined by +")
    k.add_argument("--name", default="", help="a label for people")
    k = actions.add_parser("list", parents=[action_common], help="list keys (never their text)")
    k.add_argument("--all", action="store_true", help="include revoked keys")
    k = actions.add_parser("revoke", parents=[action_common], help="revoke a key by id")
    k.add_argument("key_id")


def keys(args: argparse.Namespace, setup: Setup) -> int:
    queue = setup.queue()
    store = queue.store
    if args.keys_command == "create":
        return keys_create(
            store,
            tenant=args.tenant,
            scopes=args.scopes,
            name=args.name,
            as_json=args.json,
            env_keys=bool(queue.settings.api_keys),
        )
    if args.keys_command == "list":
        return keys_list(store, include_revoked=args.all, as_json=args.json)
    return keys_revoke(store, args.key_id, as_json=args.json)
