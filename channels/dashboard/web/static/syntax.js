// Syntax highlighting for fenced code blocks: a small tokenizer per language that turns code into
// text nodes and <span class="tok-KIND"> only (the colours are in app.css, for both themes).
// The code is never run or parsed beyond this; a language it does not know stays plain text.
// Every rule is a sticky regular expression tried at one position, and each one either fails
// at once or consumes what it read, so highlighting takes one pass over the code.

const MAX_CHARS = 200_000; // longer code is shown plain: a reply is never that long
const IDENTIFIER = /[A-Za-z_$][\w$]*/y;
const CALL = /[ \t]*\(/y;

const words = (text) => new Set(text.split(/\s+/).filter(Boolean));

// Rules shared by several languages: [sticky pattern, kind].
const SLASH_COMMENTS = [[/\/\/.*/y, "comment"], [/\/\*[\s\S]*?(?:\*\/|$)/y, "comment"]];
const HASH_COMMENT = [/(?<![^\s;])#.*/y, "comment"];
const DOUBLE_QUOTED = [/"(?:[^"\\\n]|\\[\s\S])*"?/y, "string"];
const SINGLE_QUOTED = [/'(?:[^'\\\n]|\\[\s\S])*'?/y, "string"];
const NUMBER = [/(?:0[xX][\da-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?|\.\d[\d_]*(?:[eE][+-]?\d+)?)[A-Za-z]*/y,
  "number"];

const C_KEYWORDS = `auto break case catch char class const constexpr continue default delete do
  double else enum explicit extern final float for friend goto if implements import inline int
  interface long namespace new operator override package private protected public register
  return short signed sizeof static struct super switch template this throw throws try typedef
  typename union unsigned using virtual void volatile while abstract assert boolean byte extends
  finally instanceof native synchronized transient var record yield async await base event
  foreach in is lock out params readonly ref sealed string object decimal bool`;

const JS_KEYWORDS = `break case catch class const continue debugger default delete do else export
  extends finally for function if import in instanceof let new return super switch this throw try
  typeof var void while with yield async await of static get set from as`;
const TS_KEYWORDS = `${JS_KEYWORDS} interface type enum implements namespace declare readonly
  private public protected abstract keyof infer is satisfies module`;
const JS_RULES = [...SLASH_COMMENTS, DOUBLE_QUOTED, SINGLE_QUOTED,
  [/`(?:[^`\\]|\\[\s\S])*`?/y, "string"], NUMBER, [/@[\w.]+/y, "meta"]];

const LANGUAGES = {
  python: {
    rules: [[/#.*/y, "comment"],
      [/[rRbBuUfF]{0,2}(?:"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)|"(?:[^"\\\n]|\\[\s\S])*"?|'(?:[^'\\\n]|\\[\s\S])*'?)/y,
        "string"],
      NUMBER, [/@[\w.]+/y, "meta"]],
    keywords: words(`and as assert async await break class continue def del elif else except
      finally for from global if import in is lambda nonlocal not or pass raise return try while
      with yield match case`),
    literals: words("True False None self cls"),
    types: words(`int str float bool list dict set tuple bytes object type frozenset complex
      Exception ValueError TypeError KeyError`),
    capitalTypes: true,
  },
  javascript: {
    rules: JS_RULES, keywords: words(JS_KEYWORDS),
    literals: words("true false null undefined NaN Infinity"), types: words(""), capitalTypes: true,
  },
  typescript: {
    rules: JS_RULES, keywords: words(TS_KEYWORDS),
    literals: words("true false null undefined NaN Infinity"),
    types: words("string number boolean any unknown never void object symbol bigint"),
    capitalTypes: true,
  },
  json: {
    rules: [[/"(?:[^"\\\n]|\\[\s\S])*"(?=[ \t]*:)/y, "property"], DOUBLE_QUOTED,
      [/-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y, "number"], ...SLASH_COMMENTS],
    keywords: words(""), literals: words("true false null"), types: words(""),
  },
  bash: {
    rules: [HASH_COMMENT, DOUBLE_QUOTED, [/'[^']*'?/y, "string"],
      [/\$(?:\{[^}\n]*\}?|\(|[A-Za-z_]\w*|[@#?$!*0-9-])/y, "variable"],
      [/(?<![^\s])--?[A-Za-z][\w-]*/y, "property"]],
    identifier: /[A-Za-z_][\w-]*/y,
    keywords: words(`if then else elif fi for while until do done case esac in function select
      return exit local export readonly declare unset shift break continue source alias set`),
    literals: words("true false"), types: words(""),
  },
  sql: {
    rules: [[/--.*/y, "comment"], [/\/\*[\s\S]*?(?:\*\/|$)/y, "comment"],
      [/'(?:[^']|'')*'?/y, "string"], [/"[^"\n]*"?/y, "property"], NUMBER],
    caseless: true,
    keywords: words(`select from where and or not insert into values update set delete create
      table index view drop alter add column primary key foreign references join left right inner
      outer full cross on as group by order having limit offset union all distinct case when then
      else end is in exists between like ilike returning with recursive begin commit rollback
      transaction if default unique check constraint asc desc cascade grant revoke explain
      analyze vacuum trigger function returns language over partition conflict do nothing`),
    literals: words("null true false"),
    types: words(`int integer bigint smallint text varchar char boolean bool date time timestamp
      timestamptz interval serial bigserial numeric decimal real double precision json jsonb uuid
      bytea blob float`),
  },
  go: {
    rules: [...SLASH_COMMENTS, DOUBLE_QUOTED, [/`[^`]*`?/y, "string"],
      [/'(?:[^'\\\n]|\\[^\n]{1,10}?)'/y, "string"], NUMBER],
    keywords: words(`break case chan const continue default defer else fallthrough for func go goto
      if import interface map package range return select struct switch type var`),
    literals: words("true false nil iota"),
    types: words(`bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64
      rune string uint uint8 uint16 uint32 uint64 uintptr any`),
    capitalTypes: true,
  },
  rust: {
    rules: [...SLASH_COMMENTS, [/r(#*)"[\s\S]*?(?:"\1|$)/y, "string"], [/b?"(?:[^"\\]|\\[\s\S])*"?/y, "string"],
      [/b?'(?:[^'\\\n]|\\[^\n]{1,10}?)'/y, "string"], [/'[A-Za-z_]\w*/y, "meta"],
      [/#!?\[[^\]\n]*\]?/y, "meta"], [/[A-Za-z_]\w*!(?=[ \t]*[([{])/y, "function"], NUMBER],
    keywords: words(`as async await break const continue crate dyn else enum extern fn for if impl
      in let loop match mod move mut pub ref return static struct super trait type unsafe use
      where while`),
    literals: words("true false self Self None Some Ok Err"),
    types: words(`i8 i16 i32 i64 i128 isize u8 u16 u32 u64 u128 usize f32 f64 bool char str`),
    capitalTypes: true,
  },
  c: {
    rules: [...SLASH_COMMENTS, [/(?<![^\n])[ \t]*#[ \t]*\w+/y, "meta"], DOUBLE_QUOTED,
      [/'(?:[^'\\\n]|\\[^\n]{1,10}?)'/y, "string"], NUMBER, [/@\w+/y, "meta"]],
    keywords: words(C_KEYWORDS),
    literals: words("true false null nullptr NULL"),
    types: words("size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t"),
    capitalTypes: true,
  },
  yaml: {
    rules: [HASH_COMMENT, [/(?<![^\n])(?:---|\.\.\.)(?=\s|$)/y, "meta"],
      [/(?<![^\n])[ \t]*(?:-[ \t]+)?[\w./-]+(?=[ \t]*:(?:\s|$))/y, "property"],
      DOUBLE_QUOTED, [/'(?:[^'\n]|'')*'?/y, "string"], [/[&*][\w-]+/y, "variable"], NUMBER],
    keywords: words(""), literals: words("true false null yes no on off ~"), types: words(""),
  },
  toml: {
    rules: [HASH_COMMENT, [/(?<![^\n])[ \t]*\[[^\]\n]*\]*/y, "meta"],
      [/(?<![^\n])[ \t]*[\w.-]+(?=[ \t]*=)/y, "property"],
      [/"""[\s\S]*?(?:"""|$)/y, "string"], [/'''[\s\S]*?(?:'''|$)/y, "string"],
      DOUBLE_QUOTED, [/'[^'\n]*'?/y, "string"], NUMBER],
    keywords: words(""), literals: words("true false"), types: words(""),
  },
  diff: {
    rules: [[/(?<![^\n])(?:\+\+\+|---|diff |index ).*/y, "meta"], [/(?<![^\n])@@.*/y, "meta"],
      [/(?<![^\n])\+.*/y, "inserted"], [/(?<![^\n])-.*/y, "deleted"]],
    identifier: /[^\n]+/y, keywords: words(""), literals: words(""), types: words(""),
  },
  markup: {
    rules: [[/<!--[\s\S]*?(?:-->|$)/y, "comment"], [/<\/?[A-Za-z][\w:.-]*/y, "keyword"],
      [/[A-Za-z_:][\w:.-]*(?==)/y, "property"], DOUBLE_QUOTED, SINGLE_QUOTED,
      [/&#?\w+;/y, "literal"]],
    identifier: /[^<"'&=\s]+/y, keywords: words(""), literals: words(""), types: words(""),
  },
};

const ALIASES = {
  py: "python", python3: "python", py3: "python", js: "javascript", jsx: "javascript",
  mjs: "javascript", cjs: "javascript", node: "javascript", ts: "typescript", tsx: "typescript",
  jsonc: "json", json5: "json", sh: "bash", shell: "bash", zsh: "bash", console: "bash",
  shellsession: "bash", postgresql: "sql", postgres: "sql", sqlite: "sql", mysql: "sql",
  psql: "sql", plpgsql: "sql", golang: "go", rs: "rust", h: "c", cpp: "c", "c++": "c", cc: "c",
  hpp: "c", cxx: "c", java: "c", cs: "c", csharp: "c", "c#": "c", kotlin: "c", kt: "c",
  yml: "yaml", patch: "diff", html: "markup", xml: "markup", svg: "markup", vue: "markup",
};

/** The highlighter's name for a fence's language label ("py" -> "python"), or "" if unknown. */
export function languageOf(label) {
  const name = String(label).toLowerCase();
  const known = ALIASES[name] ?? name;
  return Object.hasOwn(LANGUAGES, known) ? known : "";
}

function span(kind, text) {
  const node = document.createElement("span");
  node.className = `tok-${kind}`;
  node.textContent = text;
  return node;
}

/** `code` as a DocumentFragment: text nodes, and spans with a `tok-*` class for `language`. */
export function highlight(code, language) {
  const fragment = document.createDocumentFragment();
  const spec = LANGUAGES[languageOf(language)];
  if (!spec || code.length > MAX_CHARS) {
    fragment.append(code);
    return fragment;
  }
  let plain = "";
  const push = (kind, text) => {
    if (!kind) { plain += text; return; }
    if (plain) fragment.append(plain);
    plain = "";
    fragment.append(span(kind, text));
  };
  let index = 0;
  while (index < code.length) {
    const token = ruleAt(spec, code, index) ?? wordAt(spec, code, index);
    if (token) {
      push(token[1], token[0]);
      index += token[0].length;
    } else {
      push("", code[index]);
      index += 1;
    }
  }
  if (plain) fragment.append(plain);
  return fragment;
}

function ruleAt(spec, code, index) {
  for (const [pattern, kind] of spec.rules) {
    pattern.lastIndex = index;
    const match = pattern.exec(code);
    if (match && match[0]) return [match[0], kind];
  }
  return null;
}

function wordAt(spec, code, index) {
  const pattern = spec.identifier ?? IDENTIFIER;
  pattern.lastIndex = index;
  const match = pattern.exec(code);
  if (!match || !match[0]) return null;
  const word = match[0];
  const key = spec.caseless ? word.toLowerCase() : word;
  if (spec.keywords.has(key)) return [word, "keyword"];
  if (spec.literals.has(key)) return [word, "literal"];
  if (spec.types.has(key)) return [word, "type"];
  CALL.lastIndex = index + word.length;
  if (spec !== LANGUAGES.diff && spec !== LANGUAGES.markup && CALL.test(code)) {
    return [word, "function"];
  }
  if (spec.capitalTypes && /^[A-Z]/.test(word)) return [word, "type"];
  return [word, ""];
}
