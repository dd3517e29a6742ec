// Talking to the daemon: reads are open; every change carries the bearer token, kept in sessionStorage only.

const TOKEN_KEY = "chaosd.token";

export function hasToken() {
  return Boolean(sessionStorage.getItem(TOKEN_KEY));
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export async function getJSON(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

// A change: resolves to {ok, status, body, message}; message is the API's own error text when refused.
export async function send(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    return { ok: false, status: 0, body: null, message: "the daemon did not answer" };
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch (err) {
    payload = null;
  }
  if (response.ok) return { ok: true, status: response.status, body: payload, message: "" };
  const error = payload && payload.error ? payload.error : {};
  const field = error.field ? ` (${error.field})` : "";
  const message = `${error.message || `HTTP ${response.status}`}${field}`;
  return { ok: false, status: response.status, body: payload, message };
}
