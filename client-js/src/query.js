/**
 * What a subscription follows (docs/PROTOCOL.md, sections 5 and 5.1): one key (`{view, key}`),
 * the keys of a view that start with a prefix (`{view, prefix}`; no prefix, or '', is the whole
 * view), or a window of a key's top rows by score (`{view, key, limit, after?}`, where `after`
 * is `{score, row}`, the last row of the page before).
 *
 * `parseQuery` checks an application's query once, when it subscribes, so that a mistake is a
 * TypeError saying what to change rather than a refusal from the gateway later.
 */

export const QueryShape = Object.freeze({
  KEY: 'key',
  PREFIX: 'prefix',
  WINDOW: 'window',
});

const FIELDS = new Set(['view', 'key', 'prefix', 'limit', 'after']);

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

/**
 * The checked, frozen form of `query`: `{shape, view, key}`, `{shape, view, prefix}` or
 * `{shape, view, key, limit, after}` (`after` null on the first page).
 */
export function parseQuery(query) {
  if (query === null || typeof query !== 'object' || Array.isArray(query)) {
    throw new TypeError("subscribe needs (view, key) or a query: {view, key}, {view, prefix} or {view, key, limit, after?}");
  }
  for (const field of Object.keys(query)) {
    if (!FIELDS.has(field)) throw new TypeError(`a query has no field '${field}'; its fields are ${[...FIELDS].join(', ')}`);
  }
  const { view, key, prefix, limit, after } = query;
  nonEmptyString(view, "a query's view");
  if (given(prefix)) {
    if (given(key)) throw new TypeError('a query names a key or a prefix, not both');
    if (given(limit) || given(after)) throw new TypeError('a window (limit, after) is of one key, not of a prefix: give a key instead');
    if (typeof prefix !== 'string') throw new TypeError('a prefix must be a string (empty: the whole view)');
    return Object.freeze({ shape: QueryShape.PREFIX, view, prefix });
  }
  if (!given(key)) {
    if (given(limit) || given(after)) throw new TypeError('a window (limit) is of one key: give the key');
    return Object.freeze({ shape: QueryShape.PREFIX, view, prefix: '' });
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
