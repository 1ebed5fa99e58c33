// Query-shaped subscriptions (docs/PROTOCOL.md, sections 5.1 and 5.2) against the real gateway
// of the query application (tests/support/queryapp.py), over WebSocket and SSE: a prefix's keys,
// a filtered prefix's matching rows, a window's ranked rows and its next page, each resumed after
// a cut connection with no gap, no duplicate and no reset; the whole view, with only the keys
// the subject may read; and read-your-writes on a prefix.

import assert from 'node:assert/strict';
import { after, afterEach, test } from 'node:test';

import {
  QUERY_GATEWAY, TcpProxy, closeClients, control, liveQueries, makeClient, next, record, token, uniqueKey, waitFor, writeQueries,
} from '../test-support/helpers.js';

const proxies = [];
afterEach(closeClients);
after(async () => {
  for (const proxy of proxies) await proxy.close();
});

async function proxy() {
  const p = await TcpProxy.start(QUERY_GATEWAY);
  proxies.push(p);
  return p;
}

const plain = (keys) => Object.fromEntries([...keys].map(([key, rows]) => [key, Object.fromEntries(rows)]));
const order = (sub) => sub.ranked.map(({ row, score }) => `${row}:${score}`);
const changes = (log) => log.filter((e) => e.event === 'change');
const states = (log) => log.filter((e) => e.event === 'state').map((e) => e.newState);

/** What a resume must be: one snapshot, no reset, each delta once. */
function assertResumed(log) {
  assert.equal(log.filter((e) => e.event === 'snapshot').length, 1, 'resumed, not restarted');
  assert.deepEqual(states(log), ['live', 'reconnecting', 'live']);
  const ids = changes(log).map((e) => e.eventId);
  assert.equal(new Set(ids).size, ids.length, 'no delta twice');
}

for (const transport of ['ws', 'sse']) {
  test(`${transport}: a prefix keeps its keys, and resumes after a cut connection`, liveQueries, async () => {
    const board = uniqueKey('b');
    const key = (task) => `${board}/${task}`;
    await writeQueries([
      ['tasks', key('t1'), 'task', { title: 'one' }],
      ['tasks', key('t2'), 'task', { title: 'two' }],
      ['tasks', `${board}x/t1`, 'task', { title: 'another board' }],
    ]);
    const net = await proxy();
    const client = makeClient({ url: net.url, transport, token: token('alice') });
    const sub = client.subscribe({ view: 'tasks', prefix: `${board}/` });
    const log = record(sub);
    await next(sub, 'snapshot');
    assert.deepEqual(plain(sub.keys), { [key('t1')]: { task: { title: 'one' } }, [key('t2')]: { task: { title: 'two' } } });

    await writeQueries([['tasks', key('t3'), 'task', { title: 'three' }]]);
    await writeQueries([['tasks', key('t1'), 'task', null], ['tasks', `${board}x/t2`, 'task', { title: 'not here' }]]);
    await waitFor(() => changes(log).length === 2, 'two deltas');
    assert.deepEqual(changes(log).map((e) => [e.key, e.rows.size]), [[key('t3'), 1], [key('t1'), 0]]);
    assert.deepEqual(Object.keys(plain(sub.keys)).sort(), [key('t2'), key('t3')], 'a key goes with its last row');

    net.cut();
    await waitFor(() => sub.state === 'reconnecting', 'the client to notice');
    await writeQueries([['tasks', key('t4'), 'task', { title: 'four' }]]);
    await writeQueries([['tasks', key('t2'), 'task', { title: 'two, done' }], ['tasks', key('t3'), 'task', null]]);
    net.restore();
    await waitFor(() => changes(log).length === 5, 'the missed deltas');
    await writeQueries([['tasks', key('t5'), 'task', { title: 'five' }]]);
    await waitFor(() => changes(log).length === 6, 'a live delta after the resume');
    assert.deepEqual(plain(sub.keys), {
      [key('t2')]: { task: { title: 'two, done' } },
      [key('t4')]: { task: { title: 'four' } },
      [key('t5')]: { task: { title: 'five' } },
    });
    assertResumed(log);
  });

  test(`${transport}: a window and its next page keep their ranked rows, and resume`, liveQueries, async () => {
    const game = uniqueKey('g');
    const player = (name, score) => ['scores', game, name, { name, score }];
    await writeQueries([player('alice', 50), player('bob', 40), player('carol', 30), player('dave', 20), player('erin', 10)]);
    const net = await proxy();
    const client = makeClient({ url: net.url, transport, token: token('alice') });
    const top = client.subscribe({ view: 'scores', key: game, limit: 2 });
    const topLog = record(top);
    await next(top, 'snapshot');
    assert.deepEqual(order(top), ['alice:50', 'bob:40']);
    assert.deepEqual(top.rows.get('alice'), { name: 'alice', score: 50 });
    assert.deepEqual(top.nextPage(), { score: 40, row: 'bob' });

    // The page after bob's row; a score the gateway sent as 40.0 goes back as 40.0.
    const page = client.subscribe({ view: 'scores', key: game, limit: 2, after: top.nextPage() });
    const pageLog = record(page);
    await next(page, 'snapshot');
    assert.deepEqual(order(page), ['carol:30', 'dave:20']);

    await writeQueries([player('frank', 45)]); // enters the top, pushes bob out; the page keeps its rows
    await writeQueries([player('gina', 35)]); // enters the page, pushes dave out; the top does not change
    await waitFor(() => changes(pageLog).length === 1 && changes(topLog).length === 1, 'a delta on each');
    assert.deepEqual(order(top), ['alice:50', 'frank:45']);
    assert.deepEqual(order(page), ['gina:35', 'carol:30']);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(changes(topLog).length, 1, 'a change outside the window sends it nothing');

    net.cut();
    await waitFor(() => top.state === 'reconnecting' && page.state === 'reconnecting', 'the client to notice');
    await writeQueries([player('dave', 100)]); // into the top
    await writeQueries([player('carol', 0), player('erin', 12)]); // the page reorders
    await writeQueries([['scores', game, 'gina', null]]); // gina leaves the key
    net.restore();
    await waitFor(() => order(top).join() === 'dave:100,alice:50' && order(page).join() === 'erin:12,carol:0', 'the missed changes');
    assert.deepEqual(top.nextPage(), { score: 50, row: 'alice' });
    assertResumed(topLog);
    assertResumed(pageLog);
  });
}

for (const transport of ['ws', 'sse']) {
  test(`${transport}: a filtered prefix holds the rows that match as they move in and out, and resumes`, liveQueries, async () => {
    const board = uniqueKey('b');
    const key = (t) => `${board}/${t}`;
    const set = (t, title, assignee) => ['tasks', key(t), 'task', { title, assignee }];
    await writeQueries([set('t1', 'one', 'ada'), set('t2', 'two', 'ben'), set('t3', 'three', null)]);
    const net = await proxy();
    const client = makeClient({ url: net.url, transport, token: token('ada') });
    const sub = client.subscribe({ view: 'tasks', prefix: `${board}/`, filter: { field: 'assignee', eq: 'ada' } });
    const log = record(sub);
    await next(sub, 'snapshot');
    assert.deepEqual(plain(sub.keys), { [key('t1')]: { task: { title: 'one', assignee: 'ada' } } });

    await writeQueries([set('t2', 'two', 'ada')]); // moves in
    await writeQueries([set('t1', 'one', 'ben')]); // moves out
    await writeQueries([set('t3', 'three, renamed', null)]); // matched neither before nor after
    await writeQueries([set('t4', 'four', 'ada')]);
    await waitFor(() => changes(log).length === 3, 'two moves and a new task');
    assert.deepEqual(changes(log).map((e) => [e.key, e.ops.map((op) => op.op)]), [
      [key('t2'), ['upsert']], [key('t1'), ['delete']], [key('t4'), ['upsert']],
    ]);

    net.cut();
    await waitFor(() => sub.state === 'reconnecting', 'the client to notice');
    await writeQueries([set('t2', 'two', 'ben')]); // moves out while the client is away
    await writeQueries([set('t5', 'five', 'ada'), set('t3', 'three, again', 'ben')]);
    net.restore();
    await waitFor(() => sub.keys.has(key('t5')) && !sub.keys.has(key('t2')), 'the missed moves');
    await writeQueries([set('t6', 'six', 'ada')]);
    await waitFor(() => sub.keys.has(key('t6')), 'a live delta after the resume');
    assert.deepEqual(Object.keys(plain(sub.keys)).sort(), [key('t4'), key('t5'), key('t6')]);
    // Only rows that match ever came: a resume may delete a row it never held, never upsert one.
    const upserted = changes(log).flatMap((e) => e.ops.filter((op) => op.op === 'upsert'));
    assert.ok(upserted.every((op) => op.value.assignee === 'ada'), JSON.stringify(upserted));
    assertResumed(log);
  });
}

test('a prefix (ws) and a window (sse) reset to a fresh snapshot when the store is replaced', liveQueries, async () => {
  const board = uniqueKey('b');
  const game = uniqueKey('g');
  await writeQueries([['tasks', `${board}/t1`, 'task', { title: 'old' }], ['scores', game, 'alice', { score: 5 }]]);
  const ws = makeClient({ url: QUERY_GATEWAY, transport: 'ws', token: token('alice') });
  const sse = makeClient({ url: QUERY_GATEWAY, transport: 'sse', token: token('alice') });
  const tasks = ws.subscribe({ view: 'tasks', prefix: `${board}/` });
  const top = sse.subscribe({ view: 'scores', key: game, limit: 3 });
  await Promise.all([tasks.ready(), top.ready()]);
  const logs = [record(tasks), record(top)];
  const fresh = [next(tasks, 'snapshot'), next(top, 'snapshot')];
  await control('wipe');
  for (const snapshot of await Promise.all(fresh)) {
    assert.equal(snapshot.wasRecovering, true);
    assert.equal(snapshot.reason, 'epoch_changed');
  }
  assert.deepEqual(plain(tasks.keys), {}, 'the snapshot replaced every key');
  assert.deepEqual(top.ranked, []);
  for (const log of logs) assert.deepEqual(states(log), ['reset', 'live']);
  await writeQueries([['tasks', `${board}/t2`, 'task', { title: 'new' }], ['scores', game, 'bob', { score: 7 }]]);
  await waitFor(() => tasks.keys.has(`${board}/t2`) && order(top).join() === 'bob:7', 'live deltas after the reset');
});

for (const transport of ['ws', 'sse']) {
  test(`${transport}: a query the view cannot serve fails with the gateway's code and sentence`, liveQueries, async () => {
    const client = makeClient({ url: QUERY_GATEWAY, transport, token: token('alice') });
    const refused = [
      [{ view: 'scores', prefix: 'g' }, 'not_listable', /not listable/],
      [{ view: 'tasks', key: 'board', limit: 2 }, 'not_ranked', /no window/],
      [{ view: 'scores', key: 'g', limit: 11 }, 'invalid_parameter', /from 1 to 10/],
      // The grammar of a filter is the gateway's to check; its sentence names the place.
      [{ view: 'tasks', prefix: 'b/', filter: { and: [{ field: 'assignee', eq: 'ada' }, { field: 'n', gt: [1] }] } }, 'invalid_filter', /filter\.and\[1\]\.gt/],
    ];
    for (const [query, code, message] of refused) {
      const sub = client.subscribe(query);
      const error = await next(sub, 'error');
      assert.equal(error.code, code, JSON.stringify(query));
      assert.match(error.message, message);
      assert.equal(sub.state, 'error');
      await assert.rejects(sub.ready(), (e) => e.code === code);
    }
  });
}

test('sse: the whole view gives only the keys the subject may read', liveQueries, async () => {
  const person = uniqueKey('p');
  const other = uniqueKey('p');
  await writeQueries([
    ['drafts', `${person}/d1`, 'draft', { text: 'mine' }],
    ['drafts', `${other}/d1`, 'draft', { text: 'theirs' }],
  ]);
  const client = makeClient({ url: QUERY_GATEWAY, transport: 'sse', token: token(person) });
  const sub = client.subscribe({ view: 'drafts' });
  const log = record(sub);
  await next(sub, 'snapshot');
  assert.deepEqual(plain(sub.keys), { [`${person}/d1`]: { draft: { text: 'mine' } } });
  await writeQueries([['drafts', `${other}/d2`, 'draft', { text: 'theirs' }]]);
  await writeQueries([['drafts', `${person}/d2`, 'draft', { text: 'mine too' }]]);
  await waitFor(() => sub.keys.has(`${person}/d2`), 'a delta of a key it may read');
  assert.deepEqual(changes(log).map((e) => e.key), [`${person}/d2`]);
});

test('ws: reflects on a prefix resolves once the frontier covers the offset', liveQueries, async () => {
  const board = uniqueKey('b');
  const client = makeClient({ url: QUERY_GATEWAY, transport: 'ws', token: token(board) });
  const sub = client.subscribe({ view: 'tasks', prefix: `${board}/` });
  await sub.ready();
  const offset = await client.publish({ type: 'task_set', payload: { board, task: 't1', title: 'one' } });
  let reflected = false;
  const reflects = sub.reflects(offset).then(() => { reflected = true; });
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(reflected, false, 'no frontier covers it yet');
  // The pipeline's batch: the task's row, then the frontier at the event.
  await writeQueries([['tasks', `${board}/t1`, 'task', { title: 'one' }]], { [offset.partition]: offset.id });
  await reflects;
  assert.equal(sub.keys.get(`${board}/t1`).get('task').title, 'one', 'the delta came before the frontier');
});
