// The dashboard's start: sign-in, the theme, the panel tabs, and what refreshes after a turn.

import { ApiError, api, setCsrf } from "./api.js";
import { $, say } from "./dom.js";
import {
  setUpCredentials, setUpMemory, setUpSpecialists, showContext, showCredentials, showCredits,
  showMemory, showSession, showSpecialists,
} from "./panels.js";
import { currentThread, loadThreads, openThread, setUpThreads } from "./threads.js";

const THEME_KEY = "cloudybot-theme";

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
}

function toggleTheme() {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  const theme = dark ? "light" : "dark";
  localStorage.setItem(THEME_KEY, theme);
  applyTheme(theme);
}

function setUpTabs() {
  const tabs = [...document.querySelectorAll('[role="tab"]')];
  const select = (tab) => {
    for (const other of tabs) {
      const chosen = other === tab;
      other.setAttribute("aria-selected", String(chosen));
      other.tabIndex = chosen ? 0 : -1;
      $(other.getAttribute("aria-controls")).hidden = !chosen;
    }
    tab.focus();
  };
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) select(tabs[(index + step + tabs.length) % tabs.length]);
    });
  });
}

/** Refresh what a thread's turn, or opening it, may have changed. */
async function refresh(threadId, what = {}) {
  const jobs = [showContext(threadId), showSession(threadId), showCredits()];
  if (what.opened) jobs.push(showMemory(threadId, currentThread, memoryChanged));
  if (what.done || what.cleared) jobs.push(loadThreads());
  if (what.done?.command) jobs.push(showMemory(threadId, currentThread, memoryChanged));
  const results = await Promise.allSettled(jobs);
  for (const result of results) {
    if (result.status === "rejected") console.warn(result.reason);
  }
}

function memoryChanged() {
  showContext(currentThread());
}

async function signedIn(session) {
  setCsrf(session.csrf);
  $("who").textContent = session.userId;
  $("signin-view").hidden = true;
  $("app-view").hidden = false;
  await Promise.all([showSpecialists(), showCredentials()]);
  const threads = await loadThreads();
  if (threads.length) await openThread(threads[0].threadId);
  else $("new-thread").click();
}

function showSignIn(message = "") {
  setCsrf(null);
  $("app-view").hidden = true;
  $("signin-view").hidden = false;
  say("signin-error", message);
  $("token-input").focus();
}

async function signIn(event) {
  event.preventDefault();
  say("signin-error", "");
  try {
    const session = await api("POST", "/auth/session", { token: $("token-input").value.trim() });
    $("token-input").value = "";
    await signedIn(session);
  } catch (error) {
    say("signin-error", error.status === 401 ? "That token is not valid." : error.message);
  }
}

async function signOut() {
  try {
    await api("DELETE", "/api/session");
  } finally {
    showSignIn("You are signed out.");
  }
}

async function start() {
  applyTheme(localStorage.getItem(THEME_KEY));
  $("theme-toggle").addEventListener("click", toggleTheme);
  $("signin-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("menu-toggle").addEventListener("click", () => {
    const open = document.body.classList.toggle("threads-open");
    $("menu-toggle").setAttribute("aria-expanded", String(open));
  });
  setUpTabs();
  setUpThreads(refresh);
  setUpMemory(currentThread, memoryChanged);
  setUpSpecialists(() => showContext(currentThread()));
  setUpCredentials();
  const expired = location.hash === "#link-expired";
  if (expired) history.replaceState(null, "", "/");
  try {
    await signedIn(await api("GET", "/api/session"));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 401) throw error;
    showSignIn(expired ? "That sign-in link was used already or has expired; ask for a new one." : "");
  }
}

start();
