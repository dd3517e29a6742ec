// @ts-check
// Talking to the daemon: reads are open; every change carries the bearer token, kept in sessionStorage only.

const TOKEN_KEY = "chaosd.token";

/** @returns {boolean} */
export function hasToken() {
  return Boolean(sessionStorage.getItem(TOKEN_KEY));
}

/** @param {string} token */
export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// A read that failed: the daemon did not answer (status 0), refused it, or sent no JSON.
export class RequestError extends Error {
  /**
   * @param {string} path
   * @param {number} status 0: the daemon did not answer
   * @param {string} why
   */
  constructor(path, status, why) {
    super(`${path}: ${why}`);
    this.name = "RequestError";
    this.status = status;
  }
}

/**
 * @param {string} path
 * @returns {Promise<any>} the body: its shape is the route's (chaosd/views)
 */
export async function getJSON(path) {
  let response;
  try {
    response = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  } catch (err) {
    throw new RequestError(path, 0, "the daemon did not answer");
  }
  if (!response.ok) throw new RequestError(path, response.status, `HTTP ${response.status}`);
  try {
    return await response.json();
  } catch (err) {
    throw new RequestError(path, response.status, "not JSON");
  }
}

/** @typedef {{ok: boolean, status: number, body: any, message: string}} SendResult */

// A change: resolves to {ok, status, body, message}; message is the API's own error text when refused.
/**
 * @param {"POST" | "DELETE"} method
 * @param {string} path
 * @param {object} [body]
 * @returns {Promise<SendResult>}
 */
export async function send(method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  /** @type {RequestInit} */
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
