// A URL per thread: the open thread is named in the address as #thread=ID, so a reload reopens
// it, a link to it can be kept, and Back and Forward move between the threads opened. The Admin
// view is #admin.

const PREFIX = "#thread=";
const ADMIN = "#admin";
// What the API takes as a thread id (gateway/base/validation.py): a hash naming anything else
// names no thread, and the dashboard opens as if it had none.
const THREAD_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/** The thread the address names, or null. */
export function threadInAddress() {
  if (!location.hash.startsWith(PREFIX)) return null;
  let threadId;
  try {
    threadId = decodeURIComponent(location.hash.slice(PREFIX.length));
  } catch {
    return null; // a broken %-escape
  }
  return THREAD_ID.test(threadId) && threadId !== "." && threadId !== ".." ? threadId : null;
}

/**
 * Name `threadId` in the address: as a new history entry ("push"), in place of the current one
 * ("replace": the first thread a page opens, or one opened for a deleted one) or not at all
 * ("keep": Back or Forward brought it).
 */
export function showInAddress(threadId, how = "push") {
  const hash = PREFIX + encodeURIComponent(threadId);
  if (how === "keep" || threadInAddress() === threadId) {
    if (location.hash !== hash) history.replaceState(null, "", hash); // spelled the same way
    return;
  }
  if (how === "replace") history.replaceState(null, "", hash);
  else history.pushState(null, "", hash);
}

/** Whether the address names the Admin view. */
export const adminInAddress = () => location.hash === ADMIN;

/** Name the Admin view in the address: as a new history entry ("push") or in place ("replace"). */
export function showAdminInAddress(how = "push") {
  if (adminInAddress()) return;
  if (how === "replace") history.replaceState(null, "", ADMIN);
  else history.pushState(null, "", ADMIN);
}

/** Leave no thread in the address (signed out). */
export function forgetAddress() {
  history.replaceState(null, "", location.pathname + location.search);
}

/** Call `open(threadId)` when Back, Forward or an edited address names a thread. */
export function followAddress(open) {
  addEventListener("popstate", () => {
    const threadId = threadInAddress();
    if (threadId) open(threadId);
  });
}
