/**
 * What a subscription follows (docs/PROTOCOL.md, sections 5, 5.1 and 5.2): one key
 * (`{view, key}`), the keys of a view that start with a prefix (`{view, prefix}`; no prefix, or
 * '', is the whole view), of which only the rows that match a filter with `{view, prefix,
 * filter}`, or a window of a key's top rows by score (`{view, key, limit, after?}`, where
 * `after` is `{score, row}`, the last row of the page before).
 *
 * `parseQuery` checks an application's query once, when it subscribes, so that a mistake is a
 * TypeError saying what to change rather than a refusal from the gateway later.
 */

export const QueryShape = Object.freeze({
  KEY: 'key',
  PREFIX: 'prefix',
  WINDOW: 'window',
});

const FIELDS = new Set(['view', 'key', 'prefix', 'filter', 'limit', 'after']);

const given = (value) => value !== undefined && value !== null;

function nonEmptyString(value, what) {
  if (typeof value !== 'string' || value === '') throw new TypeError(`${what} must be a non-empty string`);
}

/** The cursor of a page: `{score, row}`, the row the page starts after. */
export function parseCursor(after) {
  if (after === null || typeof after !== 'object' || !Number.isFinite(after.score) || typeof after.row !== 'string' || after.row === '') {
    throw new TypeError("after must be {score, row}, the last row of the page before (as sub.nextPage() answers): a finite number and a non-empty row id");
  }
  return Object.freeze({ score: after.score, row: after.row });
}

// ---- filters ---------------------------------------------------------------------------------

const isPlainObject = (value) => value !== null && typeof value === 'object'
  && [Object.prototype, null].includes(Object.getPrototypeOf(value));

function describe(value) {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return `a ${value.constructor?.name ?? 'class instance'} object`;
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') return String(value);
  return `a ${typeof value}`;
}

/** A deep, frozen copy of `value` (at `where` in the filter), refused unless JSON carries it as it is. */
function jsonCopy(value, where, within) {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') {
    // JSON.stringify would quietly send NaN and the infinities as null.
    if (!Number.isFinite(value)) throw new TypeError(`${where} is ${value}: a filter's numbers must be finite`);
    return value;
  }
  const isList = Array.isArray(value);
  if (!isList && !isPlainObject(value)) {
    // JSON.stringify would drop an undefined member, or send a Date as a string: refuse both.
    throw new TypeError(`${where} is ${describe(value)}, which JSON does not carry: a filter holds strings, finite numbers, booleans, lists and plain objects`);
  }
  if (within.has(value)) throw new TypeError(`${where} contains itself: a filter must be a tree of plain objects and lists`);
  within.add(value);
  const copy = isList
    ? value.map((item, i) => jsonCopy(item, `${where}[${i}]`, within))
    : Object.fromEntries(Object.entries(value).map(([name, item]) => [name, jsonCopy(item, `${where}.${name}`, within)]));
  within.delete(value);
  return Object.freeze(copy);
}

/**
 * A filter (section 5.2) as it goes to the gateway: a plain object of JSON values, copied and
 * frozen, so that an application changing its object later cannot change what a resume sends.
 * Only its form is checked here; the gateway checks its grammar and limits (`invalid_filter`).
 */
export function parseFilter(filter) {
  if (!isPlainObject(filter)) {
    throw new TypeError(`a filter must be a plain object such as {field: 'assignee', eq: 'ada'} (docs/PROTOCOL.md, section 5.2), not ${describe(filter)}`);
  }
  return jsonCopy(filter, 'filter', new Set());
}

function prefixQuery(view, prefix, filter) {
  if (!given(filter)) return Object.freeze({ shape: QueryShape.PREFIX, view, prefix });
  return Object.freeze({ shape: QueryShape.PREFIX, view, prefix, filter: parseFilter(filter) });
}

// ---- queries ---------------------------------------------------------------------------------

/**
 * The checked, frozen form of `query`: `{shape, view, key}`, `{shape, view, prefix}` (and
 * `filter`, when it has one: a null filter is none) or `{shape, view, key, limit, after}`
 * (`after` null on the first page).
 */
export function parseQuery(query) {
  if (query === null || typeof query !== 'object' || Array.isArray(query)) {
    throw new TypeError("subscribe needs (view, key) or a query: {view, key}, {view, prefix, filter?} or {view, key, limit, after?}");
  }
  for (const field of Object.keys(query)) {
    if (!FIELDS.has(field)) throw new TypeError(`a query has no field '${field}'; its fields are ${[...FIELDS].join(', ')}`);
  }
  const { view, key, prefix, filter, limit, after } = query;
  nonEmptyString(view, "a query's view");
  if (given(prefix)) {
    if (given(key)) throw new TypeError('a query names a key or a prefix, not both');
    if (given(limit) || given(after)) throw new TypeError('a window (limit, after) is of one key, not of a prefix: give a key instead');
    if (typeof prefix !== 'string') throw new TypeError('a prefix must be a string (empty: the whole view)');
    return prefixQuery(view, prefix, filter);
  }
  if (!given(key)) {
    if (given(limit) || given(after)) throw new TypeError('a window (limit) is of one key: give the key');
    return prefixQuery(view, '', filter);
  }
  if (given(filter)) {
    throw new TypeError('a filter narrows the rows of a prefix or of the whole view, not of one key or a window: subscribe to {view, prefix, filter} instead');
  }
  nonEmptyString(key, "a query's key");
  if (!given(limit)) {
    if (given(after)) throw new TypeError('after names the last row of a page: give the page size (limit) too');
    return Object.freeze({ shape: QueryShape.KEY, view, key });
  }
  if (!Number.isInteger(limit) || limit < 1) {
    throw new TypeError(`a window's limit must be a whole number of rows, at least 1 (at most the view's own limit), not ${String(limit)}`);
  }
  return Object.freeze({ shape: QueryShape.WINDOW, view, key, limit, after: given(after) ? parseCursor(after) : null });
}
