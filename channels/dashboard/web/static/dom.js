// Small DOM helpers. Text always goes in as text nodes: no HTML strings anywhere.

/** The element with this id. */
export const $ = (id) => document.getElementById(id);

/** A new element: el("li", {className: "x", dataset: {key: "k"}}, "text", child). */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "dataset") Object.assign(node.dataset, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

/** Remove every child of `node`. */
export function clear(node) {
  node.replaceChildren();
  return node;
}

/** 1536 -> "1.5 KB". */
export function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** An ISO time as the reader's local date and time ("" for none). */
export function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(undefined, {
    dateStyle: "medium", timeStyle: "short" });
}

/** A number with thousands separators. */
export const formatNumber = (value) => Number(value).toLocaleString();

/** Show `message` in the alert element `id` (empty clears it). */
export function say(id, message) {
  $(id).textContent = message || "";
}

/** Put `text` on the clipboard (a promise); a page served over plain http from another host
 * has no navigator.clipboard, so there it copies through a hidden text area. */
export async function copyText(text) {
  if (navigator.clipboard?.writeText) return navigator.clipboard.writeText(text);
  const area = el("textarea", { value: text, readOnly: true, className: "visually-hidden" });
  document.body.append(area);
  area.select();
  const copied = document.execCommand("copy");
  area.remove();
  if (!copied) throw new Error("The browser refused to copy.");
}
