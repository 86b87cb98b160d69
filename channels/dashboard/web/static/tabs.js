// Tabs as ARIA describes them: a tablist's [role=tab] buttons each show their panel
// (aria-controls) and hide the others; a click or the arrow keys choose one.

/**
 * Wire the tabs of `tablist`; `chosen(tab)` runs after each choice. Returns
 * `select(tab, focus = true)`, to choose one from code.
 */
export function setUpTabs(tablist, chosen = () => {}) {
  const tabs = [...tablist.querySelectorAll('[role="tab"]')];
  const select = (tab, focus = true) => {
    for (const other of tabs) {
      const picked = other === tab;
      other.setAttribute("aria-selected", String(picked));
      other.tabIndex = picked ? 0 : -1;
      document.getElementById(other.getAttribute("aria-controls")).hidden = !picked;
    }
    if (focus) tab.focus();
    chosen(tab);
  };
  tabs.forEach((tab, index) => {
    tab.addEventListener("click", () => select(tab));
    tab.addEventListener("keydown", (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (step) select(tabs[(index + step + tabs.length) % tabs.length]);
    });
  });
  return select;
}
