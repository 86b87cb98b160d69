// Markdown to DOM nodes, safely: every piece of text becomes a text node, elements are made
// with createElement, and raw HTML in the source stays text. Links keep only http(s) and
// mailto addresses. Covers what models write: paragraphs, headings, emphasis, inline code,
// fenced code blocks, lists, quotes, rules and links.

const SAFE_URL = /^(https?:|mailto:)/i;
const INLINE = new RegExp([
  "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)",          // 1, 2: code
  "\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*",             // 3: strong
  "(?<![\\w])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w])",   // 4: strong (not inside words)
  "\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*",           // 5: emphasis
  "(?<![\\w])_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?![\\w])", // 6: emphasis
  "~~(?=\\S)([\\s\\S]*?\\S)~~",                     // 7: strikethrough
  "\\[([^\\]\\n]+)\\]\\(([^()\\s]+)\\)",            // 8, 9: link
  "(https?:\\/\\/[^\\s<>()]+[^\\s<>().,;:!?'\"])",  // 10: bare address
].join("|"), "g");

function element(tag, ...children) {
  const node = document.createElement(tag);
  for (const child of children) node.append(child);
  return node;
}

function link(text, href) {
  if (!SAFE_URL.test(href)) return document.createTextNode(text === href ? text : `${text} (${href})`);
  const anchor = element("a");
  anchor.href = href;
  anchor.rel = "noopener noreferrer nofollow";
  anchor.target = "_blank";
  inline(text, anchor);
  return anchor;
}

/** Append the inline Markdown of `text` to `parent`. */
function inline(text, parent) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    if (match.index > last) appendText(parent, text.slice(last, match.index));
    last = match.index + match[0].length;
    if (match[1] !== undefined) parent.append(element("code", match[2].replace(/^ (.*) $/, "$1")));
    else if (match[3] !== undefined || match[4] !== undefined) {
      const strong = element("strong");
      inline(match[3] ?? match[4], strong);
      parent.append(strong);
    } else if (match[5] !== undefined || match[6] !== undefined) {
      const em = element("em");
      inline(match[5] ?? match[6], em);
      parent.append(em);
    } else if (match[7] !== undefined) {
      const del = element("del");
      inline(match[7], del);
      parent.append(del);
    } else if (match[8] !== undefined) parent.append(link(match[8], match[9]));
    else parent.append(link(match[10], match[10]));
  }
  if (last < text.length) appendText(parent, text.slice(last));
}

function appendText(parent, text) {
  const lines = text.split("\n");
  lines.forEach((line, index) => {
    if (index > 0) parent.append(element("br"));
    if (line) parent.append(document.createTextNode(line));
  });
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^(\s*)([-*+])\s+(.*)$/;
const NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;

function isBlockStart(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || BULLET.test(line)
    || NUMBERED.test(line) || QUOTE.test(line);
}

/** The Markdown `source` as a DocumentFragment of safe nodes. */
export function renderMarkdown(source) {
  const fragment = document.createDocumentFragment();
  blocks(String(source).replace(/\r\n?/g, "\n").split("\n"), fragment);
  return fragment;
}

function blocks(lines, parent) {
  let index = 0;
  while (index < lines.length) {
    const line = lines[index];
    if (!line.trim()) { index += 1; continue; }
    let match;
    if ((match = FENCE.exec(line))) {
      const body = [];
      index += 1;
      while (index < lines.length && !lines[index].trim().startsWith(match[1])) {
        body.push(lines[index]);
        index += 1;
      }
      index += 1; // the closing fence (or the end)
      const code = element("code", body.join("\n"));
      if (match[2]) {
        code.className = `language-${match[2]}`;
        code.dataset.language = match[2];
      }
      parent.append(element("pre", code));
    } else if ((match = HEADING.exec(line))) {
      const heading = element(`h${Math.min(6, match[1].length + 2)}`);
      inline(match[2], heading);
      parent.append(heading);
      index += 1;
    } else if (RULE.test(line)) {
      parent.append(element("hr"));
      index += 1;
    } else if (QUOTE.test(line)) {
      const quoted = [];
      while (index < lines.length && (match = QUOTE.exec(lines[index]))) {
        quoted.push(match[1]);
        index += 1;
      }
      const quote = element("blockquote");
      blocks(quoted, quote);
      parent.append(quote);
    } else if (BULLET.test(line) || NUMBERED.test(line)) {
      index = list(lines, index, parent);
    } else {
      const paragraph = [];
      while (index < lines.length && lines[index].trim() && !isBlockStart(lines[index])) {
        paragraph.push(lines[index]);
        index += 1;
      }
      const p = element("p");
      inline(paragraph.join("\n"), p);
      parent.append(p);
    }
  }
}

function list(lines, index, parent) {
  const ordered = NUMBERED.test(lines[index]);
  const pattern = ordered ? NUMBERED : BULLET;
  const indent = pattern.exec(lines[index])[1].length;
  const node = element(ordered ? "ol" : "ul");
  if (ordered) {
    const start = Number(NUMBERED.exec(lines[index])[2]);
    if (start !== 1) node.start = start;
  }
  let item = null;
  while (index < lines.length) {
    const line = lines[index];
    const match = pattern.exec(line);
    if (match && match[1].length === indent) {
      item = element("li");
      inline(match[3], item);
      node.append(item);
      index += 1;
    } else if (line.trim() && item && /^\s+/.test(line)
               && (line.match(/^\s*/)[0].length > indent)) {
      if (BULLET.test(line) || NUMBERED.test(line)) index = list(lines, index, item);
      else {
        item.append(element("br"));
        inline(line.trim(), item);
        index += 1;
      }
    } else break;
  }
  parent.append(node);
  return index;
}
