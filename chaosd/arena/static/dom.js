// DOM helpers. Every value from the API or the stream goes in as text or as an attribute, never as markup.

export const SVG_NS = "http://www.w3.org/2000/svg";

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

export function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

export function svgEl(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

// Writes only on change: a live page updated every second must not touch what did not move.
export function setText(node, value) {
  const text = value === null || value === undefined ? "" : String(value);
  if (node.textContent !== text) node.textContent = text;
}

export function setAttr(node, key, value) {
  const text = String(value);
  if (node.getAttribute(key) !== text) node.setAttribute(key, text);
}

export function toggle(node, cls, on) {
  if (node.classList.contains(cls) !== Boolean(on)) node.classList.toggle(cls, Boolean(on));
}
