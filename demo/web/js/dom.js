// Small DOM helpers. Text always goes in as text (textContent), never as HTML.

/** `h('li', {class: 'x', dataset: {k: 'v'}, onclick}, child, 'text')` */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'text') el.textContent = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

export function testid(id, root = document) {
  return root.querySelector(`[data-testid="${id}"]`);
}

/**
 * Make `list`'s children the elements for `items`, in order, keyed by `keyOf`: an existing
 * element is kept (and `update`d) so nothing flickers and only new items animate in.
 */
export function renderList(list, items, keyOf, create, update) {
  const existing = new Map([...list.children].map((el) => [el.dataset.key, el]));
  let previous = null;
  for (const item of items) {
    const key = keyOf(item);
    let el = existing.get(key);
    if (el === undefined) {
      el = create(item);
      el.dataset.key = key;
    } else {
      existing.delete(key);
    }
    update(el, item);
    const wanted = previous === null ? list.firstChild : previous.nextSibling;
    if (wanted !== el) list.insertBefore(el, wanted);
    previous = el;
  }
  for (const el of existing.values()) el.remove();
}

const PALETTE = ['#4f46e5', '#0d9488', '#e11d48', '#d97706', '#7c3aed', '#2563eb', '#059669', '#db2777', '#0891b2', '#65a30d'];

/** A stable colour per user. */
export function colorFor(user) {
  let hash = 0;
  for (const ch of user) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return PALETTE[hash % PALETTE.length];
}

export function avatar(user, name, size = '') {
  const el = h('span', { class: `avatar ${size}`.trim(), 'aria-hidden': 'true' });
  setAvatar(el, user, name);
  return el;
}

export function setAvatar(el, user, name) {
  el.textContent = (name || user || '?').trim().charAt(0);
  el.style.background = colorFor(user || '?');
}

/** "just now", "42 s", "5 min", "3 h", or a date. */
export function ago(iso, now = Date.now()) {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 5) return 'just now';
  if (seconds < 60) return `${seconds} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h`;
  return new Date(iso).toLocaleDateString();
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
}

/** Show `message` in a status line, as plain, ok or error. */
export function status(el, message, kind = '') {
  el.textContent = message;
  el.className = `status-line ${kind}`.trim();
}
