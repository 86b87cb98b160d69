// What the Admin view's sections share: the words for the API's refusals, a section's status
// and alert lines while it loads, and table rows and figures made with the DOM.

import { $, el, formatNumber, say } from "./dom.js";

// Refusals worth more than the API's one-line message, by their code.
const WORDS = {
  admin_only: "You are not an admin.",
  cannot_block_self: "You cannot block your own account; another admin can.",
};
const asked = new Map(); // section -> the number of its latest request

/** What to show for a failed call: plain words for some codes, else the API's message. */
export function problem(error) {
  return WORDS[error?.code] ?? error?.message ?? String(error);
}

/**
 * Run `load()` for `section` with its status line (#SECTION-status) saying `busy` and its
 * alert line (#SECTION-error) cleared; a failure goes to the alert line. Resolves with what
 * `load` gave, or null when it failed or a later call for the same section took its place.
 */
export async function loading(section, load, busy = "Loading…") {
  const ticket = (asked.get(section) ?? 0) + 1;
  asked.set(section, ticket);
  const status = $(`${section}-status`);
  status.textContent = busy;
  say(`${section}-error`, "");
  let value;
  try {
    value = await load();
  } catch (error) {
    if (asked.get(section) === ticket) {
      status.textContent = "";
      say(`${section}-error`, problem(error));
    }
    return null;
  }
  if (asked.get(section) !== ticket) return null;
  status.textContent = "";
  return value;
}

/** A table row: each value a cell (a node as it is, anything else as text). */
export function row(values, props = {}) {
  return el("tr", props, ...values.map((value) => el("td", {},
    value instanceof Node ? value : String(value ?? ""))));
}

/** A row of one cell across `columns`, saying `text` (an empty table's). */
export function emptyRow(columns, text) {
  return el("tr", {}, el("td", { colSpan: columns, className: "muted" }, text));
}

/** A number as a right-aligned table cell's content. */
export const figure = (value) => el("span", { className: "figure" }, formatNumber(value));

/** Seconds as an age: "45 s", "12 min", "3 h 5 min", "2 d 4 h". */
export function formatAge(seconds) {
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** Fill a <dl> with [term, value] pairs. */
export function facts(list, pairs) {
  list.replaceChildren(...pairs.flatMap(([term, value]) => [el("dt", {}, term),
                                                           el("dd", {}, String(value))]));
}
