/**
 * The SSE transport: one `GET .../live` stream per subscription, read with `fetch` so that it
 * can send the `Authorization` and `Last-Event-ID` headers (EventSource can set neither; an
 * application may still give one, see eventsource.js).
 *
 * Each `EventStream` reconnects by itself with full-jitter backoff and resumes from its
 * consumer's last event id. Every await and timer carries the generation it was started in;
 * when the stream has been torn down since (`_gen` moved on) it does nothing.
 *
 * A stream has no way back to its gateway, so it names itself: a random id, the `stream`
 * parameter of each of its requests, under which its subscription's `reflects` posts waits
 * (`POST /v1/streams/{id}/wait`, docs/PROTOCOL.md section 4). The gateway keeps no wait across
 * a reconnect or a reset, so the stream posts the pending ones again when it opens, and after
 * the snapshot that follows a reset.
 */

import { Backoff } from './backoff.js';
import { ConnectionError, ProtocolError, errorFromResponse, isTokenError } from './errors.js';
import { FrameKind, SseParser, decodeSseEvent } from './frames.js';
import { latestOfEach } from './offsets.js';

export const StreamState = Object.freeze({
  IDLE: 'idle',
  CONNECTING: 'connecting',
  OPEN: 'open',
  WAITING: 'waiting',
  CLOSED: 'closed',
});

const T = StreamState;

/** Offsets the gateway takes in one wait. */
const MAX_WAIT_OFFSETS = 64;

/** A stream's id: 16 random bytes in base64url without padding (22 characters). */
function newStreamId() {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Answers that retrying cannot change: the consumer fails. */
function fatal(error) {
  return error.status !== null && error.status < 500 && error.status !== 429 && !isTokenError(error);
}

export class EventStream {
  /**
   * @param client the Client (fetch, token, url, options)
   * @param consumer a Subscription or LogTail: `_path()`, `_query()`, `lastEventId`, `_open()`,
   *   `_frame(f)`, `_lost(err)`, `_fail(err)`, `_forgetPosition(err)`
   * @param onState called with the stream after each of its state changes
   */
  constructor(client, consumer, onState = () => {}) {
    this.client = client;
    this.consumer = consumer;
    this.onState = onState;
    this.state = T.IDLE;
    /** Its `stream` parameter, the same across its reconnects: where its waits are posted. */
    this.id = newStreamId();
    this._afterReset = false;
    this._gen = 0;
    this._abort = null;
    this._timer = null;
    this._watchdog = null;
    this._refreshToken = false;
    this._backoff = new Backoff(client.options.backoff);
  }

  start() {
    if (this.state === T.IDLE) this._connect();
  }

  /** Reconnect at once, forgetting the backoff (e.g. the browser came back online). */
  restart() {
    if (this.state === T.CLOSED) return;
    this._teardown();
    this._backoff.reset();
    this._connect();
  }

  /** Drop the connection and wait for `start` or `restart`. */
  pause(reason) {
    if (this.state === T.CLOSED) return;
    this._teardown();
    this._setState(T.IDLE);
    this.consumer._lost(reason);
  }

  stop() {
    this._teardown();
    this._setState(T.CLOSED);
  }

  /** Ask for the consumer's frontier as soon as it covers `offsets` (`{partition, id}`, as
   *  `parseOffset` makes them). A stream not open yet asks when it opens (`_opened`). */
  wait(offsets) {
    if (this.state !== T.OPEN) return;
    // Only the latest offset of each partition: a frontier that covers it covers the others.
    const latest = latestOfEach(offsets);
    for (let i = 0; i < latest.length; i += MAX_WAIT_OFFSETS) {
      const body = JSON.stringify({ offsets: latest.slice(i, i + MAX_WAIT_OFFSETS) });
      const init = { method: 'POST', headers: { 'Content-Type': 'application/json' }, body };
      // Fire and forget: a lost wait is still answered by the gateway's progress, only later.
      this.client._request(`/v1/streams/${this.id}/wait`, init, false).catch(() => {});
    }
  }

  _setState(state) {
    if (this.state === state) return;
    this.state = state;
    this.onState(this);
  }

  _teardown() {
    this._gen++;
    this._afterReset = false;
    this._abort?.abort();
    this._abort = null;
    clearTimeout(this._timer);
    clearTimeout(this._watchdog);
    this._timer = this._watchdog = null;
  }

  /** The consumer's path and query, and this stream's id. */
  _url() {
    const url = new URL(this.client.url + this.consumer._path());
    for (const [name, value] of Object.entries(this.consumer._query())) {
      // A list is a repeated parameter: a group's members, in pairs of view and key.
      if (Array.isArray(value)) value.forEach((v) => url.searchParams.append(name, String(v)));
      else url.searchParams.set(name, String(value));
    }
    url.searchParams.set('stream', this.id);
    return url;
  }

  _request(token) {
    const url = this._url();
    const headers = { Accept: 'text/event-stream' };
    if (token !== null) {
      if (this.client.options.sseAuth === 'query') url.searchParams.set('access_token', token);
      else headers.Authorization = `Bearer ${token}`;
    }
    if (this.consumer.lastEventId !== null) headers['Last-Event-ID'] = this.consumer.lastEventId;
    return { url: url.toString(), headers };
  }

  async _connect() {
    this._teardown();
    const gen = this._gen;
    this._setState(T.CONNECTING);
    const controller = new AbortController();
    this._abort = controller;
    let response;
    try {
      const token = await this.client._token({ refresh: this._refreshToken });
      if (gen !== this._gen) return;
      const { url, headers } = this._request(token);
      this._watch(gen, this.client.options.connectTimeout); // a connect that hangs fails too
      response = await this.client._fetch(url, { headers, signal: controller.signal, cache: 'no-store' });
    } catch (cause) {
      if (gen !== this._gen) return;
      this._retry(cause instanceof ConnectionError ? cause : new ConnectionError('could not reach the gateway', { cause }));
      return;
    }
    if (gen !== this._gen) return;
    if (!response.ok) {
      const error = await errorFromResponse(response);
      if (gen === this._gen) this._refused(error);
      return;
    }
    this._opened();
    await this._read(response.body, gen);
  }

  /** The gateway answered: it holds the stream under its id, without the waits posted before
   *  (a resumed stream gets no snapshot), so the pending ones are posted now. */
  _opened() {
    this._refreshToken = false;
    this._setState(T.OPEN);
    this.consumer._open();
    this._waitAgain();
  }

  /** Hand `frame` to the consumer. A reset drops the gateway's waits with the rows: the ones
   *  the snapshot after it does not answer are posted again. */
  _deliver(frame) {
    this.consumer._frame(frame);
    if (frame.kind === FrameKind.RESET) {
      this._afterReset = true;
    } else if (frame.kind === FrameKind.SNAPSHOT && this._afterReset) {
      this._afterReset = false;
      this._waitAgain();
    }
  }

  /** Post the waits of the consumer's pending `reflects` (a log tail has none). */
  _waitAgain() {
    for (const offsets of this.consumer._waitingFor?.() ?? []) this.wait(offsets);
  }

  async _read(body, gen) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    this._watch(gen);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (gen !== this._gen) {
          reader.cancel().catch(() => {});
          return;
        }
        if (done) break;
        this._watch(gen);
        for (const event of parser.push(decoder.decode(value, { stream: true }))) {
          const frame = decodeSseEvent(event);
          this._backoff.reset(); // the gateway is serving us: the next failure starts small
          if (frame.kind === FrameKind.END) {
            reader.cancel().catch(() => {});
            this._ended(frame.data);
            return;
          }
          if (frame.kind !== FrameKind.HEARTBEAT) this._deliver(frame);
          if (gen !== this._gen) return; // a handler closed the subscription
        }
      }
    } catch (cause) {
      if (gen !== this._gen) return;
      if (cause instanceof ProtocolError) {
        this._fail(cause);
        return;
      }
      this._retry(new ConnectionError('the event stream broke', { cause }));
      return;
    }
    this._retry(new ConnectionError('the gateway closed the event stream'));
  }

  /** An `end` frame: resume at once, with a fresh token if that was the reason. */
  _ended(data) {
    const reason = { code: data.code, message: data.message };
    if (data.code === 'token_expired') {
      if (!this.client._canRefresh) {
        this._fail(this.client._tokenExpired(data.message));
        return;
      }
      this._refreshToken = true;
    }
    this._retry(reason, 0);
  }

  _refused(error) {
    if (error.code === 'invalid_last_event_id') {
      this.consumer._forgetPosition(error);
      this._retry(error, 0);
    } else if (isTokenError(error) && this.client._canRefresh && !this._refreshToken) {
      this._refreshToken = true;
      this._retry(error, 0);
    } else if (fatal(error) || isTokenError(error)) {
      this._fail(error);
    } else {
      this._retry(error);
    }
  }

  /** Give up for good: the consumer fails with `error`. */
  _fail(error) {
    this._teardown();
    this._setState(T.CLOSED);
    this.consumer._fail(error);
  }

  _retry(reason, delay = this._backoff.next()) {
    this._teardown();
    const gen = this._gen;
    this._setState(T.WAITING);
    this.consumer._lost(reason);
    this._timer = setTimeout(() => {
      if (gen === this._gen) this._connect();
    }, delay);
  }

  _watch(gen, timeout = this.client.options.heartbeatTimeout) {
    clearTimeout(this._watchdog);
    this._watchdog = setTimeout(() => {
      if (gen === this._gen) this._retry(new ConnectionError(`nothing heard from the gateway for ${timeout} ms`));
    }, timeout);
  }
}

/** Every SSE stream of a client; reports the client's connection state from theirs. */
export class SseTransport {
  /** `Stream`: EventStream (fetch), or EventSourceStream where the app gave an EventSource. */
  constructor(client, { reportState = true, Stream = EventStream } = {}) {
    this.client = client;
    this.reportState = reportState;
    this.Stream = Stream;
    this.streams = new Map();
    this.paused = false;
  }

  attach(consumer) {
    const stream = new this.Stream(this.client, consumer, () => this._update());
    this.streams.set(consumer, stream);
    if (!this.paused) stream.start();
    this._update();
  }

  detach(consumer) {
    const stream = this.streams.get(consumer);
    this.streams.delete(consumer);
    stream?.stop();
    this._update();
  }

  connect() {
    this.paused = false;
    for (const stream of this.streams.values()) {
      if (stream.state === T.IDLE) stream.start();
      else if (stream.state === T.WAITING) stream.restart();
    }
    this._update();
  }

  disconnect(reason) {
    this.paused = true;
    for (const stream of this.streams.values()) stream.pause(reason);
    this._update();
  }

  close() {
    for (const stream of this.streams.values()) stream.stop();
    this.streams.clear();
  }

  /** Ask for `sub`'s frontier as soon as it covers `offsets` (read-your-writes), not at the
   *  gateway's progress rhythm: a wait posted under the id of its stream. */
  wait(sub, offsets) {
    this.streams.get(sub)?.wait(offsets);
  }

  canPublish() {
    return false;
  }

  _update() {
    if (!this.reportState) return;
    const states = [...this.streams.values()].map((s) => s.state);
    let state = 'disconnected';
    if (!this.paused && states.some((s) => s === T.CONNECTING || s === T.WAITING)) state = 'connecting';
    else if (!this.paused && states.length > 0 && states.every((s) => s === T.OPEN || s === T.CLOSED)
      && states.some((s) => s === T.OPEN)) state = 'connected';
    this.client._transportState(this, state);
  }
}
