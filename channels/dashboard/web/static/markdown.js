// Markdown to DOM nodes, safely: every piece of text becomes a text node, elements are made
// with createElement, and raw HTML in the source stays text. No attribute takes a value from
// the source except a link's http(s)/mailto address. Covers what models write: paragraphs,
// headings, emphasis, inline code, fenced code blocks (highlighted, with a Copy button), GFM
// tables, lists, quotes, rules and links. Nesting stops at MAX_DEPTH: deeper, the rest is text.

import { copyText } from "./dom.js";
import { inline } from "./inline.js";
import { highlight, languageOf } from "./syntax.js";

const MAX_DEPTH = 8;
const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*))?$/;
const BULLET = /^( *)([-*+])[ \t]+(.*)$/;
const NUMBERED = /^( *)(\d{1,9})([.)])[ \t]+(.*)$/;
const QUOTE = /^ {0,3}>[ \t]?(.*)$/;
const DELIMITER_CELL = /^[ \t]*(:?)-+(:?)[ \t]*$/;

function element(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  Object.assign(node, props);
  for (const child of children) node.append(child);
  return node;
}

/** The Markdown `source` as a DocumentFragment of safe nodes. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  blocks(String(source ?? "").replace(/\r\n?/g, "\n").split("\n"), fragment, 0);
  return fragment;
}

function isRule(line) {
  const marks = line.replace(/[ \t]/g, "");
  return /^ {0,3}\S/.test(line) && marks.length >= 3 && /^(?:-+|\*+|_+)$/.test(marks);
}

function isBlockStart(lines, index) {
  const line = lines[index];
  return FENCE.test(line) || HEADING.test(line) || isRule(line) || BULLET.test(line)
    || NUMBERED.test(line) || QUOTE.test(line) || tableAt(lines, index) !== null;
}

function blocks(lines, parent, depth) {
  if (depth >= MAX_DEPTH) { // too deep: what is left is one paragraph of text
    const text = lines.join("\n").trim();
    if (text) parent.append(element("p", {}, text));
    return;
  }
  let index = 0;
  while (index < lines.length) {
    const line = lines[index];
    if (!line.trim()) { index += 1; continue; }
    let match;
    const table = tableAt(lines, index);
    if ((match = FENCE.exec(line)) && !(match[1][0] === "`" && match[2].includes("`"))) {
      index = codeBlock(lines, index, match, parent);
    } else if (table) {
      index = renderTable(lines, index, table, parent);
    } else if ((match = HEADING.exec(line))) {
      const heading = element(`h${Math.min(6, match[1].length + 2)}`);
      inline(headingText(match[2] ?? ""), heading, 0);
      parent.append(heading);
      index += 1;
    } else if (isRule(line)) {
      parent.append(element("hr"));
      index += 1;
    } else if (QUOTE.test(line)) {
      const quoted = [];
      while (index < lines.length && (match = QUOTE.exec(lines[index]))) {
        quoted.push(match[1]);
        index += 1;
      }
      const quote = element("blockquote");
      blocks(quoted, quote, depth + 1);
      parent.append(quote);
    } else if (BULLET.test(line) || NUMBERED.test(line)) {
      index = list(lines, index, parent, depth);
    } else {
      const paragraph = [line];
      index += 1;
      while (index < lines.length && lines[index].trim() && !isBlockStart(lines, index)) {
        paragraph.push(lines[index]);
        index += 1;
      }
      const p = element("p");
      inline(paragraph.join("\n"), p, 0);
      parent.append(p);
    }
  }
}

/** A heading's text without its closing `#`s. */
function headingText(text) {
  const trimmed = text.trimEnd();
  let end = trimmed.length;
  while (end > 0 && trimmed[end - 1] === "#") end -= 1;
  if (end === 0) return "";
  return end < trimmed.length && /[ \t]/.test(trimmed[end - 1]) ? trimmed.slice(0, end).trimEnd()
    : trimmed;
}

// --- code blocks -------------------------------------------------------------------------

function codeBlock(lines, index, match, parent) {
  const [, fence, info] = match;
  const body = [];
  let at = index + 1;
  for (; at < lines.length; at += 1) {
    const closing = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(lines[at]);
    if (closing && closing[1][0] === fence[0] && closing[1].length >= fence.length) break;
    body.push(lines[at]);
  }
  parent.append(codeFigure(body.join("\n"), info.trim().split(/\s+/)[0] ?? ""));
  return at + 1; // after the closing fence (or the end)
}

/** A code block: its language as text, a Copy button, and the code, highlighted if known. */
function codeFigure(text, label) {
  const language = languageOf(label);
  const code = element("code");
  if (language) code.className = `language-${language}`;
  code.append(highlight(text, language));
  const button = element("button", { type: "button", className: "copy-code small ghost" }, "Copy");
  button.dataset.testid = "copy-code";
  button.setAttribute("aria-label", "Copy code");
  button.addEventListener("click", () => {
    copyText(text).then(() => "Copied", () => "Copy failed").then((said) => {
      button.textContent = said;
      setTimeout(() => { button.textContent = "Copy"; }, 2000);
    });
  });
  return element("div", { className: "code-block" },
    element("div", { className: "code-head" }, element("span", { className: "code-language" }, label),
            button),
    element("pre", {}, code));
}

// --- tables (GFM) ------------------------------------------------------------------------

/** Split a table row into its cells' text (`\|` is a pipe inside a cell). */
function cells(line) {
  let text = line.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  return text.split(/(?<!\\)\|/).map((cell) => cell.replace(/\\\|/g, "|").trim());
}

/** The column alignments if a table starts at `index` (a header row, then a delimiter row). */
function tableAt(lines, index) {
  const header = lines[index];
  const delimiter = lines[index + 1];
  if (delimiter === undefined || !header.includes("|") || !delimiter.includes("|")) return null;
  if (!/^[ \t|:-]+$/.test(delimiter)) return null;
  const aligns = [];
  for (const cell of cells(delimiter)) {
    const match = DELIMITER_CELL.exec(cell);
    if (!match) return null;
    aligns.push(match[1] && match[2] ? "center" : match[2] ? "right" : match[1] ? "left" : "");
  }
  return cells(header).length === aligns.length ? aligns : null;
}

function row(tag, line, aligns) {
  const texts = cells(line);
  const tr = element("tr");
  aligns.forEach((align, column) => {
    const cell = element(tag);
    if (align) cell.className = `align-${align}`;
    inline(texts[column] ?? "", cell, 0);
    tr.append(cell);
  });
  return tr;
}

function renderTable(lines, index, aligns, parent) {
  const head = element("thead", {}, row("th", lines[index], aligns));
  const body = element("tbody");
  let at = index + 2;
  while (at < lines.length && lines[at].includes("|") && lines[at].trim()
         && !(FENCE.test(lines[at]) || HEADING.test(lines[at]) || QUOTE.test(lines[at]))) {
    body.append(row("td", lines[at], aligns));
    at += 1;
  }
  const table = element("table", {}, head);
  if (body.childNodes.length) table.append(body);
  parent.append(element("div", { className: "table-scroll" }, table));
  return at;
}

// --- lists -------------------------------------------------------------------------------

function marker(line) {
  const bullet = BULLET.exec(line);
  if (bullet) {
    return { ordered: false, indent: bullet[1].length, content: bullet[3], kind: bullet[2],
             column: line.length - bullet[3].length };
  }
  const numbered = NUMBERED.exec(line);
  if (numbered) {
    return { ordered: true, indent: numbered[1].length, content: numbered[4],
             start: Number(numbered[2]), kind: numbered[3], column: line.length - numbered[4].length };
  }
  return null;
}

const indentOf = (line) => line.length - line.trimStart().length;

/** A list from `index`: each item's lines (its first and the ones indented under it) are
 * blocks of their own, so nested lists and code blocks in items work; the index after it. */
function list(lines, index, parent, depth) {
  const first = marker(lines[index]);
  const node = element(first.ordered ? "ol" : "ul");
  if (first.ordered && first.start !== 1) node.start = first.start;
  let at = index;
  while (at < lines.length) {
    const item = marker(lines[at]);
    if (!item || item.indent !== first.indent || item.ordered !== first.ordered
        || item.kind !== first.kind) break;
    const itemLines = [item.content];
    let loose = false;
    at += 1;
    while (at < lines.length) {
      const line = lines[at];
      if (line.trim() && indentOf(line) > first.indent) {
        itemLines.push(line.slice(Math.min(indentOf(line), item.column)));
        at += 1;
      } else if (!line.trim() && at + 1 < lines.length && indentOf(lines[at + 1]) > first.indent
                 && lines[at + 1].trim()) {
        itemLines.push("");
        loose = true;
        at += 1;
      } else break;
    }
    const li = element("li");
    blocks(itemLines, li, depth + 1);
    if (!loose) { // a tight item: its paragraphs' text sits in the item itself
      for (const p of [...li.children].filter((child) => child.tagName === "P")) {
        p.replaceWith(...p.childNodes);
      }
    }
    node.append(li);
    if (at < lines.length && !lines[at].trim() && marker(lines[at + 1] ?? "")?.indent === first.indent) {
      at += 1; // a blank line between two items
    }
  }
  parent.append(node);
  return at;
}
