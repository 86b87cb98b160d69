// The Admin view's Users section: accounts searched and filtered (GET /api/admin/users), a page
// at a time with More; per account, block or unblock it (once confirmed), grant it credits with
// a reason, set its daily cap or give it back its plan's. Each act's answer redraws the row.

import { figure, loading, problem } from "./admin-kit.js";
import { api, query } from "./api.js";
import { $, clear, el, formatNumber, formatTime } from "./dom.js";

const PAGE = 50;
const COLUMNS = 9;
const userPath = (userId, act) => `/api/admin/users/${encodeURIComponent(userId)}/${act}`;
let nextAfter = null;
let shown = 0;

/** Wire the filters and More. */
export function setUpUsers() {
  $("user-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    showUsers();
  });
  for (const id of ["user-blocked", "user-admin"]) {
    $(id).addEventListener("change", () => showUsers());
  }
  $("users-more").addEventListener("click", () => loadUsers(false));
}

/** Read the first page of the accounts the filters name. */
export const showUsers = () => loadUsers(true);

function filters() {
  return { q: $("user-q").value.trim(), plan: $("user-plan").value.trim(),
           blocked: $("user-blocked").value, admin: $("user-admin").value };
}

async function loadUsers(first) {
  $("users-more").disabled = true;
  const page = await loading("users", () => api("GET", query("/api/admin/users", {
    ...filters(), limit: PAGE, after: first ? undefined : nextAfter })));
  $("users-more").disabled = false;
  if (!page) return;
  const rows = $("users-rows");
  if (first) {
    clear(rows);
    shown = 0;
  }
  for (const user of page.users) rows.append(...userRows(user));
  shown += page.users.length;
  nextAfter = page.nextAfter;
  $("users-more").hidden = !nextAfter;
  $("users-status").textContent = shown
    ? `${shown} account${shown === 1 ? "" : "s"} shown${nextAfter ? "; More reads the next page" : ""}.`
    : "No account matches.";
}

function userRows(user) {
  const line = el("tr", { dataset: { testid: "user-row", userId: user.userId } });
  const detail = el("tr", { className: "row-detail", hidden: true,
                            dataset: { testid: "user-detail", userId: user.userId } },
                    el("td", { colSpan: COLUMNS }));
  fill(line, detail, user);
  return [line, detail];
}

/** Draw the account's row (again, after an act) from the API's account object. */
function fill(line, detail, user) {
  const known = $("user-plans"); // the plans seen, offered in the plan filter
  if (![...known.options].some((option) => option.value === user.plan)) {
    known.append(el("option", { value: user.plan }));
  }
  line.dataset.blocked = String(user.blocked);
  const action = (label, testid, open) => el("button", {
    type: "button", className: "ghost small", dataset: { testid },
    "aria-label": `${label}: ${user.userId}`, onclick: () => open(user, line, detail) }, label);
  const cap = user.dailyCap === null ? "no cap"
    : `${formatNumber(user.dailyCap)} (${user.dailyCredits === null ? "plan's" : "own"})`;
  line.replaceChildren(
    el("th", { scope: "row" }, user.userId),
    el("td", {}, el("div", { className: "row-actions" },
       action(user.blocked ? "Unblock" : "Block", "block-toggle", confirmBlock),
       action("Grant credits", "grant-open", grantForm),
       action("Daily cap", "cap-open", capForm))),
    el("td", {}, user.plan),
    el("td", { dataset: { testid: "user-credits" } }, figure(user.credits)),
    el("td", {}, figure(user.browserMinutes)),
    el("td", {}, user.lastActive ? formatTime(user.lastActive) : "never"),
    el("td", { dataset: { testid: "user-cap" } }, `${formatNumber(user.spentToday)} / ${cap}`),
    el("td", {}, user.admin ? "admin" : "—"),
    el("td", { dataset: { testid: "user-blocked" } },
       user.blocked ? el("span", { className: "badge danger" }, "blocked") : "—"));
}

function openPanel(detail, ...children) {
  clear(detail.firstElementChild).append(...children);
  detail.hidden = false;
}

function closePanel(detail) {
  clear(detail.firstElementChild);
  detail.hidden = true;
}

/** Run an act on the account; its answer (the account) redraws the row, a refusal is said in
 * `message`. */
async function act(line, detail, message, call, done) {
  message.textContent = "";
  try {
    const answer = await call();
    const user = answer.user ?? answer;
    closePanel(detail);
    fill(line, detail, user);
    $("users-status").textContent = done(user);
    line.querySelector("button")?.focus();
  } catch (error) {
    message.textContent = problem(error);
  }
}

const alertLine = () => el("p", { className: "error", role: "alert",
                                  dataset: { testid: "row-error" } });
const cancel = (detail) => el("button", { type: "button", className: "ghost small",
                                          onclick: () => closePanel(detail) }, "Cancel");

function confirmBlock(user, line, detail) {
  const message = alertLine();
  const blocking = !user.blocked;
  const yes = el("button", {
    type: "button", className: blocking ? "danger small" : "primary small",
    dataset: { testid: "block-confirm" },
    onclick: () => act(line, detail, message,
                       () => api("POST", userPath(user.userId, blocking ? "block" : "unblock")),
                       (done) => `${done.userId} is ${done.blocked ? "blocked" : "unblocked"}.`),
  }, blocking ? `Block ${user.userId}` : `Unblock ${user.userId}`);
  openPanel(detail, el("div", { className: "row-form" },
    el("p", {}, blocking
      ? `Block ${user.userId}? Their API calls, sign-ins, channel messages and scheduled jobs `
        + "are refused from their next request on; their data stays."
      : `Let ${user.userId} in again?`),
    yes, cancel(detail), message));
  yes.focus();
}

// What the amount box holds, as the API takes it: digits as a number, anything else as typed
// (the API says what is wrong with it).
const amountOf = (text) => (/^\s*\d+\s*$/.test(text) ? Number(text) : text);

function grantForm(user, line, detail) {
  const message = alertLine();
  const amount = el("input", { inputMode: "numeric", required: true, autocomplete: "off",
                               dataset: { testid: "grant-amount" } });
  const reason = el("input", { required: true, maxLength: 500, autocomplete: "off",
                               dataset: { testid: "grant-reason" } });
  const form = el("form", { className: "row-form", onsubmit: (event) => {
    event.preventDefault();
    act(line, detail, message, () => api("POST", userPath(user.userId, "grants"), {
      credits: amountOf(amount.value), reason: reason.value }),
    (done) => `Granted ${formatNumber(amountOf(amount.value))} credits to ${done.userId}.`);
  } },
  el("label", {}, "Credits ", amount), el("label", { className: "grow" }, "Reason ", reason),
  el("button", { type: "submit", className: "primary small" }, "Grant"), cancel(detail),
  message);
  openPanel(detail, form);
  amount.focus();
}

function capForm(user, line, detail) {
  const message = alertLine();
  const cap = el("input", { type: "number", min: 0, step: 1, required: true,
                            value: user.dailyCredits ?? "", dataset: { testid: "cap-amount" } });
  const setCap = (dailyCredits) => act(
    line, detail, message,
    () => api("PUT", userPath(user.userId, "budget"), { dailyCredits }),
    (done) => (done.dailyCredits === null
      ? `${done.userId} has their plan's daily cap again.`
      : `${done.userId}'s daily cap is ${formatNumber(done.dailyCredits)} credits.`));
  const form = el("form", { className: "row-form", onsubmit: (event) => {
    event.preventDefault();
    setCap(Number(cap.value));
  } },
  el("label", {}, "Daily cap in AI credits (0: none) ", cap),
  el("button", { type: "submit", className: "primary small" }, "Set"),
  el("button", { type: "button", className: "ghost small", dataset: { testid: "cap-plan" },
                 onclick: () => setCap(null) }, "Use the plan's"),
  cancel(detail), message);
  openPanel(detail, form);
  cap.focus();
}
