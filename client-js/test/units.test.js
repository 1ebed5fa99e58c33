// Offline tests of the pieces: exported names, backoff, offsets, and a subscription's state
// machine driven by frames handed to it directly (no transport).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import * as api from '../src/index.js';
import { Backoff, fullJitter } from '../src/backoff.js';
import { frame } from '../src/frames.js';
import { compareEntryIds, covers, mergeFrontier, parseOffset } from '../src/offsets.js';
import { parseQuery } from '../src/query.js';
import { Subscription } from '../src/subscription.js';

test('the public names are exactly these', () => {
  assert.deepEqual(Object.keys(api).sort(), [
    'Client', 'ClientState', 'ConnectionError', 'Group', 'LiveviewsError', 'LogTail', 'PrefixSubscription',
    'ProtocolError', 'RequestError', 'StateError', 'Subscription', 'SubscriptionState', 'WindowSubscription',
    'compareEntryIds', 'covers', 'createClient', 'fullJitter', 'parseOffset',
  ]);
  assert.deepEqual(Object.values(api.SubscriptionState), ['connecting', 'live', 'reconnecting', 'reset', 'closed', 'error']);
  assert.deepEqual(Object.values(api.ClientState), ['disconnected', 'connecting', 'connected', 'closed']);
});

test('backoff is full jitter: anywhere from 0 to a cap that doubles up to the maximum', () => {
  assert.equal(fullJitter(0, 100, 1000, () => 0.999), 99);
  assert.equal(fullJitter(3, 100, 1000, () => 0.999), 799);
  assert.equal(fullJitter(10, 100, 1000, () => 0.999), 999);
  assert.equal(fullJitter(10, 100, 1000, () => 0), 0);
  const b = new Backoff({ minDelay: 100, maxDelay: 1000 });
  const delays = Array.from({ length: 50 }, () => b.next());
  assert.ok(delays.every((d) => d >= 0 && d < 1000));
  assert.equal(b.attempts, 50);
  b.reset();
  assert.ok(b.next() < 100);
});

test('positions compare as numbers, and offsets parse from what publish answers', () => {
  assert.equal(compareEntryIds('9-0', '10-0'), -1);
  assert.equal(compareEntryIds('10-2', '10-10'), -1);
  assert.equal(compareEntryIds('1732170000000-5', '1732170000000-5'), 0);
  assert.equal(compareEntryIds('99999999999999999999-0', '99999999999999999998-9'), 1);
  assert.deepEqual(parseOffset('2:10-0'), { partition: 2, id: '10-0' });
  assert.deepEqual(parseOffset({ partition: 2, id: '10-0', token: '2:10-0' }), { partition: 2, id: '10-0' });
  assert.deepEqual(parseOffset({ token: '3:1-1' }), { partition: 3, id: '1-1' });
  // A Kafka log's offsets: one number, ordered as that number followed by -0.
  assert.deepEqual(parseOffset('2:41'), { partition: 2, id: '41' });
  assert.equal(compareEntryIds('9', '10'), -1);
  assert.equal(compareEntryIds('10', '10-0'), 0);
  assert.ok(covers({ 0: '42' }, [{ partition: 0, id: '41' }]) && !covers({ 0: '41' }, [{ partition: 0, id: '42' }]));
  for (const bad of ['2', ':1-0', 'x:1-0', '2:1-', '2:-1', '2:1-2-3', { partition: '2', id: '1-0' }, null]) {
    assert.throws(() => parseOffset(bad), TypeError, JSON.stringify(bad));
  }
  assert.ok(covers({ 0: '10-0', 1: '5-0' }, [{ partition: 0, id: '9-5' }, { partition: 1, id: '5-0' }]));
  assert.ok(!covers({ 0: '10-0' }, [{ partition: 1, id: '1-0' }]));
  assert.ok(!covers({ 0: '9-0' }, [{ partition: 0, id: '10-0' }]));
  assert.deepEqual(mergeFrontier({ 0: '10-0', 1: '3-0' }, { 0: '9-0', 1: '4-0', 2: '1-0' }), { 0: '10-0', 1: '4-0', 2: '1-0' });
});

/** A subscription with a stand-in client: the transport is replaced by direct calls. */
function standalone(handlers) {
  const client = {
    detached: [],
    waits: [],
    _detach(sub) { this.detached.push(sub); },
    _wait(sub, offsets) { this.waits.push(offsets); },
  };
  return new Subscription(client, parseQuery({ view: 'profiles', key: 'alice' }), handlers);
}

const snapshot = (rows, frontier = {}, id = 'e.1-0') => frame('snapshot', id, { view: 'profiles', key: 'alice', rows, frontier });
const delta = (ops, id) => frame('delta', id, { view: 'profiles', key: 'alice', ops });
const progress = (frontier) => frame('progress', null, { frontier });
const reset = (code) => frame('reset', null, { code, message: 'cannot resume' });

test('a subscription goes connecting -> live -> reconnecting -> reset -> live, saying why', () => {
  const events = [];
  const sub = standalone({
    snapshot: (e) => events.push(['snapshot', e.wasRecovering, e.reason, Object.fromEntries(e.rows)]),
    change: (e) => events.push(['change', e.eventId, Object.fromEntries(e.rows)]),
    state: (e) => events.push(['state', e.oldState, e.newState]),
  });
  assert.equal(sub.state, 'connecting');
  sub._open(); // the stream is open, but nothing is live before the snapshot
  assert.equal(sub.state, 'connecting');
  sub._frame(snapshot({ profile: { name: 'A' } }));
  const before = sub.rows;
  sub._frame(delta([{ op: 'upsert', row: 'profile', value: { name: 'B' } }, { op: 'upsert', row: 'x', value: 1 }], 'e.2-0'));
  assert.notEqual(sub.rows, before, 'a change makes a new Map');
  assert.deepEqual(Object.fromEntries(before), { profile: { name: 'A' } });
  sub._frame(delta([{ op: 'delete', row: 'x' }], 'e.3-0'));
  assert.equal(sub.lastEventId, 'e.3-0');
  sub._lost({ code: 'connection_lost', message: 'gone' });
  sub._open(); // resumed: live again, rows kept
  sub._lost({ code: 'connection_lost', message: 'gone' });
  sub._frame(reset('history_trimmed'));
  sub._frame(snapshot({ profile: { name: 'C' } }, {}, 'e.9-0'));
  assert.deepEqual(events, [
    ['snapshot', false, null, { profile: { name: 'A' } }],
    ['state', 'connecting', 'live'],
    ['change', 'e.2-0', { profile: { name: 'B' }, x: 1 }],
    ['change', 'e.3-0', { profile: { name: 'B' } }],
    ['state', 'live', 'reconnecting'],
    ['state', 'reconnecting', 'live'],
    ['state', 'live', 'reconnecting'],
    ['state', 'reconnecting', 'reset'],
    ['snapshot', true, 'history_trimmed', { profile: { name: 'C' } }],
    ['state', 'reset', 'live'],
  ]);
  sub.unsubscribe();
  sub.unsubscribe();
  assert.equal(sub.state, 'closed');
  sub._frame(delta([{ op: 'upsert', row: 'late', value: 1 }], 'e.10-0'));
  assert.ok(!sub.rows.has('late'), 'a frame after unsubscribe is dropped');
});

test('reflects waits for the frontier, numerically, and fails when the subscription does', async () => {
  const sub = standalone();
  sub._frame(snapshot({}, { 0: '9-0' }));
  await sub.reflects({ partition: 0, id: '8-0' }); // already covered
  const order = [];
  const waiting = sub.reflects([{ partition: 0, id: '10-0' }, '1:5-0']).then(() => order.push('reflects'));
  // The transport is asked for the covering frontier early, once, and only for what is not covered.
  assert.deepEqual(sub.client.waits, [[{ partition: 0, id: '10-0' }, { partition: 1, id: '5-0' }]]);
  assert.deepEqual(sub._waitingFor(), sub.client.waits);
  sub.on('change', () => order.push('change'));
  sub._frame(progress({ 0: '10-0' }));
  sub._frame(delta([{ op: 'upsert', row: 'r', value: 1 }], 'e.2-0'));
  sub._frame(progress({ 0: '10-0', 1: '5-0' }));
  await waiting;
  assert.deepEqual(order, ['change', 'reflects']);
  assert.deepEqual(sub._waitingFor(), []);

  const aborted = new AbortController();
  const pending = sub.reflects('0:99-0', { signal: aborted.signal });
  aborted.abort(new Error('gave up'));
  await assert.rejects(pending, /gave up/);
  const failing = sub.reflects('0:99-0');
  sub._fail(Object.assign(new Error('forbidden'), { code: 'forbidden' }));
  await assert.rejects(failing, /forbidden/);
  assert.equal(sub.state, 'error');
});

test('lagMs follows the latest snapshot or progress frame, and is null when it has none', () => {
  const seen = [];
  const sub = standalone({
    snapshot: (e) => seen.push(['snapshot', e.lagMs]),
    progress: (e) => seen.push(['progress', e.lagMs, e.frontier[0]]),
  });
  assert.equal(sub.lagMs, null, 'nothing said yet');
  sub._frame(frame('snapshot', 'e.1-0', { view: 'profiles', key: 'alice', rows: {}, frontier: { 0: '5-0' }, lag_ms: 1200 }));
  assert.equal(sub.lagMs, 1200);
  sub._frame(frame('progress', null, { frontier: { 0: '9-0' }, lag_ms: 0 }));
  assert.equal(sub.lagMs, 0, 'caught up');
  sub._frame(progress({ 0: '10-0' })); // a gateway that does not say
  assert.equal(sub.lagMs, null);
  assert.deepEqual(seen, [['snapshot', 1200], ['progress', 0, '9-0'], ['progress', null, '10-0']]);
  for (const bad of [-1, 1.5, '3', null]) {
    assert.throws(() => frame('progress', null, { frontier: {}, lag_ms: bad }), /lag_ms/, String(bad));
  }
});

test('for await iterates snapshots and deltas until the subscription closes', async () => {
  const sub = standalone();
  const seen = [];
  const loop = (async () => {
    for await (const change of sub) seen.push([change.kind, change.eventId]);
  })();
  sub._frame(snapshot({}));
  sub._frame(delta([{ op: 'upsert', row: 'r', value: 1 }], 'e.2-0'));
  await new Promise((resolve) => setImmediate(resolve));
  sub._frame(delta([{ op: 'delete', row: 'r' }], 'e.3-0'));
  sub.unsubscribe();
  await loop;
  assert.deepEqual(seen, [['snapshot', 'e.1-0'], ['delta', 'e.2-0'], ['delta', 'e.3-0']]);

  const failed = standalone();
  const failing = (async () => {
    for await (const _ of failed) { /* nothing comes */ }
  })();
  failed._fail(Object.assign(new Error('refused'), { code: 'forbidden' }));
  await assert.rejects(failing, /refused/);
});

test('a throwing handler does not stop the others or the subscription', () => {
  const sub = standalone();
  const reported = [];
  globalThis.reportError = (error) => reported.push(error.message);
  try {
    let second = 0;
    sub.on('snapshot', () => { throw new Error('bad handler'); });
    sub.on('snapshot', () => { second += 1; });
    sub._frame(snapshot({ a: 1 }));
    assert.equal(second, 1);
    assert.equal(sub.state, 'live');
    assert.deepEqual(reported, ['bad handler']);
  } finally {
    delete globalThis.reportError;
  }
});

test('unknown handler names are refused up front', () => {
  assert.throws(() => standalone({ snapshots: () => {} }), /unknown subscription event 'snapshots'/);
  assert.throws(() => api.createClient({ url: 'ftp://x' }), /http\(s\) url/);
  assert.throws(() => api.createClient({ url: 'http://x', transport: 'carrier-pigeon' }), /transport must be/);
});
