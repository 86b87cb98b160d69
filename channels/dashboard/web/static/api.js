// The dashboard's only way to the gateway: the documented HTTP API, with the session cookie
// and, on requests that change something, the session's CSRF token.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let csrfToken = null;

/** Remember the CSRF token of the signed-in session (sent with every change). */
export function setCsrf(token) {
  csrfToken = token;
}

function headersFor(method, body, extra = {}) {
  const headers = { ...extra };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  return headers;
}

async function errorOf(response) {
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON: fall back on the status line
  }
  return new ApiError(response.status, data?.error?.code ?? "http_error",
                      data?.error?.message ?? response.statusText);
}

/** Call the API; the decoded JSON answer (null for 204), or an ApiError. */
export async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: headersFor(method, body),
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (!response.ok) throw await errorOf(response);
  return response.status === 204 ? null : response.json();
}

/** A path with its query string: query("/api/x", {a: 1, b: undefined}) -> "/api/x?a=1". */
export function query(path, params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `${path}?${text}` : path;
}

/**
 * POST /chat as Server-Sent Events. Calls onDelta(text) for each piece and onReset() when text
 * shown so far is not part of the reply; resolves with the `done` object, rejects with an
 * ApiError (before the stream: the HTTP error; after: the `error` event).
 */
export async function streamChat(body, { onDelta, onReset }) {
  const response = await fetch("/chat", {
    method: "POST",
    headers: headersFor("POST", body, { Accept: "text/event-stream" }),
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  if (!response.ok) throw await errorOf(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value ?? new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = parseEvent(block);
      if (event.name === "delta") onDelta(event.data.text);
      else if (event.name === "reset") onReset();
      else if (event.name === "done") return event.data;
      else if (event.name === "error") {
        throw new ApiError(502, event.data.error.code, event.data.error.message);
      }
    }
    if (done) throw new ApiError(502, "stream_ended", "the answer stopped before it was done");
  }
}

function parseEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  return { name, data: data.length ? JSON.parse(data.join("\n")) : null };
}
