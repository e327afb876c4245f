"""`chit limits`, `chit limits set|clear KIND`, `chit pause` and `chit resume`:
flow control (DESIGN.md, "Flow control") from the command line, on the
database, or through the HTTP API with `--url` (`RemoteFlow`).
Values are checked by `Limits.checked`, so a bad one gets the message
`@queue.task` and the API give, and nothing is stored."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from chit.api.schemas.limits import LimitOut, LimitsOut, LimitValues
from chit.bounds import NAME_MAX
from chit.cli import output
from chit.cli.flags import AddCommand, api_key, remote_flags
from chit.cli.loading import Setup
from chit.errors import InvalidRequest
from chit.fleet import LiveWorker
from chit.limits import KindLimits, Limits, Paused

if TYPE_CHECKING:
    from chit.client import Client


class Flow(Protocol):
    """What the commands call: the store's FlowControl, or RemoteFlow."""

    def limits(self) -> list[KindLimits]: ...
    def pauses(self) -> list[Paused]: ...
    def set_limits(self, kind: str, limits: Limits) -> KindLimits: ...
    def clear_limits(self, kind: str) -> bool: ...
    def pause(self, queue: str | None = None, kind: str | None = None) -> bool: ...
    def resume(self, queue: str | None = None, kind: str | None = None) -> bool: ...


@runtime_checkable
class FleetView(Protocol):
    """The store's view of live workers (not RemoteFlow's: the API has none)."""

    def live_workers(self) -> Sequence[LiveWorker]: ...


@contextmanager
def flow_of(args: argparse.Namespace, setup: Setup) -> Iterator[Flow]:
    if not args.url:
        yield setup.queue().store
        return
    from chit.client import Client  # an extra: loaded for --url only

    with Client(args.url, api_key(args)) as client:
        yield RemoteFlow(client)


def add_parsers(command: AddCommand, action_common: argparse.ArgumentParser) -> None:
    """`chit limits [set|clear]`, `chit pause` and `chit resume`; `action_common`
    is main's `common_flags(action=True)`."""
    p = command(
        "limits",
        limits,
        "limits per kind, with running and waiting jobs: chit limits [set|clear]",
    )
    actions = p.add_subparsers(dest="limits_command", metavar="ACTION")
    k = actions.add_parser(
        "set",
        parents=[action_common],
        help="override a kind's limits (the flags given) until cleared",
    )
    k.add_argument("kind")
    # Not dest "concurrency": that is the worker's flag, which Setup reads into Settings.
    k.add_argument(
        "--concurrency",
        dest="limit_concurrency",
        metavar="N",
        help="at most N of the kind running across all workers",
    )
    k.add_argument(
        "--rate",
        dest="limit_rate",
        metavar="N/s",
        help="at most N starts per period: N/s, N/m or N/h",
    )
    k.add_argument(
        "--key-concurrency",
        dest="limit_key_concurrency",
        metavar="M",
        help="at most M running per concurrency key",
    )
    k.add_argument(
        "--key-rate",
        dest="limit_key_rate",
        metavar="N/m",
        help="at most N starts per period per concurrency key",
    )
    k.add_argument(
        "--cost-rate",
        dest="limit_cost_rate",
        metavar="N/m",
        help="at most N cost (the jobs' --cost) started per period: N/s, N/m or N/h",
    )
    k.add_argument(
        "--key-cost-rate",
        dest="limit_key_cost_rate",
        metavar="N/m",
        help="at most N cost started per period per concurrency key",
    )
    k.add_argument(
        "--force",
        action="store_true",
        help="set limits for a kind no task declares yet (refused without it)",
    )
    k = actions.add_parser(
        "clear", parents=[action_common], help="drop the operator's limits: the code's apply again"
    )
    k.add_argument("kind")
    remote_flags(p)
    for action in actions.choices.values():
        remote_flags(action, action=True)

    for name, handler, verb in (
        (
            "pause",
            pause,
            "claim no job of a queue (or --kind) until resumed; running ones finish",
        ),
        ("resume", resume, "claim a paused queue's (or --kind's) jobs again"),
    ):
        p = command(name, handler, verb)
        p.add_argument("queue", nargs="?", metavar="QUEUE")
        p.add_argument("--kind", help=f"{name} a kind, in every queue")
        remote_flags(p)


# A whole number as typed; anything else is handed on as text for Limits.checked
# to refuse by name (30 digits is far beyond any limit, and cheap to convert).
_WHOLE = re.compile(r"\s*[+-]?\d{1,30}\s*")


def limits(args: argparse.Namespace, setup: Setup) -> int:
    if args.limits_command == "set":
        return _set(args, setup)
    if args.limits_command == "clear":
        return _clear(args, setup)
    with flow_of(args, setup) as flow:
        kinds, pauses = flow.limits(), flow.pauses()
    if args.json:
        output.print_json(LimitsOut.of(kinds, pauses).model_dump(mode="json"))
        return 0
    if kinds:
        print(limits_table(kinds))
    else:
        print(
            "no limits: declare them with @queue.task(KIND, concurrency=N, rate='N/s') "
            "or set them with chit limits set KIND"
        )
    if pauses:
        print()
        print(paused_lines(pauses))
    return 0


def _set(args: argparse.Namespace, setup: Setup) -> int:
    kind = _name("kind", args.kind)
    given = Limits.checked(
        _number(args.limit_concurrency),
        args.limit_rate,
        _number(args.limit_key_concurrency),
        args.limit_key_rate,
        args.limit_cost_rate,
        args.limit_key_cost_rate,
    )
    if not given:
        raise InvalidRequest(
            "say which limits to set: --concurrency N, --rate N/s|N/m|N/h, "
            "--key-concurrency M, --key-rate N/m, --cost-rate N/m or --key-cost-rate N/m"
        )
    with flow_of(args, setup) as flow:
        if not args.force and not args.url:
            _check_declared(kind, flow, setup)
        entry = flow.set_limits(kind, given)
    if args.json:
        output.print_json(LimitOut.of(entry).model_dump(mode="json"))
    else:
        print(
            f"{kind}: {_describe(entry.effective)} (an operator's until chit limits clear "
            f"{kind}); running {entry.running}, waiting {entry.waiting}"
        )
    return 0


def _check_declared(kind: str, flow: Flow, setup: Setup) -> None:
    """A limit on a kind no task declares holds nothing back (a typo, most
    often), so it is refused unless --force. Declared means: a task of the app
    (--app, CHIT_APP), a kind a live worker runs, or a kind that has limits
    already. Not checked over --url, where the CLI sees neither the server's
    tasks nor its workers."""
    known = {k.kind for k in flow.limits()}
    if setup.settings.app:
        known |= set(setup.queue().tasks)
    if isinstance(flow, FleetView):  # the store (RemoteFlow is never checked)
        known |= {kind for w in flow.live_workers() for kind in w.beat.kinds}
    if kind in known:
        return
    listed = ", ".join(sorted(known)[:20]) or "none seen"
    raise InvalidRequest(
        f"no task declares kind {kind!r} (kinds declared: {listed}); check the name, "
        "name the app with --app, or give --force to limit a kind not deployed yet"
    )


def _clear(args: argparse.Namespace, setup: Setup) -> int:
    kind = _name("kind", args.kind)
    with flow_of(args, setup) as flow:
        cleared = flow.clear_limits(kind)
    if args.json:
        output.print_json({"kind": kind, "cleared": cleared})
    elif cleared:
        print(f"{kind}: the operator's limits are cleared; the code's apply again")
    else:
        print(f"{kind} had no limits set by an operator; nothing changed")
    return 0


def pause(args: argparse.Namespace, setup: Setup) -> int:
    return _pausing(args, setup, pausing=True)


def resume(args: argparse.Namespace, setup: Setup) -> int:
    return _pausing(args, setup, pausing=False)


def _pausing(args: argparse.Namespace, setup: Setup, *, pausing: bool) -> int:
    verb = "pause" if pausing else "resume"
    if (args.queue is None) == (args.kind is None):
        raise InvalidRequest(f"{verb} what: give a QUEUE or --kind KIND (exactly one)")
    what = "queue" if args.queue is not None else "kind"
    name = _name(what, args.queue if args.queue is not None else args.kind)
    with flow_of(args, setup) as flow:
        act = flow.pause if pausing else flow.resume
        changed = act(queue=name) if what == "queue" else act(kind=name)
    if args.json:
        output.print_json({what: name, "paused": pausing, "changed": changed})
    elif pausing:
        print(
            f"paused {what} {name}: its jobs stay queued, running ones finish"
            if changed
            else f"{what} {name} was paused already"
        )
    else:
        print(f"resumed {what} {name}" if changed else f"{what} {name} was not paused")
    return 0


def limits_table(kinds: Sequence[KindLimits]) -> str:
    # Budgets' columns only where a kind has one: most deployments have none.
    costs = any(k.effective.cost_rate or k.effective.key_cost_rate for k in kinds)
    rows = [
        (
            k.kind,
            k.effective.concurrency,
            k.effective.rate,
            k.effective.key_concurrency,
            k.effective.key_rate,
            *((k.effective.cost_rate, k.effective.key_cost_rate) if costs else ()),
            k.running,
            k.waiting,
            "+".join(who for who, set_ in (("code", k.declared), ("operator", k.override)) if set_)
            or None,
        )
        for k in kinds
    ]
    headers = [
        "kind",
        "concurrency",
        "rate",
        "key concurrency",
        "key rate",
        *(("cost rate", "key cost rate") if costs else ()),
        "running",
        "waiting",
        "set by",
    ]
    return output.table(headers, rows)


def paused_lines(pauses: Sequence[Paused]) -> str:
    return "\n".join(
        f"paused: {'queue ' + p.queue if p.queue is not None else 'kind ' + str(p.kind)} "
        f"(since {output.when(p.paused_at)})"
        for p in pauses
    )


def _describe(limits: Limits) -> str:
    said = [
        f"{name.replace('_', ' ')} {v}" for name, v in limits.as_dict().items() if v is not None
    ]
    return ", ".join(said) or "no limits"


def _number(text: str | None) -> int | str | None:
    if text is None or not _WHOLE.fullmatch(text):
        return text
    return int(text)


def _name(what: str, text: str) -> str:
    if not 1 <= len(text) <= NAME_MAX or "\x00" in text:
        raise InvalidRequest(f"a {what} name is 1 to {NAME_MAX} characters, not {text[:50]!r}")
    return text


class RemoteFlow:
    """The store's flow control calls that the CLI makes (`limits`, `pauses`,
    `set_limits`, `clear_limits`, `pause`, `resume`), through the HTTP API: the
    commands run unchanged on either. The server checks every value again."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def limits(self) -> list[KindLimits]:
        return [_kind_limits(k) for k in self.client.limits().limits]

    def pauses(self) -> list[Paused]:
        return [Paused(p.queue, p.kind, p.paused_at) for p in self.client.limits().paused]

    def set_limits(self, kind: str, limits: Limits) -> KindLimits:
        return _kind_limits(self.client.set_limits(kind, **limits.as_dict()))

    def clear_limits(self, kind: str) -> bool:
        return self.client.clear_limits(kind)

    def pause(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self.client.pause(queue, kind=kind)

    def resume(self, queue: str | None = None, kind: str | None = None) -> bool:
        return self.client.resume(queue, kind=kind)


def _kind_limits(entry: LimitOut) -> KindLimits:
    return KindLimits(
        entry.kind,
        declared=_limits(entry.declared),
        override=_limits(entry.override),
        running=entry.running,
        waiting=entry.waiting,
        updated_at=entry.updated_at,
    )


def _limits(values: LimitValues) -> Limits:
    return Limits.checked(**values.model_dump())
