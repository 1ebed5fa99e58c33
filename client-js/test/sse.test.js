// The SSE transport against the real gateway: snapshot then deltas, resume after a cut
// connection with no gap and no duplicate, resets, token passing and refresh, the log feed,
// waits posted for a stream. Its waits are also checked offline, against a gateway in this
// process (`fakeGateway`): the stream's id, what is posted, when it is posted again.

import assert from 'node:assert/strict';
import { after, afterEach, test } from 'node:test';

import { fakeGateway } from '../test-support/fakes.js';
import {
  GATEWAY, TcpProxy, closeClients, control, live, makeClient, next, record, token, uniqueKey, waitFor, write,
} from '../test-support/helpers.js';

const proxies = [];
afterEach(closeClients);
after(async () => {
  for (const proxy of proxies) await proxy.close();
});

async function proxy() {
  const p = await TcpProxy.start();
  proxies.push(p);
  return p;
}

const profile = (name) => ({ user: 'u', name });
const names = (changes) => changes.filter((e) => e.event === 'change').map((e) => e.rows.get('profile').name);

test('a subscription gets the snapshot, then each delta in order', live, async () => {
  const key = uniqueKey();
  await write([['profiles', key, 'profile', profile('A0')]]);
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  const snap = await next(sub, 'snapshot');
  assert.deepEqual(Object.fromEntries(snap.rows), { profile: profile('A0') });
  assert.equal(snap.wasRecovering, false);
  assert.equal(sub.state, 'live');
  assert.equal(client.state, 'connected');
  for (let i = 1; i <= 3; i++) await write([['profiles', key, 'profile', profile(`A${i}`)]]);
  await write([['profiles', key, 'extra', { n: 1 }]]);
  await write([['profiles', key, 'extra', null]]);
  await waitFor(() => log.filter((e) => e.event === 'change').length === 5, 'five deltas');
  assert.deepEqual(names(log), ['A1', 'A2', 'A3', 'A3', 'A3']);
  assert.deepEqual(Object.fromEntries(sub.rows), (await control('rows', { view: 'profiles', key })).rows);
  const once = await client.get('profiles', key); // the same rows, read without following them
  assert.deepEqual(once.rows, sub.rows);
  assert.match(once.position, /^[\w-]+\.\d+-\d+$/);
  assert.ok(Number.isInteger(once.lagMs) && once.lagMs >= 0, `lagMs ${once.lagMs}: the pipeline's lag at its last batch`);
  assert.deepEqual(log.filter((e) => e.event === 'state').map((e) => e.newState), ['live']);
  sub.unsubscribe();
  assert.equal(sub.state, 'closed');
  await waitFor(() => client.state === 'disconnected', 'the client to disconnect');
});

test('after a cut connection it resumes from the last event id: no gap, no duplicate', live, async () => {
  const key = uniqueKey();
  const net = await proxy();
  const client = makeClient({ url: net.url, transport: 'sse', token: token('alice') });
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  await next(sub, 'snapshot');
  await write([['profiles', key, 'profile', profile('1')]]);
  await waitFor(() => names(log).length === 1, 'the first delta');

  net.cut();
  await waitFor(() => sub.state === 'reconnecting', 'the client to notice');
  assert.equal(client.state, 'connecting');
  for (let i = 2; i <= 5; i++) await write([['profiles', key, 'profile', profile(String(i))]]);
  net.restore();
  await waitFor(() => names(log).length === 5, 'the missed deltas');
  await write([['profiles', key, 'profile', profile('6')]]);
  await waitFor(() => names(log).length === 6, 'a live delta after the resume');

  assert.deepEqual(names(log), ['1', '2', '3', '4', '5', '6']);
  const ids = log.filter((e) => e.event === 'change').map((e) => e.eventId);
  assert.equal(new Set(ids).size, ids.length, 'no delta twice');
  assert.equal(log.filter((e) => e.event === 'snapshot').length, 1, 'resumed, not restarted');
  assert.deepEqual(log.filter((e) => e.event === 'state').map((e) => e.newState), ['live', 'reconnecting', 'live']);
  assert.ok(net.accepted >= 2);
});

test('a resume the store cannot serve resets: fresh rows, and the app is told why', live, async () => {
  const key = uniqueKey();
  const net = await proxy();
  const client = makeClient({ url: net.url, transport: 'sse', token: token('alice') });
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  await next(sub, 'snapshot');
  await write([['profiles', key, 'profile', profile('before')]]);
  await waitFor(() => names(log).length === 1, 'a delta');

  net.cut();
  await write([['profiles', key, 'profile', profile('during')]]);
  await control('flood', { view: 'profiles', key, n: 120 }); // trims the shard's history
  await write([['profiles', key, 'profile', profile('after')]]);
  const snapshot = next(sub, 'snapshot');
  net.restore();
  const fresh = await snapshot;
  assert.equal(fresh.wasRecovering, true);
  assert.equal(fresh.reason, 'history_trimmed');
  assert.equal(fresh.rows.get('profile').name, 'after');
  assert.deepEqual(log.filter((e) => e.event === 'state').map((e) => e.newState), ['live', 'reconnecting', 'live', 'reset', 'live']);
  await write([['profiles', key, 'profile', profile('later')]]);
  await waitFor(() => sub.rows.get('profile').name === 'later', 'live deltas after the reset');
});

test('an open stream resets when the store is replaced', live, async () => {
  const key = uniqueKey();
  await write([['profiles', key, 'profile', profile('old')]]);
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const sub = client.subscribe('profiles', key);
  await next(sub, 'snapshot');
  const snapshot = next(sub, 'snapshot');
  await control('wipe');
  await write([['profiles', key, 'profile', profile('new')]]);
  const fresh = await snapshot;
  assert.equal(fresh.wasRecovering, true);
  assert.equal(fresh.reason, 'epoch_changed');
  await waitFor(() => sub.rows.get('profile')?.name === 'new', 'the new store\'s rows');
});

test('the token goes in the Authorization header, or in the query when asked', live, async () => {
  for (const sseAuth of ['header', 'query']) {
    const requests = [];
    const recordingFetch = (url, init) => {
      requests.push({ url: String(url), headers: { ...init?.headers } });
      return fetch(url, init);
    };
    const key = uniqueKey();
    const client = makeClient({ transport: 'sse', sseAuth, token: token('alice'), fetch: recordingFetch });
    const sub = client.subscribe('profiles', key);
    await next(sub, 'snapshot');
    const [request] = requests;
    const url = new URL(request.url);
    if (sseAuth === 'header') {
      assert.match(request.headers.Authorization, /^Bearer ey/);
      assert.equal(url.searchParams.get('access_token'), null);
    } else {
      assert.equal(request.headers.Authorization, undefined);
      assert.match(url.searchParams.get('access_token'), /^ey/);
    }
    assert.equal(request.headers.Accept, 'text/event-stream');
    client.close();
  }
});

test('without a token, or with a forbidden key, the subscription fails with the gateway\'s code', live, async () => {
  const anonymous = makeClient({ transport: 'sse' });
  const sub = anonymous.subscribe('profiles', uniqueKey());
  const error = await next(sub, 'error');
  assert.equal(error.code, 'token_missing');
  assert.equal(error.status, 401);
  assert.equal(sub.state, 'error');
  await assert.rejects(sub.ready(), /sign in/);

  const bob = makeClient({ transport: 'sse', token: token('bob') });
  const other = bob.subscribe('timeline', 'alice');
  assert.equal((await next(other, 'error')).code, 'forbidden');
  const unknown = bob.subscribe('nope', 'x');
  assert.equal((await next(unknown, 'error')).code, 'unknown_view');
});

test('an expiring token is refreshed with getToken and the stream resumes without a gap', live, async () => {
  const key = uniqueKey();
  let issued = 0;
  const client = makeClient({
    transport: 'sse',
    getToken: async () => {
      issued += 1;
      return token('alice', { ttl: issued === 1 ? 2 : 3600 });
    },
  });
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  await next(sub, 'snapshot');
  await write([['profiles', key, 'profile', profile('1')]]);
  await waitFor(() => issued === 2, 'the stream to end with token_expired and a new token', 5_000);
  await write([['profiles', key, 'profile', profile('2')]]);
  await waitFor(() => names(log).length === 2, 'both deltas');
  assert.deepEqual(names(log), ['1', '2']);
  assert.equal(log.filter((e) => e.event === 'snapshot').length, 1);
});

test('publish refused by the gateway rejects with its code, and writes nothing', live, async () => {
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const error = await client.publish({ type: 'profile_set', payload: { user: 'bob', name: 'Not Bob' } }).catch((e) => e);
  assert.equal(error.name, 'RequestError');
  assert.equal(error.code, 'not_author');
  assert.equal(error.status, 403);
  assert.equal(error.details.index, 0);
  const invalid = await client.publishBatch([{ type: 'tweet_posted', payload: { user: 'alice' } }]).catch((e) => e);
  assert.equal(invalid.code, 'missing_field');
  assert.equal(invalid.status, 422);
});

test('the log feed shows appended events once each, and fills the gap of an outage', live, async () => {
  const net = await proxy();
  const client = makeClient({ url: net.url, transport: 'sse', token: token('alice') });
  const tail = client.tailLog({ recent: 0 });
  const entries = [];
  tail.on('entry', (e) => entries.push(e));
  await waitFor(() => tail.state === 'live', 'the log feed to open');
  const direct = makeClient({ url: GATEWAY, transport: 'sse', token: token('alice') });
  const suffix = uniqueKey('t');
  const tweet = (n) => ({ type: 'tweet_posted', payload: { user: 'alice', tweet: `alice:${suffix}${n}`, text: `hello ${n}` } });
  const offsets = await direct.publishBatch([tweet(1), tweet(2)]);
  await waitFor(() => entries.length === 2, 'two log entries');
  assert.deepEqual(entries.map((e) => e.id), offsets.map((o) => o.id));
  assert.equal(entries[0].type, 'tweet_posted');
  assert.equal(entries[0].payload.text, 'hello 1');

  net.cut();
  await waitFor(() => tail.state === 'reconnecting', 'the feed to notice the cut');
  await direct.publish(tweet(3)); // during the outage
  net.restore();
  await waitFor(() => entries.length === 3, 'the entry appended during the outage');
  await direct.publish(tweet(4));
  await waitFor(() => entries.length === 4, 'a live entry');
  assert.deepEqual(entries.map((e) => e.payload.text), ['hello 1', 'hello 2', 'hello 3', 'hello 4']);
  tail.close();
  assert.equal(tail.state, 'closed');
});

test('reflects posts a wait for its stream: the frontier comes before the quiet rhythm', live, async () => {
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const sub = client.subscribe('profiles', uniqueKey());
  await next(sub, 'snapshot');
  const publish = () => client.publish({ type: 'profile_set', payload: { user: 'alice', name: 'Alice' } });
  // The pipeline's batches change another key: this one is sent its frontier at the quiet
  // rhythm (5 s) only, after the first.
  const first = await publish();
  const progressed = next(sub, 'progress');
  await write([['profiles', uniqueKey(), 'profile', profile('other')]], { [first.partition]: first.id });
  await progressed;
  const offset = await publish();
  const reflected = sub.reflects(offset);
  await new Promise((resolve) => setTimeout(resolve, 300)); // the wait reaches the gateway first
  const started = Date.now();
  await write([['profiles', uniqueKey(), 'profile', profile('other')]], { [offset.partition]: offset.id });
  await reflected;
  assert.ok(Date.now() - started < 2_500, `reflected after ${Date.now() - started} ms: the wait was not answered`);
});

// ---- offline: waits against a gateway in this process ------------------------------------------

const EPOCH = '5f3a9c0e12ab';
const snapshotOf = (frontier) => ({ view: 'profiles', key: 'alice', rows: {}, frontier });
const STREAM_ID = /^[A-Za-z0-9_-]{22}$/;

/** A client of `fakeGateway`, whose streams do not time out while a test looks at them. */
const offline = (options) => makeClient({
  url: 'http://gateway.test', transport: 'sse', token: 't', watchOnline: false, heartbeatTimeout: 60_000, ...options,
});

test('a stream names itself with a random id, the same across its reconnects', async () => {
  const gateway = fakeGateway();
  const client = offline({ fetch: gateway.fetch });
  const sub = client.subscribe('profiles', 'alice');
  await waitFor(() => gateway.streams.length === 1, 'the stream');
  const id = gateway.streams[0].url.searchParams.get('stream');
  assert.match(id, STREAM_ID);
  gateway.streams[0].send('snapshot', snapshotOf({ 0: '1-0' }), `${EPOCH}.1-0`);
  gateway.streams[0].close();
  await waitFor(() => gateway.streams.length === 2, 'the reconnect');
  assert.equal(gateway.streams[1].url.searchParams.get('stream'), id);
  assert.equal(gateway.streams[1].headers['Last-Event-ID'], `${EPOCH}.1-0`);
  client.subscribe('profiles', 'bob');
  await waitFor(() => gateway.streams.length === 3, 'another stream');
  assert.notEqual(gateway.streams[2].url.searchParams.get('stream'), id, 'each stream its own id');
  assert.equal(sub.state, 'live');
});

test('with an EventSource too: the id is on every URL, and the waits go with fetch', async () => {
  const gateway = fakeGateway();
  const sources = [];
  class FakeEventSource {
    constructor(url) {
      this.url = new URL(url);
      sources.push(this);
      setTimeout(() => this.onopen?.(), 1);
    }

    addEventListener() {}

    close() {}
  }
  const client = offline({ fetch: gateway.fetch, EventSource: FakeEventSource });
  const sub = client.subscribe('profiles', 'alice');
  const reflected = sub.reflects('0:5-0');
  await waitFor(() => gateway.waits.length === 1, 'the wait, once the stream is open');
  const id = sources[0].url.searchParams.get('stream');
  assert.match(id, STREAM_ID);
  assert.equal(gateway.waits[0].path, `/v1/streams/${id}/wait`);
  sources[0].onerror();
  await waitFor(() => gateway.waits.length === 2, 'the wait posted again after the reconnect');
  assert.equal(sources[1].url.searchParams.get('stream'), id);
  assert.equal(gateway.waits[1].path, `/v1/streams/${id}/wait`);
  sub.unsubscribe();
  await assert.rejects(reflected, /closed/);
});

test('reflects posts a wait for the stream, authenticated as publish is, and the frontier answers it', async () => {
  const gateway = fakeGateway();
  const client = offline({ fetch: gateway.fetch });
  const sub = client.subscribe('profiles', 'alice');
  await waitFor(() => gateway.streams.length === 1, 'the stream');
  gateway.streams[0].send('snapshot', snapshotOf({ 0: '1-0' }), `${EPOCH}.1-0`);
  await sub.ready();
  await sub.reflects('0:1-0'); // covered already: nothing to ask
  assert.equal(gateway.waits.length, 0);

  const reflected = sub.reflects([{ partition: 0, id: '5-0', token: '0:5-0' }, '0:4-0', '1:2-0']);
  const id = gateway.streams[0].url.searchParams.get('stream');
  await waitFor(() => gateway.waits.length === 1, 'the wait');
  const [wait] = gateway.waits;
  assert.equal(wait.path, `/v1/streams/${id}/wait`);
  assert.equal(wait.headers.Authorization, 'Bearer t');
  assert.equal(wait.headers['Content-Type'], 'application/json');
  assert.equal(wait.credentials, 'same-origin');
  // The latest offset of each partition, without its token: a frontier covering it covers all.
  assert.deepEqual(wait.body, { offsets: [{ partition: 0, id: '5-0' }, { partition: 1, id: '2-0' }] });
  gateway.streams[0].send('progress', { frontier: { 0: '5-0', 1: '2-0' } });
  await reflected;
});

test('the waits still pending are posted again when the stream reopens, and after a reset', async () => {
  const gateway = fakeGateway();
  const client = offline({ fetch: gateway.fetch });
  const sub = client.subscribe('profiles', 'alice');
  const reflected = sub.reflects('0:5-0'); // before the stream is open: posted when it is
  await waitFor(() => gateway.waits.length === 1, 'the wait, once the stream is open');
  gateway.streams[0].send('snapshot', snapshotOf({ 0: '1-0' }), `${EPOCH}.1-0`);
  await sub.ready();
  assert.equal(gateway.waits.length, 1, 'a snapshot without a reset keeps the waits');

  gateway.streams[0].close(); // resumed: no snapshot comes, the waits go when it opens
  await waitFor(() => gateway.waits.length === 2, 'the wait after the reconnect');
  await waitFor(() => sub.state === 'live', 'the resume');
  gateway.streams[1].send('reset', { code: 'epoch_changed', message: 'a new store' });
  gateway.streams[1].send('snapshot', snapshotOf({ 0: '2-0' }), `${EPOCH}.2-0`);
  await waitFor(() => gateway.waits.length === 3, 'the wait after the reset');
  const id = gateway.streams[0].url.searchParams.get('stream');
  for (const wait of gateway.waits) assert.deepEqual([wait.path, wait.body.offsets], [`/v1/streams/${id}/wait`, [{ partition: 0, id: '5-0' }]]);

  gateway.streams[1].send('progress', { frontier: { 0: '5-0' } });
  await reflected;
  gateway.streams[1].close();
  await waitFor(() => gateway.streams.length === 3 && sub.state === 'live', 'another reconnect');
  assert.equal(gateway.waits.length, 3, 'nothing pending, nothing posted');
});

test('a wait that fails is ignored: reflects resolves with a later progress frame', async () => {
  const gateway = fakeGateway();
  const client = offline({ fetch: gateway.fetch });
  const errors = [];
  client.on('error', (error) => errors.push(error));
  const sub = client.subscribe('profiles', 'alice');
  sub.on('error', (error) => errors.push(error));
  await waitFor(() => gateway.streams.length === 1, 'the stream');
  gateway.streams[0].send('snapshot', snapshotOf({ 0: '1-0' }), `${EPOCH}.1-0`);
  await sub.ready();
  let reflected = 0;
  for (const status of [0, 503]) {
    gateway.waitStatus = status;
    sub.reflects(`0:${status + 2}-0`).then(() => { reflected += 1; });
  }
  await waitFor(() => gateway.waits.length === 2, 'both waits');
  await new Promise((resolve) => setTimeout(resolve, 20)); // their failures are in
  assert.equal(reflected, 0);
  gateway.streams[0].send('progress', { frontier: { 0: '600-0' } });
  await waitFor(() => reflected === 2, 'both reflects, at the progress frame');
  assert.deepEqual(errors, []);
  assert.equal(sub.state, 'live');
  assert.equal(gateway.streams.length, 1, 'the stream stayed open');
});
