/**
 * `createClient(options)`: a connection to one Liveviews gateway, its subscriptions, and
 * publishing with read-your-writes.
 *
 * The client's state is `disconnected`, `connecting`, `connected` or `closed`, changed only by
 * `_setState`, which emits `state` with `{oldState, newState}`. The transport (`ws`: one socket
 * for everything; `sse`: one stream per subscription; `auto`: WebSocket, or SSE where no
 * WebSocket can be opened) decides it. In a browser the client follows `online`/`offline`:
 * offline it drops its connections at once, online it reconnects at once and every
 * subscription resumes from its last event id.
 */

import { Emitter } from './emitter.js';
import { fullJitter } from './backoff.js';
import {
  ConnectionError, LiveviewsError, RequestError, StateError, errorFromResponse, isTokenError,
} from './errors.js';
import { decodeOffsets } from './frames.js';
import { EventSourceStream } from './eventsource.js';
import { Group, parseMembers } from './group.js';
import { LogTail } from './log.js';
import { PrefixSubscription } from './prefix.js';
import { QueryShape, parseQuery } from './query.js';
import { EventStream, SseTransport } from './sse.js';
import { Subscription } from './subscription.js';
import { WindowSubscription } from './window.js';
import { WsTransport } from './ws.js';

export const ClientState = Object.freeze({
  DISCONNECTED: 'disconnected',
  CONNECTING: 'connecting',
  CONNECTED: 'connected',
  CLOSED: 'closed',
});

const TRANSPORTS = ['auto', 'ws', 'sse'];

/** What the gateway takes as an idempotency key (docs/PROTOCOL.md, section 2). */
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;

/** Refusals of a publish over the socket that say nothing was decided about the batch: the
 *  same batch sent again with its key may go through (over HTTP they come as 5xx). */
const RESEND_CODES = new Set(['store_unavailable', 'store_full', 'partial_append', 'not_replicated']);

/** A fresh idempotency key: 128 random bits in hex. `getRandomValues` rather than
 *  `randomUUID`, which a page served over plain http (not localhost) does not have. */
function newIdempotencyKey() {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** Whether a failed publish may be sent again with its key: its answer was lost, or the
 *  gateway or the store could not take it just then. A rate limit (429) is the caller's. */
function worthResending(error) {
  if (error instanceof ConnectionError) return true;
  if (!(error instanceof RequestError)) return false;
  return (error.status !== null && error.status >= 500) || RESEND_CODES.has(error.code);
}

const SUBSCRIPTIONS = {
  [QueryShape.KEY]: Subscription,
  [QueryShape.PREFIX]: PrefixSubscription,
  [QueryShape.WINDOW]: WindowSubscription,
};

/** A client of the gateway at `options.url`; see Client. */
export function createClient(options) {
  return new Client(options);
}

export class Client extends Emitter {
  /**
   * @param {object} options
   * @param {string} [options.url] the gateway, e.g. `https://chirp.example`; in a browser the
   *   page's origin by default
   * @param {string} [options.token] a bearer token (without one, the `lv_token` cookie is used)
   * @param {() => Promise<string | {token: string}>} [options.getToken] called for a token and
   *   again whenever it expires or is refused
   * @param {'auto' | 'ws' | 'sse'} [options.transport]
   * @param {'header' | 'query'} [options.sseAuth] how SSE sends the token
   * @param {{minDelay?: number, maxDelay?: number}} [options.backoff] reconnect delays, ms
   * @param {number} [options.heartbeatTimeout] ms without a byte before a connection is dead
   * @param {number} [options.connectTimeout] ms before a connection attempt counts as failed
   * @param {typeof fetch} [options.fetch]
   * @param {typeof WebSocket} [options.WebSocket]
   * @param {typeof EventSource} [options.EventSource] read SSE with it instead of fetch (the
   *   token then goes in the query)
   * @param {boolean} [options.watchOnline] follow the browser's online/offline events
   * @param {number} [options.publishRetries] times a batch whose answer was lost (or a 5xx) is
   *   sent again with its idempotency key before publish rejects (default 3)
   */
  constructor(options = {}) {
    super();
    const url = options.url ?? globalThis.location?.origin;
    if (typeof url !== 'string' || !/^https?:\/\//.test(url)) {
      throw new TypeError("createClient needs the gateway's http(s) url, e.g. {url: 'http://127.0.0.1:8000'}");
    }
    const transport = options.transport ?? 'auto';
    if (!TRANSPORTS.includes(transport)) throw new TypeError(`transport must be one of ${TRANSPORTS.join(', ')}, not '${transport}'`);
    const sseAuth = options.sseAuth ?? 'header';
    if (sseAuth !== 'header' && sseAuth !== 'query') throw new TypeError("sseAuth must be 'header' or 'query'");
    this.url = url.replace(/\/+$/, '');
    this.options = Object.freeze({
      transport,
      sseAuth,
      backoff: Object.freeze({ minDelay: 500, maxDelay: 20_000, ...options.backoff }),
      heartbeatTimeout: options.heartbeatTimeout ?? 45_000,
      connectTimeout: options.connectTimeout ?? 10_000,
      watchOnline: options.watchOnline ?? true,
      publishRetries: options.publishRetries ?? 3,
    });
    if (!Number.isInteger(this.options.publishRetries) || this.options.publishRetries < 0) {
      throw new TypeError('publishRetries must be a whole number of retries, 0 or more');
    }
    this._fetch = options.fetch ?? globalThis.fetch?.bind(globalThis);
    if (typeof this._fetch !== 'function') throw new TypeError('no fetch here: pass options.fetch');
    this._WebSocket = options.WebSocket ?? globalThis.WebSocket ?? null;
    this._EventSource = options.EventSource ?? null;
    this._Stream = this._EventSource === null ? EventStream : EventSourceStream;
    if (transport === 'ws' && this._WebSocket === null) {
      throw new TypeError("transport 'ws' needs a WebSocket: pass options.WebSocket (Node 20: run with --experimental-websocket)");
    }
    if (options.token != null && options.getToken != null) throw new TypeError('pass token or getToken, not both');
    this._staticToken = options.token ?? null;
    this._getToken = options.getToken ?? null;
    this._tokenValue = null;
    this._tokenPromise = null;

    this.state = ClientState.DISCONNECTED;
    /** @type {Set<Subscription>} */
    this.subscriptions = new Set();
    this._manualDisconnect = false;
    this._logTransport = null;
    const ws = transport === 'ws' || (transport === 'auto' && this._WebSocket !== null);
    this.transport = ws ? 'ws' : 'sse';
    this._transport = ws
      ? new WsTransport(this, { onUnavailable: transport === 'auto' ? (error) => this._fallBack(error) : null })
      : new SseTransport(this, { Stream: this._Stream });
    this._unwatch = this._watchOnline();
  }

  /**
   * Follow a query: a snapshot, then its changes. `subscribe(view, key, handlers?)` or
   * `subscribe({view, key}, handlers?)` follows one key (a Subscription);
   * `subscribe({view, prefix}, handlers?)` the keys that start with `prefix`, or with no prefix
   * the whole view (a PrefixSubscription), and `{view, prefix, filter}` only their rows that
   * match the filter (docs/PROTOCOL.md, section 5.2); `subscribe({view, key, limit, after?},
   * handlers?)` a window of the key's top rows by score, after the row `after` names (a
   * WindowSubscription). `handlers`: `{snapshot, change, ...}`.
   */
  subscribe(viewOrQuery, key, handlers) {
    this._requireOpen('subscribe');
    let query;
    if (typeof viewOrQuery === 'string') {
      if (typeof key !== 'string' || !key) throw new TypeError('subscribe(view, key): both must be non-empty strings');
      query = parseQuery({ view: viewOrQuery, key });
    } else {
      if (handlers !== undefined) throw new TypeError('subscribe(query, handlers) takes the query and the handlers only');
      query = parseQuery(viewOrQuery);
      handlers = key;
    }
    const sub = new SUBSCRIPTIONS[query.shape](this, query, handlers);
    this.subscriptions.add(sub);
    this._transport.attach(sub);
    return sub;
  }

  /**
   * Follow several keys as one group (docs/PROTOCOL.md, section 5.3): `members` is a list of
   * `{view, key}`, released together so that the page never shows one of them reflecting a
   * write another does not reflect yet. A Group: `change` gets `{members, frontier, changed}`.
   */
  group(members, handlers) {
    this._requireOpen('group');
    const sub = new Group(this, parseMembers(members), handlers);
    this.subscriptions.add(sub);
    this._transport.attach(sub);
    return sub;
  }

  /** Append one event, once; resolves with its offset `{partition, id, token}`. */
  async publish(event, options = {}) {
    const [offset] = await this.publishBatch([event], options);
    return offset;
  }

  /**
   * Append events all or nothing, and once; resolves with one offset per event, in order.
   *
   * The batch goes with an idempotency key (`options.idempotencyKey`, or a new one). When its
   * answer is lost (the connection dropped) or the gateway answers 5xx, it is sent again with
   * that key, over whichever way is open then, up to `publishRetries` times: the gateway
   * appends it at most once. An error that ends the publish carries the key as
   * `idempotencyKey`, so the batch can be sent again later without appending it twice.
   */
  async publishBatch(events, { idempotencyKey } = {}) {
    this._requireOpen('publish');
    if (!Array.isArray(events) || events.length === 0) throw new TypeError('publishBatch needs a non-empty array of events');
    const key = idempotencyKey ?? newIdempotencyKey();
    if (typeof key !== 'string' || !IDEMPOTENCY_KEY.test(key)) {
      throw new TypeError('an idempotency key is 1 to 200 visible ASCII characters (no spaces), such as a UUID');
    }
    const { minDelay, maxDelay } = this.options.backoff;
    for (let attempt = 0; ; attempt += 1) {
      try {
        if (this._transport.canPublish()) return await this._transport.publish(events, key);
        return await this._httpPublish(events, key);
      } catch (error) {
        if (error instanceof LiveviewsError) error.idempotencyKey = key;
        if (!worthResending(error) || attempt >= this.options.publishRetries || this.state === ClientState.CLOSED) throw error;
        await new Promise((resolve) => { setTimeout(resolve, fullJitter(attempt, minDelay, maxDelay)); });
        if (this.state === ClientState.CLOSED) throw error;
      }
    }
  }

  /** The rows of `view`/`key` once, without following them: `{rows, frontier, lagMs, position}`. */
  async get(view, key) {
    this._requireOpen('get');
    const path = `/v1/views/${encodeURIComponent(view)}/${encodeURIComponent(key)}`;
    const response = await this._request(path, {}, false);
    const body = await response.json();
    return {
      rows: new Map(Object.entries(body.rows)), frontier: body.frontier, lagMs: body.lag_ms ?? null, position: body.position,
    };
  }

  /** Watch events as they are appended to the log (`GET /v1/log/live`); see LogTail. */
  tailLog(options = {}, handlers = {}) {
    this._requireOpen('tailLog');
    const tail = new LogTail(this, options, handlers);
    this._logTransport ??= new SseTransport(this, { reportState: false, Stream: this._Stream });
    if (this.state === ClientState.DISCONNECTED && (this._manualDisconnect || this._offline)) this._logTransport.paused = true;
    this._logTransport.attach(tail);
    return tail;
  }

  /** Use another token from now on; an open WebSocket signs in with it at once. */
  setToken(token) {
    if (this._getToken !== null) throw new StateError('this client gets its tokens from getToken');
    this._staticToken = token;
    if (this.transport === 'ws') this._transport.refreshToken().catch((error) => this._emit('error', error));
  }

  /** Drop the connections; subscriptions stay and resume on `connect()`. */
  disconnect() {
    this._requireOpen('disconnect');
    this._manualDisconnect = true;
    this._pause({ code: 'disconnected', message: 'the application disconnected the client' });
  }

  /** Reconnect after `disconnect()`, or now instead of after the current backoff delay. */
  connect() {
    this._requireOpen('connect');
    this._manualDisconnect = false;
    this._resume();
  }

  /** Unsubscribe everything and close the connections for good. */
  close() {
    if (this.state === ClientState.CLOSED) return;
    this._unwatch();
    for (const sub of [...this.subscriptions]) sub.unsubscribe();
    this._transport.close();
    this._logTransport?.close();
    this._setState(ClientState.CLOSED);
  }

  // ---- for transports and subscriptions ---------------------------------------------------

  get _canRefresh() {
    return this._getToken !== null;
  }

  /** The token to send, or null for none (the cookie may carry one). */
  async _token({ refresh = false } = {}) {
    if (this._getToken === null) return this._staticToken;
    if (this._tokenPromise !== null) return this._tokenPromise;
    if (!refresh && this._tokenValue !== null) return this._tokenValue;
    this._tokenPromise = (async () => {
      const answer = await this._getToken();
      const token = typeof answer === 'string' ? answer : answer?.token;
      if (typeof token !== 'string' || !token) throw new TypeError('getToken() must resolve to a token string');
      this._tokenValue = token;
      return token;
    })();
    try {
      return await this._tokenPromise;
    } finally {
      this._tokenPromise = null;
    }
  }

  /**
   * The token for a transport's connection attempt `gen`: `{ token }`, or null when the attempt
   * is stale or the token could not be had (then the transport retries with backoff).
   */
  async _connectToken(transport, gen) {
    try {
      const token = await this._token({ refresh: transport._refreshToken });
      return gen === transport._gen ? { token } : null;
    } catch (cause) {
      if (gen === transport._gen) transport._retry(new ConnectionError('could not get a token', { cause }));
      return null;
    }
  }

  _tokenExpired(message) {
    return new RequestError(message, { code: 'token_expired', status: 401 });
  }

  /** `sub` waits for its view to reflect `offsets`: the transport asks the gateway for the
   *  covering frontier early, a `wait` on the socket or one posted for the SSE stream. */
  _wait(sub, offsets) {
    this._transport.wait?.(sub, offsets);
  }

  _detach(consumer) {
    if (consumer instanceof LogTail) {
      this._logTransport?.detach(consumer);
      return;
    }
    this.subscriptions.delete(consumer);
    this._transport.detach(consumer);
  }

  _transportState(source, state) {
    if (source !== this._transport || this.state === ClientState.CLOSED) return;
    this._setState(state);
  }

  _setState(newState) {
    const oldState = this.state;
    if (oldState === newState) return;
    this.state = newState;
    this._emit('state', { oldState, newState });
  }

  // ---- internals ----------------------------------------------------------------------------

  _requireOpen(what) {
    if (this.state === ClientState.CLOSED) throw new StateError(`cannot ${what} on a closed client`);
  }

  _pause(reason) {
    this._transport.disconnect(reason);
    this._logTransport?.disconnect(reason);
  }

  _resume() {
    if (this._manualDisconnect || this._offline) return;
    this._transport.connect();
    this._logTransport?.connect();
  }

  /** `auto`: the first WebSocket never opened, so follow the subscriptions over SSE. */
  _fallBack(error) {
    this.transport = 'sse';
    this._transport = new SseTransport(this, { Stream: this._Stream });
    this._emit('error', new ConnectionError('no WebSocket could be opened; using Server-Sent Events', { cause: error }));
    for (const sub of this.subscriptions) this._transport.attach(sub);
  }

  async _request(path, init, refreshed) {
    const token = await this._token({ refresh: refreshed });
    const headers = { ...init.headers };
    if (token !== null) headers.Authorization = `Bearer ${token}`;
    let response;
    try {
      response = await this._fetch(this.url + path, { ...init, headers, credentials: 'same-origin' });
    } catch (cause) {
      throw new ConnectionError('could not reach the gateway', { cause });
    }
    if (response.ok) return response;
    const error = await errorFromResponse(response);
    if (isTokenError(error) && this._canRefresh && !refreshed) return this._request(path, init, true);
    throw error;
  }

  async _httpPublish(events, idempotencyKey) {
    const response = await this._request('/v1/events', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': idempotencyKey },
      body: JSON.stringify({ events }),
    }, false);
    return decodeOffsets((await response.json()).offsets);
  }

  _watchOnline() {
    const target = globalThis;
    const nav = globalThis.navigator;
    this._offline = false;
    if (!this.options.watchOnline || typeof target.addEventListener !== 'function' || nav === undefined || !('onLine' in nav)) {
      return () => {};
    }
    const offline = () => {
      this._offline = true;
      this._pause({ code: 'offline', message: 'the browser went offline' });
    };
    const online = () => {
      this._offline = false;
      this._resume();
    };
    target.addEventListener('offline', offline);
    target.addEventListener('online', online);
    if (nav.onLine === false) offline();
    return () => {
      target.removeEventListener('offline', offline);
      target.removeEventListener('online', online);
    };
  }
}
