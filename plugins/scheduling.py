"""Scheduled jobs for users and the model: the ``schedule`` tool and the ``/remind`` and
``/jobs`` chat commands (every channel routes them). The gateway reads the times and runs the
jobs (``host.jobs``); nothing here does date arithmetic but showing a time in a zone."""

from __future__ import annotations

from typing import Any

from gateway import (
    ChatCommand,
    CommandContext,
    GatewayError,
    Job,
    PluginHost,
    Tool,
    ToolContext,
    hookimpl,
    job_timing,
)

SCHEDULE_PARAMETERS = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["at", "every", "cron"]},
        "when": {"type": "string",
                 "description": "at: ISO time (2030-01-31T09:00); every: 30m, 2h, 1d; cron: "
                                "5 fields"},
        "text": {"type": "string", "description": "what to post, or the prompt to run"},
        "action": {"enum": ["message", "prompt"], "description": "default message"},
        "time_zone": {"type": "string", "description": "IANA; default the user's"},
        "misfire": {"enum": ["run_once", "skip"], "description": "if missed; default run_once"},
    },
    "required": ["kind", "when", "text"],
}


def describe(job: Job, zone: str) -> str:
    """One line: the job's id, what it does, when, its state and next run in ``zone``."""
    when = job_timing.When(job.kind, job.spec, job.time_zone).describe()
    upcoming = (f"next {job_timing.local(job.next_run, zone)}" if job.next_run is not None
                else job.state)
    words = job.text if len(job.text) <= 60 else job.text[:57] + "..."
    paused = " (paused)" if job.state == "paused" else ""
    return f"{job.id} — {job.action} {when}, {upcoming}{paused}: {words}"


def schedule_tool(host: PluginHost) -> Tool:
    """The ``schedule`` tool: the model asks, the gateway reads the time and answers with the
    next run in the user's zone, so that the model can confirm it."""
    async def run(arguments: dict[str, Any], context: ToolContext) -> str:
        try:
            zone = await host.jobs.time_zone(context.user_id)
            when = job_timing.of(str(arguments.get("kind", "")), str(arguments.get("when", "")),
                                 str(arguments.get("time_zone") or zone))
            job = await host.jobs.create_in(context.user_id, context.session_key, when.to(
                str(arguments.get("action") or "message"), str(arguments.get("text", "")),
                str(arguments.get("misfire") or "run_once")))
        except GatewayError as exc:
            return f"error: {exc.message}"
        assert job.next_run is not None
        return (f"Scheduled {job.id} ({when.describe()}). Next run: "
                f"{job_timing.local(job.next_run, zone)} (the user's time zone, {zone}).")
    return Tool("schedule", "Schedule a reminder or recurring job here; answers with the "
                "next run, to confirm.",
                SCHEDULE_PARAMETERS, run)


async def remind(context: CommandContext) -> str:
    """``/remind WHEN TEXT``: a message posted here at that time."""
    jobs, user = context.host.jobs, context.user
    if not context.argument:
        return ("Usage: remind WHEN TEXT — WHEN is: in 10m, 09:00, tomorrow 09:00, "
                "2030-01-31T09:00, every 2h, or cron 0 9 * * 1-5")
    zone = await jobs.time_zone(user.user_id)
    try:
        when, text = job_timing.after_words(context.argument, context.host.now(), zone)
        job = await jobs.create_in(user.user_id, context.ref.session_key,
                                   when.to("message", text))
    except GatewayError as exc:
        return f"I can't schedule that: {exc.message}."
    assert job.next_run is not None
    return f"OK: {job.id}, next {job_timing.local(job.next_run, zone)}."


async def list_jobs(context: CommandContext) -> str:
    """``/jobs`` lists; ``/jobs pause|resume|delete ID``; ``/jobs tz ZONE``."""
    jobs, user_id = context.host.jobs, context.user.user_id
    verb, _, rest = context.argument.partition(" ")
    rest = rest.strip()
    try:
        if verb == "tz" and rest:
            return f"Your time zone is now {await jobs.set_time_zone(user_id, rest)}."
        actions = {"pause": jobs.pause, "resume": jobs.resume}
        if verb in actions and rest:
            zone = await jobs.time_zone(user_id)
            return describe(await actions[verb](user_id, rest), zone)
        if verb == "delete" and rest:
            await jobs.delete(user_id, rest)
            return f"Deleted {rest}."
    except GatewayError as exc:
        return f"I can't: {exc.message}."
    if verb:
        return "Usage: jobs [pause|resume|delete ID | tz ZONE]"
    zone = await jobs.time_zone(user_id)
    mine = [job for job in await jobs.list(user_id) if job.state != "done"]
    if not mine:
        return f"You have no scheduled jobs (time zone {zone}). Use: remind WHEN TEXT"
    return f"Your jobs (time zone {zone}):\n" + "\n".join(
        f"• {describe(job, zone)}" for job in mine)


@hookimpl
def register_tools(host: PluginHost) -> list[Tool]:
    """The ``schedule`` tool."""
    return [schedule_tool(host)]


@hookimpl
def register_commands(host: PluginHost) -> list[ChatCommand]:
    """``/remind`` and ``/jobs``."""
    return [ChatCommand("remind", "WHEN TEXT", "post TEXT here at WHEN (in 10m, 09:00, "
                        "every 2h, cron …)", remind, per_conversation=True),
            ChatCommand("jobs", "[pause|resume|delete ID | tz ZONE]",
                        "your scheduled jobs", list_jobs)]
