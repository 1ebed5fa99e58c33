// The WebSocket transport against the real gateway: every subscription on one socket, resume
// after a cut connection, resets, token refresh on the open socket, and falling back to SSE.

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

/** The platform's WebSocket, counting the sockets it opens. */
function countingWebSocket() {
  const sockets = [];
  class Counted extends WebSocket {
    constructor(...args) {
      super(...args);
      sockets.push(this);
    }
  }
  return { WebSocket: Counted, sockets };
}

const profile = (name) => ({ user: 'u', name });
const names = (log) => log.filter((e) => e.event === 'change').map((e) => e.rows.get('profile').name);

test('Node has a WebSocket to test with', live, () => {
  assert.equal(typeof WebSocket, 'function', 'run node with --experimental-websocket');
});

test('all subscriptions share one socket, each getting only its own deltas', live, async () => {
  const { WebSocket: Counted, sockets } = countingWebSocket();
  const client = makeClient({ transport: 'ws', token: token('alice'), WebSocket: Counted });
  const keys = [uniqueKey(), uniqueKey(), uniqueKey()];
  const subs = keys.map((key) => client.subscribe('profiles', key));
  const logs = subs.map(record);
  await Promise.all(subs.map((sub) => sub.ready()));
  assert.equal(client.state, 'connected');
  assert.equal(client.transport, 'ws');
  for (const [i, key] of keys.entries()) await write([['profiles', key, 'profile', profile(`k${i}`)]]);
  await waitFor(() => logs.every((log) => names(log).length === 1), 'a delta on each');
  assert.deepEqual(logs.map(names), [['k0'], ['k1'], ['k2']]);

  subs[1].unsubscribe();
  await write(keys.map((key, i) => ['profiles', key, 'profile', profile(`again${i}`)]));
  await waitFor(() => names(logs[0]).length === 2 && names(logs[2]).length === 2, 'the open ones');
  assert.deepEqual(names(logs[1]), ['k1'], 'nothing after unsubscribe');
  assert.equal(sockets.length, 1);
  const metrics = await (await fetch(`${GATEWAY}/metrics`)).text();
  assert.match(metrics, /lv_connections\{transport="ws"\} 1\n/);
});

test('a batch sent on the socket and again over HTTP with its key is appended once', live, async () => {
  const overSocket = makeClient({ transport: 'ws', token: token('alice') });
  await overSocket.subscribe('profiles', uniqueKey()).ready();
  const overHttp = makeClient({ transport: 'sse', token: token('alice') });
  const idempotencyKey = `k-${uniqueKey()}`;
  const batch = [{ type: 'profile_set', payload: { user: 'alice', name: idempotencyKey } }];
  const first = await overSocket.publishBatch(batch, { idempotencyKey });
  assert.deepEqual(await overHttp.publishBatch(batch, { idempotencyKey }), first);
  assert.deepEqual(await overSocket.publishBatch(batch, { idempotencyKey }), first);
  const fresh = await overSocket.publishBatch(batch);
  assert.notDeepEqual(fresh, first, 'a new key is a new batch');
});

test('publish goes over the socket and reflects resolves once the view covers it', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('alice') });
  const key = uniqueKey();
  const sub = client.subscribe('profiles', key);
  await sub.ready();
  const offset = await client.publish({ type: 'profile_set', payload: { user: 'alice', name: 'Alice' } });
  assert.ok(Number.isInteger(offset.partition) && /^\d+-\d+$/.test(offset.id));
  assert.equal(offset.token, `${offset.partition}:${offset.id}`);
  let reflected = false;
  const reflects = sub.reflects(offset).then(() => { reflected = true; });
  // The views have not reached the offset yet: a frontier just before it changes nothing.
  const [ms, seq] = offset.id.split('-').map(Number);
  const before = seq > 0 ? `${ms}-${seq - 1}` : `${ms - 1}-99`;
  // Listening before the write: the progress frame may arrive before the write's own reply.
  const progressed = next(sub, 'progress', ({ frontier }) => frontier[offset.partition] === before);
  await write([], { [offset.partition]: before });
  await progressed;
  assert.equal(reflected, false);
  // The pipeline's batch: the delta the event caused, and the frontier at its offset.
  await write([['profiles', key, 'profile', profile('Alice')]], { [offset.partition]: offset.id });
  await reflects;
  assert.equal(sub.rows.get('profile').name, 'Alice', 'the delta is applied before reflects resolves');
});

test('reflects asks the gateway for the covering frontier at once, and again after a reconnect', live, async () => {
  const net = await proxy();
  const sent = [];
  class Recording extends WebSocket {
    send(text) {
      sent.push(JSON.parse(text));
      super.send(text);
    }
  }
  const client = makeClient({ url: net.url, transport: 'ws', token: token('alice'), WebSocket: Recording });
  const key = uniqueKey();
  const sub = client.subscribe('profiles', key);
  await sub.ready();
  const offset = await client.publish({ type: 'profile_set', payload: { user: 'alice', name: 'Alice' } });
  const reflects = sub.reflects(offset);
  const waits = () => sent.filter((m) => m.type === 'wait');
  await waitFor(() => waits().length === 1, 'a wait message');
  const subId = sent.find((m) => m.type === 'subscribe').sub;
  assert.deepEqual(waits()[0], { type: 'wait', sub: subId, offsets: [{ partition: offset.partition, id: offset.id }] });

  net.cut(); // the new subscription asks again, under its new id
  await waitFor(() => sub.state === 'reconnecting', 'the cut');
  net.restore();
  await waitFor(() => waits().length === 2, 'the wait sent again');
  const again = sent.filter((m) => m.type === 'subscribe').at(-1).sub;
  assert.notEqual(again, subId);
  assert.deepEqual(waits()[1].sub, again);
  await write([['profiles', key, 'profile', profile('Alice')]], { [offset.partition]: offset.id });
  await reflects;
  assert.equal(sub.rows.get('profile').name, 'Alice');
});

test('after a cut connection every subscription resumes on a new socket, no gap, no duplicate', live, async () => {
  const net = await proxy();
  const { WebSocket: Counted, sockets } = countingWebSocket();
  const client = makeClient({ url: net.url, transport: 'ws', token: token('alice'), WebSocket: Counted });
  const keys = [uniqueKey(), uniqueKey()];
  const subs = keys.map((key) => client.subscribe('profiles', key));
  const logs = subs.map(record);
  await Promise.all(subs.map((sub) => sub.ready()));
  await write(keys.map((key) => ['profiles', key, 'profile', profile('1')]));
  await waitFor(() => logs.every((log) => names(log).length === 1), 'the first deltas');

  net.cut();
  await waitFor(() => client.state === 'connecting' && subs.every((s) => s.state === 'reconnecting'), 'the cut');
  for (let i = 2; i <= 4; i++) await write(keys.map((key) => ['profiles', key, 'profile', profile(String(i))]));
  net.restore();
  await waitFor(() => logs.every((log) => names(log).length === 4), 'the missed deltas');
  await write([['profiles', keys[0], 'profile', profile('5')]]);
  await waitFor(() => names(logs[0]).length === 5, 'a live delta');
  assert.deepEqual(names(logs[0]), ['1', '2', '3', '4', '5']);
  assert.deepEqual(names(logs[1]), ['1', '2', '3', '4']);
  for (const log of logs) assert.equal(log.filter((e) => e.event === 'snapshot').length, 1);
  assert.equal(client.state, 'connected');
  assert.ok(sockets.length >= 2);
});

test('a subscription resets over WebSocket when the store is replaced', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('alice') });
  const key = uniqueKey();
  await write([['profiles', key, 'profile', profile('old')]]);
  const sub = client.subscribe('profiles', key);
  await sub.ready();
  const snapshot = next(sub, 'snapshot');
  await control('wipe');
  await write([['profiles', key, 'profile', profile('new')]]);
  const fresh = await snapshot;
  assert.deepEqual([fresh.wasRecovering, fresh.reason], [true, 'epoch_changed']);
  await waitFor(() => sub.rows.get('profile')?.name === 'new', 'the new rows');
});

test('a token about to expire is refreshed on the open socket, which stays open', live, async () => {
  const { WebSocket: Counted, sockets } = countingWebSocket();
  let issued = 0;
  const firstExpiry = Date.now() + 2_000;
  const client = makeClient({
    transport: 'ws',
    WebSocket: Counted,
    getToken: async () => {
      issued += 1;
      return token('alice', { ttl: issued === 1 ? 2 : 3600 });
    },
  });
  const key = uniqueKey();
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  await sub.ready();
  await waitFor(() => issued === 2, 'a refresh before expiry', 5_000);
  await waitFor(() => Date.now() > firstExpiry + 500, 'the first token to expire', 5_000);
  await write([['profiles', key, 'profile', profile('still here')]]);
  await waitFor(() => names(log).length === 1, 'a delta after the first token expired');
  assert.equal(sockets.length, 1);
  assert.equal(client.state, 'connected');
});

test('a WebSocket refused for a bad token fails its subscriptions with the code', live, async () => {
  const client = makeClient({ transport: 'ws', token: 'not-a-token' });
  const errors = [];
  client.on('error', (e) => errors.push(e.code));
  const sub = client.subscribe('profiles', uniqueKey());
  const error = await next(sub, 'error');
  assert.equal(error.code, 'token_invalid');
  assert.deepEqual(errors, ['token_invalid']);
  assert.equal(client.state, 'disconnected');
});

test("'auto' falls back to SSE where no WebSocket can be opened", live, async () => {
  class Blocked {
    constructor() {
      setTimeout(() => this.onclose?.({ code: 1006, reason: '' }), 5);
    }

    close() {}
  }
  const client = makeClient({ transport: 'auto', token: token('alice'), WebSocket: Blocked });
  const errors = [];
  client.on('error', (e) => errors.push(e.name));
  const key = uniqueKey();
  await write([['profiles', key, 'profile', profile('over sse')]]);
  const sub = client.subscribe('profiles', key);
  await sub.ready();
  assert.equal(client.transport, 'sse');
  assert.equal(sub.rows.get('profile').name, 'over sse');
  assert.deepEqual(errors, ['ConnectionError']);
  await waitFor(() => client.state === 'connected', 'connected over SSE');
});

test('disconnect() keeps the subscriptions, connect() resumes them', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('alice') });
  const key = uniqueKey();
  const sub = client.subscribe('profiles', key);
  const log = record(sub);
  await sub.ready();
  client.disconnect();
  assert.equal(client.state, 'disconnected');
  assert.equal(sub.state, 'reconnecting');
  await write([['profiles', key, 'profile', profile('while away')]]);
  client.connect();
  await waitFor(() => names(log).length === 1, 'the delta missed while disconnected');
  assert.equal(sub.state, 'live');
  client.close();
  assert.equal(sub.state, 'closed');
  assert.throws(() => client.subscribe('profiles', key), /closed client/);
});
