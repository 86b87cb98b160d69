// The Admin view's Audit log section: GET /api/admin/audit, newest first, filtered by actor,
// action and a first day, a page at a time with More; Export reads every page the filters
// match and downloads them as JSON lines, oldest first, as `cloudybot audit --export` writes
// (the API has no export route: the file is made here, as a Blob).

import { emptyRow, loading, row } from "./admin-kit.js";
import { api, query } from "./api.js";
import { $, clear, el, formatTime } from "./dom.js";

const PAGE = 50;
const EXPORT_PAGE = 500; // the API's most per page
let nextBefore = null;

/** Wire the filters, More and Export. */
export function setUpAudit() {
  $("audit-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    showAudit();
  });
  $("audit-more").addEventListener("click", () => loadAudit(false));
  $("audit-export").addEventListener("click", exportAudit);
}

/** Read the newest page of the audit log the filters match. */
export const showAudit = () => loadAudit(true);

function filters() {
  return { actor: $("audit-actor").value.trim(), action: $("audit-action").value.trim(),
           since: $("audit-since").value };
}

async function loadAudit(first) {
  $("audit-more").disabled = true;
  const page = await loading("audit", () => api("GET", query("/api/admin/audit", {
    ...filters(), limit: PAGE, before: first ? undefined : nextBefore })));
  $("audit-more").disabled = false;
  if (!page) return;
  const rows = $("audit-rows");
  if (first) clear(rows);
  rows.append(...page.entries.map(auditRow));
  if (!rows.childElementCount) rows.append(emptyRow(6, "No entry matches."));
  nextBefore = page.nextBefore;
  $("audit-more").hidden = !nextBefore;
}

function details(entry) {
  const pairs = Object.entries(entry.details ?? {});
  return pairs.length ? pairs.map(([key, value]) => `${key}: ${JSON.stringify(value)}`).join(", ")
    : "";
}

function auditRow(entry) {
  return row([el("time", { dateTime: entry.at, title: entry.at }, formatTime(entry.at)),
              entry.actor, el("code", {}, entry.action), entry.target ?? "—", details(entry),
              entry.source],
             { dataset: { testid: "audit-row", action: entry.action } });
}

/** Download every entry the filters match as a JSON-lines file, oldest first. */
async function exportAudit() {
  const button = $("audit-export");
  button.disabled = true;
  const entries = await loading("audit", async () => {
    const all = [];
    let before;
    do {
      const page = await api("GET", query("/api/admin/audit", {
        ...filters(), limit: EXPORT_PAGE, before }));
      all.push(...page.entries);
      before = page.nextBefore;
    } while (before);
    return all.reverse();
  }, "Exporting…");
  button.disabled = false;
  if (!entries) return;
  const blob = new Blob(entries.map((entry) => `${JSON.stringify(entry)}\n`),
                        { type: "application/x-ndjson" });
  const address = URL.createObjectURL(blob);
  const link = el("a", { href: address, download: `cloudybot-audit-${new Date().toISOString().slice(0, 10)}.jsonl` });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(address), 60_000); // once the download has read it
  $("audit-status").textContent = `Exported ${entries.length} entr${entries.length === 1 ? "y" : "ies"}, oldest first.`;
}
