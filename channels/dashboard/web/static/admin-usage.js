// The Admin view's Usage and cost section: GET /api/admin/usage over a range (the last 7, 30 or
// 90 days by day, or 48 hours by hour) grouped by model, plan, channel, tool or user, drawn as
// a stacked bar chart per bucket, with the range's totals and its top spenders.

import { emptyRow, facts, figure, loading, row } from "./admin-kit.js";
import { api, query } from "./api.js";
import { chartLegend, stackedBars } from "./chart.js";
import { $, clear, el, formatNumber } from "./dom.js";

const HOURLY = "48h";
const COLOURS = 10; // series-0 … series-9 in app.css
const DAY_MS = 86_400_000;
const MEASURES = {
  credits: { label: "AI credits", of: (spend) => spend.credits },
  calls: { label: "LLM calls", of: (spend) => spend.calls },
  tokens: { label: "tokens", of: (spend) => spend.promptTokens + spend.completionTokens },
  browserMinutes: { label: "browser minutes", of: (spend) => spend.browserMinutes },
};
const NONE = { tool: "no tool", channel: "no channel", model: "no model" };

/** Wire the range, grouping and measure choices (each draws the report again). */
export function setUpUsage() {
  for (const id of ["usage-range", "usage-group", "usage-measure"]) {
    $(id).addEventListener("change", () => {
      limitChoices();
      showUsage();
    });
  }
  limitChoices();
}

// Usage by user is kept per day: the hourly range and "by user" exclude each other.
function limitChoices() {
  const hourly = $("usage-range").value === HOURLY;
  $("usage-group").querySelector('[value="user"]').disabled = hourly;
  $("usage-range").querySelector(`[value="${HOURLY}"]`).disabled =
    $("usage-group").value === "user";
}

/** The report's query for the choices made (a range of whole UTC days ending today). */
function request() {
  const range = $("usage-range").value;
  const groupBy = $("usage-group").value;
  if (range === HOURLY) return { bucket: "hour", groupBy };
  const today = Date.parse(new Date().toISOString().slice(0, 10));
  const from = new Date(today - (Number(range) - 1) * DAY_MS).toISOString().slice(0, 10);
  return { bucket: "day", from, groupBy };
}

/** Read the report for the choices made and draw it. */
export async function showUsage() {
  const report = await loading("usage", () => api("GET", query("/api/admin/usage", request())));
  if (report) drawUsage(report);
}

/** Every bucket of the report's range, empty ones too: [{ key, label }]. */
function bucketsOf(report) {
  const hourly = report.bucket === "hour";
  const at = (stamp) => Date.parse(hourly ? `${stamp}:00:00Z` : `${stamp}T00:00:00Z`);
  const step = hourly ? DAY_MS / 24 : DAY_MS;
  const buckets = [];
  for (let moment = at(report.from); moment < at(report.to); moment += step) {
    const iso = new Date(moment).toISOString();
    const hour = iso.slice(11, 13);
    buckets.push(hourly
      ? { key: iso.slice(0, 13), label: hour === "00" ? iso.slice(5, 10) : `${hour}:00` }
      : { key: iso.slice(0, 10), label: iso.slice(5, 10) });
  }
  return buckets;
}

function drawUsage(report) {
  const measure = MEASURES[$("usage-measure").value];
  const cells = new Map(report.series.map((entry) => [`${entry.bucket} ${entry.group}`,
                                                      measure.of(entry)]));
  const sums = new Map();
  for (const entry of report.series) {
    sums.set(entry.group, (sums.get(entry.group) ?? 0) + measure.of(entry));
  }
  const groups = [...sums].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([key], index) => ({ key, label: key || NONE[report.groupBy] || "none",
                              className: `series-${index % COLOURS}` }));
  const unit = report.bucket === "hour" ? "UTC hour" : "UTC day";
  const box = clear($("usage-bars"));
  Object.assign(box.dataset, { from: report.from, to: report.to, bucket: report.bucket,
                               groupBy: report.groupBy });
  box.append(stackedBars({
    buckets: bucketsOf(report), groups,
    value: (bucket, group) => cells.get(`${bucket.key} ${group.key}`) ?? 0,
    describe: (bucket, group, value) => `${bucket.key}, ${group.label}: ${formatNumber(value)} ${measure.label}`,
    label: `${measure.label} per ${unit}, by ${report.groupBy}`, valueLabel: measure.label,
    bucketLabel: unit, width: Math.max(320, box.clientWidth || 640), height: 260, fontSize: 11,
  }), groups.length ? chartLegend(groups)
    : el("p", { className: "muted small" }, "Nothing was used in this range."));
  $("usage-caption").textContent = `${measure.label} per ${unit} from ${report.from} to `
    + `${report.to} (not included), by ${report.groupBy}.`;
  const total = report.totals;
  facts($("usage-totals"), [
    ["AI credits", formatNumber(total.credits)], ["LLM calls", formatNumber(total.calls)],
    ["Prompt tokens", formatNumber(total.promptTokens)],
    ["Completion tokens", formatNumber(total.completionTokens)],
    ["Browser minutes", formatNumber(total.browserMinutes)]]);
  const spenders = report.topSpenders;
  $("spenders-range").textContent = `Whole UTC days from ${spenders.from} to ${spenders.to} `
    + "(not included).";
  const rows = clear($("spenders-rows"));
  rows.append(...spenders.users.map((user) => row([
    user.userId, figure(user.credits), figure(user.calls), figure(user.promptTokens),
    figure(user.completionTokens), figure(user.browserMinutes)])));
  if (!spenders.users.length) rows.append(emptyRow(6, "Nobody spent anything."));
}
