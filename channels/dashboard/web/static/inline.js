// Inline Markdown (code spans, emphasis, strikethrough, links, <addresses> and bare ones) to DOM nodes.
// A scanner, not a regular expression: it reads the text left to right once per nesting level,
// remembers where a closing delimiter was looked for in vain (so a thousand `[` or `*` cost one
// search each, not one each), and stops nesting at MAX_DEPTH, where the rest stays text.
// Text only ever becomes text nodes; links keep only http(s) and mailto addresses.

const MAX_DEPTH = 8;
const SAFE_URL = /^(https?:|mailto:)/i;
const PUNCTUATION = /[!-/:-@[-`{-~]/; // what a backslash may escape (ASCII punctuation)
const WORD = /[\p{L}\p{N}_]/u;
const SPACE = /\s/;
const URL_STOP = /[\s<>()]/;
const URL_TRAILING = /[.,;:!?'"*_~]/;
const DELIMITERS = [["**", "strong"], ["__", "strong"], ["~~", "del"], ["*", "em"], ["_", "em"]];

function element(tag, ...children) {
  const node = document.createElement(tag);
  for (const child of children) node.append(child);
  return node;
}

/** Append `text` to `parent`, a line break for each newline. */
export function appendText(parent, text) {
  const lines = text.split("\n");
  lines.forEach((line, index) => {
    if (index > 0) parent.append(element("br"));
    if (line) parent.append(document.createTextNode(line));
  });
}

/** Append the inline Markdown of `text` to `parent` (`depth` levels deep already). */
export function inline(text, parent, depth = 0, inLink = false) {
  new Scanner(text, parent, depth, inLink).run();
}

/** An http(s) or mailto link to `href` showing `text` (or the text itself, for any other). */
function link(href, fill) {
  const anchor = element("a");
  anchor.href = href;
  anchor.rel = "noopener noreferrer nofollow";
  anchor.target = "_blank";
  fill(anchor);
  return anchor;
}

class Scanner {
  constructor(text, parent, depth, inLink) {
    this.text = text;
    this.parent = parent;
    this.depth = depth;
    this.inLink = inLink;
    this.found = new Map(); // needle -> [from, index]: indexOf(needle, from) was index
    this.unclosed = new Map(); // mark -> from where it has no closer
    this.urlEnds = new Map(); // "](" index -> where the address after it ends
    this.pending = 0; // start of the text not yet appended
  }

  /** indexOf, remembering the last answer: scanning forward it costs one pass per needle. */
  next(needle, from) {
    const known = this.found.get(needle);
    if (known && from >= known[0] && (known[1] === -1 || from <= known[1])) return known[1];
    const index = this.text.indexOf(needle, from);
    this.found.set(needle, [from, index]);
    return index;
  }

  flush(end) {
    if (end > this.pending) appendText(this.parent, this.text.slice(this.pending, end));
  }

  emit(start, node, end) {
    this.flush(start);
    this.parent.append(node);
    this.pending = end;
    return end;
  }

  run() {
    const { text } = this;
    let index = 0;
    while (index < text.length) index = this.at(index);
    this.flush(text.length);
  }

  /** Whatever starts at `index`; the index after it. */
  at(index) {
    const { text } = this;
    const char = text[index];
    if (char === "\\" && PUNCTUATION.test(text[index + 1] ?? "")) {
      this.flush(index);
      this.pending = index + 1; // drop the backslash, keep the character as text
      return index + 2;
    }
    if (char === "`") return this.code(index);
    if (this.depth < MAX_DEPTH) {
      if (char === "*" || char === "_" || char === "~") {
        const end = this.emphasis(index);
        if (end) return end;
        return index + run(text, index, char); // an unmatched run stays text, all of it
      }
      if (char === "[" && !this.inLink) {
        const end = this.bracketLink(index);
        if (end) return end;
      }
    }
    if (char === "<" && !this.inLink) {
      const end = this.angleLink(index);
      if (end) return end;
    }
    if ((char === "h" || char === "H") && !this.inLink) {
      const end = this.bareLink(index);
      if (end) return end;
    }
    return index + 1;
  }

  code(index) {
    const { text } = this;
    const length = run(text, index, "`");
    const fence = "`".repeat(length);
    let from = index + length;
    for (;;) {
      const close = this.next(fence, from);
      if (close === -1) return index + length;
      const closing = run(text, close, "`");
      if (closing === length) {
        let body = text.slice(index + length, close).replace(/\n/g, " ");
        if (body.length > 2 && body.startsWith(" ") && body.endsWith(" ") && body.trim()) {
          body = body.slice(1, -1);
        }
        return this.emit(index, element("code", body), close + length);
      }
      from = close + closing;
    }
  }

  emphasis(index) {
    const { text } = this;
    for (const [mark, tag] of DELIMITERS) {
      if (!text.startsWith(mark, index)) continue;
      const after = text[index + mark.length];
      if (after === undefined || SPACE.test(after) || (mark.length === 1 && after === mark)) continue;
      if (mark[0] === "_" && WORD.test(text[index - 1] ?? "")) continue; // snake_case stays
      const close = this.closer(mark, index + mark.length + 1);
      if (close === -1) continue;
      const node = element(tag);
      inline(text.slice(index + mark.length, close), node, this.depth + 1, this.inLink);
      return this.emit(index, node, close + mark.length);
    }
    return 0;
  }

  /** Where `mark` closes at or after `from`: after a non-space, a single mark alone, a double
   * one at the end of its run (`***x***` is strong around emphasis); -1 for nowhere. */
  closer(mark, from) {
    const { text } = this;
    if (this.unclosed.get(mark) <= from) return -1;
    let search = from;
    for (;;) {
      const found = this.next(mark, search);
      if (found === -1) {
        this.unclosed.set(mark, Math.min(from, this.unclosed.get(mark) ?? from));
        return -1;
      }
      const length = run(text, found, mark[0]);
      const close = mark.length === 1 ? found : found + length - mark.length;
      const before = text[found - 1];
      const valid = (mark.length === 1 ? length === 1 && before !== mark : length >= mark.length)
        && close >= from && !SPACE.test(before)
        && !(mark[0] === "_" && WORD.test(text[close + mark.length] ?? ""));
      if (valid) return close;
      search = found + length;
    }
  }

  bracketLink(index) {
    const { text } = this;
    const close = this.next("]", index + 1);
    const newline = this.next("\n", index + 1);
    if (close <= index + 1 || (newline !== -1 && newline < close) || text[close + 1] !== "(") return 0;
    let end = this.urlEnds.get(close);
    if (end === undefined) {
      end = close + 2;
      while (end < text.length && !URL_STOP.test(text[end])) end += 1;
      this.urlEnds.set(close, end);
    }
    if (text[end] !== ")" || end === close + 2) return 0;
    const label = text.slice(index + 1, close);
    const href = text.slice(close + 2, end);
    const node = SAFE_URL.test(href)
      ? link(href, (anchor) => inline(label, anchor, this.depth + 1, true))
      : document.createTextNode(label === href ? label : `${label} (${href})`);
    return this.emit(index, node, end + 1);
  }

  /** `<https://…>` or `<mailto:…>`: a link without its brackets. */
  angleLink(index) {
    const { text } = this;
    let end = index + 1;
    while (end < text.length && !/[\s<>]/.test(text[end])) end += 1;
    const href = text.slice(index + 1, end);
    if (text[end] !== ">" || !/^(https?:\/\/|mailto:)./i.test(href)) return 0;
    return this.emit(index, link(href, (anchor) => anchor.append(href)), end + 1);
  }

  bareLink(index) {
    const { text } = this;
    const scheme = /^https?:\/\//i.exec(text.slice(index, index + 8));
    if (!scheme || WORD.test(text[index - 1] ?? "")) return 0;
    let end = index + scheme[0].length;
    while (end < text.length && !URL_STOP.test(text[end])) end += 1;
    while (end > index + scheme[0].length && URL_TRAILING.test(text[end - 1])) end -= 1;
    if (end === index + scheme[0].length) return 0;
    const href = text.slice(index, end);
    return this.emit(index, link(href, (anchor) => anchor.append(href)), end);
  }
}

/** How many times `char` repeats from `index`. */
function run(text, index, char) {
  let end = index;
  while (text[end] === char) end += 1;
  return end - index;
}
