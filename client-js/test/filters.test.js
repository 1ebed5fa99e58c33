// Offline tests of filtered prefix subscriptions (docs/PROTOCOL.md, section 5.2): the checks of a
// query's filter, what each transport sends of it (and sends again with the last event id on a
// resume), and what a filtered prefix keeps as rows move in and out, or as a resume deletes a
// row it never held. The gateway is scripted at the protocol edge (test-support/fakes.js).

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import { encode, frame } from '../src/frames.js';
import { PrefixSubscription } from '../src/prefix.js';
import { parseQuery } from '../src/query.js';
import { fakeGateway, scriptedWebSocket } from '../test-support/fakes.js';
import { closeClients, makeClient, waitFor } from '../test-support/helpers.js';

afterEach(closeClients);

const EPOCH = '5f3a9c0e12ab';
const DIGEST = '0123456789abcdef';
const MINE = { field: 'assignee', eq: 'ada' };
const plain = (keys) => Object.fromEntries([...keys].map(([key, rows]) => [key, Object.fromEntries(rows)]));
const task = (title, assignee) => ({ title, assignee });
const snapshotData = (keys) => ({ view: 'tasks', prefix: 'board1/', keys, frontier: { 0: '1-0' } });
const deltaData = (key, ops) => ({ view: 'tasks', key, ops });
const upsert = (row, value) => ({ op: 'upsert', row, value });
const remove = (row) => ({ op: 'delete', row });
const id = (pos) => `${EPOCH}.${pos}~0.${DIGEST}`;

const offline = (options) => makeClient({
  url: 'http://gateway.test', token: 't', watchOnline: false, heartbeatTimeout: 60_000, backoff: { minDelay: 5, maxDelay: 20 }, ...options,
});

// ---- the query ------------------------------------------------------------------------------

test('a filter goes with a prefix or the whole view, as a frozen copy of what was given', () => {
  const given = { and: [{ field: 'assignee', eq: 'ada' }, { not: { field: ['meta', 'done'], eq: true } }] };
  const query = parseQuery({ view: 'tasks', prefix: 'board1/', filter: given });
  assert.deepEqual(query, { shape: 'prefix', view: 'tasks', prefix: 'board1/', filter: given });
  assert.notEqual(query.filter, given, 'a copy: changing the application\'s object later changes nothing');
  given.and.push({ field: 'x', eq: 1 });
  assert.equal(query.filter.and.length, 2);
  assert.ok(Object.isFrozen(query.filter) && Object.isFrozen(query.filter.and[1].not.field));
  assert.deepEqual(parseQuery({ view: 'tasks', filter: MINE }), { shape: 'prefix', view: 'tasks', prefix: '', filter: MINE });
  assert.deepEqual(parseQuery({ view: 'tasks', prefix: 'b/', filter: null }), { shape: 'prefix', view: 'tasks', prefix: 'b/' }, 'null: no filter');
  // Its grammar is the gateway's to check (invalid_filter): any plain JSON object goes.
  assert.deepEqual(parseQuery({ view: 'tasks', filter: { field: 'x', eq: 1, ne: null } }).filter, { field: 'x', eq: 1, ne: null });
  assert.deepEqual(parseQuery({ view: 'tasks', filter: Object.assign(Object.create(null), MINE) }).filter, MINE);
});

test('a filter of one key or of a window, or one JSON cannot carry, is a TypeError saying what to change', () => {
  class Spec {}
  const circular = { field: 'a', in: [] };
  circular.in.push(circular);
  const refused = [
    [{ view: 'tasks', key: 'board1/t1', filter: MINE }, /not of one key or a window: subscribe to \{view, prefix, filter\}/],
    [{ view: 'scores', key: 'g', limit: 3, filter: MINE }, /not of one key or a window/],
    [{ view: 'tasks', key: 'k', prefix: 'b/', filter: MINE }, /a key or a prefix, not both/],
    [{ view: 'tasks', filter: 'assignee = ada' }, /a filter must be a plain object such as \{field: 'assignee', eq: 'ada'\}.*not "assignee = ada"/],
    [{ view: 'tasks', filter: [MINE] }, /a filter must be a plain object.*not a list/],
    [{ view: 'tasks', filter: new Map() }, /not a Map object/],
    [{ view: 'tasks', filter: new Spec() }, /not a Spec object/],
    [{ view: 'tasks', filter: { field: 'assignee', eq: undefined } }, /filter\.eq is undefined, which JSON does not carry/],
    [{ view: 'tasks', filter: { field: 'points', gt: NaN } }, /filter\.gt is NaN: a filter's numbers must be finite/],
    [{ view: 'tasks', filter: { or: [MINE, { field: 'due', lt: new Date(0) }] } }, /filter\.or\[1\]\.lt is a Date object/],
    [{ view: 'tasks', filter: { field: 'n', eq: 1n } }, /filter\.eq is a bigint/],
    [{ view: 'tasks', filter: { field: 'n', eq: () => 1 } }, /filter\.eq is a function/],
    [{ view: 'tasks', filter: circular }, /filter\.in\[0\] contains itself/],
  ];
  for (const [query, message] of refused) assert.throws(() => parseQuery(query), { name: 'TypeError', message }, String(message));
});

test('a filtered prefix asks the gateway for the filter: the WebSocket message and the SSE parameters', () => {
  const query = parseQuery({ view: 'tasks', prefix: 'board1/', filter: MINE });
  // The form of protocol/golden/client-subscribe-filter.json: the filter after the prefix.
  assert.equal(encode.subscribe('s3', query), '{"type":"subscribe","sub":"s3","view":"tasks","prefix":"board1/","filter":{"field":"assignee","eq":"ada"}}');
  assert.equal(
    encode.subscribe('s3', query, id('7-0')),
    `{"type":"subscribe","sub":"s3","view":"tasks","prefix":"board1/","filter":{"field":"assignee","eq":"ada"},"last_event_id":"${id('7-0')}"}`,
  );
  // Members in the order the application wrote them: the digest does not depend on it.
  const turned = parseQuery({ view: 'tasks', filter: { eq: 'ada', field: 'assignee' } });
  assert.equal(encode.subscribe('s4', turned), '{"type":"subscribe","sub":"s4","view":"tasks","prefix":"","filter":{"eq":"ada","field":"assignee"}}');

  const sub = new PrefixSubscription({ _detach() {}, _wait() {} }, query);
  assert.deepEqual(sub.filter, MINE);
  assert.deepEqual(sub._query(), { view: 'tasks', prefix: 'board1/', filter: '{"field":"assignee","eq":"ada"}' });
  const whole = new PrefixSubscription({ _detach() {}, _wait() {} }, turned);
  assert.deepEqual(whole._query(), { view: 'tasks', filter: '{"eq":"ada","field":"assignee"}' });
  assert.equal(new PrefixSubscription({ _detach() {}, _wait() {} }, parseQuery({ view: 'tasks' })).filter, null);
});

// ---- what a filtered prefix keeps -----------------------------------------------------------

test('rows move in and out of a filtered prefix; a delete of a row it never held changes nothing', () => {
  const sub = new PrefixSubscription({ _detach() {}, _wait() {} }, parseQuery({ view: 'tasks', prefix: 'board1/', filter: MINE }));
  const changes = [];
  sub.on('change', (e) => changes.push(e));
  sub._frame(frame('snapshot', id('1-0'), snapshotData({ 'board1/t1': { task: task('one', 'ada') } })));
  // t2 is assigned to ada: it moves in. t1 goes to ben: it moves out, as a delete.
  sub._frame(frame('delta', id('2-0'), deltaData('board1/t2', [upsert('task', task('two', 'ada'))])));
  sub._frame(frame('delta', id('3-0'), deltaData('board1/t1', [remove('task')])));
  assert.deepEqual(plain(sub.keys), { 'board1/t2': { task: task('two', 'ada') } });
  assert.deepEqual(changes.map((e) => [e.key, e.rows.size]), [['board1/t2', 1], ['board1/t1', 0]]);

  // After a resume the gateway may delete a row that matched neither then nor now.
  const keys = sub.keys;
  const t2 = sub.keys.get('board1/t2');
  sub._frame(frame('delta', id('4-0'), deltaData('board1/t9', [remove('task')])));
  sub._frame(frame('delta', id('5-0'), deltaData('board1/t2', [remove('note')])));
  assert.equal(sub.keys, keys, 'the same Map of keys: there is nothing to redraw');
  assert.equal(sub.keys.get('board1/t2'), t2, 'and the same rows of a key it holds');
  assert.equal(sub.lastEventId, id('5-0'), 'its id still covers its position');
  const [never, held] = changes.slice(2);
  assert.deepEqual([never.key, never.rows.size, never.keys === keys], ['board1/t9', 0, true]);
  assert.deepEqual([held.key, held.rows === t2, held.keys === keys], ['board1/t2', true, true]);
  assert.ok(!sub.keys.has('board1/t9'), 'no key made for a row never held');
  assert.equal(sub.state, 'live');
});

// ---- over each transport: the filter is sent, and sent again on a resume ---------------------

test('WebSocket: the subscribe carries the filter, and a resume sends it again with the last event id', async () => {
  const { WebSocket, sockets } = scriptedWebSocket((socket, msg) => {
    if (msg.type === 'auth') socket.deliver({ type: 'authenticated', subject: 'ada', expires_at: 4102444800 });
    if (msg.type !== 'subscribe') return;
    if (msg.last_event_id === undefined) {
      socket.deliver({ sub: msg.sub, type: 'snapshot', id: id('1-0'), data: snapshotData({ 'board1/t1': { task: task('one', 'ada') } }) });
      socket.deliver({ sub: msg.sub, type: 'delta', id: id('2-0'), data: deltaData('board1/t2', [upsert('task', task('two', 'ada'))]) });
      socket.deliver({ type: 'error', sub: msg.sub, code: 'slow_consumer', message: 'behind', last_event_id: id('2-0') });
    } else {
      // The resume: t1 moved out while the client was away, t8 never matched.
      socket.deliver({ sub: msg.sub, type: 'delta', id: id('3-0'), data: deltaData('board1/t1', [remove('task')]) });
      socket.deliver({ sub: msg.sub, type: 'delta', id: id('4-0'), data: deltaData('board1/t8', [remove('task')]) });
    }
  });
  const client = offline({ transport: 'ws', WebSocket });
  const sub = client.subscribe({ view: 'tasks', prefix: 'board1/', filter: MINE });
  let snapshots = 0;
  sub.on('snapshot', () => { snapshots += 1; });
  await waitFor(() => sub.lastEventId === id('4-0'), 'the resumed deltas');
  const subscribes = sockets[0].sent.filter((m) => m.type === 'subscribe');
  assert.deepEqual(subscribes.map((m) => [m.prefix, m.filter, m.last_event_id]), [
    ['board1/', MINE, undefined],
    ['board1/', MINE, id('2-0')],
  ]);
  assert.deepEqual(plain(sub.keys), { 'board1/t2': { task: task('two', 'ada') } });
  assert.equal(snapshots, 1, 'resumed, not started over');
});

test('SSE: the stream carries the filter, and its reconnect the same filter with Last-Event-ID', async () => {
  const gateway = fakeGateway();
  const client = offline({ transport: 'sse', fetch: gateway.fetch });
  const sub = client.subscribe({ view: 'tasks', prefix: 'board1/', filter: { field: 'assignee', in: ['ada', 'ben'] } });
  await waitFor(() => gateway.streams.length === 1, 'the stream');
  const first = gateway.streams[0];
  assert.equal(first.url.pathname, '/v1/live');
  assert.equal(first.url.searchParams.get('view'), 'tasks');
  assert.equal(first.url.searchParams.get('prefix'), 'board1/');
  assert.deepEqual(JSON.parse(first.url.searchParams.get('filter')), { field: 'assignee', in: ['ada', 'ben'] });
  first.send('snapshot', snapshotData({ 'board1/t1': { task: task('one', 'ben') } }), id('1-0'));
  first.send('delta', deltaData('board1/t1', [remove('task')]), id('2-0'));
  first.close();
  await waitFor(() => gateway.streams.length === 2, 'the reconnect');
  const again = gateway.streams[1];
  assert.equal(again.headers['Last-Event-ID'], id('2-0'));
  assert.equal(again.url.searchParams.get('filter'), first.url.searchParams.get('filter'));
  again.send('delta', deltaData('board1/t3', [upsert('task', task('three', 'ada'))]), id('3-0'));
  await waitFor(() => sub.keys.size === 1, 'the delta after the resume');
  assert.deepEqual(plain(sub.keys), { 'board1/t3': { task: task('three', 'ada') } });
});
