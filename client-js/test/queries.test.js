// Offline tests of query-shaped subscriptions (docs/PROTOCOL.md, section 5.1): the checks of a
// query, the request each transport makes of it, and the state machines of a prefix and of a
// window driven by frames handed to them directly (no transport).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { createClient } from '../src/index.js';
import { ProtocolError } from '../src/errors.js';
import { frame } from '../src/frames.js';
import { PrefixSubscription } from '../src/prefix.js';
import { parseQuery } from '../src/query.js';
import { Subscription } from '../src/subscription.js';
import { WindowSubscription, compareRowIds } from '../src/window.js';

/** A subscription with a stand-in client: the transport is replaced by direct calls. */
function standalone(Kind, query, handlers) {
  const client = {
    detached: [],
    waits: [],
    _detach(sub) { this.detached.push(sub); },
    _wait(sub, offsets) { this.waits.push(offsets); },
  };
  return new Kind(client, parseQuery(query), handlers);
}

const progress = (frontier) => frame('progress', null, { frontier });
const reset = (code) => frame('reset', null, { code, message: 'cannot resume' });
const plain = (keys) => Object.fromEntries([...keys].map(([key, rows]) => [key, Object.fromEntries(rows)]));

test('a query is checked up front, with a sentence saying what to change', () => {
  assert.deepEqual(parseQuery({ view: 'tasks' }), { shape: 'prefix', view: 'tasks', prefix: '' });
  assert.deepEqual(parseQuery({ view: 'tasks', prefix: 'b/' }), { shape: 'prefix', view: 'tasks', prefix: 'b/' });
  assert.deepEqual(parseQuery({ view: 'p', key: 'k' }), { shape: 'key', view: 'p', key: 'k' });
  assert.deepEqual(parseQuery({ view: 's', key: 'g', limit: 3, after: null }), { shape: 'window', view: 's', key: 'g', limit: 3, after: null });
  assert.deepEqual(parseQuery({ view: 's', key: 'g', limit: 3, after: { score: 9, row: 'bob' } }).after, { score: 9, row: 'bob' });
  const refused = [
    [null, /needs \(view, key\) or a query/],
    [{ view: '' }, /view must be a non-empty string/],
    [{ view: 'v', keys: 'k' }, /no field 'keys'/],
    [{ view: 'v', key: 'k', prefix: 'p' }, /a key or a prefix, not both/],
    [{ view: 'v', prefix: 'p', limit: 2 }, /of one key, not of a prefix/],
    [{ view: 'v', limit: 2 }, /give the key/],
    [{ view: 'v', prefix: 3 }, /prefix must be a string/],
    [{ view: 'v', key: 'k', after: { score: 1, row: 'r' } }, /give the page size \(limit\) too/],
    [{ view: 'v', key: 'k', limit: 0 }, /at least 1/],
    [{ view: 'v', key: 'k', limit: 2.5 }, /whole number/],
    [{ view: 'v', key: 'k', limit: 2, after: { score: NaN, row: 'r' } }, /after must be \{score, row\}/],
    [{ view: 'v', key: 'k', limit: 2, after: { score: 1 } }, /after must be \{score, row\}/],
  ];
  for (const [query, message] of refused) assert.throws(() => parseQuery(query), message, JSON.stringify(query));
});

test('client.subscribe takes (view, key) as before, or a query of any shape', () => {
  const client = createClient({ url: 'http://127.0.0.1:1', transport: 'sse', fetch: () => new Promise(() => {}), watchOnline: false });
  try {
    const key = client.subscribe('profiles', 'alice', { snapshot: () => {} });
    assert.equal(key.constructor, Subscription);
    assert.equal(key.key, 'alice');
    assert.equal(client.subscribe({ view: 'profiles', key: 'alice' }).constructor, Subscription);
    const prefix = client.subscribe({ view: 'tasks', prefix: 'board1/' }, { change: () => {} });
    assert.ok(prefix instanceof PrefixSubscription);
    assert.equal(prefix.prefix, 'board1/');
    const window = client.subscribe({ view: 'scores', key: 'game1', limit: 10 });
    assert.ok(window instanceof WindowSubscription);
    assert.equal(client.subscriptions.size, 4);
    assert.throws(() => client.subscribe('profiles', 42), /both must be non-empty strings/);
    assert.throws(() => client.subscribe({ view: 'v', key: 'k' }, {}, {}), /takes the query and the handlers only/);
    assert.throws(() => client.subscribe({ view: 'v' }, { changes: () => {} }), /unknown subscription event 'changes'/);
  } finally {
    client.close();
  }
});

test('each shape asks the gateway for its query: the SSE path and parameters', () => {
  const request = (query) => {
    const sub = standalone(query.prefix !== undefined || query.key === undefined ? PrefixSubscription : query.limit ? WindowSubscription : Subscription, query);
    return [sub._path(), sub._query()];
  };
  assert.deepEqual(request({ view: 'profiles', key: 'a/b' }), ['/v1/views/profiles/a%2Fb/live', {}]);
  assert.deepEqual(request({ view: 'tasks' }), ['/v1/live', { view: 'tasks' }]);
  assert.deepEqual(request({ view: 'tasks', prefix: 'board 1/' }), ['/v1/live', { view: 'tasks', prefix: 'board 1/' }]);
  assert.deepEqual(request({ view: 'scores', key: 'g', limit: 2 }), ['/v1/views/scores/g/live', { limit: 2 }]);
  assert.deepEqual(
    request({ view: 'scores', key: 'g', limit: 2, after: { score: 9, row: 'bob' } }),
    ['/v1/views/scores/g/live', { limit: 2, after_score: '9.0', after_row: 'bob' }],
  );
});

// ---- a prefix ------------------------------------------------------------------------------

const prefixSnapshot = (keys, id = 'e.1-0~0', frontier = {}) => frame('snapshot', id, { view: 'tasks', prefix: 'b/', keys, frontier });
const keyDelta = (key, ops, id) => frame('delta', id, { view: 'tasks', key, ops });

test('a prefix keeps each key with its rows: created by its first row, dropped with its last', () => {
  const events = [];
  const sub = standalone(PrefixSubscription, { view: 'tasks', prefix: 'b/' }, {
    snapshot: (e) => events.push(['snapshot', e.wasRecovering, plain(e.keys)]),
    change: (e) => events.push(['change', e.key, Object.fromEntries(e.rows), e.eventId]),
  });
  assert.deepEqual(sub.keys, new Map());
  sub._frame(prefixSnapshot({ 'b/t1': { task: { title: 'one' } }, 'b/t2': { task: { title: 'two' } } }));
  assert.equal(sub.state, 'live');
  const before = sub.keys;
  const t2 = sub.keys.get('b/t2');
  sub._frame(keyDelta('b/t3', [{ op: 'upsert', row: 'task', value: { title: 'three' } }], 'e.2-0~0'));
  assert.notEqual(sub.keys, before, 'a change makes a new Map of keys');
  assert.equal(sub.keys.get('b/t2'), t2, 'a key the delta is not of keeps its rows Map');
  sub._frame(keyDelta('b/t1', [{ op: 'upsert', row: 'note', value: 'n' }, { op: 'delete', row: 'task' }], 'e.3-0~0'));
  sub._frame(keyDelta('b/t2', [{ op: 'delete', row: 'task' }], 'e.3-0~1'));
  sub._frame(keyDelta('b/t9', [{ op: 'delete', row: 'task' }], 'e.3-0~2')); // a key it never held
  assert.deepEqual(plain(sub.keys), { 'b/t1': { note: 'n' }, 'b/t3': { task: { title: 'three' } } });
  assert.deepEqual(plain(before), { 'b/t1': { task: { title: 'one' } }, 'b/t2': { task: { title: 'two' } } }, 'earlier Maps are never changed');
  assert.equal(sub.lastEventId, 'e.3-0~2');

  sub._lost({ code: 'connection_lost', message: 'gone' });
  sub._frame(reset('history_trimmed'));
  sub._frame(prefixSnapshot({ 'b/t4': { task: { title: 'four' } } }, 'e.9-0~0'));
  assert.deepEqual(plain(sub.keys), { 'b/t4': { task: { title: 'four' } } }, 'the snapshot after a reset replaces every key');
  assert.deepEqual(events, [
    ['snapshot', false, { 'b/t1': { task: { title: 'one' } }, 'b/t2': { task: { title: 'two' } } }],
    ['change', 'b/t3', { task: { title: 'three' } }, 'e.2-0~0'],
    ['change', 'b/t1', { note: 'n' }, 'e.3-0~0'],
    ['change', 'b/t2', {}, 'e.3-0~1'],
    ['change', 'b/t9', {}, 'e.3-0~2'],
    ['snapshot', true, { 'b/t4': { task: { title: 'four' } } }],
  ]);
  assert.equal(sub.state, 'live');
});

test('a prefix subscription waits for its frontier like a key subscription', async () => {
  const sub = standalone(PrefixSubscription, { view: 'tasks' });
  sub._frame(prefixSnapshot({}, 'e.1-0~0', { 0: '5-0' }));
  await sub.reflects('0:5-0');
  const waiting = sub.reflects('0:7-0');
  assert.deepEqual(sub.client.waits, [[{ partition: 0, id: '7-0' }]]);
  sub._frame(progress({ 0: '7-0' }));
  await waiting;
});

test('a frame that does not fit the query fails the subscription with a protocol error', () => {
  const outside = standalone(PrefixSubscription, { view: 'tasks', prefix: 'b/' });
  outside._frame(prefixSnapshot({}));
  outside._frame(keyDelta('c/t1', [{ op: 'upsert', row: 'task', value: 1 }], 'e.2-0~0'));
  assert.equal(outside.state, 'error');
  assert.ok(outside.error instanceof ProtocolError);
  assert.match(outside.error.message, /prefix 'b\/' got a delta of the key 'c\/t1'/);
  assert.deepEqual(outside.client.detached, [outside], 'it leaves its transport');

  const wrongShape = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 2 });
  wrongShape._frame(frame('snapshot', 'e.1-0', { view: 'scores', key: 'g', rows: {}, frontier: {} }));
  assert.match(wrongShape.error.message, /a subscription to a window got the snapshot of a key/);

  const noScore = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 2 });
  noScore._frame(frame('snapshot', 'e.1-0', { view: 'scores', key: 'g', limit: 2, rows: {}, scores: {}, frontier: {} }));
  noScore._frame(frame('delta', 'e.2-0', { view: 'scores', key: 'g', ops: [{ op: 'upsert', row: 'a', value: 1 }] }));
  assert.match(noScore.error.message, /must carry the score of its row \('a'\)/);
});

// ---- a window ------------------------------------------------------------------------------

const windowSnapshot = (rows, scores, { limit = 3, id = 'e.1-0.x' } = {}) => frame('snapshot', id, { view: 'scores', key: 'g', limit, rows, scores, frontier: {} });
const windowDelta = (ops, id) => frame('delta', id, { view: 'scores', key: 'g', ops });
const order = (sub) => sub.ranked.map(({ row, score }) => `${row}:${score}`);

test('row ids compare in code point order (UTF-8 byte order), not UTF-16 order', () => {
  const ids = ['b', 'a', '\u{ff5e}', '\u{1f600}', 'ab', '', '\u{e000}', '\u{10000}', 'é'];
  const sorted = [...ids].sort(compareRowIds);
  const bytes = [...ids].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
  assert.deepEqual(sorted, bytes);
  assert.deepEqual(sorted, ['', 'a', 'ab', 'b', 'é', '\u{e000}', '\u{ff5e}', '\u{10000}', '\u{1f600}']);
  assert.ok('\u{1f600}' < '\u{ff5e}', "JavaScript's own order differs, which is why");
});

test('a window keeps its rows by score descending, ties by row id descending', () => {
  const events = [];
  const sub = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 3 }, {
    snapshot: (e) => events.push(['snapshot', e.ranked.map((r) => r.row)]),
    change: (e) => events.push(['change', e.ranked.map((r) => r.row), Object.fromEntries(e.rows)]),
  });
  assert.equal(sub.nextPage(), null, 'no snapshot yet');
  sub._frame(windowSnapshot({ alice: { n: 'A' }, bob: { n: 'B' }, '\u{1f600}': { n: 'E' } }, { alice: 12, bob: 9, '\u{1f600}': 9 }));
  assert.deepEqual(order(sub), ['alice:12', '\u{1f600}:9', 'bob:9'], 'the tie goes to the higher code point');
  assert.deepEqual(sub.ranked[0], { row: 'alice', score: 12, value: { n: 'A' } });
  assert.deepEqual(sub.nextPage(), { score: 9, row: 'bob' });

  // carol enters with 10 and pushes bob out (golden delta-window); alice drops to 1.
  const before = sub.ranked;
  sub._frame(windowDelta([{ op: 'upsert', row: 'carol', value: { n: 'C' }, score: 10 }, { op: 'delete', row: 'bob' }], 'e.2-0.y'));
  sub._frame(windowDelta([{ op: 'upsert', row: 'alice', value: { n: 'A2' }, score: 1 }], 'e.3-0.z'));
  assert.deepEqual(order(sub), ['carol:10', '\u{1f600}:9', 'alice:1']);
  assert.deepEqual(before.map((r) => r.row), ['alice', '\u{1f600}', 'bob'], 'an earlier order is never changed');
  assert.equal(sub.scores.get('alice'), 1);
  assert.equal(sub.rows.get('alice').n, 'A2');
  assert.deepEqual(sub.nextPage(), { score: 1, row: 'alice' });

  // A resumed window may be told to delete a row it does not hold: nothing changes.
  const rows = sub.rows;
  sub._frame(windowDelta([{ op: 'delete', row: 'dave' }], 'e.4-0.z'));
  assert.deepEqual(Object.fromEntries(sub.rows), Object.fromEntries(rows));
  assert.equal(sub.lastEventId, 'e.4-0.z');
  sub._frame(windowDelta([{ op: 'delete', row: 'alice' }], 'e.5-0.'));
  assert.equal(sub.nextPage(), null, 'a window that is not full has no next page');
  assert.deepEqual(events.map((e) => e.slice(0, 2)), [
    ['snapshot', ['alice', '\u{1f600}', 'bob']],
    ['change', ['alice', 'carol', '\u{1f600}']],
    ['change', ['carol', '\u{1f600}', 'alice']],
    ['change', ['carol', '\u{1f600}', 'alice']],
    ['change', ['carol', '\u{1f600}']],
  ]);
});

test('a window stays in order through many random changes', () => {
  let seed = 7;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const ids = ['a', 'b', 'é', '\u{ff5e}', '\u{1f600}', 'ab', 'z', 'y', 'x', 'w'];
  const sub = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 10 });
  sub._frame(windowSnapshot({}, {}, { limit: 10 }));
  for (let i = 0; i < 500; i++) {
    const ops = Array.from({ length: 1 + Math.floor(random() * 3) }, () => {
      const row = ids[Math.floor(random() * ids.length)];
      return random() < 0.3 ? { op: 'delete', row } : { op: 'upsert', row, value: i, score: Math.floor(random() * 4) };
    });
    sub._frame(windowDelta(ops, `e.${i + 2}-0.x`));
    const expected = [...sub.rows.keys()].map((row) => ({ row, score: sub.scores.get(row) }))
      .sort((p, q) => q.score - p.score || Buffer.compare(Buffer.from(q.row), Buffer.from(p.row)));
    assert.deepEqual(sub.ranked.map(({ row, score }) => ({ row, score })), expected, `after change ${i}`);
    assert.ok(sub.ranked.every(({ row, value }) => sub.rows.get(row) === value));
  }
});

test('a window resets to its new snapshot, and its next page starts after its last row', () => {
  const states = [];
  const sub = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 2 }, { state: (e) => states.push(e.newState) });
  sub._frame(windowSnapshot({ a: 1, b: 2, c: 3 }, { a: 30, b: 20, c: 10 }, { limit: 2 }));
  sub._frame(reset('epoch_changed'));
  sub._frame(windowSnapshot({ x: 1 }, { x: 5 }, { limit: 2, id: 'f.1-0.' }));
  assert.deepEqual(order(sub), ['x:5']);
  assert.deepEqual([...sub.scores], [['x', 5]]);
  assert.deepEqual(states, ['live', 'reset', 'live']);

  const page = standalone(WindowSubscription, { view: 'scores', key: 'g', limit: 2, after: { score: 20, row: 'b' } });
  assert.deepEqual(page.after, { score: 20, row: 'b' });
  assert.deepEqual(page._query(), { limit: 2, after_score: '20.0', after_row: 'b' });
});
