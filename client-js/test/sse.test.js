// The SSE transport against the real gateway: snapshot then deltas, resume after a cut
// connection with no gap and no duplicate, resets, token passing and refresh, the log feed.

import assert from 'node:assert/strict';
import { after, afterEach, test } from 'node:test';

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
