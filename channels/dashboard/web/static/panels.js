// The side panels: context inspector, pinned memory, specialists, credits and usage, the
// session's files and saved browser logins. Each reads and writes the documented API only.

import { api, query } from "./api.js";
import { chartLegend, stackedBars } from "./chart.js";
import { $, clear, el, formatBytes, formatNumber, formatTime, say } from "./dom.js";

const LAYER_NAMES = {
  base: "Instructions", pinned: "Pinned", specialist: "Specialist", summary: "Summary",
  hints: "Hints", recent: "Recent messages",
};
const KIND_NAMES = { chat: "Chat", tool_round: "Tool rounds", summarize: "Summaries",
                     browser: "Browser" };
const threadPath = (threadId, tail = "") => `/api/threads/${encodeURIComponent(threadId)}${tail}`;

// --- context inspector ------------------------------------------------------------------
/** Draw the next turn's prompt as a bar of tokens per layer against MAX_CONTEXT. */
export async function showContext(threadId) {
  const specialist = $("specialist-select").value || undefined;
  const box = $("context-inspector");
  let context;
  try {
    context = await api("GET", query(threadPath(threadId, "/context"), { specialist }));
  } catch (error) {
    clear(box).append(el("p", { className: "error" }, error.message));
    return;
  }
  const bar = el("div", { className: "bar", role: "img",
                          "aria-label": `${context.totalTokens} of ${context.maxContext} tokens` });
  const legend = el("ul", { className: "legend" });
  const layerTokens = context.layers.reduce((sum, layer) => sum + layer.tokens, 0);
  const framing = Math.max(0, context.totalTokens - layerTokens);
  const parts = [...context.layers, ...(framing ? [{ name: "framing", tokens: framing, text: "" }] : [])];
  for (const layer of parts) {
    const segment = el("span", { className: `segment layer-${layer.name}`,
                                 title: `${LAYER_NAMES[layer.name] ?? "Message framing and tools"}: ${layer.tokens} tokens`,
                                 dataset: { layer: layer.name, tokens: String(layer.tokens) } });
    segment.style.width = `${(100 * layer.tokens) / context.maxContext}%`;
    bar.append(segment);
    const label = LAYER_NAMES[layer.name] ?? "Framing and tools";
    const item = el("li", { dataset: { layer: layer.name } },
      el("span", { className: `swatch layer-${layer.name}` }),
      el("span", { className: "legend-name" }, label),
      el("span", { className: "muted" }, `${formatNumber(layer.tokens)} tokens`));
    if (layer.text) {
      item.append(el("details", {}, el("summary", {}, "show text"),
                     el("pre", { className: "layer-text" }, layer.text)));
    }
    legend.append(item);
  }
  const recent = context.recent;
  clear(box).append(
    el("p", { className: "total" },
       el("strong", {}, formatNumber(context.totalTokens)),
       ` of ${formatNumber(context.maxContext)} tokens`,
       el("span", { className: "muted" },
          ` · ${recent.kept} recent message${recent.kept === 1 ? "" : "s"} kept`,
          recent.dropped ? `, ${recent.dropped} dropped` : "")),
    bar, legend);
}

// --- pinned memory ------------------------------------------------------------------------
/** Wire the memory form; `changed()` runs after each change. */
export function setUpMemory(thread, changed) {
  $("memory-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    say("memory-error", "");
    try {
      const answer = await api("PUT", query("/api/user/memory", { threadId: thread() }), {
        key: $("memory-key").value.trim(), value: $("memory-value").value });
      $("memory-form").reset();
      drawMemory(answer.memory, thread, changed);
      changed();
    } catch (error) {
      say("memory-error", error.message);
    }
  });
}

/** Load and list the thread's pinned keys. */
export async function showMemory(threadId, thread, changed) {
  const answer = await api("GET", query("/api/user/memory", { threadId }));
  drawMemory(answer.memory, thread, changed);
}

function drawMemory(memory, thread, changed) {
  const list = clear($("memory-list"));
  const keys = Object.keys(memory).sort();
  if (!keys.length) list.append(el("li", { className: "muted small" }, "No pinned facts yet."));
  for (const key of keys) {
    const edit = () => {
      $("memory-key").value = key;
      $("memory-value").value = memory[key];
      $("memory-value").focus();
    };
    const remove = async () => {
      const answer = await api("DELETE", query("/api/user/memory", { threadId: thread(), key }));
      drawMemory(answer.memory, thread, changed);
      changed();
    };
    list.append(el("li", { className: "entry", dataset: { testid: "memory-entry", key } },
      el("div", {}, el("code", {}, key), el("p", { className: "entry-value" }, memory[key])),
      el("div", { className: "entry-actions" },
         el("button", { type: "button", className: "ghost small", onclick: edit,
                        "aria-label": `Edit ${key}` }, "Edit"),
         el("button", { type: "button", className: "ghost small danger", onclick: remove,
                        dataset: { testid: "memory-delete" }, "aria-label": `Delete ${key}` },
            "Delete"))));
  }
}

// --- specialists ----------------------------------------------------------------------------
/** Wire the specialist editor and the composer's picker. */
export function setUpSpecialists(changed) {
  $("specialist-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    say("specialist-error", "");
    const name = $("specialist-name").value.trim();
    try {
      await api("PUT", `/api/specialists/${encodeURIComponent(name)}`,
                { instructions: $("specialist-instructions").value });
      $("specialist-form").reset();
      await showSpecialists();
    } catch (error) {
      say("specialist-error", error.message);
    }
  });
  $("specialist-select").addEventListener("change", changed);
}

/** Load the user's specialists into the editor list and the picker (keeping its choice). */
export async function showSpecialists() {
  const { specialists } = await api("GET", "/api/specialists");
  const select = $("specialist-select");
  const chosen = select.value;
  clear(select).append(el("option", { value: "" }, "None"));
  const list = clear($("specialist-list"));
  for (const specialist of specialists) {
    select.append(el("option", { value: specialist.name }, specialist.name));
    const edit = () => {
      $("specialist-name").value = specialist.name;
      $("specialist-instructions").value = specialist.instructions;
      $("specialist-instructions").focus();
    };
    const remove = async () => {
      await api("DELETE", `/api/specialists/${encodeURIComponent(specialist.name)}`);
      await showSpecialists();
    };
    list.append(el("li", { className: "entry" },
      el("div", {}, el("strong", {}, specialist.name),
         el("p", { className: "entry-value" }, specialist.instructions)),
      el("div", { className: "entry-actions" },
         el("button", { type: "button", className: "ghost small", onclick: edit }, "Edit"),
         el("button", { type: "button", className: "ghost small danger", onclick: remove },
            "Delete"))));
  }
  if (!specialists.length) {
    list.append(el("li", { className: "muted small" }, "No specialists yet."));
  }
  select.value = specialists.some((s) => s.name === chosen) ? chosen : "";
}

// --- credits and usage ----------------------------------------------------------------------
/** The balance in the top bar and the usage panel, and the chart of credits per day. */
export async function showCredits() {
  const [credits, daily] = await Promise.all([
    api("GET", "/api/user/credits"), api("GET", query("/api/user/usage/daily", { days: 30 }))]);
  $("credits").textContent = `${formatNumber(credits.credits)} credits`;
  const facts = clear($("balance"));
  for (const [term, value] of [["Plan", credits.plan],
                               ["AI credits", formatNumber(credits.credits)],
                               ["Browser minutes", formatNumber(credits.browserMinutes)],
                               ["Period", credits.period]]) {
    facts.append(el("dt", {}, term), el("dd", {}, value));
  }
  drawChart(daily.days);
}

function drawChart(days) {
  const kinds = [...new Set(days.flatMap((day) => Object.keys(day.kinds)))].sort();
  const groups = kinds.map((kind) => ({ key: kind, label: KIND_NAMES[kind] ?? kind,
                                        className: `kind-${kind}` }));
  const byDate = new Map(days.map((day) => [day.date, day]));
  const chart = stackedBars({
    buckets: days.map((day) => ({ key: day.date, label: day.date.slice(5) })), groups,
    value: (bucket, group) => byDate.get(bucket.key).kinds[group.key]?.credits ?? 0,
    describe: (bucket, group, spent) => `${bucket.key}: ${spent} credits (${group.label})`,
    label: "Credits spent per day" });
  const total = days.reduce((sum, day) => sum + day.credits, 0);
  clear($("usage-chart")).append(chart, kinds.length ? chartLegend(groups)
    : el("p", { className: "muted small" }, "Nothing spent in the last 30 days."),
    el("p", { className: "small" },
       `${formatNumber(total)} credit${total === 1 ? "" : "s"} in 30 days`));
}

// --- session --------------------------------------------------------------------------------
/** The thread's session files: the active one's size, the last rotation, the archives. */
export async function showSession(threadId) {
  const status = await api("GET", threadPath(threadId, "/session"));
  const facts = clear($("session-status"));
  const active = status.active
    ? `${formatBytes(status.active.bytes)} of ${formatBytes(status.maxBytes)}, written ${formatTime(status.active.updatedAt)}`
    : "none yet";
  for (const [term, value] of [["Active file", active],
                               ["Rotates after", `${status.idleMinutes} idle minutes or ${formatBytes(status.maxBytes)}`],
                               ["Last rotation", status.lastRotation ? formatTime(status.lastRotation) : "never"],
                               ["Archives", String(status.archives.length)]]) {
    facts.append(el("dt", {}, term), el("dd", {}, value));
  }
  const list = clear($("session-archives"));
  for (const archive of status.archives.slice(-10).reverse()) {
    list.append(el("li", {}, `${formatTime(archive.archivedAt)} · ${formatBytes(archive.bytes)}`));
  }
}

// --- browser logins -------------------------------------------------------------------------
/** Wire the saved-login form: passwords go in and are never shown again. */
export function setUpCredentials() {
  $("credential-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    say("credential-error", "");
    try {
      const answer = await api("PUT", "/api/user/browser-credentials", {
        site: $("credential-site").value.trim(), username: $("credential-username").value,
        password: $("credential-password").value });
      $("credential-form").reset();
      drawCredentials(answer);
    } catch (error) {
      say("credential-error", error.message);
    }
  });
}

/** Load and list the saved logins (site and username only). */
export async function showCredentials() {
  drawCredentials(await api("GET", "/api/user/browser-credentials"));
}

function drawCredentials(answer) {
  const logins = Array.isArray(answer) ? answer : answer.credentials ?? [];
  const list = clear($("credential-list"));
  if (!logins.length) list.append(el("li", { className: "muted small" }, "No saved logins."));
  for (const login of logins) {
    const remove = async () => {
      drawCredentials(await api("DELETE", query("/api/user/browser-credentials",
                                                { site: login.site })));
    };
    list.append(el("li", { className: "entry" },
      el("div", {}, el("strong", {}, login.site),
         el("p", { className: "entry-value muted" }, `${login.username} · password saved`)),
      el("div", { className: "entry-actions" },
         el("button", { type: "button", className: "ghost small danger", onclick: remove },
            "Forget"))));
  }
}
