// Faults forced on purpose, at the protocol edge: a scripted WebSocket (test-support/fakes.js)
// and a scripted fetch that speak the golden frames, so the client's handling of a
// slow-consumer ending, a refusal, an outage and a silent connection can be checked exactly.
// No gateway needed.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { createClient } from '../src/index.js';
import { scriptedWebSocket, sse } from '../test-support/fakes.js';
import { waitFor } from '../test-support/helpers.js';

const EPOCH = '5f3a9c0e12ab';
const snapshot = { view: 'profiles', key: 'alice', rows: { profile: { name: 'A0' } }, frontier: { 0: '1-0' } };
const delta = (name) => ({ view: 'profiles', key: 'alice', ops: [{ op: 'upsert', row: 'profile', value: { name } }] });

function client(options) {
  return createClient({
    url: 'http://gateway.test', token: 't', backoff: { minDelay: 5, maxDelay: 20 }, watchOnline: false, ...options,
  });
}

test('WebSocket: after slow_consumer the subscription resumes from the id the error names', async () => {
  const { WebSocket, sockets } = scriptedWebSocket((socket, msg) => {
    if (msg.type === 'auth') socket.deliver({ type: 'authenticated', subject: 'alice', expires_at: 4102444800 });
    if (msg.type === 'subscribe' && msg.last_event_id === undefined) {
      socket.deliver({ sub: msg.sub, type: 'snapshot', id: `${EPOCH}.1-0`, data: snapshot });
      socket.deliver({ sub: msg.sub, type: 'delta', id: `${EPOCH}.2-0`, data: delta('A1') });
      socket.deliver({ type: 'error', sub: msg.sub, code: 'slow_consumer', message: 'behind', last_event_id: `${EPOCH}.2-0` });
    } else if (msg.type === 'subscribe') {
      socket.deliver({ sub: msg.sub, type: 'delta', id: `${EPOCH}.3-0`, data: delta('A2') });
    }
  });
  const c = client({ transport: 'ws', WebSocket });
  const sub = c.subscribe('profiles', 'alice');
  const changes = [];
  sub.on('change', (e) => changes.push(e.rows.get('profile').name));
  let snapshots = 0;
  sub.on('snapshot', () => { snapshots += 1; });
  await waitFor(() => changes.length === 2, 'the resumed delta');
  assert.deepEqual(changes, ['A1', 'A2']);
  assert.equal(snapshots, 1);
  const subscribes = sockets[0].sent.filter((m) => m.type === 'subscribe');
  assert.equal(subscribes.length, 2);
  assert.equal(subscribes[1].last_event_id, `${EPOCH}.2-0`);
  assert.notEqual(subscribes[1].sub, subscribes[0].sub, 'a fresh sub id: late frames of the old one are dropped');
  assert.equal(sockets.length, 1, 'the socket stays open');
  assert.equal(sub.state, 'live');
  c.close();
});

test('WebSocket: a socket that falls silent is replaced after the heartbeat timeout', async () => {
  const { WebSocket, sockets } = scriptedWebSocket((socket, msg) => {
    if (msg.type === 'auth') socket.deliver({ type: 'authenticated', subject: 'alice', expires_at: 4102444800 });
    if (msg.type === 'subscribe' && sockets.length === 1) socket.deliver({ sub: msg.sub, type: 'snapshot', id: `${EPOCH}.1-0`, data: snapshot });
    // the first socket then says nothing, not even heartbeats
  });
  const c = client({ transport: 'ws', WebSocket, heartbeatTimeout: 100 });
  const sub = c.subscribe('profiles', 'alice');
  const states = [];
  sub.on('state', (e) => states.push(e.newState));
  await waitFor(() => sockets.length === 2 && sockets[1].sent.some((m) => m.type === 'subscribe'), 'a second socket');
  assert.equal(sockets[0].closed, true);
  assert.equal(sockets[1].sent.find((m) => m.type === 'subscribe').last_event_id, `${EPOCH}.1-0`);
  assert.deepEqual(states.slice(0, 3), ['live', 'reconnecting', 'live']);
  c.close();
});

/**
 * A fetch whose answer to the i-th call is `responses[i]`: `[status, body, stay open?]`;
 * status 0 is a network failure. A stream that stays open ends only when the client aborts.
 * The waits an SSE stream posts (`POST /v1/streams/{id}/wait`) are answered 204, off the script.
 */
function scriptedFetch(responses) {
  const calls = [];
  const fetch = async (url, init) => {
    if (new URL(url).pathname.startsWith('/v1/streams/')) return new Response(null, { status: 204 });
    calls.push({ url, headers: init.headers });
    const [status, body, open = false] = responses[Math.min(calls.length - 1, responses.length - 1)];
    if (status === 0) throw new TypeError('fetch failed');
    const stream = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(body));
        if (!open) controller.close();
      },
    });
    return new Response(stream, { status, headers: { 'Content-Type': status === 200 ? 'text/event-stream' : 'application/json' } });
  };
  return { fetch, calls };
}

test('SSE: an end frame resumes at once with Last-Event-ID; an outage is retried', async () => {
  const { fetch, calls } = scriptedFetch([
    [200, sse('snapshot', snapshot, `${EPOCH}.1-0`) + sse('delta', delta('A1'), `${EPOCH}.2-0`)
      + sse('end', { code: 'slow_consumer', message: 'behind', last_event_id: `${EPOCH}.2-0` })],
    [0, ''],
    [503, '{"code":"store_unavailable","message":"try again"}'],
    [200, sse('delta', delta('A2'), `${EPOCH}.3-0`) + ': heartbeat\n\n' + sse('progress', { frontier: { 0: '9-0' } }), true],
  ]);
  const c = client({ transport: 'sse', fetch });
  const sub = c.subscribe('profiles', 'alice');
  const changes = [];
  sub.on('change', (e) => changes.push(e.rows.get('profile').name));
  await sub.reflects('0:9-0');
  assert.deepEqual(changes, ['A1', 'A2']);
  assert.equal(calls.length, 4);
  assert.equal(calls[0].headers['Last-Event-ID'], undefined);
  for (const call of calls.slice(1)) assert.equal(call.headers['Last-Event-ID'], `${EPOCH}.2-0`);
  assert.equal(calls[0].headers.Authorization, 'Bearer t');
  c.close();
});

test('SSE: a refusal fails the subscription at once, without retrying', async () => {
  const { fetch, calls } = scriptedFetch([[403, '{"code":"forbidden","message":"not yours"}']]);
  const c = client({ transport: 'sse', fetch });
  const sub = c.subscribe('timeline', 'bob');
  await assert.rejects(sub.ready(), (error) => error.code === 'forbidden' && error.status === 403);
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(calls.length, 1);
  assert.equal(sub.state, 'error');
  c.close();
});

test('SSE: a malformed last event id starts over with a fresh snapshot, and says so', async () => {
  const { fetch, calls } = scriptedFetch([
    [200, sse('snapshot', snapshot, `${EPOCH}.1-0`)],
    [400, '{"code":"invalid_last_event_id","message":"not an id"}'],
    [200, sse('snapshot', { ...snapshot, rows: { profile: { name: 'fresh' } } }, `${EPOCH}.5-0`), true],
  ]);
  const c = client({ transport: 'sse', fetch });
  const sub = c.subscribe('profiles', 'alice');
  const snapshots = [];
  sub.on('snapshot', (e) => snapshots.push([e.wasRecovering, e.reason, e.rows.get('profile').name]));
  await waitFor(() => snapshots.length === 2, 'the second snapshot');
  assert.deepEqual(snapshots, [[false, null, 'A0'], [true, 'invalid_last_event_id', 'fresh']]);
  assert.equal(calls[2].headers['Last-Event-ID'], undefined);
  c.close();
});

const like = { type: 'profile_set', payload: { user: 'alice', name: 'Alice' } };
const published = (req) => ({ type: 'published', req, offsets: [{ partition: 2, id: '7-0', token: '2:7-0' }] });

test('publish: a batch whose answer is lost with the socket is sent again with the same key, once', async () => {
  // The gateway side takes the first publish and then the connection drops, unanswered.
  const { WebSocket, sockets } = scriptedWebSocket((socket, msg) => {
    if (msg.type === 'auth') socket.deliver({ type: 'authenticated', subject: 'alice', expires_at: 4102444800 });
    if (msg.type === 'subscribe') socket.deliver({ sub: msg.sub, type: 'snapshot', id: `${EPOCH}.1-0`, data: snapshot });
    if (msg.type === 'publish' && sockets.length === 1) socket.onclose?.({ code: 1006, reason: '' });
    else if (msg.type === 'publish') socket.deliver(published(msg.req));
  });
  // While no socket is open the batch goes over HTTP: that way is down too, once.
  const { fetch, calls } = scriptedFetch([[0, ''], [202, JSON.stringify(published('x'))]]);
  const c = client({ transport: 'ws', WebSocket, fetch });
  await c.subscribe('profiles', 'alice').ready(); // the socket opens for a subscription
  const offset = await c.publish(like);
  assert.deepEqual(offset, { partition: 2, id: '7-0', token: '2:7-0' });
  const keys = [
    ...sockets.flatMap((s) => s.sent.filter((m) => m.type === 'publish').map((m) => m.idempotency_key)),
    ...calls.map((call) => call.headers['Idempotency-Key']),
  ];
  assert.ok(keys.length >= 2, `sent ${keys.length} times`);
  assert.match(keys[0], /^[0-9a-f]{32}$/);
  assert.deepEqual(new Set(keys), new Set([keys[0]]), 'every sending carries the one key');
  c.close();
});

test('publish over HTTP: a 5xx is sent again with the key; a refusal or a rate limit is not', async () => {
  const { fetch, calls } = scriptedFetch([
    [503, '{"code":"store_unavailable","message":"try again"}'],
    [503, '{"code":"partial_append","message":"some","appended":[null]}'],
    [202, JSON.stringify(published('x'))],
    [429, '{"code":"rate_limited","message":"slow down","retry_after":1}'],
    [422, '{"code":"idempotency_key_reused","message":"other events"}'],
  ]);
  const c = client({ transport: 'sse', fetch });
  const offsets = await c.publishBatch([like], { idempotencyKey: 'batch-1' });
  assert.deepEqual(offsets, [{ partition: 2, id: '7-0', token: '2:7-0' }]);
  assert.deepEqual(calls.map((call) => call.headers['Idempotency-Key']), ['batch-1', 'batch-1', 'batch-1']);
  const limited = await c.publish(like).catch((e) => e);
  assert.equal(limited.code, 'rate_limited');
  assert.match(limited.idempotencyKey, /^[0-9a-f]{32}$/, 'the key, to send the batch again later');
  const reused = await c.publish(like, { idempotencyKey: 'batch-1' }).catch((e) => e);
  assert.deepEqual([reused.code, reused.idempotencyKey], ['idempotency_key_reused', 'batch-1']);
  assert.equal(calls.length, 5);
  await assert.rejects(c.publish(like, { idempotencyKey: 'has space' }), /visible ASCII/);
  c.close();
});

test('publish gives up after publishRetries, with the key on the error', async () => {
  const { fetch, calls } = scriptedFetch([[0, '']]);
  const c = client({ transport: 'sse', fetch, publishRetries: 2 });
  const error = await c.publish(like).catch((e) => e);
  assert.deepEqual([error.code, error.retryable], ['connection_lost', true]);
  assert.equal(calls.length, 3);
  assert.equal(error.idempotencyKey, calls[0].headers['Idempotency-Key']);
  assert.throws(() => client({ publishRetries: -1 }), /publishRetries/);
  c.close();
});
