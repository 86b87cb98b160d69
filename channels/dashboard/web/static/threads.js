// The thread list, one thread's transcript (with scrollback) and the streaming composer.

import { showInAddress } from "./address.js";
import { ApiError, api, query, streamChat } from "./api.js";
import { $, clear, el, formatTime, say } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { showTitle } from "./titles.js";

const PAGE = 50;
const state = {
  threadId: null,
  nextBefore: null, // the transcript page before the oldest one shown
  loadingOlder: false,
  listBefore: null,
  known: new Map(), // threadId -> its summary, from the list (its title before it loads)
  sending: false,
  pictures: [], // data: URLs to send with the next message
};
let onTurn = () => {};

/** The thread shown now. */
export const currentThread = () => state.threadId;

/** Wire the list, transcript and composer; `turnDone()` runs after every answered turn. */
export function setUpThreads(turnDone) {
  onTurn = turnDone;
  $("new-thread").addEventListener("click", () => newThread());
  $("more-threads").addEventListener("click", () => loadThreads(false));
  $("composer-form").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("composer").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("transcript-scroll").addEventListener("scroll", () => {
    if ($("transcript-scroll").scrollTop < 80) loadOlder();
  });
  $("stop").addEventListener("click", stopTurn);
  $("picture-input").addEventListener("change", async (event) => {
    await addPictures([...event.target.files]);
    event.target.value = "";
  });
  $("picture-button").addEventListener("click", () => $("picture-input").click());
  $("composer").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files ?? [])].filter((f) => f.type.startsWith("image/"));
    if (files.length && !$("picture-button").hidden) {
      event.preventDefault();
      addPictures(files);
    }
  });
  $("clear-thread").addEventListener("click", clearThread);
  $("delete-thread").addEventListener("click", deleteThread);
}

/** Open a new thread: it exists on the gateway from its first message. */
export function newThread(address = "push") {
  return openThread(newThreadId(), { fresh: true, address });
}

function newThreadId() {
  // chat-20261202-0442-x7: sortable, readable, and within the API's thread id rules
  const now = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const day = `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}`;
  return `chat-${day}-${pad(now.getHours())}${pad(now.getMinutes())}-${Math.random().toString(36).slice(2, 4)}`;
}

function channelOf(threadId, channel) {
  return channel && channel !== "dashboard" ? channel : "dashboard";
}

/** (Re)load the first page of the thread list; `reset` false loads the next page. */
export async function loadThreads(reset = true) {
  if (reset) state.listBefore = null;
  const page = await api("GET", query("/api/threads", { limit: 50, before: state.listBefore }));
  const list = $("thread-list");
  if (reset) clear(list);
  for (const thread of page.threads) {
    state.known.set(thread.threadId, thread);
    list.append(threadItem(thread));
    if (thread.threadId === state.threadId) showTitle(thread.threadId, thread); // a new title
  }
  state.listBefore = page.nextBefore;
  $("more-threads").hidden = !page.nextBefore;
  markCurrent();
  return page.threads;
}

/** What a thread is called in a list: its title, or its id when it has none. */
export const threadLabel = (thread) => thread.title || thread.threadId;

/**
 * A thread as an entry of a list (the thread list, or search results): its `name` (nodes; its
 * label by default), channel and last change, and `more` below them; opens it when chosen.
 */
export function threadItem(thread, { testid = "thread", name = [threadLabel(thread)],
                                     more = null } = {}) {
  const channel = channelOf(thread.threadId, thread.channel);
  const button = el("button", { type: "button", className: "thread-button",
                               onclick: () => openThread(thread.threadId) },
    el("span", { className: "thread-name", title: threadLabel(thread) }, ...name),
    el("span", { className: `badge channel-${channel}` }, channel),
    el("time", { className: "muted small", dateTime: thread.updatedAt },
       formatTime(thread.updatedAt)),
    more);
  return el("li", { dataset: { testid, threadId: thread.threadId } }, button);
}

/** Mark the open thread wherever it is listed. */
export function markCurrent() {
  for (const item of $("threads").querySelectorAll("li[data-thread-id]")) {
    const current = item.dataset.threadId === state.threadId;
    item.classList.toggle("current", current);
    const button = item.querySelector("button");
    if (current) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
}

/** A thread renamed: its new title wherever it is listed. */
export function retitled(summary) {
  state.known.set(summary.threadId, { ...state.known.get(summary.threadId), ...summary });
  const label = threadLabel(summary);
  for (const item of $("threads").querySelectorAll("li[data-thread-id]")) {
    if (item.dataset.threadId !== summary.threadId) continue;
    const name = item.querySelector(".thread-name");
    name.textContent = label;
    name.title = label;
  }
}

/** Open or close the thread list's drawer (on a phone; on a wide screen it is always shown). */
export function showDrawer(open) {
  document.body.classList.toggle("threads-open", open);
  $("menu-toggle").setAttribute("aria-expanded", String(open));
}

/**
 * Show a thread: its first transcript page, newest at the bottom. `address` says how it is
 * named in the address bar (address.js: "push", "replace" or "keep").
 */
export async function openThread(threadId, { fresh = false, address = "push" } = {}) {
  state.threadId = threadId;
  state.nextBefore = null;
  showInAddress(threadId, address);
  showTitle(threadId, fresh ? null : state.known.get(threadId) ?? null);
  clear($("transcript"));
  $("transcript-top").textContent = fresh ? "No messages yet." : "";
  say("composer-error", "");
  $("summary-box").hidden = true;
  showDrawer(false);
  markCurrent();
  if (!fresh) await loadPage(true);
  else showThreadMeta(null);
  onTurn(threadId, { opened: true });
  // to the composer, unless the reader is typing elsewhere meanwhile (in the search box, say)
  const typing = document.activeElement?.matches("input, textarea, select");
  if (threadId === state.threadId && !typing) $("composer").focus();
}

function showThreadMeta(thread) {
  showTitle(state.threadId, thread);
  const channel = thread ? channelOf(thread.threadId, thread.channel) : "dashboard";
  $("thread-channel").textContent = channel;
  $("thread-channel").className = `badge channel-${channel}`;
  $("clear-thread").hidden = !thread;
  $("delete-thread").hidden = !thread;
  $("summary-box").hidden = !thread?.summary;
  clear($("summary-text")).append(renderMarkdown(thread?.summary ?? ""));
}

async function loadPage(first) {
  const threadId = state.threadId;
  let thread;
  try {
    thread = await api("GET", query(`/api/threads/${encodeURIComponent(threadId)}`,
                                    { limit: PAGE, before: first ? undefined : state.nextBefore }));
  } catch (error) {
    if (error.status === 404) {
      showThreadMeta(null);
      $("transcript-top").textContent = "No messages yet.";
      return;
    }
    throw error;
  }
  if (threadId !== state.threadId) return; // another thread was opened meanwhile
  if (first) showThreadMeta(thread);
  state.nextBefore = thread.nextBefore;
  $("transcript-top").textContent = thread.nextBefore ? "Scroll up for older messages"
    : "The beginning of this thread.";
  const scroller = $("transcript-scroll");
  const fromBottom = scroller.scrollHeight - scroller.scrollTop;
  const entries = thread.display_messages.map((m) => messageEntry(m.role, m.content, m.createdAt));
  $("transcript").prepend(...entries);
  markLast();
  if (first) scroller.scrollTop = scroller.scrollHeight;
  else scroller.scrollTop = scroller.scrollHeight - fromBottom; // keep the reader's place
}

async function loadOlder() {
  if (state.loadingOlder || !state.nextBefore) return;
  state.loadingOlder = true;
  try {
    await loadPage(false);
  } finally {
    state.loadingOlder = false;
  }
}

function messageEntry(role, content, createdAt, { pictures = [] } = {}) {
  const body = el("div", { className: "message-body" });
  body.append(renderMarkdown(content));
  const entry = el("li", { className: `message ${role}`, dataset: { testid: "message", role } },
    el("div", { className: "message-meta" },
       el("span", { className: "who" }, role === "user" ? "You" : "Assistant"),
       createdAt ? el("time", { className: "muted small", dateTime: createdAt },
                      formatTime(createdAt)) : null),
    pictures.length ? el("figure", { className: "message-pictures" },
      ...pictures.map((url, index) => el("img", { src: url, alt: `Your picture ${index + 1}`,
                                                  className: "thumbnail" })),
      el("figcaption", { className: "muted small" }, "Sent to the model, not kept.")) : null,
    body);
  entry.text = content; // what Copy copies and Edit starts from (the Markdown, not the HTML)
  entry.append(messageActions(entry, role));
  return entry;
}

function messageActions(entry, role) {
  const copy = el("button", { type: "button", className: "ghost small", dataset: { testid: "copy" },
                              onclick: () => copyMessage(entry, copy) }, "Copy");
  const actions = el("div", { className: "message-actions" }, copy);
  if (role === "user") {
    actions.append(el("button", { type: "button", className: "ghost small last-only",
                                  dataset: { testid: "edit" }, hidden: true,
                                  onclick: () => startEdit(entry) }, "Edit"));
  } else {
    actions.append(el("button", { type: "button", className: "ghost small last-only",
                                  dataset: { testid: "regenerate" }, hidden: true,
                                  onclick: () => regenerate(entry) }, "Regenerate"));
  }
  return actions;
}

// The clipboard, with a word on the button for a moment. (dom.js has no copy helper yet.)
async function copyMessage(entry, button) {
  try {
    await navigator.clipboard.writeText(entry.text);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Copy failed";
  }
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}

/** Offer Edit on the last user message and Regenerate on the last reply, when they end the
 * thread as one exchange and no turn is running. */
function markLast() {
  const entries = [...$("transcript").children];
  for (const button of $("transcript").querySelectorAll(".last-only")) button.hidden = true;
  const [user, answer] = entries.slice(-2);
  if (state.sending || !user || !answer || user.classList.contains("failed")) return;
  if (user.dataset.role !== "user" || answer.dataset.role !== "assistant") return;
  user.querySelector('[data-testid="edit"]').hidden = false;
  answer.querySelector('[data-testid="regenerate"]').hidden = false;
}

async function send() {
  const text = $("composer").value.trim();
  const pictures = [...state.pictures];
  if ((!text && !pictures.length) || state.sending || !state.threadId) return;
  const entry = messageEntry("user", text, new Date().toISOString(), { pictures });
  $("transcript").append(entry);
  $("composer").value = "";
  setPictures([]);
  await runTurn(entry, { message: text, ...(pictures.length ? { images: pictures } : {}) });
}

/** Regenerate: the last reply is replaced by a new answer to the same message. */
async function regenerate(answer) {
  const user = answer.previousElementSibling;
  if (state.sending || !user) return;
  answer.remove();
  const ok = await runTurn(user, { ...(user.request ?? { message: user.text }), replaceLast: true });
  if (!ok && !user.classList.contains("failed")) restore(user, answer);
}

function restore(user, answer) {
  // the turn failed: the old exchange is still the thread's, so it is shown again
  user.classList.remove("failed");
  user.querySelector(".send-failed")?.remove();
  user.after(answer);
  markLast();
}

/** Edit the last message in place; "Save and send" replaces the last exchange with it. */
function startEdit(user) {
  if (state.sending) return;
  const answer = user.nextElementSibling;
  const body = user.querySelector(".message-body");
  const box = el("textarea", { className: "edit-box", value: user.text, rows: 3,
                               "aria-label": "Edit your message", dataset: { testid: "edit-box" } });
  const form = el("form", { className: "edit-form" }, box,
    el("div", { className: "edit-actions" },
       el("button", { type: "button", className: "ghost small",
                      onclick: () => { form.remove(); body.hidden = false; markLast(); } },
          "Cancel"),
       el("button", { type: "submit", className: "primary small",
                      dataset: { testid: "edit-send" } }, "Save and send")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = box.value.trim();
    if (!text || state.sending) return;
    const edited = messageEntry("user", text, new Date().toISOString());
    user.replaceWith(edited);
    answer?.remove();
    const ok = await runTurn(edited, { message: text, replaceLast: true });
    if (ok) return;
    if (edited.classList.contains("failed")) return; // shown failed, with Retry
    edited.replaceWith(user); // stopped before an answer: the old exchange stays
    form.remove();
    body.hidden = false;
    if (answer) restore(user, answer);
  });
  body.hidden = true;
  body.after(form);
  for (const button of $("transcript").querySelectorAll(".last-only")) button.hidden = true;
  box.focus();
}

function setBusy(busy) {
  state.sending = busy;
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("stop").disabled = false;
  if (busy) $("stop").focus({ preventScroll: true });
  markLast();
}

/** Stop generating: the gateway ends the turn, keeping what the model wrote so far. */
async function stopTurn() {
  $("stop").disabled = true;
  try {
    await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/stop`);
  } catch (error) {
    say("composer-error", error.message);
  }
}

/** Run one turn for `user` (its entry already shown) and stream the answer after it; true if
 * answered. On failure the message is marked as not sent, with Retry (which sends it again
 * from the same entry). */
async function runTurn(user, request) {
  user.request = request; // Regenerate sends it again (its pictures too, while the page is open)
  setBusy(true);
  say("composer-error", "");
  user.classList.remove("failed");
  user.querySelector(".send-failed")?.remove();
  const answer = messageEntry("assistant", "", null);
  answer.classList.add("streaming");
  answer.setAttribute("aria-busy", "true");
  user.after(answer);
  scrollToEnd();
  const body = answer.querySelector(".message-body");
  let written = "";
  let frame = 0;
  const show = () => {
    frame = 0;
    clear(body).append(renderMarkdown(written));
    scrollToEnd();
  };
  const specialist = $("specialist-select").value;
  const threadId = state.threadId;
  try {
    const done = await streamChat(
      { threadId, ...request, ...(specialist ? { specialist } : {}) },
      {
        onDelta: (delta) => {
          written += delta;
          if (!frame) frame = requestAnimationFrame(show);
        },
        onReset: () => { written = ""; },
      });
    cancelAnimationFrame(frame);
    written = done.reply;
    answer.text = done.reply;
    show();
    if (done.stopped) {
      answer.querySelector(".message-meta").append(
        el("span", { className: "badge", dataset: { testid: "stopped" } }, "stopped"));
    }
    $("clear-thread").hidden = false; // the thread exists now
    $("delete-thread").hidden = false;
    if (!state.nextBefore) $("transcript-top").textContent = "The beginning of this thread.";
    onTurn(threadId, { done });
    return true;
  } catch (error) {
    cancelAnimationFrame(frame);
    answer.remove();
    if (error.code === "turn_stopped") {
      if (request.replaceLast) say("composer-error", "Stopped before the model wrote anything.");
      else markFailed(user, "stopped before the model wrote anything; nothing was kept.", request);
    } else {
      markFailed(user, failureText(error), request);
    }
    return false;
  } finally {
    answer.classList.remove("streaming");
    answer.removeAttribute("aria-busy");
    setBusy(false);
  }
}

function failureText(error) {
  if (!(error instanceof ApiError)) return "The gateway could not be reached. Check your connection.";
  if (error.code === "stream_ended") return "The connection broke before the answer was complete.";
  return error.message;
}

/** Show `user` as not sent: why, and a Retry that sends the same request again. */
function markFailed(user, why, request) {
  user.classList.add("failed");
  const retry = el("button", { type: "button", className: "small", dataset: { testid: "retry" },
                               onclick: () => { if (!state.sending) runTurn(user, request); } },
                   "Retry");
  user.append(el("p", { className: "send-failed", role: "alert", dataset: { testid: "send-failed" } },
                 el("span", {}, `Not sent: ${why}`), " ", retry));
}

function scrollToEnd() {
  const scroller = $("transcript-scroll");
  scroller.scrollTop = scroller.scrollHeight;
}

// --- pictures for the model: picked or pasted, shrunk to fit, sent with the message -------
const PICTURE_SIDE = 1568; // longest side sent: what vision models read at full detail

function setPictures(pictures) {
  state.pictures = pictures;
  const list = clear($("composer-pictures"));
  list.hidden = !pictures.length;
  pictures.forEach((url, index) => list.append(el("li", {},
    el("img", { src: url, alt: `Picture ${index + 1}`, className: "thumbnail" }),
    el("button", { type: "button", className: "ghost small", "aria-label": `Remove picture ${index + 1}`,
                   onclick: () => setPictures(state.pictures.filter((_, i) => i !== index)) },
       "✕"))));
}

async function addPictures(files) {
  say("composer-error", "");
  for (const file of files) {
    if (!/^image\/(png|jpeg|gif|webp)$/.test(file.type)) {
      say("composer-error", `${file.name || "That file"} is not a PNG, JPEG, GIF or WebP picture.`);
      continue;
    }
    if (state.pictures.length >= 4) {
      say("composer-error", "At most 4 pictures a message.");
      break;
    }
    try {
      setPictures([...state.pictures, await shrink(file)]);
    } catch {
      say("composer-error", `${file.name || "That picture"} could not be read.`);
    }
  }
}

/** A picture as a JPEG data: URL no larger than PICTURE_SIDE a side (it fits a request). */
async function shrink(file) {
  const bitmap = await createImageBitmap(file);
  const scale = Math.min(1, PICTURE_SIDE / Math.max(bitmap.width, bitmap.height));
  const canvas = el("canvas", { width: Math.round(bitmap.width * scale),
                                height: Math.round(bitmap.height * scale) });
  const context = canvas.getContext("2d");
  context.fillStyle = "#fff"; // a transparent PNG on white, not black
  context.fillRect(0, 0, canvas.width, canvas.height);
  context.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  return canvas.toDataURL("image/jpeg", 0.85);
}

/** Offer pictures only when the gateway's model reads them. */
export function allowPictures(vision) {
  $("picture-button").hidden = !vision;
  if (!vision) setPictures([]);
}

async function clearThread() {
  if (!confirm("Clear this thread's summary and recent memory? The transcript and pinned facts stay.")) return;
  await api("POST", `/api/threads/${encodeURIComponent(state.threadId)}/clear`);
  onTurn(state.threadId, { cleared: true });
}

async function deleteThread() {
  if (!confirm("Delete this thread, its transcript and its pinned facts?")) return;
  await api("DELETE", `/api/threads/${encodeURIComponent(state.threadId)}`);
  const threads = await loadThreads();
  state.known.delete(state.threadId);
  // the deleted thread's place in history goes to the one shown instead
  if (threads.length) await openThread(threads[0].threadId, { address: "replace" });
  else await newThread("replace");
}
