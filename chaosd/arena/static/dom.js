// @ts-check
// DOM helpers. Every value from the API or the stream goes in as text or as an attribute, never as markup.

export const SVG_NS = "http://www.w3.org/2000/svg";

/** @typedef {Record<string, string | number | boolean | null | undefined>} Attrs */
/** @typedef {Node | string | number | null | undefined} Child */

/**
 * @template {Element} E
 * @param {E} node
 * @param {Attrs | undefined} attrs
 * @param {Child[]} children
 * @returns {E}
 */
function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return node;
}

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/**
 * @template {keyof SVGElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs} [attrs]
 * @param {...Child} children
 * @returns {SVGElementTagNameMap[K]}
 */
export function svgEl(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

// Writes only on change: a live page updated every second must not touch what did not move.
/**
 * @param {Node} node
 * @param {unknown} value
 */
export function setText(node, value) {
  const text = value === null || value === undefined ? "" : String(value);
  if (node.textContent !== text) node.textContent = text;
}

/**
 * @param {Element} node
 * @param {string} key
 * @param {unknown} value
 */
export function setAttr(node, key, value) {
  const text = String(value);
  if (node.getAttribute(key) !== text) node.setAttribute(key, text);
}

/**
 * @param {Element} node
 * @param {string} cls
 * @param {unknown} on
 */
export function toggle(node, cls, on) {
  if (node.classList.contains(cls) !== Boolean(on)) node.classList.toggle(cls, Boolean(on));
}

// The page's own element of that id: its absence is a bug of the page, told at once.
/**
 * @template {Element} [E=HTMLElement]
 * @param {string} id
 * @param {{new (): E, prototype: E}} [type] what it must be (an HTMLElement unless said)
 * @returns {E}
 */
export function byId(id, type) {
  const node = document.getElementById(id);
  if (!(node instanceof (type ?? HTMLElement))) throw new Error(`no #${id} on the page`);
  return /** @type {E} */ (/** @type {unknown} */ (node)); // checked above: an instance of type
}
