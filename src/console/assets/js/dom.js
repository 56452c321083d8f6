// Building the page. Every value that comes from a call is put in as text
// (a text node, or `textContent`): nothing here ever parses data as HTML,
// so a key or an argument holding markup shows as the characters it is.

/**
 * An element: `h('a', {href: '/ui/', class: 'x'}, 'text', child, …)`.
 * Attributes go through `setAttribute` (event handlers are `on: {click: f}`,
 * never an attribute string); strings and numbers become text nodes;
 * `null`, `undefined` and `false` children are skipped; arrays are spread.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'on') {
      for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
    } else if (name === 'dataset') {
      for (const [key, v] of Object.entries(value)) el.dataset[key] = String(v);
    } else if (name === 'value') {
      el.value = value;
    } else if (name === 'checked' || name === 'disabled' || name === 'open') {
      el[name] = Boolean(value);
    } else {
      el.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(el, children);
  return el;
}

/** Append children (text for strings and numbers) to `el`. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace everything in `el` with `children`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** An SVG element with attributes (numbers and fixed names only). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

/** A link inside the console, followed without reloading the page. */
export function link(href, ...children) {
  return h('a', {href, 'data-nav': true}, ...children);
}

/** A definition list from [label, value] pairs; a `null` value shows "—". */
export function facts(pairs, attrs) {
  return h('dl', Object.assign({class: 'facts'}, attrs || {}),
    pairs.filter(Boolean).map(([label, value, key]) => h('div', {class: 'fact', dataset: key ? {fact: key} : null},
      h('dt', null, label),
      h('dd', null, value === null || value === undefined || value === '' ? h('span', {class: 'muted'}, '—') : value))));
}

/** A message box: `kind` is `error`, `warn`, `ok` or `info`. */
export function notice(kind, ...children) {
  return h('div', {class: `notice notice-${kind}`, role: kind === 'error' ? 'alert' : 'status'}, ...children);
}

/** A section with a heading. */
export function panel(title, attrs, ...children) {
  return h('section', Object.assign({class: 'panel'}, attrs || {}),
    title ? h('h2', null, title) : null, ...children);
}
