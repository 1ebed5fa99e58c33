/**
 * A subscription to a window of a key: its `limit` rows of highest score, or the page after a
 * row (`after`): `client.subscribe({view, key, limit, after?})` (docs/PROTOCOL.md, section 5.1).
 *
 * `rows` maps row id -> value and `scores` row id -> score, as for a key; `ranked` is the same
 * rows in the window's order, `[{row, score, value}, ...]`: score descending, ties by row id
 * descending in UTF-8 byte order (the gateway's order). All three are new after every change.
 * `nextPage()` is the cursor of the page after this one.
 *
 * The gateway sends a delta only when the window changes: an upsert (with the row's score) for a
 * row that enters or changes, a delete for one that leaves. A resumed window may be sent the
 * delete of a row it does not hold; that delete changes nothing.
 */

import { ProtocolError } from './errors.js';
import { Subscription } from './subscription.js';
import { floatText } from './frames.js';

/**
 * -1, 0 or 1 as row id `a` is before, equal to or after `b` in code point order, which is UTF-8
 * byte order. JavaScript's `<` compares UTF-16 units, which puts U+E000..U+FFFF after the
 * surrogates of U+10000 and above; moving those two ranges past each other at the first unit
 * that differs gives code point order.
 */
export function compareRowIds(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800) x += x >= 0xe000 ? -0x800 : 0x2000;
    if (y >= 0xd800) y += y >= 0xe000 ? -0x800 : 0x2000;
    return x < y ? -1 : 1;
  }
  return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
}

/** The window's order of two `{row, score}`: negative when `a` comes first. */
export function compareRanked(a, b) {
  if (a.score !== b.score) return a.score > b.score ? -1 : 1;
  return compareRowIds(b.row, a.row);
}

function rank(rows, scores) {
  const ranked = [...rows].map(([row, value]) => Object.freeze({ row, score: scores.get(row), value }));
  return Object.freeze(ranked.sort(compareRanked));
}

/** Where `entry` is, or would go, in `ranked` (which is in the window's order). */
function place(ranked, entry) {
  let lo = 0;
  let hi = ranked.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareRanked(ranked[mid], entry) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export class WindowSubscription extends Subscription {
  _empty() {
    this.key = this.query.key;
    this.limit = this.query.limit;
    /** The row this page starts after, `{score, row}`, or null for the top of the key. */
    this.after = this.query.after;
    /** @type {Map<string, unknown>} */
    this.rows = new Map();
    /** @type {Map<string, number>} */
    this.scores = new Map();
    /** @type {ReadonlyArray<{row: string, score: number, value: unknown}>} */
    this.ranked = Object.freeze([]);
  }

  /**
   * The cursor of the next page, `{score, row}` of this window's last row, to subscribe with as
   * `after`; null while the window is not full (there is no next page, or no snapshot yet).
   */
  nextPage() {
    if (this.ranked.length < this.limit) return null;
    const { score, row } = this.ranked[this.ranked.length - 1];
    return { score, row };
  }

  _applySnapshot(data) {
    this.rows = new Map(Object.entries(data.rows));
    this.scores = new Map([...this.rows.keys()].map((row) => [row, data.scores[row]]));
    this.ranked = rank(this.rows, this.scores);
    return { rows: this.rows, ranked: this.ranked };
  }

  _applyDelta(data) {
    const rows = new Map(this.rows);
    const scores = new Map(this.scores);
    // Each op moves one row: a binary search and a splice, not a sort of the whole window.
    const ranked = [...this.ranked];
    for (const op of data.ops) {
      if (op.op === 'upsert' && op.score === undefined) {
        throw new ProtocolError(`a window's upsert must carry the score of its row ('${op.row}')`);
      }
      if (scores.has(op.row)) ranked.splice(place(ranked, { row: op.row, score: scores.get(op.row) }), 1);
      if (op.op === 'upsert') {
        const entry = Object.freeze({ row: op.row, score: op.score, value: op.value });
        ranked.splice(place(ranked, entry), 0, entry);
        rows.set(op.row, op.value);
        scores.set(op.row, op.score);
      } else {
        rows.delete(op.row);
        scores.delete(op.row);
      }
    }
    this.rows = rows;
    this.scores = scores;
    this.ranked = Object.freeze(ranked);
    return { ops: data.ops, rows, ranked: this.ranked };
  }

  _query() {
    const query = { limit: this.limit };
    if (this.after !== null) Object.assign(query, { after_score: floatText(this.after.score), after_row: this.after.row });
    return query;
  }
}
