/**
 * The WebSocket transport: every subscription of a client on one socket (`/v1/ws`), plus
 * publishing and token refresh on that socket.
 *
 * The socket signs in with an `auth` message, then (re)subscribes every subscription, each
 * from its last event id. Subscription ids are fresh for every `subscribe` message, so a frame
 * of an id this socket no longer uses is dropped. Every callback carries the generation of the
 * socket it belongs to and does nothing once that socket has been replaced.
 */

import { Backoff } from './backoff.js';
import { ConnectionError, ProtocolError, StateError, isTokenError } from './errors.js';
import { FrameKind, decodeWsMessage, encode } from './frames.js';

export const SocketState = Object.freeze({
  IDLE: 'idle',
  CONNECTING: 'connecting',
  OPEN: 'open',
  WAITING: 'waiting',
  CLOSED: 'closed',
});

const W = SocketState;
const CLOSE_UNAUTHORIZED = 4401;
/** Refresh this long before the token expires (at most a fifth of its remaining life). */
const REFRESH_MARGIN_MS = 60_000;
/** Subscription errors after which the subscription resumes instead of failing. */
const RESUMABLE = new Set(['slow_consumer', 'store_unavailable', 'too_many_subscriptions']);

function wsUrl(httpUrl) {
  const url = new URL(httpUrl + '/v1/ws');
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  return url.toString();
}

export class WsTransport {
  constructor(client, { onUnavailable = null } = {}) {
    this.client = client;
    this.onUnavailable = onUnavailable;
    this.state = W.IDLE;
    this.subject = null;
    this.expiresAt = null;
    this.socket = null;
    this.paused = false;
    this._gen = 0;
    this._everOpened = false;
    this._refreshToken = false;
    this._ids = new Map(); // subscription -> its current sub id, or null before subscribing
    this._subs = new Map(); // sub id -> subscription
    this._requests = new Map(); // req id -> {resolve, reject}
    this._next = 0;
    this._timers = new Set();
    this._watchdog = null;
    this._refresher = null;
    this._socketError = null;
    this._backoff = new Backoff(client.options.backoff);
  }

  attach(sub) {
    this._ids.set(sub, null);
    if (this.state === W.OPEN) this._subscribe(sub);
    else if (this.state === W.IDLE && !this.paused) this._connect();
  }

  detach(sub) {
    const id = this._ids.get(sub);
    this._ids.delete(sub);
    if (id) {
      this._subs.delete(id);
      if (this.state === W.OPEN) this._send(encode.unsubscribe(id));
    }
  }

  connect() {
    this.paused = false;
    if (this.state === W.IDLE || this.state === W.WAITING) {
      this._backoff.reset();
      this._connect();
    }
  }

  disconnect(reason) {
    this.paused = true;
    if (this.state === W.CLOSED) return;
    this._drop(reason, W.IDLE);
  }

  close() {
    this._drop(new StateError('the client was closed'), W.CLOSED);
    this._ids.clear();
  }

  canPublish() {
    return this.state === W.OPEN;
  }

  /** Ask for `sub`'s frontier as soon as it covers `offsets` (read-your-writes), not at the
   *  next progress interval. A subscription not open yet asks when it is (`_subscribe`). */
  wait(sub, offsets) {
    const id = this._ids.get(sub);
    if (id && this.state === W.OPEN) this._send(encode.wait(id, offsets));
  }

  /** Publish on the open socket, under `idempotencyKey`; resolves with the offsets. */
  publish(events, idempotencyKey) {
    const req = `r${++this._next}`;
    return new Promise((resolve, reject) => {
      this._requests.set(req, { resolve, reject });
      this._send(encode.publish(req, events, idempotencyKey));
    });
  }

  /** Send a new token on the open socket (the gateway keeps the socket and its subscriptions). */
  async refreshToken() {
    if (this.state !== W.OPEN) return;
    const gen = this._gen;
    const token = await this.client._token({ refresh: true });
    if (gen === this._gen && this.state === W.OPEN) this._send(encode.auth(token));
  }

  // ---- connection ---------------------------------------------------------------------------

  _setState(state) {
    if (this.state === state) return;
    this.state = state;
    const clientState = {
      [W.IDLE]: 'disconnected', [W.CONNECTING]: 'connecting', [W.WAITING]: 'connecting',
      [W.OPEN]: 'connected', [W.CLOSED]: 'closed',
    }[state];
    this.client._transportState(this, clientState);
  }

  _timer(gen, delay, fn) {
    const timer = setTimeout(() => {
      this._timers.delete(timer);
      if (gen === this._gen) fn();
    }, delay);
    this._timers.add(timer);
    return timer;
  }

  _teardown() {
    this._gen++;
    for (const timer of this._timers) clearTimeout(timer);
    this._timers.clear();
    clearTimeout(this._watchdog);
    clearTimeout(this._refresher);
    this._watchdog = this._refresher = null;
    const socket = this.socket;
    this.socket = null;
    if (socket) {
      socket.onopen = socket.onmessage = socket.onerror = socket.onclose = null;
      try {
        socket.close(1000, 'client closed');
      } catch {
        // a socket that never opened may refuse close(); it is abandoned either way
      }
    }
    this._subs.clear();
    for (const sub of this._ids.keys()) this._ids.set(sub, null);
  }

  /** Tear the socket down; subscriptions wait to resume, pending publishes fail. */
  _drop(reason, state) {
    this._teardown();
    this._setState(state);
    // One error per publish: each carries its own batch's idempotency key.
    const lost = () => new ConnectionError(
      'the connection closed before the gateway answered; the events may or may not have been appended',
      { cause: reason },
    );
    for (const { reject } of this._requests.values()) reject(lost());
    this._requests.clear();
    for (const sub of this._ids.keys()) sub._lost(reason);
  }

  async _connect() {
    this._teardown();
    const gen = this._gen;
    this._setState(W.CONNECTING);
    const got = await this.client._connectToken(this, gen);
    if (got === null) return;
    const { token } = got;
    const WebSocketImpl = this.client._WebSocket;
    let socket;
    try {
      socket = new WebSocketImpl(wsUrl(this.client.url));
    } catch (cause) {
      this._retry(new ConnectionError('could not open a WebSocket', { cause }));
      return;
    }
    this.socket = socket;
    // Some WebSocket implementations never report a handshake cut short: time it out.
    this._watch(gen, this.client.options.connectTimeout);
    socket.onopen = () => {
      // Without a token the gateway signs the socket in from the lv_token cookie, if any.
      if (gen === this._gen && token !== null) socket.send(encode.auth(token));
    };
    socket.onmessage = (event) => {
      if (gen === this._gen) this._message(event.data, gen);
    };
    socket.onclose = (event) => {
      if (gen === this._gen) this._closed(event.code, event.reason);
    };
    socket.onerror = () => {}; // a close event follows, with what there is to know
  }

  _retry(reason, delay = this._backoff.next()) {
    this._drop(reason, W.WAITING);
    this._timer(this._gen, delay, () => this._connect());
  }

  _closed(code, reason) {
    const error = this._socketError ?? new ConnectionError(`the WebSocket closed (${code}${reason ? `: ${reason}` : ''})`);
    this._socketError = null;
    if (!this._everOpened && this.onUnavailable && code !== CLOSE_UNAUTHORIZED) {
      // The subscriptions move to the transport the client falls back to; this one is done.
      const fallBack = this.onUnavailable;
      this.onUnavailable = null;
      fallBack(error);
      this._ids.clear();
      this._drop(error, W.CLOSED);
      return;
    }
    if (code === CLOSE_UNAUTHORIZED) {
      if (this.client._canRefresh && !this._refreshToken) {
        this._refreshToken = true;
        this._retry(error, 0);
        return;
      }
      // Refused for good: its subscriptions fail; a later subscribe tries again, e.g. after
      // client.setToken() with a valid token.
      this._drop(error, W.IDLE);
      for (const sub of [...this._ids.keys()]) sub._fail(error);
      this._ids.clear();
      this.client._emit('error', error);
      return;
    }
    this._retry(error);
  }

  _send(text) {
    this.socket?.send(text);
  }

  _subscribe(sub) {
    const id = `s${++this._next}`;
    this._ids.set(sub, id);
    this._subs.set(id, sub);
    this._send(sub._subscribeMessage(id));
    for (const offsets of sub._waitingFor()) this._send(encode.wait(id, offsets));
    sub._open();
  }

  /** Treat the socket as dead if nothing arrives within `timeout` (3 missed heartbeats). */
  _watch(gen, timeout = this.client.options.heartbeatTimeout) {
    clearTimeout(this._watchdog);
    this._watchdog = setTimeout(() => {
      if (gen === this._gen) this._retry(new ConnectionError(`nothing heard from the gateway for ${timeout} ms`));
    }, timeout);
  }

  _scheduleRefresh(gen) {
    clearTimeout(this._refresher);
    if (this.expiresAt === null || !this.client._canRefresh) return;
    const remaining = this.expiresAt * 1000 - Date.now();
    const margin = Math.min(REFRESH_MARGIN_MS, remaining / 5);
    this._refresher = setTimeout(() => {
      if (gen === this._gen) this.refreshToken().catch((error) => this.client._emit('error', error));
    }, Math.max(0, remaining - margin));
  }

  // ---- messages -----------------------------------------------------------------------------

  _message(data, gen) {
    this._watch(gen);
    let msg;
    try {
      if (typeof data !== 'string') throw new ProtocolError('the gateway sends text messages only');
      msg = decodeWsMessage(data);
    } catch (error) {
      this._socketError = error;
      this.socket?.close(1002, 'protocol error');
      return;
    }
    switch (msg.type) {
      case 'authenticated':
        this._authenticated(msg);
        break;
      case 'frame':
        this._frame(msg.frame);
        break;
      case 'published': {
        const request = this._requests.get(msg.req);
        this._requests.delete(msg.req);
        request?.resolve(msg.offsets);
        break;
      }
      case 'error':
        this._error(msg);
        break;
      default:
        break; // heartbeat, unsubscribed, and kinds this client does not know
    }
  }

  _authenticated(msg) {
    const first = this.state !== W.OPEN;
    this.subject = msg.subject;
    this.expiresAt = msg.expiresAt;
    this._refreshToken = false;
    this._scheduleRefresh(this._gen);
    if (!first) return;
    this._everOpened = true;
    this._backoff.reset();
    this._setState(W.OPEN);
    for (const sub of [...this._ids.keys()]) this._subscribe(sub);
  }

  _frame(frame) {
    const sub = this._subs.get(frame.sub);
    if (sub === undefined) return; // a subscription since unsubscribed or resubscribed
    if (frame.kind === FrameKind.END) {
      this._resubscribe(frame.sub, sub, 0);
      return;
    }
    sub._frame(frame);
  }

  _error(msg) {
    const { error } = msg;
    if (msg.req !== null) {
      const request = this._requests.get(msg.req);
      this._requests.delete(msg.req);
      request?.reject(error);
      return;
    }
    if (msg.sub !== null) {
      const sub = this._subs.get(msg.sub);
      if (sub === undefined) return;
      if (RESUMABLE.has(error.code)) {
        sub._lost(error);
        this._resubscribe(msg.sub, sub, error.code === 'slow_consumer' ? 0 : this._backoff.next());
      } else if (error.code === 'invalid_last_event_id') {
        sub._forgetPosition(error);
        this._resubscribe(msg.sub, sub, 0);
      } else {
        this._subs.delete(msg.sub);
        this._ids.delete(sub);
        sub._fail(error);
      }
      return;
    }
    // An error of the socket itself. Before `authenticated` a token error answers our auth
    // message: the socket is refused. On an open socket it answers a refresh, which leaves
    // the socket signed in until its current token expires; the gateway then closes it.
    if (isTokenError(error) && this.state !== W.OPEN) {
      this._socketError = error;
      this._closed(CLOSE_UNAUTHORIZED, error.code);
      return;
    }
    this._socketError ??= error;
    this.client._emit('error', error);
  }

  _resubscribe(id, sub, delay) {
    this._subs.delete(id);
    this._ids.set(sub, null);
    this._timer(this._gen, delay, () => {
      if (this._ids.has(sub) && this._ids.get(sub) === null && this.state === W.OPEN) this._subscribe(sub);
    });
  }
}
