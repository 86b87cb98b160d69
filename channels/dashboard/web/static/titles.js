// The open thread's title in its header, and renaming it there (PATCH /api/threads/{id}):
// Rename edits the title in place, Enter saves, Escape cancels, and "Use first message" goes
// back to the title the thread's first message gives. Titles go in as text only.

import { api } from "./api.js";
import { $, say } from "./dom.js";

let shown = { threadId: null, title: "", titleSet: false, exists: false };
let renamed = () => {};

/** Wire the rename controls; `onRenamed(summary)` runs with the thread's summary after each. */
export function setUpTitles(onRenamed) {
  renamed = onRenamed;
  $("rename-thread").addEventListener("click", startRename);
  $("rename-cancel").addEventListener("click", stopRename);
  $("rename-reset").addEventListener("click", () => save(null));
  $("rename-form").addEventListener("submit", (event) => {
    event.preventDefault();
    save($("rename-input").value);
  });
  $("rename-form").addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      stopRename();
    }
  });
}

/**
 * Show the open thread's title: `summary` is what the API says of it (its title, titleSet), or
 * null for a thread with no message yet. A thread without a title shows its id.
 */
export function showTitle(threadId, summary) {
  if (shown.threadId !== threadId) stopRename({ focus: false });
  shown = { threadId, title: summary?.title ?? "", titleSet: Boolean(summary?.titleSet),
            exists: Boolean(summary) };
  const text = summary ? summary.title || threadId : "New thread";
  $("thread-title").textContent = text;
  $("thread-title").title = text; // the whole of a long one, on hover
  $("rename-thread").hidden = !summary;
  document.title = `${text} · CloudyBot`;
}

function startRename() {
  if (!shown.exists) return;
  say("rename-error", "");
  $("rename-input").value = shown.title || shown.threadId;
  $("rename-reset").hidden = !shown.titleSet;
  $("rename-form").hidden = false;
  $("thread-header").classList.add("renaming");
  $("rename-input").select();
  $("rename-input").focus();
}

function stopRename({ focus = true } = {}) {
  if ($("rename-form").hidden) return;
  $("rename-form").hidden = true;
  $("thread-header").classList.remove("renaming");
  say("rename-error", "");
  if (focus) $("rename-thread").focus();
}

/** Send the new title (null: the first message's); the server's word when it refuses it. */
async function save(title) {
  const threadId = shown.threadId;
  say("rename-error", "");
  let summary;
  try {
    summary = await api("PATCH", `/api/threads/${encodeURIComponent(threadId)}`, { title });
  } catch (error) {
    if (threadId !== shown.threadId) return;
    say("rename-error", error.message);
    $("rename-input").focus(); // to correct it
    return;
  }
  if (threadId !== shown.threadId) return; // another thread was opened meanwhile
  stopRename();
  showTitle(threadId, summary);
  renamed(summary);
}
