/**
 * The one decoder of what the gateway sends, and encoder of what the client sends over
 * WebSocket: the JavaScript mirror of server/wire/frames.py. docs/PROTOCOL.md is normative, and
 * protocol/golden/ holds examples that this module's tests decode and encode byte for byte.
 *
 * A frame is `{kind, id, data, sub}`: its kind (`snapshot`, `delta`, `progress`, `reset`,
 * `end`, `log`, or `heartbeat`), its event id (snapshot and delta only, else null), its JSON
 * data, and over WebSocket the subscription id it belongs to. A snapshot is of one of three
 * shapes, as the subscription's query (section 5.1): a key's rows, a prefix's keys, or a
 * window's rows and their scores; `snapshotShape` says which.
 */

import { ProtocolError, requestError } from './errors.js';
import { latestOfEach } from './offsets.js';

export const FrameKind = Object.freeze({
  SNAPSHOT: 'snapshot',
  DELTA: 'delta',
  PROGRESS: 'progress',
  RESET: 'reset',
  END: 'end',
  LOG: 'log',
  GROUP: 'group',
  HEARTBEAT: 'heartbeat',
});

const FRAME_KINDS = new Set(['snapshot', 'delta', 'progress', 'reset', 'end', 'group']);
const MEMBER_KINDS = new Set(['snapshot', 'delta', 'reset']);

/**
 * Splits an event stream into events, following the HTML standard's parsing rules: lines end
 * with CRLF, LF or CR; `field: value` drops one space after the colon; a blank line dispatches.
 * Returns `{event, id, data}` per event (id null when the event had none) and
 * `{comment}` per comment line.
 */
export class SseParser {
  constructor() {
    this._buffer = '';
    this._resetEvent();
  }

  _resetEvent() {
    this._event = '';
    this._id = null;
    this._data = [];
  }

  /** Feed decoded text; returns what it completed, in order. */
  push(text) {
    const buffer = this._buffer + text;
    const out = [];
    let start = 0;
    for (let i = 0; i < buffer.length; i++) {
      const c = buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      if (c === 13 && i === buffer.length - 1) break; // maybe the first half of CRLF
      const line = buffer.slice(start, i);
      if (c === 13 && buffer.charCodeAt(i + 1) === 10) i++;
      start = i + 1;
      const item = this._line(line);
      if (item !== null) out.push(item);
    }
    this._buffer = buffer.slice(start);
    return out;
  }

  _line(line) {
    if (line === '') {
      const item = this._data.length === 0
        ? null
        : { event: this._event || 'message', id: this._id, data: this._data.join('\n') };
      this._resetEvent();
      return item;
    }
    if (line.charCodeAt(0) === 58 /* : */) return { comment: line.slice(1).replace(/^ /, '') };
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') this._event = value;
    else if (field === 'data') this._data.push(value);
    else if (field === 'id' && !value.includes('\0')) this._id = value;
    return null; // `retry` and unknown fields do not concern this client
  }
}

function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new ProtocolError(`${what} is not JSON`, { cause });
  }
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const isString = (v) => typeof v === 'string';

function check(ok, kind, what) {
  if (!ok) throw new ProtocolError(`a ${kind} frame must have ${what}`);
}

const isScore = (v) => typeof v === 'number' && Number.isFinite(v);

function checkOps(ops) {
  check(Array.isArray(ops), 'delta', 'an ops array');
  for (const op of ops) {
    check(isObject(op) && isString(op.row), 'delta', 'ops with a row id');
    check(op.op === 'delete' || (op.op === 'upsert' && 'value' in op), 'delta',
      "ops that are {op: 'upsert', row, value} or {op: 'delete', row}");
    check(op.score === undefined || isScore(op.score), 'delta', 'a number as the score of an op, if any');
  }
}

/** Which query a snapshot's data answers: `key`, `prefix` or `window` (a QueryShape). */
export function snapshotShape(data) {
  if (data.prefix !== undefined) return 'prefix';
  if (data.limit !== undefined) return 'window';
  return 'key';
}

function checkSnapshot(data) {
  const kind = FrameKind.SNAPSHOT;
  check(isObject(data.frontier), kind, 'a frontier');
  switch (snapshotShape(data)) {
    case 'prefix':
      check(isString(data.view) && isString(data.prefix), kind, 'a view and a prefix');
      check(isObject(data.keys) && Object.values(data.keys).every(isObject), kind, 'keys that map each key to its rows');
      break;
    case 'window':
      check(isString(data.view) && isString(data.key), kind, 'a view and a key');
      check(Number.isInteger(data.limit) && data.limit >= 1, kind, 'a limit of at least 1 row');
      check(isObject(data.rows) && isObject(data.scores), kind, 'rows and their scores');
      check(Object.keys(data.rows).every((row) => isScore(data.scores[row])), kind, 'a number as the score of every row');
      break;
    default:
      check(isString(data.view) && isString(data.key), kind, 'a view and a key');
      check(isObject(data.rows), kind, 'rows');
  }
  checkLag(kind, data);
}

function checkLag(kind, data) {
  const lag = data.lag_ms;
  check(lag === undefined || (Number.isInteger(lag) && lag >= 0), kind, 'a lag_ms that is a whole number of ms, if any');
}

/** A frame of `kind`, checked against the protocol. Unknown kinds pass, for newer gateways. */
export function frame(kind, id, data, sub = null) {
  check(isObject(data), kind, 'a data object');
  switch (kind) {
    case FrameKind.SNAPSHOT:
      check(isString(id), kind, 'an id');
      checkSnapshot(data);
      break;
    case FrameKind.DELTA:
      check(isString(id), kind, 'an id');
      check(isString(data.view) && isString(data.key), kind, 'a view and a key');
      checkOps(data.ops);
      break;
    case FrameKind.PROGRESS:
      check(isObject(data.frontier), kind, 'a frontier');
      checkLag(kind, data);
      break;
    case FrameKind.RESET:
    case FrameKind.END:
      check(isString(data.code) && isString(data.message), kind, 'a code and a message');
      break;
    case FrameKind.LOG:
      check(Number.isInteger(data.partition) && isString(data.id), kind, 'a partition and an id');
      check(isString(data.type) && isObject(data.payload), kind, 'a type and a payload');
      break;
    case FrameKind.GROUP:
      return groupFrame(id, data, sub);
    default:
      break;
  }
  return { kind, id: id ?? null, data, sub };
}

/**
 * A group's release (docs/PROTOCOL.md, section 5.3): its members' frames, each checked as the
 * same frame on its own is, and the frontier every member reflects once they are applied.
 */
function groupFrame(id, data, sub) {
  const kind = FrameKind.GROUP;
  check(Array.isArray(data.frames) && isObject(data.frontier), kind, 'a list of frames and a frontier');
  const members = data.frames.map((m) => {
    check(isObject(m) && MEMBER_KINDS.has(m.type), kind, 'snapshot, delta and reset frames only');
    check(isString(m.sub), kind, "each frame naming its member's sub");
    return frame(m.type, m.id, m.data, m.sub);
  });
  return { kind, id: id ?? null, data: { frames: members, frontier: data.frontier }, sub };
}

const HEARTBEAT = Object.freeze({ kind: FrameKind.HEARTBEAT, id: null, data: null, sub: null });

/** The frame an SSE event (or comment) from SseParser stands for. */
export function decodeSseEvent(event) {
  if (event.comment !== undefined) return HEARTBEAT; // the gateway's only comment
  return frame(event.event, event.id, parseJson(event.data, `the data of a ${event.event} event`));
}

function decodeOffset(o) {
  if (!isObject(o) || !Number.isInteger(o.partition) || !isString(o.id)) {
    throw new ProtocolError('an offset must be {partition, id, token}');
  }
  return { partition: o.partition, id: o.id, token: isString(o.token) ? o.token : `${o.partition}:${o.id}` };
}

/** The offsets of a publish answer (`POST /v1/events` body, or a WebSocket `published`). */
export function decodeOffsets(offsets) {
  if (!Array.isArray(offsets)) throw new ProtocolError('a publish answer must carry an offsets array');
  return offsets.map(decodeOffset);
}

/**
 * One WebSocket message from the gateway, as one of
 * `{type: 'frame', frame}`, `{type: 'heartbeat'}`, `{type: 'authenticated', subject, expiresAt}`,
 * `{type: 'published', req, offsets}`, `{type: 'unsubscribed', sub}`,
 * `{type: 'error', sub, req, error}` (error: a RequestError), or `{type: 'unknown', message}`.
 */
export function decodeWsMessage(text) {
  const msg = parseJson(text, 'a WebSocket message');
  if (!isObject(msg) || !isString(msg.type)) throw new ProtocolError('a WebSocket message must be an object with a type');
  if (FRAME_KINDS.has(msg.type)) {
    if (!isString(msg.sub)) throw new ProtocolError(`a ${msg.type} message must name its sub`);
    return { type: 'frame', frame: frame(msg.type, msg.id, msg.data, msg.sub) };
  }
  switch (msg.type) {
    case 'heartbeat':
      return { type: 'heartbeat' };
    case 'authenticated':
      if (!isString(msg.subject) || typeof msg.expires_at !== 'number') {
        throw new ProtocolError('an authenticated message must carry subject and expires_at');
      }
      return { type: 'authenticated', subject: msg.subject, expiresAt: msg.expires_at };
    case 'published':
      if (!isString(msg.req)) throw new ProtocolError('a published message must carry its req');
      return { type: 'published', req: msg.req, offsets: decodeOffsets(msg.offsets) };
    case 'unsubscribed':
      return { type: 'unsubscribed', sub: msg.sub ?? null };
    case 'error':
      if (!isString(msg.code)) throw new ProtocolError('an error message must carry a code');
      return { type: 'error', sub: msg.sub ?? null, req: msg.req ?? null, error: requestError(msg) };
    default:
      return { type: 'unknown', message: msg };
  }
}

/**
 * A score as the gateway's JSON writes a float (Python's shortest repr: `9.0`, `0.0001`,
 * `1e-05`, `1.5e+16`), so that a score it sent goes back as the same float, not as an integer.
 */
export function floatText(x) {
  if (!isScore(x)) throw new TypeError(`a score must be a finite number, not ${String(x)}`);
  if (Object.is(x, -0)) return '-0.0';
  const sign = x < 0 ? '-' : '';
  // toExponential() without digits gives the shortest digits that read back as x, as repr does.
  const [mantissa, exponent] = Math.abs(x).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const e = Number(exponent);
  if (e >= 16 || e < -4) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  }
  if (e < 0) return `${sign}0.${'0'.repeat(-e - 1)}${digits}`;
  return `${sign}${digits.slice(0, e + 1).padEnd(e + 1, '0')}.${digits.slice(e + 1) || '0'}`;
}

/** A subscribe message for `query` (a key, a prefix with or without a filter, or a window: see query.js). */
function subscribeMessage(sub, query, lastEventId) {
  const fields = [['type', 'subscribe'], ['sub', sub], ['view', query.view]];
  if (isString(query.key)) fields.push(['key', query.key]);
  if (isString(query.prefix)) fields.push(['prefix', query.prefix]);
  // As the application wrote it: the gateway's digest of a filter does not depend on member order.
  if (query.filter != null) fields.push(['filter', query.filter]);
  if (query.limit != null) fields.push(['limit', query.limit]);
  const parts = fields.map(([name, value]) => `${JSON.stringify(name)}:${JSON.stringify(value)}`);
  if (query.after != null) {
    parts.push(`"after":{"score":${floatText(query.after.score)},"row":${JSON.stringify(query.after.row)}}`);
  }
  if (lastEventId !== null) parts.push(`"last_event_id":${JSON.stringify(lastEventId)}`);
  return `{${parts.join(',')}}`;
}

/** The client's WebSocket messages, with their fields in the order of the golden files. */
export const encode = Object.freeze({
  auth: (token) => JSON.stringify({ type: 'auth', token }),
  /** `query`: `{view, key}`, `{view, prefix, filter?}` or `{view, key, limit, after?}`. */
  subscribe: (sub, query, lastEventId = null) => subscribeMessage(sub, query, lastEventId),
  /** A group of key subscriptions: `members` as `{sub, view, key, lastEventId?}`. */
  subscribeGroup: (sub, members) => JSON.stringify({
    type: 'subscribe',
    sub,
    members: members.map((m) => (m.lastEventId == null
      ? { sub: m.sub, view: m.view, key: m.key }
      : { sub: m.sub, view: m.view, key: m.key, last_event_id: m.lastEventId })),
  }),
  unsubscribe: (sub) => JSON.stringify({ type: 'unsubscribe', sub }),
  publish: (req, events, idempotencyKey = null) => JSON.stringify(
    idempotencyKey === null
      ? { type: 'publish', req, events }
      : { type: 'publish', req, events, idempotency_key: idempotencyKey },
  ),
  // Only the latest offset of each partition: a frontier that covers it covers the others.
  wait: (sub, offsets) => JSON.stringify({ type: 'wait', sub, offsets: latestOfEach(offsets).map(({ partition, id }) => ({ partition, id })) }),
});
