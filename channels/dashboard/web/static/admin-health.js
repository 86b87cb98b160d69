// The Admin view's Health section: GET /api/admin/health, each channel's inbox and outbox
// (what waits and for how long, what failed for good), the webhook endpoints failing and the
// scheduled jobs by state; Refresh reads it again.

import { emptyRow, facts, figure, formatAge, loading, row } from "./admin-kit.js";
import { api } from "./api.js";
import { $, clear, el, formatNumber, formatTime } from "./dom.js";

/** Wire Refresh. */
export function setUpHealth() {
  $("health-refresh").addEventListener("click", () => showHealth());
}

/** Read the gateway's health and show it. */
export async function showHealth() {
  const health = await loading("health", () => api("GET", "/api/admin/health"));
  if (!health) return;
  const channels = clear($("health-channels"));
  channels.append(...health.channels.map((channel) => row([
    channel.channel, figure(channel.inboxPending), figure(channel.outboxPending),
    channel.oldestPendingSeconds === null ? "—"
      : el("span", { title: formatTime(channel.oldestPending) },
           formatAge(channel.oldestPendingSeconds)),
    figure(channel.failed)], { dataset: { testid: "health-channel" } })));
  if (!health.channels.length) {
    channels.append(emptyRow(5, "No channel has a message waiting or a reply failed."));
  }
  $("health-since").textContent = "Deliveries being retried, or failed for good since "
    + `${formatTime(health.failingSince)}.`;
  const hooks = clear($("health-webhooks"));
  hooks.append(...health.webhooks.map((hook) => row([
    hook.host, hook.userId, el("code", {}, hook.id), figure(hook.retrying), figure(hook.failed),
    hook.lastStatusCode ?? "—", hook.lastError ?? "—"], { dataset: { testid: "health-webhook" } })));
  if (!health.webhooks.length) hooks.append(emptyRow(7, "No webhook endpoint is failing."));
  facts($("health-jobs"), [["Active", formatNumber(health.jobs.active)],
                           ["Paused", formatNumber(health.jobs.paused)],
                           ["Done", formatNumber(health.jobs.done)]]);
  $("health-status").textContent = `Read at ${new Date().toLocaleTimeString()}.`;
}
