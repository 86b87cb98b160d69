// The thread list, one thread's transcript (with scrollback) and the streaming composer.

import { api, query, streamChat } from "./api.js";
import { $, clear, el, formatTime, say } from "./dom.js";
import { renderMarkdown } from "./markdown.js";

const PAGE = 50;
const state = {
  threadId: null,
  nextBefore: null, // the transcript page before the oldest one shown
  loadingOlder: false,
  listBefore: null,
  sending: false,
};
let onTurn = () => {};

/** The thread shown now. */
export const currentThread = () => state.threadId;

/** Wire the list, transcript and composer; `turnDone()` runs after every answered turn. */
export function setUpThreads(turnDone) {
  onTurn = turnDone;
  $("new-thread").addEventListener("click", () => openThread(newThreadId(), { fresh: true }));
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
  $("clear-thread").addEventListener("click", clearThread);
  $("delete-thread").addEventListener("click", deleteThread);
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
  for (const thread of page.threads) list.append(threadItem(thread));
  state.listBefore = page.nextBefore;
  $("more-threads").hidden = !page.nextBefore;
  markCurrent();
  return page.threads;
}

function threadItem(thread) {
  const channel = channelOf(thread.threadId, thread.channel);
  const button = el("button", { type: "button", className: "thread-button",
                               onclick: () => openThread(thread.threadId) },
    el("span", { className: "thread-name" }, thread.threadId),
    el("span", { className: `badge channel-${channel}` }, channel),
    el("time", { className: "muted small", dateTime: thread.updatedAt },
       formatTime(thread.updatedAt)));
  return el("li", { dataset: { testid: "thread", threadId: thread.threadId } }, button);
}

function markCurrent() {
  for (const item of $("thread-list").children) {
    const current = item.dataset.threadId === state.threadId;
    item.classList.toggle("current", current);
    const button = item.querySelector("button");
    if (current) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
}

/** Show a thread: its first transcript page, newest at the bottom. */
export async function openThread(threadId, { fresh = false } = {}) {
  state.threadId = threadId;
  state.nextBefore = null;
  $("thread-title").textContent = threadId;
  clear($("transcript"));
  say("composer-error", "");
  $("summary-box").hidden = true;
  document.body.classList.remove("threads-open");
  $("menu-toggle").setAttribute("aria-expanded", "false");
  markCurrent();
  if (!fresh) await loadPage(true);
  else showThreadMeta(null);
  onTurn(threadId, { opened: true });
  $("composer").focus();
}

function showThreadMeta(thread) {
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

function messageEntry(role, content, createdAt) {
  const body = el("div", { className: "message-body" });
  body.append(renderMarkdown(content));
  return el("li", { className: `message ${role}`, dataset: { testid: "message", role } },
    el("div", { className: "message-meta" },
       el("span", { className: "who" }, role === "user" ? "You" : "Assistant"),
       createdAt ? el("time", { className: "muted small", dateTime: createdAt },
                      formatTime(createdAt)) : null),
    body);
}

async function send() {
  const text = $("composer").value.trim();
  if (!text || state.sending || !state.threadId) return;
  state.sending = true;
  $("send").disabled = true;
  say("composer-error", "");
  const transcript = $("transcript");
  transcript.append(messageEntry("user", text, new Date().toISOString()));
  const answer = messageEntry("assistant", "", null);
  answer.classList.add("streaming");
  answer.setAttribute("aria-busy", "true");
  transcript.append(answer);
  $("composer").value = "";
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
  try {
    const done = await streamChat(
      { threadId: state.threadId, message: text, ...(specialist ? { specialist } : {}) },
      {
        onDelta: (delta) => {
          written += delta;
          if (!frame) frame = requestAnimationFrame(show);
        },
        onReset: () => { written = ""; },
      });
    cancelAnimationFrame(frame);
    written = done.reply;
    show();
    $("clear-thread").hidden = false; // the thread exists now
    $("delete-thread").hidden = false;
    $("transcript-top").textContent = state.nextBefore ? $("transcript-top").textContent
      : "The beginning of this thread.";
    onTurn(state.threadId, { done });
  } catch (error) {
    cancelAnimationFrame(frame);
    answer.remove();
    say("composer-error", error.message);
    if (!$("composer").value) $("composer").value = text;
  } finally {
    answer.classList.remove("streaming");
    answer.removeAttribute("aria-busy");
    state.sending = false;
    $("send").disabled = false;
  }
}

function scrollToEnd() {
  const scroller = $("transcript-scroll");
  scroller.scrollTop = scroller.scrollHeight;
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
  await openThread(threads[0]?.threadId ?? newThreadId(), { fresh: !threads.length });
}
