/**
 * `client.tailLog()`: events as they are appended to the log, for watching a system work.
 *
 * Not a view: the stream (`GET /v1/log/live`, docs/PROTOCOL.md section 9) starts with the
 * `recent` newest entries and has no event ids to resume from. A reconnect asks for the most
 * recent entries the gateway keeps and shows only those after what this tail has shown: after
 * the newest entry of their partition, and after the first entry it showed at all, so an outage
 * shorter than the gateway's memory leaves no gap and nothing shows twice. Events: `entry`
 * (`{partition, id, type, key, time, payload}`), `state` and `error`. States are those of a
 * subscription, without `reset`.
 */

import { Emitter } from './emitter.js';
import { FrameKind } from './frames.js';
import { compareEntryIds } from './offsets.js';
import { SubscriptionState } from './subscription.js';

const S = SubscriptionState;
const EVENTS = new Set(['entry', 'state', 'error']);
const MOST_RECENT = 100;

export class LogTail extends Emitter {
  constructor(client, { recent = 20, keep = 200 } = {}, handlers = {}) {
    super();
    if (!Number.isInteger(recent) || recent < 0 || recent > 100) throw new TypeError('recent must be a whole number from 0 to 100');
    this.client = client;
    this.recent = recent;
    this.keep = keep;
    this.state = S.CONNECTING;
    this.error = null;
    this.lastEventId = null; // never resumed: the feed has no ids
    /** The newest entries shown, oldest first (at most `keep`). */
    this.entries = [];
    this._newest = new Map(); // partition -> id of the newest entry shown
    this._first = null; // id of the first entry shown
    this._opened = false;
    for (const [event, fn] of Object.entries(handlers ?? {})) {
      if (!EVENTS.has(event)) throw new TypeError(`unknown log event '${event}'; use ${[...EVENTS].join(', ')}`);
      this.on(event, fn);
    }
  }

  get active() {
    return this.state !== S.CLOSED && this.state !== S.ERROR;
  }

  close() {
    if (!this.active) return;
    this.client._detach(this);
    this._setState(S.CLOSED, null);
  }

  _path() {
    return '/v1/log/live';
  }

  _query() {
    return { recent: this._opened ? MOST_RECENT : this.recent };
  }

  _open() {
    this._opened = true;
    this._setState(S.LIVE, null);
  }

  _lost(reason) {
    if (this.state === S.LIVE) this._setState(S.RECONNECTING, reason);
  }

  _fail(error) {
    if (!this.active) return;
    this.error = error;
    this._setState(S.ERROR, error);
    this._emit('error', error);
  }

  _forgetPosition() {}

  _frame(frame) {
    if (!this.active || frame.kind !== FrameKind.LOG) return;
    const { partition, id, type, key, time, payload } = frame.data;
    const newest = this._newest.get(partition);
    if (newest !== undefined && compareEntryIds(id, newest) <= 0) return;
    if (this._first !== null && compareEntryIds(id, this._first) < 0) return;
    this._first ??= id;
    this._newest.set(partition, id);
    const entry = { partition, id, type, key, time, payload };
    this.entries.push(entry);
    if (this.entries.length > this.keep) this.entries.shift();
    this._emit('entry', entry);
  }

  _setState(newState, reason) {
    const oldState = this.state;
    if (oldState === newState) return;
    this.state = newState;
    this._emit('state', { oldState, newState, reason: reason ?? null });
  }
}
