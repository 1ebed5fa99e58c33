/**
 * One subscription to one (view, key): its rows, its state machine, and its events. The
 * subscriptions to a prefix (prefix.js) and to a window (window.js) are this state machine too,
 * with their own contents: each shape fills in `_empty`, `_applySnapshot` and `_applyDelta`.
 *
 * States: `connecting` (no snapshot yet) -> `live` -> `reconnecting` (connection lost; it
 * resumes from the last event id) -> `live` again, or -> `reset` (the gateway could not resume
 * and sent a reset; a snapshot follows at once) -> `live`. `closed` (unsubscribed) and `error`
 * (refused for good, e.g. forbidden) are final. Every transition goes through `_setState`,
 * which emits `state` with `{oldState, newState, reason}`.
 *
 * Events: `snapshot` (rows replaced: `{rows, frontier, lagMs, eventId, wasRecovering,
 * reason}`; `wasRecovering` is true when a resume failed and this snapshot starts over),
 * `change` (one delta applied: `{ops, rows, eventId}`), `progress` (`{frontier, lagMs}`),
 * `state` and `error`. `rows` is a new Map after every change; treat it as read-only. (A
 * prefix's events carry `keys`, a window's `ranked` too: see prefix.js and window.js.)
 *
 * `lagMs` is how far the view was behind the log when its pipeline committed the batch that
 * left the latest frontier (0: caught up), or null when the gateway did not say.
 */

import { Emitter } from './emitter.js';
import { ProtocolError, StateError } from './errors.js';
import { FrameKind, encode, snapshotShape } from './frames.js';
import { covers, mergeFrontier, parseOffset } from './offsets.js';

export const SubscriptionState = Object.freeze({
  CONNECTING: 'connecting',
  LIVE: 'live',
  RECONNECTING: 'reconnecting',
  RESET: 'reset',
  CLOSED: 'closed',
  ERROR: 'error',
});

const S = SubscriptionState;
const EVENTS = new Set(['snapshot', 'change', 'progress', 'state', 'error']);

function offsetsOf(offsets) {
  return (Array.isArray(offsets) ? offsets : [offsets]).map(parseOffset);
}

export class Subscription extends Emitter {
  /**
   * Made by `client.subscribe(...)` with a query checked by `parseQuery` (query.js); not meant
   * to be constructed directly.
   */
  constructor(client, query, handlers = {}) {
    super();
    this.client = client;
    this.query = query;
    this.view = query.view;
    this.state = S.CONNECTING;
    this._empty();
    /** @type {Record<string, string>} */
    this.frontier = {};
    /** Ms the view was behind the log at the latest frontier (0: caught up); null: unknown. */
    this.lagMs = null;
    /** The id of the last snapshot or delta: where a reconnect resumes. Opaque. */
    this.lastEventId = null;
    this.error = null;
    this._hadSnapshot = false;
    this._reset = null;
    this._waiters = new Set();
    for (const [event, fn] of Object.entries(handlers ?? {})) {
      if (!EVENTS.has(event)) throw new TypeError(`unknown subscription event '${event}'; use ${[...EVENTS].join(', ')}`);
      this.on(event, fn);
    }
  }

  /** Whether it may still receive frames (not closed, not failed). */
  get active() {
    return this.state !== S.CLOSED && this.state !== S.ERROR;
  }

  /** Stop receiving; the final state is `closed`. Calling it again does nothing. */
  unsubscribe() {
    if (!this.active) return;
    this.client._detach(this);
    this._finish(S.CLOSED, null);
  }

  /** Resolves at the first snapshot; rejects if the subscription fails or closes before. */
  ready() {
    if (this._hadSnapshot) return Promise.resolve(this);
    if (!this.active) return Promise.reject(this.error ?? new StateError('the subscription is closed'));
    return new Promise((resolve, reject) => {
      const offs = [
        this.on('snapshot', () => { offs.forEach((off) => off()); resolve(this); }),
        this.on('state', ({ newState }) => {
          if (newState === S.CLOSED || newState === S.ERROR) {
            offs.forEach((off) => off());
            reject(this.error ?? new StateError('the subscription closed before its snapshot'));
          }
        }),
      ];
    });
  }

  /**
   * Resolves once this view reflects every one of `offsets` (what `publish` answered): the
   * frontier of a snapshot or progress frame reached them, and every delta they caused on this
   * key has been applied. Rejects if the subscription ends first, or on `signal`'s abort.
   */
  reflects(offsets, { signal } = {}) {
    const wanted = offsetsOf(offsets);
    if (covers(this.frontier, wanted)) return Promise.resolve();
    if (!this.active) return Promise.reject(this.error ?? new StateError('the subscription is closed'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const waiter = { wanted, resolve, reject, signal, onAbort: null };
      if (signal) {
        waiter.onAbort = () => {
          this._waiters.delete(waiter);
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      this._waiters.add(waiter);
      this.client._wait(this, wanted);
    });
  }

  /** `for await (const change of sub)`: snapshots and deltas from now until it closes. */
  [Symbol.asyncIterator]() {
    const queue = [];
    let wake = null;
    let finished = !this.active;
    const notify = () => {
      wake?.();
      wake = null;
    };
    const offs = [
      this.on('snapshot', (e) => { queue.push(e); notify(); }),
      this.on('change', (e) => { queue.push(e); notify(); }),
      this.on('state', ({ newState }) => {
        if (newState === S.CLOSED || newState === S.ERROR) {
          finished = true;
          notify();
        }
      }),
    ];
    const stop = () => offs.forEach((off) => off());
    const sub = this;
    return {
      async next() {
        for (;;) {
          if (queue.length > 0) return { value: queue.shift(), done: false };
          if (finished) {
            stop();
            if (sub.state === S.ERROR) throw sub.error;
            return { value: undefined, done: true };
          }
          await new Promise((resolve) => { wake = resolve; });
        }
      },
      async return() {
        stop();
        finished = true;
        queue.length = 0;
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]() {
        return this;
      },
    };
  }

  // ---- the contents of a key: each shape overrides these ----------------------------------

  _empty() {
    this.key = this.query.key;
    /** @type {Map<string, unknown>} */
    this.rows = new Map();
  }

  /** Replace the contents with a snapshot's; returns what the `snapshot` event carries. */
  _applySnapshot(data) {
    this.rows = new Map(Object.entries(data.rows));
    return { rows: this.rows };
  }

  /** Apply a delta; returns what the `change` event carries. */
  _applyDelta(data) {
    const rows = new Map(this.rows);
    for (const op of data.ops) {
      if (op.op === 'upsert') rows.set(op.row, op.value);
      else rows.delete(op.row);
    }
    this.rows = rows;
    return { ops: data.ops, rows };
  }

  // ---- what transports call -------------------------------------------------------------

  /** The SSE path of this subscription. */
  _path() {
    return `/v1/views/${encodeURIComponent(this.view)}/${encodeURIComponent(this.key)}/live`;
  }

  _query() {
    return {};
  }

  /** The offsets of each pending `reflects`, to ask for again on a new subscription. */
  _waitingFor() {
    return [...this._waiters].map((waiter) => waiter.wanted);
  }

  /** Its WebSocket subscribe message under the socket's id for it, from where it resumes. */
  _subscribeMessage(id) {
    return encode.subscribe(id, this.query, this.lastEventId);
  }

  /** The transport (re)established the subscription on the gateway. */
  _open() {
    if (this.state === S.RECONNECTING) this._setState(S.LIVE, null);
  }

  /** The connection was lost; the transport will resume from `lastEventId`. */
  _lost(reason) {
    if (this.state === S.LIVE || this.state === S.RESET) this._setState(S.RECONNECTING, reason);
  }

  /** The gateway refused the subscription for good. */
  _fail(error) {
    if (!this.active) return;
    this.error = error;
    this._finish(S.ERROR, error);
    this._emit('error', error);
  }

  /** The position was refused as malformed: start over with a fresh snapshot. */
  _forgetPosition(reason) {
    this.lastEventId = null;
    if (this._hadSnapshot) this._reset = { code: reason?.code ?? 'invalid_last_event_id', message: reason?.message ?? '' };
  }

  _frame(frame) {
    if (!this.active) return; // a frame of a connection torn down since
    try {
      this._dispatch(frame);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      // A frame that does not fit this query: its contents can no longer be trusted.
      this.client._detach(this);
      this._fail(error);
    }
  }

  _dispatch(frame) {
    switch (frame.kind) {
      case FrameKind.SNAPSHOT:
        this._snapshot(frame);
        break;
      case FrameKind.DELTA:
        this._delta(frame);
        break;
      case FrameKind.PROGRESS:
        this._progress(frame.data);
        break;
      case FrameKind.RESET:
        this._reset = { code: frame.data.code, message: frame.data.message };
        this._setState(S.RESET, this._reset);
        break;
      default:
        break; // newer kinds, and end (which the transport handles)
    }
  }

  _snapshot(frame) {
    const shape = snapshotShape(frame.data);
    if (shape !== this.query.shape) throw new ProtocolError(`a subscription to a ${this.query.shape} got the snapshot of a ${shape}`);
    const contents = this._applySnapshot(frame.data);
    const wasRecovering = this._hadSnapshot;
    const reason = this._reset?.code ?? null;
    this._hadSnapshot = true;
    this._reset = null;
    this.frontier = { ...frame.data.frontier };
    this.lagMs = frame.data.lag_ms ?? null;
    this.lastEventId = frame.id;
    this._emit('snapshot', {
      kind: 'snapshot', ...contents, frontier: this.frontier, lagMs: this.lagMs, eventId: frame.id, wasRecovering, reason,
    });
    if (this.state !== S.LIVE) this._setState(S.LIVE, null);
    this._settleWaiters();
  }

  _delta(frame) {
    const contents = this._applyDelta(frame.data);
    this.lastEventId = frame.id;
    if (this.state === S.RECONNECTING) this._setState(S.LIVE, null);
    this._emit('change', { kind: 'delta', ...contents, eventId: frame.id });
  }

  _progress({ frontier, lag_ms: lagMs = null }) {
    this.frontier = mergeFrontier(this.frontier, frontier);
    this.lagMs = lagMs;
    this._emit('progress', { frontier: this.frontier, lagMs });
    this._settleWaiters();
  }

  _settleWaiters() {
    for (const waiter of [...this._waiters]) {
      if (covers(this.frontier, waiter.wanted)) {
        this._dropWaiter(waiter);
        waiter.resolve();
      }
    }
  }

  _dropWaiter(waiter) {
    this._waiters.delete(waiter);
    if (waiter.onAbort) waiter.signal.removeEventListener('abort', waiter.onAbort);
  }

  _finish(state, reason) {
    this._setState(state, reason);
    const error = this.error ?? new StateError('the subscription closed before the view reflected the offsets');
    for (const waiter of [...this._waiters]) {
      this._dropWaiter(waiter);
      waiter.reject(error);
    }
  }

  _setState(newState, reason) {
    const oldState = this.state;
    if (oldState === newState) return;
    this.state = newState;
    this._emit('state', { oldState, newState, reason: reason ?? null });
  }
}
