// The Admin view, for admins only (GET /api/session says who is one; /api/admin/* refuses anyone
// else whatever this page does): the Admin button in the top bar, #admin in the address, the
// view's tabs (each section read anew when shown) and Back to chat.

import { adminInAddress, showAdminInAddress, showInAddress } from "./address.js";
import { setUpAudit, showAudit } from "./admin-audit.js";
import { setUpHealth, showHealth } from "./admin-health.js";
import { setUpUsage, showUsage } from "./admin-usage.js";
import { setUpUsers, showUsers } from "./admin-users.js";
import { $, clear } from "./dom.js";
import { setUpTabs } from "./tabs.js";

const SECTIONS = { "admin-users": showUsers, "admin-usage": showUsage,
                   "admin-health": showHealth, "admin-audit": showAudit };
let allowed = false;

const isOpen = () => !$("admin-view").hidden;
const shownSection = () => $("admin-tabs").querySelector('[aria-selected="true"]')
  .getAttribute("aria-controls");

/** Wire the Admin button, the view's sections and the way back to `chatThread()`. */
export function setUpAdmin(chatThread) {
  setUpUsers();
  setUpUsage();
  setUpHealth();
  setUpAudit();
  setUpTabs($("admin-tabs"), (tab) => SECTIONS[tab.getAttribute("aria-controls")]());
  $("admin-button").addEventListener("click", () => openAdmin());
  $("back-to-chat").addEventListener("click", () => {
    closeAdmin();
    showInAddress(chatThread());
    $("composer").focus();
  });
  addEventListener("popstate", () => {
    if (allowed && adminInAddress()) openAdmin("keep");
    else closeAdmin();
  });
}

/**
 * Offer the Admin view to an admin (`admin`), and open it at once when `open`; anyone else
 * (or no one: signed out) has neither the button nor the view, and what it showed is dropped.
 */
export function allowAdmin(admin, open = false) {
  allowed = admin;
  $("admin-button").hidden = !admin;
  if (!admin) {
    closeAdmin();
    for (const node of $("admin-view").querySelectorAll("[data-filled]")) clear(node);
  } else if (open) {
    openAdmin("replace");
  }
}

/** Show the Admin view and read its current section; `address`: "push", "replace" or "keep". */
function openAdmin(address = "push") {
  if (!allowed) return;
  if (address !== "keep") showAdminInAddress(address);
  if (isOpen()) return;
  $("app-view").classList.add("admin-open");
  $("admin-view").hidden = false;
  $("admin-button").setAttribute("aria-pressed", "true");
  $("admin-heading").focus();
  SECTIONS[shownSection()]();
}

function closeAdmin() {
  $("app-view").classList.remove("admin-open");
  $("admin-view").hidden = true;
  $("admin-button").setAttribute("aria-pressed", "false");
}
