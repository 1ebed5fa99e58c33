// Shared by the live tests (test/*.test.js): the gateway under test, tokens, the control server that writes
// deltas with the real sink, and a TCP proxy that can cut connections on purpose.
//
// tests/client/test_js_client.py starts a real gateway and the control server and runs these
// tests with LV_GATEWAY_URL, LV_CONTROL_URL, LV_JWT_SECRET and LV_JWT_AUDIENCE set, and
// LV_QUERY_GATEWAY_URL: a gateway of tests/support/queryapp.py, whose views (tasks, drafts,
// scores) are subscribed to by query. Without them (e.g. `npm test` alone) the live tests are
// skipped and only the offline ones run.

import { createHmac } from 'node:crypto';
import net from 'node:net';

import { createClient } from '../src/index.js';

export const GATEWAY = process.env.LV_GATEWAY_URL ?? null;
export const QUERY_GATEWAY = process.env.LV_QUERY_GATEWAY_URL ?? null;
const CONTROL = process.env.LV_CONTROL_URL ?? null;
const SECRET = process.env.LV_JWT_SECRET ?? 'liveviews-dev-secret-never-use-in-production';
const AUDIENCE = process.env.LV_JWT_AUDIENCE ?? 'liveviews';

/** Options for `test()` of a test that needs the gateway. */
export const live = GATEWAY && CONTROL
  ? {}
  : { skip: 'needs a gateway: run `pytest tests/client` (it sets LV_GATEWAY_URL and LV_CONTROL_URL)' };

/** Options for `test()` of a test that needs the gateway of the query application. */
export const liveQueries = QUERY_GATEWAY && CONTROL
  ? {}
  : { skip: 'needs a gateway of tests/support/queryapp.py: run `pytest tests/client` (it sets LV_QUERY_GATEWAY_URL)' };

/** A token signed like the gateway's own (HS256), for `user`, valid for `ttl` seconds. */
export function token(user, { ttl = 3600, scope = 'read publish' } = {}) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const head = part({ alg: 'HS256', typ: 'JWT' });
  const body = part({ sub: user, scope, aud: AUDIENCE, exp: Math.floor(Date.now() / 1000) + ttl });
  const signature = createHmac('sha256', SECRET).update(`${head}.${body}`).digest('base64url');
  return `${head}.${body}.${signature}`;
}

/** Ask the control server to do something to the store (see test_js_client.py). */
export async function control(action, body = {}) {
  const response = await fetch(`${CONTROL}/${action}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`control ${action} failed: ${JSON.stringify(answer)}`);
  return answer;
}

/** Write one batch of changes `[view, key, row, value | null]` through the real sink. */
export function write(changes, frontier = undefined) {
  return control('write', { changes, frontier });
}

/** `write` for the views of the query application; a value's `score` is its row's score. */
export function writeQueries(changes, frontier = undefined) {
  return control('write', { changes, frontier, app: 'queries' });
}

let serial = 0;
/** A key no other test uses, so tests never see each other's deltas. */
export function uniqueKey(prefix = 'k') {
  serial += 1;
  return `${prefix}${process.pid}x${Date.now().toString(36)}x${serial}`;
}

const clients = new Set();

/** A client of the gateway with test-sized reconnect delays; closed by `closeClients()`. */
export function makeClient(options = {}) {
  const client = createClient({
    url: GATEWAY,
    backoff: { minDelay: 20, maxDelay: 200 },
    heartbeatTimeout: 5_000,
    connectTimeout: 1_000,
    ...options,
  });
  clients.add(client);
  return client;
}

export function closeClients() {
  for (const client of clients) client.close();
  clients.clear();
}

/** Resolves when `predicate()` is true; fails after `timeout` ms with `what`. */
export async function waitFor(predicate, what = 'a condition', timeout = 10_000) {
  const deadline = Date.now() + timeout;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** The next `event` of `emitter` for which `filter` holds. */
export function next(emitter, event, filter = () => true, timeout = 10_000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out waiting for '${event}'`));
    }, timeout);
    const off = emitter.on(event, (value) => {
      if (!filter(value)) return;
      clearTimeout(timer);
      off();
      resolve(value);
    });
  });
}

/** Records a subscription's events, in order, for assertions about the whole sequence. */
export function record(sub) {
  const log = [];
  for (const event of ['snapshot', 'change', 'state', 'error']) sub.on(event, (value) => log.push({ event, ...value }));
  return log;
}

/**
 * A TCP proxy in front of the gateway. `cut()` kills every open connection and refuses new ones
 * until `restore()`: a network outage, seen by the client exactly as one.
 */
export class TcpProxy {
  static async start(target = GATEWAY) {
    const proxy = new TcpProxy(new URL(target));
    await new Promise((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  constructor(target) {
    this.pairs = new Set();
    this.blocked = false;
    this.accepted = 0;
    this.server = net.createServer((client) => {
      if (this.blocked) {
        client.destroy();
        return;
      }
      this.accepted += 1;
      const upstream = net.connect(Number(target.port), target.hostname);
      const pair = {
        kill: () => {
          client.destroy();
          upstream.destroy();
          this.pairs.delete(pair);
        },
      };
      this.pairs.add(pair);
      for (const socket of [client, upstream]) {
        socket.on('error', pair.kill);
        socket.on('close', pair.kill);
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
  }

  get url() {
    return `http://127.0.0.1:${this.server.address().port}`;
  }

  get open() {
    return this.pairs.size;
  }

  cut() {
    this.blocked = true;
    for (const pair of [...this.pairs]) pair.kill();
  }

  restore() {
    this.blocked = false;
  }

  async close() {
    this.cut();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
