"""``cloudybot users promote|demote|block|unblock|budget`` and ``cloudybot audit``: the admin
acts from the command line, each written to the audit log as the operating-system user that
ran it, from ``cli`` (:mod:`gateway.accounts.admin`); and the audit log itself, listed or
exported as JSON lines (the file 0600).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeAlias

from gateway.accounts.admin import Actor
from gateway.base.errors import GatewayError
from gateway.base.files import write_private
from gateway.base.times import iso
from gateway.cli.running import settings_of, with_gateway
from gateway.gateway import Gateway
from gateway.store import AuditQuery, AuditRecord, User

Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
AUDIT_PAGE = 1000  # rows read at a time


def _flagged(args: argparse.Namespace, flag: str, on: bool) -> User:
    actor = Actor.command_line()

    async def run(gateway: Gateway) -> User:
        if flag == "admin":
            return await gateway.admin.set_admin(args.user_id, on, actor)
        return await gateway.admin.set_blocked(args.user_id, on, actor)
    return with_gateway(settings_of(args), run)


def cmd_promote(args: argparse.Namespace) -> int:
    """Make an account an admin (it may use ``/api/admin/*``)."""
    user = _flagged(args, "admin", True)
    print(f"{user.user_id} is an admin; running gateways see it from its next request on")
    return 0


def cmd_demote(args: argparse.Namespace) -> int:
    """Make an admin an ordinary account again."""
    user = _flagged(args, "admin", False)
    print(f"{user.user_id} is no longer an admin")
    return 0


def cmd_block(args: argparse.Namespace) -> int:
    """Refuse an account's API calls and channel turns (its data stays)."""
    user = _flagged(args, "blocked", True)
    print(f"{user.user_id} is blocked: its API calls and channel turns are refused from its "
          "next request on; its data stays (unblock lets it in again)")
    return 0


def cmd_unblock(args: argparse.Namespace) -> int:
    """Let a blocked account in again."""
    user = _flagged(args, "blocked", False)
    print(f"{user.user_id} is no longer blocked")
    return 0


def cmd_budget(args: argparse.Namespace) -> int:
    """Give an account a daily credit cap of its own (0: none), or ``plan``: its plan's."""
    raw = args.daily_credits
    if raw == "plan":
        credits: int | None = None
    elif raw.isascii() and raw.isdigit():
        credits = int(raw)
    else:
        raise GatewayError(f"the daily cap must be a whole number or 'plan', got {raw!r}")
    user = with_gateway(settings_of(args), lambda gw: gw.admin.set_daily_credits(
        args.user_id, credits, Actor.command_line()))
    what = "its plan's" if user.daily_credits is None else (
        "none" if user.daily_credits == 0 else f"{user.daily_credits} credits a day")
    print(f"{user.user_id}'s daily cap: {what}")
    return 0


def _since(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise GatewayError(f"--since must be a date (2026-12-01) or an ISO-8601 time, "
                           f"got {value!r}") from None
    return iso(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


def _record_json(record: AuditRecord) -> dict[str, object]:
    entry = record.entry
    return {"id": record.id, "at": record.at, "actor": entry.actor, "action": entry.action,
            "target": entry.target, "details": entry.details, "source": entry.source}


def cmd_audit(args: argparse.Namespace) -> int:
    """List the audit log, newest first (``--limit``), from ``--since`` on, of one
    ``--actor`` or ``--action``; or, with ``--export FILE``, write all of it that matches as
    JSON lines, oldest first, to a file only its owner may read (the export is audited)."""
    since = _since(args.since)
    limit = None if args.export else args.limit

    async def run(gateway: Gateway) -> list[AuditRecord]:
        records: list[AuditRecord] = []
        before = None
        while limit is None or len(records) < limit:
            want = AUDIT_PAGE if limit is None else min(AUDIT_PAGE, limit - len(records))
            page = await gateway.store.audit_log(AuditQuery(want, before, since, args.actor,
                                                            args.action))
            records += page
            if len(page) < want:
                break
            before = page[-1].id
        if args.export:
            await gateway.store.append_audit(Actor.command_line().did(
                "audit.export", None, rows=len(records), file=str(Path(args.export).name)))
        return records

    records = with_gateway(settings_of(args), run)
    if args.export:
        lines = "".join(json.dumps(_record_json(r), ensure_ascii=False) + "\n"
                        for r in reversed(records))
        write_private(Path(args.export), lines.encode())
        print(f"wrote {args.export}: {len(records)} audit row(s), oldest first")
        return 0
    for record in records:
        entry = record.entry
        details = json.dumps(entry.details, ensure_ascii=False) if entry.details else ""
        print(f"{record.at[:19]}  {entry.actor:<16} {entry.source:<15} {entry.action:<14} "
              f"{entry.target or '-':<20} {details}".rstrip())
    print(f"{len(records)} audit row(s)")
    return 0


def add_user_commands(users: Subcommands, common: argparse.ArgumentParser) -> None:
    """users promote|demote|block|unblock|budget."""
    for verb, handler, does in (
            ("promote", cmd_promote, "make an account an admin"),
            ("demote", cmd_demote, "make an admin an ordinary account again"),
            ("block", cmd_block, "refuse an account's API calls and channel turns"),
            ("unblock", cmd_unblock, "let a blocked account in again")):
        command = users.add_parser(verb, parents=[common], help=does)
        command.add_argument("user_id")
        command.set_defaults(handler=handler)
    budget = users.add_parser("budget", parents=[common],
                              help="an account's own daily credit cap")
    budget.add_argument("user_id")
    budget.add_argument("daily_credits", metavar="CREDITS",
                        help="the most AI credits a UTC day may spend (0: no cap), or 'plan' "
                             "for the plan's")
    budget.set_defaults(handler=cmd_budget)


def add_audit_command(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """audit."""
    audit = commands.add_parser("audit", parents=[common],
                                help="the audit log of admin acts (list, or --export)")
    audit.add_argument("--since", help="from this date or ISO-8601 time (UTC) on")
    audit.add_argument("--actor", help="only this admin's (or operating-system user's) acts")
    audit.add_argument("--action", help="only this action, e.g. user.block")
    audit.add_argument("--limit", type=int, default=50, help="rows to list (50)")
    audit.add_argument("--export", metavar="FILE",
                       help="write every matching row as JSON lines (mode 0600) instead")
    audit.set_defaults(handler=cmd_audit)
