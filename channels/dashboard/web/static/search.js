// Searching one's threads: the box above the thread list asks GET /api/threads?q= as one types
// (after a pause), and lists the threads found in the list's place, each with a snippet of
// where it matched and the searched words marked; emptying the box brings the list back.

import { api, query } from "./api.js";
import { $, clear, el } from "./dom.js";
import { markCurrent, showDrawer, threadItem, threadLabel } from "./threads.js";

const PAUSE_MS = 250; // typing this long after the last key runs the search
const PAGE = 20;
const state = { q: "", terms: [], before: null, asked: 0, timer: 0 };

/** Wire the search box (and Ctrl+K, or ⌘K, to reach it from anywhere). */
export function setUpSearch() {
  const input = $("search-input");
  input.addEventListener("input", () => {
    clearTimeout(state.timer);
    const q = input.value.trim();
    if (!q) showList();
    else state.timer = setTimeout(() => search(q), PAUSE_MS);
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(state.timer);
    const q = input.value.trim();
    if (q) search(q);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && input.value) {
      event.preventDefault();
      input.value = "";
      showList();
    }
  });
  $("more-results").addEventListener("click", () => search(state.q, state.before));
  document.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "k" && !$("app-view").hidden) {
      event.preventDefault();
      showDrawer(true);
      input.focus();
      input.select();
    }
  });
}

/** Back to the thread list: no search shown, and none still on its way. */
function showList() {
  clearTimeout(state.timer);
  state.asked += 1;
  state.q = "";
  $("search-view").hidden = true;
  $("search-view").removeAttribute("aria-busy");
  $("search-status").textContent = "";
  $("thread-browse").hidden = false;
  clear($("search-results"));
}

/** Run the search `q` (the page after `before`, when given) and show what it found. */
async function search(q, before = null) {
  const asked = ++state.asked;
  $("thread-browse").hidden = true;
  $("search-view").hidden = false;
  const status = $("search-status");
  if (!/[\p{L}\p{N}]/u.test(q)) { // the API searches words: letters and digits
    clear($("search-results"));
    $("more-results").hidden = true;
    status.textContent = "Type a letter or a digit to search.";
    return;
  }
  if (!before) {
    status.textContent = "Searching…";
    $("more-results").hidden = true;
  }
  $("search-view").setAttribute("aria-busy", "true");
  $("more-results").disabled = true; // one page at a time
  let page;
  try {
    page = await api("GET", query("/api/threads", { q, limit: PAGE, before }));
  } catch (error) {
    if (asked !== state.asked) return;
    if (!before) clear($("search-results"));
    status.textContent = error.message;
    return;
  } finally {
    if (asked === state.asked) {
      $("search-view").removeAttribute("aria-busy");
      $("more-results").disabled = false;
    }
  }
  if (asked !== state.asked) return; // a later search, or the list, took its place
  const results = $("search-results");
  if (!before) clear(results);
  state.q = q;
  state.terms = page.terms;
  state.before = page.nextBefore;
  results.append(...page.threads.map(resultItem));
  $("more-results").hidden = !page.nextBefore;
  const count = results.children.length;
  status.textContent = count
    ? `${count}${page.nextBefore ? "+" : ""} thread${count === 1 && !page.nextBefore ? "" : "s"} found`
    : `No threads match “${q}”.`;
  markCurrent();
}

function resultItem(thread) {
  return threadItem(thread, {
    testid: "search-result",
    name: marked(threadLabel(thread), state.terms),
    more: thread.match.snippet
      ? el("span", { className: "snippet small", dataset: { testid: "snippet" } },
           ...marked(thread.match.snippet, state.terms))
      : null,
  });
}

/**
 * `text` as text nodes, with each word that starts with one of `terms` (the API's, lower-case)
 * marked: <mark> elements made here, the text in them as text. A word is a run of letters and
 * digits, as the API reads words; the longest term is tried first.
 */
export function marked(text, terms) {
  const words = [...terms].filter(Boolean).sort((a, b) => b.length - a.length)
    .map((term) => term.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  if (!words.length) return [text];
  const starts = new RegExp(`(?<![\\p{L}\\p{N}])(?:${words.join("|")})`, "giu");
  const nodes = [];
  let last = 0;
  for (const found of text.matchAll(starts)) {
    if (found.index > last) nodes.push(text.slice(last, found.index));
    nodes.push(el("mark", {}, found[0]));
    last = found.index + found[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}
