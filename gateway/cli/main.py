"""The ``cloudybot`` command: serve, users add|list|show|export|delete|grant|token|revoke|plan|
promote|demote|block|unblock|budget, plans, usage, audit, purge, deliveries, sessions
list|show|export|rotate, migrate, plugins [enable|disable], new-plugin, completion."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import logging
import os
import sys
from pathlib import Path
from typing import TypeAlias, TypeVar

from gateway import __version__
from gateway.accounts import user_data
from gateway.accounts.admin import Actor
from gateway.accounts.retention import PurgeReport, Retention
from gateway.accounts.secrets import SecretBox, load_or_create_key
from gateway.app import build_app
from gateway.base.errors import ConfigError, GatewayError
from gateway.base.files import write_private
from gateway.base.locks import KeyedLocks
from gateway.base.logs import log_handler
from gateway.base.times import iso_utc
from gateway.base.tokens import TokenCounter
from gateway.billing.credits import period_bounds
from gateway.cli import admin
from gateway.cli.completion import SCRIPTS
from gateway.cli.datadir import where
from gateway.cli.progress import Tick, progress_bar
from gateway.cli.running import config_path as _config_path
from gateway.cli.running import load as _load
from gateway.cli.running import settings_of as _settings
from gateway.cli.running import with_gateway as _with_gateway
from gateway.cli.scaffold import KINDS, write_plugin
from gateway.cli.switch import switch_plugin
from gateway.config.options import declared
from gateway.config.settings import (
    ENABLED_KEY,
    OPTIONS,
    PLUGINS_DISABLED_VARIABLE,
    Settings,
    load_settings,
    unknown_plan,
)
from gateway.gateway import Gateway
from gateway.memory import sessions_for
from gateway.memory.sessions import Sessions, parse_events
from gateway.plugins.manager import (
    declared_settings,
    describe_plugins,
    installed_plugins,
    make_plugin_manager,
    plugin_names,
    registered_names,
)
from gateway.server.connections import AddressCap
from gateway.server.run import Listener, run
from gateway.store import Delivery, ExpiredThread, User

T = TypeVar("T")
LIST_PAGE = 500  # accounts read at a time by users list


def configure_logging(settings: Settings) -> None:
    """The server's logging: to stderr, one line each, in the configured format and level."""
    root = logging.getLogger()
    root.handlers[:] = [log_handler(settings.log_format)]
    root.setLevel(settings.log_level.upper())
    # httpx (python-telegram-bot's client) logs every Bot API request at INFO: a line per send
    # is noise, and formatting it costs more than the send itself. Its warnings still show.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the gateway until interrupted."""
    settings, pm = _load(args)
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    configure_logging(settings)
    gateway = Gateway(settings, pm)

    def started(_: str) -> None:
        channels = ", ".join(name for name, channel in sorted(gateway.channels.items())
                             if channel.enabled) or "none"
        tools = ", ".join(sorted(gateway.tools)) or "none"
        print(f"cloudybot: serving on http://{host}:{port} (provider: {settings.llm_provider}; "
              f"channels: {channels}; tools: {tools}; data: {where(settings)})", flush=True)

    cap = AddressCap(settings.max_connections_per_address,
                     on_refused=gateway.metrics.connections_refused.inc)
    try:
        listener = Listener(host, port, cap, on_accept_paused=gateway.metrics.accept_paused.inc)
        run(build_app(gateway), settings, listener, started)
    except OSError as exc:
        raise GatewayError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    # Stopped: the store, the channels and Chromium are closed. Tearing the interpreter down
    # (every module, a last garbage collection) could take a second more, past the grace
    # period a supervisor allowed: flush what is buffered and exit now.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def cmd_users_add(args: argparse.Namespace) -> int:
    """Create an account (``--admin``: an admin, the promotion audited); its API token is
    the last line printed."""
    settings = _settings(args)

    async def run(gw: Gateway) -> tuple[User, str]:
        user, token = await gw.accounts.add_user(args.user_id, args.plan, args.credits)
        if args.admin:
            user = await gw.admin.set_admin(user.user_id, True, Actor.command_line())
        return user, token
    user, token = _with_gateway(settings, run)
    role = "admin " if user.admin else ""
    print(f"created {role}user {user.user_id} on plan {user.plan} with {user.credits} credits "
          f"(data: {where(settings)})")
    print("API token (shown once; send it as 'Authorization: Bearer <token>'):")
    print(token)
    return 0


def cmd_users_list(args: argparse.Namespace) -> int:
    """Every account (or the first ``--limit``), by user id: plan, balances, period."""
    async def run(gateway: Gateway) -> list[User]:
        users: list[User] = []
        while len(users) < args.limit:
            page = await gateway.store.list_users(min(LIST_PAGE, args.limit - len(users)),
                                                  users[-1].user_id if users else None)
            users += page
            if len(page) < LIST_PAGE:
                break
        return users
    users = _with_gateway(_settings(args), run)
    print(f"{'user':<32} {'plan':<10} {'credits':>10} {'minutes':>8} {'period':<8} "
          f"{'created':<27} flags")
    for user in users:
        flags = ",".join(flag for flag, on in (("admin", user.admin),
                                               ("blocked", user.blocked)) if on)
        print(f"{user.user_id:<32} {user.plan:<10} {user.credits:>10} "
              f"{user.browser_minutes:>8} {user.period:<8} {user.created_at:<27} {flags}"
              .rstrip())
    print(f"{len(users)} account(s)")
    return 0


def cmd_users_show(args: argparse.Namespace) -> int:
    """One account: plan, balances, period and what it holds."""
    async def run(gateway: Gateway) -> tuple[User | None, dict[str, int]]:
        user = await gateway.store.get_user(args.user_id)
        return user, (await gateway.store.user_counts(args.user_id) if user else {})
    user, counts = _with_gateway(_settings(args), run)
    if user is None:
        raise GatewayError(f"no user {args.user_id!r}")
    daily = "plan's" if user.daily_credits is None else user.daily_credits or "none"
    fields = {"user": user.user_id, "plan": user.plan, "credits": user.credits,
              "minutes": user.browser_minutes, "period": user.period,
              "created": user.created_at, "admin": "yes" if user.admin else "no",
              "blocked": "yes" if user.blocked else "no", "daily cap": daily,
              "last active": user.active_at or "never", **counts}
    for name, value in fields.items():
        print(f"{name:<12} {value}")
    return 0


def cmd_users_revoke(args: argparse.Namespace) -> int:
    """End every API token, dashboard session and sign-in link of an account."""
    async def run(gateway: Gateway) -> int | None:
        if await gateway.store.get_user(args.user_id) is None:
            return None
        return await gateway.store.revoke_access(args.user_id)
    revoked = _with_gateway(_settings(args), run)
    if revoked is None:
        raise GatewayError(f"no user {args.user_id!r}")
    print(f"revoked {revoked} token(s), session(s) and link(s) of {args.user_id}; running "
          "gateways refuse them from their next request on")
    return 0


def cmd_users_export(args: argparse.Namespace) -> int:
    """Write everything held about an account (never a password or a secret) as one zip."""
    settings = _settings(args)
    box = SecretBox(load_or_create_key(settings.secret_key, settings.data_dir))
    data = _with_gateway(settings, lambda gw: user_data.export_user(
        gw.store, _sessions_of(gw), box, args.user_id))
    out = Path(args.out or f"{args.user_id}-export.zip")
    write_private(out, data)
    print(f"wrote {out} ({len(data):,} bytes): everything held about {args.user_id}")
    return 0


def cmd_users_delete(args: argparse.Namespace) -> int:
    """Delete an account and everything held about it, sessions and archives included; asked
    first on a terminal, refused without ``--yes`` otherwise (a script must say so)."""
    settings = _settings(args)
    if not args.yes:
        _confirm_delete(settings, args.user_id)
    deleted = _with_gateway(settings, lambda gw: user_data.delete_user(
        gw.store, _sessions_of(gw), args.user_id))
    print(f"deleted {args.user_id}: {deleted.threads} thread(s), {deleted.sessions} "
          "session(s) and archive(s), and every row held about the account")
    return 0


def _confirm_delete(settings: Settings, user_id: str) -> None:
    """Ask on the terminal whether to delete ``user_id`` (what it holds said first); raise
    unless the answer is yes. Without a terminal there is nobody to ask: refuse, naming
    ``--yes``."""
    if not sys.stdin.isatty():
        raise GatewayError(f"users delete {user_id} deletes the account and everything held "
                           "about it, and stdin is not a terminal to ask on: pass --yes to "
                           "delete without asking")

    async def held(gateway: Gateway) -> dict[str, int]:
        if await gateway.store.get_user(user_id) is None:
            raise GatewayError(f"no user {user_id!r}")
        return await gateway.store.user_counts(user_id)
    counts = _with_gateway(settings, held)
    what = ", ".join(f"{count} {name.removesuffix('s')}(s)" for name, count in counts.items()
                     if count)
    try:
        answer = input(f"delete {user_id} ({what or 'nothing else held'}) from "
                       f"{where(settings)}, for good? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise GatewayError(f"not deleted: {user_id} is kept")


def cmd_plans(args: argparse.Namespace) -> int:
    """The configured plans: monthly credits and browser minutes, retention, rate limit."""
    settings = _settings(args)
    print(f"{'plan':<12} {'credits':>10} {'minutes':>8} {'retention':>10} {'per minute':>10}")
    for plan in settings.plans.values():
        default = "  (default)" if plan.name == settings.default_plan else ""
        print(f"{plan.name:<12} {plan.credits:>10} {plan.browser_minutes:>8} "
              f"{plan.retention_days:>9}d {plan.requests_per_minute or 'none':>10}{default}")
    return 0


def cmd_users_grant(args: argparse.Namespace) -> int:
    """Add credits to an account (audited, with ``--reason`` if given)."""
    if args.credits <= 0:
        raise GatewayError("credits to grant must be a positive whole number")
    details: dict[str, object] = {"credits": args.credits}
    if args.reason:
        details["reason"] = args.reason
    audit = Actor.command_line().did("credits.grant", args.user_id, **details)
    user = _with_gateway(_settings(args), lambda gw: gw.store.grant_credits(
        args.user_id, args.credits, audit))
    print(f"granted {args.credits} credits to {user.user_id}; balance {user.credits}")
    return 0


def cmd_users_login_link(args: argparse.Namespace) -> int:
    """A single-use dashboard sign-in link (15 minutes), printed as the last line."""
    settings = _settings(args)
    code = _with_gateway(settings, lambda gw: gw.accounts.login_link_code(args.user_id))
    base = (args.base_url or f"http://{settings.host}:{settings.port}").rstrip("/")
    print(f"sign-in link for {args.user_id} (works once, for 15 minutes):")
    print(f"{base}/auth/login?code={code}")
    return 0


def cmd_users_token(args: argparse.Namespace) -> int:
    """Issue a new API token (earlier ones stop working); printed as the last line. With
    ``--revoke-sessions`` the account's dashboard sessions and sign-in links end too."""
    async def run(gateway: Gateway) -> tuple[int, str]:
        ended = await gateway.store.revoke_access(args.user_id) if args.revoke_sessions else 0
        return ended, await gateway.accounts.issue_token(args.user_id)
    ended, token = _with_gateway(_settings(args), run)
    if args.revoke_sessions:
        print(f"new API token for {args.user_id}; ended {ended} earlier token(s), dashboard "
              "session(s) and sign-in link(s):")
    else:
        print(f"new API token for {args.user_id} (earlier tokens no longer work; dashboard "
              "sessions and unused sign-in links still do: --revoke-sessions ends them):")
    print(token)
    return 0


def cmd_users_plan(args: argparse.Namespace) -> int:
    """Move an account to another plan (balances topped up to the plan's amounts at once)."""
    settings = _settings(args)
    plan = settings.plans.get(args.plan)
    if plan is None:
        raise GatewayError(unknown_plan(args.plan, settings.plans))
    user = _with_gateway(settings, lambda gw: gw.store.set_plan(
        args.user_id, plan.name, plan.credits, plan.browser_minutes))
    print(f"{user.user_id} is on plan {user.plan}: {user.credits} credits, "
          f"{user.browser_minutes} browser minutes")
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    """Print an account's balances, this period's totals per kind, and its latest ledger rows."""
    async def work(gw: Gateway) -> None:
        stored = await gw.store.get_user(args.user_id)
        if stored is None:
            raise GatewayError(f"no user {args.user_id!r}")
        user = await gw.accounts.current_user(stored)
        start, end = period_bounds(user.period)
        totals = await gw.store.ledger_totals(user.user_id, start)
        entries, _ = await gw.store.ledger_page(user.user_id, args.limit, None)
        print(f"{user.user_id}  plan {user.plan}  credits {user.credits}  "
              f"browser minutes {user.browser_minutes}  period {start[:10]} to {end[:10]}")
        print(f"\n{'kind':<14}{'calls':>7}{'prompt tok':>12}{'compl. tok':>12}{'credits':>10}"
              f"{'minutes':>9}")
        for kind, total in totals.items():
            print(f"{kind:<14}{total.model:>7}{total.prompt_tokens:>12}"
                  f"{total.completion_tokens:>12}{total.credits:>10}{total.minutes:>9}")
        print(f"\n{'time (UTC)':<21}{'kind':<14}{'model':<18}{'tokens':>12}{'credits':>9}  thread")
        for entry in entries:
            charge = entry.charge
            tokens = f"{charge.prompt_tokens}+{charge.completion_tokens}"
            print(f"{entry.created_at[:19]:<21}{charge.kind:<14}{charge.model[:17]:<18}"
                  f"{tokens:>12}{charge.credits:>9}  {entry.thread_key or ''}")
    _with_gateway(_settings(args), work)
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    """Delete threads inactive longer than their owner's plan retention (or list them)."""
    async def work(gw: Gateway, tick: Tick) -> PurgeReport:
        def progress(done: int, total: int, thread: ExpiredThread) -> None:
            if args.dry_run:  # the listing is what a dry run is for
                print(f"[{done}/{total}] would purge {thread.session_key} (plan "
                      f"{thread.plan}, last active {thread.updated_at[:19]})", flush=True)
            else:
                tick("purge", done, total)
        retention = Retention(gw.settings, gw.store, _sessions_of(gw), KeyedLocks(),
                              gw.clock, gw.quotas)
        return await retention.purge(dry_run=args.dry_run, progress=progress)

    with progress_bar("threads") as tick:
        report = _with_gateway(_settings(args), lambda gw: work(gw, tick))
    plans = ", ".join(f"{plan}: {count}" for plan, count in sorted(report.by_plan().items()))
    if args.dry_run:
        print(f"dry run: {len(report.threads)} thread(s) would be purged"
              f"{f' ({plans})' if plans else ''}; nothing was changed")
    else:
        print(f"purged {len(report.threads)} thread(s){f' ({plans})' if plans else ''}, "
              f"{report.files} session file(s) ({report.orphans} of deleted threads), "
              f"{report.inbound_ids} old message id(s)")
    return 0


def cmd_deliveries(args: argparse.Namespace) -> int:
    """List channel replies still waiting for their platform, and those that failed."""
    async def work(gw: Gateway) -> list[Delivery]:
        return await gw.store.deliveries(limit=args.limit)

    deliveries = _with_gateway(_settings(args), work)
    if args.state != "all":
        deliveries = [d for d in deliveries if d.state == args.state]
    if not deliveries:
        print("no pending or failed deliveries")
        return 0
    print(f"{'created (UTC)':<21}{'state':<9}{'tries':>5}  {'channel':<10}{'message':<22}"
          f"conversation / next attempt or reason")
    for delivery in deliveries:
        print(f"{iso_utc(delivery.created)[:19]:<21}{delivery.state:<9}{delivery.attempts:>5}  "
              f"{delivery.channel[:9]:<10}{delivery.message_id[:21]:<22}{delivery.conversation}")
        if delivery.state == "pending":
            detail = f"next attempt {iso_utc(delivery.next_attempt)[:19]}"
            if delivery.last_error:
                detail += f" (last error: {delivery.last_error})"
        else:
            detail = f"failed: {delivery.last_error}"
        print(f"{'':<35}{detail}")
    return 0


def _sessions_of(gw: Gateway) -> Sessions:
    """The deployment's sessions: in its PostgreSQL database, or files in its data dir."""
    settings = gw.settings
    counter = TokenCounter.for_encoding(settings.tokenizer_encoding)
    return sessions_for(gw.store, settings, counter.chat_message, gw.clock)


def cmd_sessions_list(args: argparse.Namespace) -> int:
    """List active sessions: key, size, last activity, archived sessions."""
    rows = _with_gateway(_settings(args), lambda gw: _sessions_of(gw).active_sessions())
    for row in rows:
        print(f"{row.key}\t{row.size} bytes\tlast activity {iso_utc(row.last_write)}\t"
              f"{row.archives} archived")
    print(f"{len(rows)} active session(s)")
    return 0


def _exported(args: argparse.Namespace) -> bytes:
    data = _with_gateway(_settings(args), lambda gw: _sessions_of(gw).export(args.key))
    if data is None:
        raise GatewayError(f"no active session {args.key!r}")
    return data


def cmd_sessions_show(args: argparse.Namespace) -> int:
    """Print the events of a session, one JSON object per line."""
    for event in parse_events(_exported(args), args.key):
        print(json.dumps(event, ensure_ascii=False))
    return 0


def cmd_sessions_export(args: argparse.Namespace) -> int:
    """Write the active session's JSONL (header first) to stdout, as it is stored."""
    sys.stdout.buffer.write(_exported(args))
    sys.stdout.flush()
    return 0


def cmd_sessions_rotate(args: argparse.Namespace) -> int:
    """Archive a session now; the next turn starts a new one (memory is untouched)."""
    rotation = _with_gateway(_settings(args), lambda gw: _sessions_of(gw).archive_now(args.key))
    if rotation is None:
        raise GatewayError(f"no active session {args.key!r}")
    print(f"archived {args.key} to {rotation.archive or rotation.name}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    """List plugins, built-in and third-party: the hooks each implements, the channels it
    offers (enabled or not) and its settings as configured (secrets masked); a disabled one
    as such."""
    settings, pm = _load(args)
    for name, error in pm.load_failures.items():  # serve would refuse to start
        print(f"{name:<16} FAILED TO LOAD: {error}")
    for info in asyncio.run(describe_plugins(Gateway(settings, pm))):
        print(f"{info.name:<16} {info.distribution:<24} {info.module}")
        if info.disabled:
            how = (f"{PLUGINS_DISABLED_VARIABLE} names it" if info.name in _env_disabled()
                   else f"cloudybot plugins enable {info.name} loads it")
            print(f"{'':<16} disabled: not loaded ({how})")
            continue
        print(f"{'':<16} hooks: {', '.join(info.hooks) or '(none)'}")
        for channel, enabled in info.channels:
            print(f"{'':<16} channel {channel}: {'enabled' if enabled else 'off'}")
        for line in info.settings:
            print(f"{'':<16} {line}")
    return 1 if pm.load_failures else 0


def _env_disabled() -> set[str]:
    """The plugins ``CLOUDYBOT_PLUGINS_DISABLED`` names in this environment."""
    return {name.strip() for name in os.environ.get(PLUGINS_DISABLED_VARIABLE, "").split(",")}


def cmd_plugins_switch(args: argparse.Namespace) -> int:
    """``plugins enable|disable NAME``: set ``[plugins.NAME] enabled`` in the config file
    (made if missing), the rest of the file kept as it is."""
    enabled = args.plugins_command == "enable"
    path = _config_path(args)
    if path is None:
        raise GatewayError("no config file to edit: pass --config FILE (or set "
                           "CLOUDYBOT_CONFIG), the file the gateway is started with")
    installed = installed_plugins()
    if args.name not in installed:
        close = difflib.get_close_matches(args.name, installed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise GatewayError(f"no installed plugin is named {args.name!r} ({hint}installed: "
                           f"{', '.join(installed) or 'none'})")
    state = "enabled" if enabled else "disabled"
    if switch_plugin(path, args.name, enabled):
        print(f"{state} plugin {args.name} in {path} ([plugins.{args.name}] {ENABLED_KEY} = "
              f"{str(enabled).lower()}); a running gateway picks this up when restarted")
    else:
        print(f"plugin {args.name} is already {state} in {path}; nothing changed")
    if enabled and args.name in _env_disabled():
        print(f"note: {PLUGINS_DISABLED_VARIABLE} names {args.name} in this environment: it "
              "stays disabled wherever that is set")
    return 0


def cmd_new_plugin(args: argparse.Namespace) -> int:
    """Write a channel, tool or provider plugin package to start from (its tests pass as
    written), under a name no installed plugin and no setting of the gateway already uses."""
    pm = make_plugin_manager()
    groups = declared_settings(pm)
    installed = plugin_names(pm)
    gateway = Gateway(load_settings(None, plugins=groups, installed=installed), pm)
    # what the loaded plugins register (the built-ins' tools: calculator, current_time, ...),
    # then the plugins themselves: an installed plugin's name reads as such
    plugins = {**asyncio.run(registered_names(gateway)),
               **dict.fromkeys([*installed, *(group.name for group in groups)], "")}
    settings = [*OPTIONS, *(item for group in groups for item in declared(group.schema,
                                                                          group.name))]
    variables = {PLUGINS_DISABLED_VARIABLE, *(name for item in settings for name in item.env)}
    folder = write_plugin(args.name, Path(args.dir), args.kind, plugins=plugins,
                          variables=variables)
    print(f"wrote {folder} (a {args.kind} plugin): pip install -e '{folder}[test]', then "
          "pytest in it")
    return 0


Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    config_help = "TOML configuration (default: $CLOUDYBOT_CONFIG or built-ins)"
    # --config before the subcommand or after it: the subcommand's copy leaves the value
    # alone unless it is given there.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help=config_help)
    parser = argparse.ArgumentParser(prog="cloudybot", description=__doc__)
    parser.add_argument("--version", action="version", version=f"cloudybot {__version__}")
    parser.add_argument("--config", metavar="FILE", default=None, help=config_help)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", parents=[common], help="run the gateway")
    serve.add_argument("--host", help="listen address (overrides CLOUDYBOT_HOST)")
    serve.add_argument("--port", type=int, help="listen port (overrides CLOUDYBOT_PORT)")
    serve.set_defaults(handler=cmd_serve)
    _add_account_commands(commands, common)
    _add_channel_commands(commands, common)
    _add_plugin_commands(commands, common)
    _add_mcp_commands(commands, common)
    return parser


def cmd_mcp(args: argparse.Namespace) -> int:
    """``mcp list`` / ``mcp call``: run by the ``mcp`` plugin (its ``operator_command``)."""
    settings, pm = _load(args)
    command = getattr(pm.get_plugin("mcp"), "operator_command", None)
    if command is None:
        raise ConfigError("the mcp plugin is not installed or is switched off")
    return int(asyncio.run(command(settings, args)))


def _add_mcp_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """mcp list|call."""
    mcp = commands.add_parser("mcp", help="the MCP servers the agent uses").add_subparsers(
        dest="mcp_command", required=True)
    mcp.add_parser("list", parents=[common],
                   help="servers, state, tools and who may use them").set_defaults(
        handler=cmd_mcp)
    call = mcp.add_parser("call", parents=[common], help="call one tool of a server")
    call.add_argument("server")
    call.add_argument("tool", help="the tool's name at the server")
    call.add_argument("arguments", metavar="JSON", help="the arguments, a JSON object")
    call.set_defaults(handler=cmd_mcp)


def _add_account_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """users …, plans, audit, usage, purge."""
    users = commands.add_parser("users", help="manage accounts").add_subparsers(
        dest="users_command", required=True)
    _add_users_commands(users, common)
    admin.add_user_commands(users, common)
    admin.add_audit_command(commands, common)
    commands.add_parser("plans", parents=[common], help="the configured plans").set_defaults(
        handler=cmd_plans)
    usage = commands.add_parser("usage", parents=[common], help="an account's ledger")
    usage.add_argument("user_id")
    usage.add_argument("--limit", type=int, default=20, help="ledger rows to show (20)")
    usage.set_defaults(handler=cmd_usage)
    purge_ = commands.add_parser("purge", parents=[common],
                                 help="delete threads past their plan's retention")
    purge_.add_argument("--dry-run", action="store_true", help="list, change nothing")
    purge_.set_defaults(handler=cmd_purge)


def _add_users_commands(users: Subcommands, common: argparse.ArgumentParser) -> None:
    """users add|list|show|revoke|export|delete|grant|token|login-link|plan."""
    add = users.add_parser("add", parents=[common], help="create an account")
    add.add_argument("user_id")
    add.add_argument("--plan", help="plan name (default: the configured default plan)")
    add.add_argument("--credits", type=int, help="opening balance instead of the plan's grant")
    add.add_argument("--admin", action="store_true",
                     help="make it an admin (it may use /api/admin/*)")
    add.set_defaults(handler=cmd_users_add)
    listed = users.add_parser("list", parents=[common], help="list accounts")
    listed.add_argument("--limit", type=int, default=10_000, help="at most this many")
    listed.set_defaults(handler=cmd_users_list)
    show = users.add_parser("show", parents=[common], help="one account and what it holds")
    show.add_argument("user_id")
    show.set_defaults(handler=cmd_users_show)
    revoke = users.add_parser("revoke", parents=[common],
                              help="end an account's tokens, sessions and sign-in links")
    revoke.add_argument("user_id")
    revoke.set_defaults(handler=cmd_users_revoke)
    export = users.add_parser("export", parents=[common],
                              help="everything held about an account, as one zip")
    export.add_argument("user_id")
    export.add_argument("--out", help="the file to write (default USER_ID-export.zip)")
    export.set_defaults(handler=cmd_users_export)
    delete = users.add_parser("delete", parents=[common],
                              help="delete an account and everything held about it")
    delete.add_argument("user_id")
    delete.add_argument("--yes", action="store_true",
                        help="delete without asking (needed when stdin is not a terminal)")
    delete.set_defaults(handler=cmd_users_delete)
    grant = users.add_parser("grant", parents=[common], help="add credits to an account")
    grant.add_argument("user_id")
    grant.add_argument("credits", type=int)
    grant.add_argument("--reason", help="why, for the audit log")
    grant.set_defaults(handler=cmd_users_grant)
    token = users.add_parser("token", parents=[common], help="issue a new API token")
    token.add_argument("user_id")
    token.add_argument("--revoke-sessions", action="store_true",
                       help="also end the account's dashboard sessions and sign-in links")
    token.set_defaults(handler=cmd_users_token)
    link = users.add_parser("login-link", parents=[common],
                            help="a single-use dashboard sign-in link (15 minutes)")
    link.add_argument("user_id")
    link.add_argument("--base-url", help="the dashboard's address as users reach it "
                      "(default http://CLOUDYBOT_HOST:CLOUDYBOT_PORT)")
    link.set_defaults(handler=cmd_users_login_link)
    plan = users.add_parser("plan", parents=[common], help="move an account to another plan")
    plan.add_argument("user_id")
    plan.add_argument("plan")
    plan.set_defaults(handler=cmd_users_plan)


def _add_channel_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """deliveries, sessions list|show|export|rotate."""
    deliveries = commands.add_parser(
        "deliveries", parents=[common],
        help="channel replies waiting for their platform, and failed ones")
    deliveries.add_argument("--state", choices=("pending", "failed", "all"), default="all",
                            help="which deliveries to list (all)")
    deliveries.add_argument("--limit", type=int, default=100,
                            help="newest deliveries to look at (100)")
    deliveries.set_defaults(handler=cmd_deliveries)
    sessions = commands.add_parser("sessions", help="inspect agent sessions").add_subparsers(
        dest="sessions_command", required=True)
    sessions.add_parser("list", parents=[common], help="list active sessions").set_defaults(
        handler=cmd_sessions_list)
    show = sessions.add_parser("show", parents=[common], help="print a session's events")
    show.add_argument("key", help="session key, e.g. alice--t1 or telegram:42")
    show.set_defaults(handler=cmd_sessions_show)
    export = sessions.add_parser("export", parents=[common],
                                 help="write a session's JSONL to stdout")
    export.add_argument("key", help="session key, e.g. alice--t1 or telegram:42")
    export.set_defaults(handler=cmd_sessions_export)
    rotate = sessions.add_parser("rotate", parents=[common], help="archive a session now")
    rotate.add_argument("key")
    rotate.set_defaults(handler=cmd_sessions_rotate)
    migrate = commands.add_parser(
        "migrate", parents=[common], help="copy a SQLite deployment into PostgreSQL (--config: "
        "the PostgreSQL deployment's, for its data folder and secret key)")
    migrate.add_argument("--from-sqlite", required=True, metavar="DATA_DIR",
                         help="the data dir of the SQLite deployment (not running)")
    migrate.add_argument("--to", required=True, metavar="URL",
                         help="postgresql://user@host/database (created beforehand)")
    migrate.add_argument("--force", action="store_true",
                         help="replace what the target database already holds")
    migrate.set_defaults(handler=cmd_migrate)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Copy a SQLite deployment (rows and session files) into PostgreSQL, and its secret key
    into the PostgreSQL deployment's data folder when that has none (see
    :mod:`gateway.cli.migrate_key`)."""
    from gateway.cli.migrate import migrate
    from gateway.cli.migrate_key import carry_key, target_key
    from gateway.config.options import database_url

    try:
        url = database_url(args.to)
    except ValueError as exc:
        raise GatewayError(f"--to {exc}") from None
    if not url:
        raise GatewayError("--to must be a postgresql:// URL")
    settings = _settings(args)  # the PostgreSQL deployment's: its data folder and key
    source = Path(args.from_sqlite)
    key = target_key(source, settings.secret_key, settings.data_dir)
    with progress_bar("rows") as tick:
        report = asyncio.run(migrate(source, url, force=args.force, progress=tick, key=key))
    tables = ", ".join(f"{table} {count:,}" for table, count in report.copied.items() if count)
    print(f"migrated {report.total:,} rows from {args.from_sqlite} ({tables or 'none'}); "
          "every table's count matches")
    carried = carry_key(key)
    if carried:
        print(carried)
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the shell's completion script: ``eval "$(cloudybot completion bash)"`` (or
    ``zsh``), ``cloudybot completion fish | source``."""
    print(SCRIPTS[args.shell](build_parser()), end="")
    return 0


def _add_plugin_commands(commands: Subcommands, common: argparse.ArgumentParser) -> None:
    """plugins, new-plugin."""
    completion = commands.add_parser(
        "completion", help="print shell completion: eval \"$(cloudybot completion bash)\" "
        "(or zsh, after compinit); cloudybot completion fish | source")
    completion.add_argument("shell", choices=sorted(SCRIPTS))
    completion.set_defaults(handler=cmd_completion)
    plugins = commands.add_parser("plugins", parents=[common], help="list plugins; enable "
                                  "or disable one in the config file")
    plugins.set_defaults(handler=cmd_plugins)
    switches = plugins.add_subparsers(dest="plugins_command")
    for verb, does in (("enable", "load it (from the next start)"),
                       ("disable", "do not load it at all (from the next start)")):
        switch = switches.add_parser(verb, parents=[common],
                                     help=f"[plugins.NAME] {ENABLED_KEY} in the config file: "
                                          f"{does}")
        switch.add_argument("name", metavar="NAME", help="the plugin, as `cloudybot plugins` "
                            "lists it")
        switch.set_defaults(handler=cmd_plugins_switch)
    scaffold = commands.add_parser("new-plugin",
                                   help="write a plugin package to start from, tests passing")
    scaffold.add_argument("name", metavar="NAME",
                          help="the plugin's name, e.g. acme-chat: lowercase words joined by "
                               "- or _ (the package is cloudybot-acme-chat, the plugin "
                               "acme_chat)")
    scaffold.add_argument("--kind", choices=KINDS, default="channel",
                          help="what the plugin adds: a channel (default), a tool or an LLM "
                               "provider")
    scaffold.add_argument("--dir", default=".", help="where to write cloudybot-NAME/")
    scaffold.set_defaults(handler=cmd_new_plugin)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cloudybot`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        print(f"cloudybot: config error: {exc.message}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"cloudybot: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
