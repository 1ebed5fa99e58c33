/**
 * A subscription to the keys of a view that start with a prefix, or to the whole view (the
 * empty prefix): `client.subscribe({view, prefix})` (docs/PROTOCOL.md, section 5.1); with
 * `filter`, only their rows that match it (section 5.2).
 *
 * `keys` maps each key to its rows (row id -> value). The snapshot gives every key that has
 * rows; each delta is one key's, and names it: a key appears with its first row and is dropped
 * with its last. `keys` is a new Map after every delta that changes it, and so is the changed
 * key's rows Map; the others are the same objects as before, so a page can redraw only what
 * changed. Under a filter, a row that stops matching comes as a delete (it moves out) and one
 * that starts to as an upsert (it moves in).
 *
 * Events as a key's subscription (subscription.js), except that `snapshot` carries `{keys}`
 * instead of `{rows}`, and `change` carries `{key, ops, rows, keys}`: the key the delta is of,
 * its ops, that key's rows after them (empty when it has none: dropped, or never held), and
 * every key's. A delete of a row the subscription does not hold changes nothing: a resumed
 * filtered subscription may be sent one (section 5.2). Its `change` event still comes, with
 * `keys` (and the key's `rows`, if held) the very Maps of before.
 */

import { ProtocolError } from './errors.js';
import { Subscription } from './subscription.js';

export class PrefixSubscription extends Subscription {
  _empty() {
    this.prefix = this.query.prefix;
    /** The filter the rows match (frozen, as given), or null: every row of the keys. */
    this.filter = this.query.filter ?? null;
    /** @type {Map<string, Map<string, unknown>>} */
    this.keys = new Map();
  }

  _applySnapshot(data) {
    this.keys = new Map(Object.entries(data.keys).map(([key, rows]) => [key, new Map(Object.entries(rows))]));
    return { keys: this.keys };
  }

  _applyDelta(data) {
    const { key, ops } = data;
    if (!key.startsWith(this.prefix)) {
      throw new ProtocolError(`a subscription to the prefix '${this.prefix}' got a delta of the key '${key}'`);
    }
    const held = this.keys.get(key) ?? new Map();
    const changes = ops.some((op) => op.op === 'upsert' || held.has(op.row));
    if (!changes) return { key, ops, rows: held, keys: this.keys };
    const rows = new Map(held);
    for (const op of ops) {
      if (op.op === 'upsert') rows.set(op.row, op.value);
      else rows.delete(op.row);
    }
    const keys = new Map(this.keys);
    if (rows.size > 0) keys.set(key, rows);
    else keys.delete(key);
    this.keys = keys;
    return { key, ops, rows, keys };
  }

  _path() {
    return '/v1/live';
  }

  _query() {
    // The prefix is left out for the whole view, as the protocol allows.
    const query = this.prefix === '' ? { view: this.view } : { view: this.view, prefix: this.prefix };
    // Sent again as it is on every reconnect, with the last event id: a resume needs the same filter.
    if (this.filter !== null) query.filter = JSON.stringify(this.filter);
    return query;
  }
}
