// The dashboard's start: sign-in, the theme, the panel tabs, and what refreshes after a turn.

import { adminInAddress, followAddress, forgetAddress, threadInAddress } from "./address.js";
import { allowAdmin, setUpAdmin } from "./admin.js";
import { ApiError, api, setCsrf } from "./api.js";
import { $, say } from "./dom.js";
import {
  setUpCredentials, setUpMemory, setUpSpecialists, showContext, showCredentials, showCredits,
  showMemory, showSession, showSpecialists,
} from "./panels.js";
import { setUpSearch } from "./search.js";
import { setUpTabs } from "./tabs.js";
import {
  allowPictures, currentThread, loadThreads, newThread, openThread, retitled, setUpThreads,
  showDrawer,
} from "./threads.js";
import { setUpTitles } from "./titles.js";

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
  const wantsAdmin = adminInAddress(); // opening a thread names it in the address instead
  setCsrf(session.csrf);
  $("who").textContent = session.userId;
  allowPictures(Boolean(session.vision));
  await Promise.all([showSpecialists(), showCredentials()]);
  const threads = await loadThreads();
  // the thread the address names (a reload, a kept link), else the latest; either takes the
  // place of the address the page was opened at (a sign-in link's is gone already)
  const named = threadInAddress();
  if (named) await openThread(named, { address: "replace" });
  else if (threads.length) await openThread(threads[0].threadId, { address: "replace" });
  else await newThread("replace");
  // shown once a thread is open: a message typed and sent at once has a thread to go to
  $("signin-view").hidden = true;
  $("app-view").hidden = false;
  $("composer").focus();
  allowAdmin(Boolean(session.admin), wantsAdmin);
}

function showSignIn(message = "") {
  setCsrf(null);
  allowAdmin(false);
  $("app-view").hidden = true;
  $("signin-view").hidden = false;
  $("link-form").hidden = true;
  $("signin-form").hidden = false;
  say("signin-error", message);
  $("token-input").focus();
}

/**
 * A login link opened the page (/auth/login?code= sends it here as #login=CODE). Opening it
 * signs no one in, since any site can send a browser to a link: the person confirms, and the
 * code goes to POST /auth/login as JSON, which only this page can send.
 */
function offerLinkSignIn(code) {
  showSignIn();
  $("signin-form").hidden = true;
  $("link-form").hidden = false;
  $("link-form").onsubmit = async (event) => {
    event.preventDefault();
    try {
      const session = await api("POST", "/auth/login", { code });
      $("link-form").hidden = true;
      await signedIn(session);
    } catch (error) {
      showSignIn(error.status === 401
        ? "That sign-in link was used already or has expired; ask for a new one."
        : error.message);
    }
  };
  $("link-sign-in").focus();
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
    forgetAddress();
    document.title = "CloudyBot";
    showSignIn("You are signed out.");
  }
}

async function start() {
  applyTheme(localStorage.getItem(THEME_KEY));
  $("theme-toggle").addEventListener("click", toggleTheme);
  $("signin-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("menu-toggle").addEventListener("click", () => {
    showDrawer(!document.body.classList.contains("threads-open"));
  });
  setUpTabs(document.querySelector(".side .tabs"));
  setUpThreads(refresh);
  setUpAdmin(currentThread);
  setUpTitles(retitled);
  setUpSearch();
  followAddress((threadId) => {
    if (!$("app-view").hidden && threadId !== currentThread()) {
      openThread(threadId, { address: "keep" });
    }
  });
  setUpMemory(currentThread, memoryChanged);
  setUpSpecialists(() => showContext(currentThread()));
  setUpCredentials();
  // A login link's code, kept out of the address bar (and of history) once read.
  const code = location.hash.startsWith("#login=")
    ? decodeURIComponent(location.hash.slice("#login=".length)) : "";
  if (code) history.replaceState(null, "", "/");
  try {
    // Already signed in: a link opened now changes nothing (sign out first to use it).
    await signedIn(await api("GET", "/api/session"));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 401) throw error;
    if (code) offerLinkSignIn(code);
    else showSignIn();
  }
}

start();
