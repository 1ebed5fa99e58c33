/**
 * SSE through the platform's EventSource, for an application that gives one
 * (`createClient({EventSource})`): the token goes in the `access_token` query parameter (or
 * the `lv_token` cookie when there is none) and the resume position in `last_event_id`.
 *
 * The stream does its own reconnecting, as the fetch one does, so the EventSource is closed at
 * its first error instead of retrying by itself. EventSource hides HTTP statuses and comments,
 * so: a failure before the stream opened is followed by one plain request of the same URL to
 * tell a refusal (which fails the consumer with the gateway's code) from an outage; and idle
 * streams are not timed out, since heartbeats are invisible here.
 */

import { ConnectionError, ProtocolError, errorFromResponse } from './errors.js';
import { FrameKind, decodeSseEvent } from './frames.js';
import { EventStream, StreamState } from './sse.js';

const T = StreamState;
const KINDS = [FrameKind.SNAPSHOT, FrameKind.DELTA, FrameKind.PROGRESS, FrameKind.RESET, FrameKind.END, FrameKind.LOG];
const WITH_ID = new Set([FrameKind.SNAPSHOT, FrameKind.DELTA]);

export class EventSourceStream extends EventStream {
  constructor(client, consumer, onState) {
    super(client, consumer, onState);
    this._source = null;
  }

  _teardown() {
    super._teardown();
    this._source?.close();
    this._source = null;
  }

  _sourceUrl(token) {
    const url = this._url();
    if (token !== null) url.searchParams.set('access_token', token);
    if (this.consumer.lastEventId !== null) url.searchParams.set('last_event_id', this.consumer.lastEventId);
    return url.toString();
  }

  async _connect() {
    this._teardown();
    const gen = this._gen;
    this._setState(T.CONNECTING);
    const got = await this.client._connectToken(this, gen);
    if (got === null) return;
    const { token } = got;
    const url = this._sourceUrl(token);
    const source = new this.client._EventSource(url, { withCredentials: token === null });
    this._source = source;
    this._watch(gen, this.client.options.connectTimeout);
    source.onopen = () => {
      if (gen !== this._gen) return;
      clearTimeout(this._watchdog);
      this._opened();
    };
    for (const kind of KINDS) {
      source.addEventListener(kind, (event) => {
        if (gen === this._gen) this._event(kind, event);
      });
    }
    source.onerror = () => {
      if (gen !== this._gen) return;
      if (this.state === T.OPEN) this._retry(new ConnectionError('the event stream broke'));
      else this._probe(url, gen);
    };
  }

  _event(kind, event) {
    let frame;
    try {
      // EventSource keeps the last id for events without one; only snapshot and delta have one.
      frame = decodeSseEvent({ event: kind, id: WITH_ID.has(kind) ? event.lastEventId : null, data: event.data });
    } catch (error) {
      this._fail(error instanceof ProtocolError ? error : new ProtocolError('a malformed event', { cause: error }));
      return;
    }
    this._backoff.reset();
    if (frame.kind === FrameKind.END) this._ended(frame.data);
    else this._deliver(frame);
  }

  /** Why did the stream not open? Ask the same URL once, without EventSource. */
  async _probe(url, gen) {
    this._source?.close();
    let error = new ConnectionError('could not open the event stream');
    try {
      const response = await this.client._fetch(url, { headers: { Accept: 'text/event-stream' }, cache: 'no-store' });
      if (response.ok) response.body?.cancel().catch(() => {});
      else error = await errorFromResponse(response);
    } catch {
      // unreachable: an outage, retried below
    }
    if (gen !== this._gen) return;
    if (error instanceof ConnectionError) this._retry(error);
    else this._refused(error);
  }
}
