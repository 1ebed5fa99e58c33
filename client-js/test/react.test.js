// useLiveView (src/react.js, the `liveviews-client/react` export) against the real gateway, or a
// scripted one (test-support/fakes.js) where what the hook asks for is the point, and the real
// React (the registry's react and react-test-renderer, client-js's devDependencies).

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import React from 'react';
import TestRenderer from 'react-test-renderer';

import { LiveviewsProvider, useLiveView, useLiveviewsClient } from '../src/react.js';
import { fakeGateway } from '../test-support/fakes.js';
import {
  QUERY_GATEWAY, closeClients, live, liveQueries, makeClient, token, uniqueKey, waitFor, write, writeQueries,
} from '../test-support/helpers.js';

afterEach(closeClients);

const h = React.createElement;

/**
 * Mount a component that calls `useLiveView(view, props.user, options)`, under a provider of
 * `client` when one is given. Returns `{latest(), seen, update(user), unmount()}`: `latest()` is
 * the hook's newest value, `seen` what the provider's client was at each render.
 */
function mount({ client = null, view = 'profiles', user, options }) {
  const renders = [];
  const seen = [];
  function Probe({ user: current }) {
    renders.push(useLiveView(view, current, options));
    seen.push(useLiveviewsClient());
    return null;
  }
  const tree = (current) => (client === null ? h(Probe, { user: current }) : h(LiveviewsProvider, { client }, h(Probe, { user: current })));
  const renderer = TestRenderer.create(tree(user));
  return {
    renders,
    seen,
    latest: () => renders.at(-1),
    update: (next) => renderer.update(tree(next)),
    unmount: () => renderer.unmount(),
  };
}

test('useLiveView follows a key: connecting, then the rows, then each change', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('alice') });
  const key = uniqueKey();
  await write([['profiles', key, 'profile', { name: 'first' }]]);
  const view = mount({ client, user: key });
  assert.equal(view.renders[0].state, 'connecting');
  assert.equal(view.renders[0].rows.size, 0);
  assert.equal(view.seen[0], client);
  await waitFor(() => view.latest().rows.get('profile')?.name === 'first', 'the snapshot to render');
  assert.equal(view.latest().state, 'live');
  await write([['profiles', key, 'profile', { name: 'second' }]]);
  await waitFor(() => view.latest().rows.get('profile')?.name === 'second', 'the change to render');

  const sub = view.latest().subscription;
  const other = uniqueKey();
  await write([['profiles', other, 'profile', { name: 'other' }]]);
  view.update(other);
  await waitFor(() => sub.state === 'closed', 'a new key to unsubscribe the old one');
  await waitFor(() => view.latest().rows.get('profile')?.name === 'other', 'the other key');
  assert.equal(client.subscriptions.size, 1);

  const current = view.latest().subscription;
  view.unmount(); // React runs an unmounted component's effect cleanups after the commit
  await waitFor(() => current.state === 'closed', 'unmounting to unsubscribe');
  assert.equal(client.subscriptions.size, 0);
});

test('useLiveView follows a query: a window, then a prefix, one subscription however often it renders', liveQueries, async () => {
  const client = makeClient({ url: QUERY_GATEWAY, transport: 'ws', token: token('alice') });
  const game = uniqueKey('g');
  const board = uniqueKey('b');
  await writeQueries([
    ['scores', game, 'alice', { score: 3 }], ['scores', game, 'bob', { score: 2 }], ['scores', game, 'carol', { score: 1 }],
    ['tasks', `${board}/t1`, 'task', { title: 'one' }],
  ]);
  const renders = [];
  function Probe({ query }) {
    // A new query object at every render, as a component writes it inline.
    renders.push(useLiveView(query === 'window' ? { view: 'scores', key: game, limit: 2 } : { view: 'tasks', prefix: `${board}/` }));
    return null;
  }
  const tree = (query, n) => h(LiveviewsProvider, { client }, h(Probe, { query, n }));
  const renderer = TestRenderer.create(tree('window', 0));
  assert.deepEqual(renders[0].ranked, []);
  assert.equal(renders[0].nextPage, null);
  await waitFor(() => renders.at(-1).ranked.length === 2, 'the window to render');
  const sub = renders.at(-1).subscription;
  for (let n = 1; n <= 3; n++) renderer.update(tree('window', n));
  assert.equal(renders.at(-1).subscription, sub, 'rendering again keeps the subscription');
  assert.deepEqual(renders.at(-1).ranked.map((r) => r.row), ['alice', 'bob']);
  assert.deepEqual(renders.at(-1).nextPage, { score: 2, row: 'bob' });
  await writeQueries([['scores', game, 'carol', { score: 9 }]]);
  await waitFor(() => renders.at(-1).ranked[0]?.row === 'carol', 'the change to render');
  assert.equal(client.subscriptions.size, 1);

  renderer.update(tree('prefix', 4));
  await waitFor(() => sub.state === 'closed', 'another query to unsubscribe the window');
  await waitFor(() => renders.at(-1).keys?.get(`${board}/t1`)?.get('task').title === 'one', "the prefix's keys");
  assert.equal(client.subscriptions.size, 1);
  renderer.unmount();
  await waitFor(() => client.subscriptions.size === 0, 'unmounting to unsubscribe');
});

test('useLiveView with a null key subscribes to nothing, and needs a client', live, async () => {
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const idle = mount({ client, view: 'timeline', user: null });
  await new Promise((resolve) => setTimeout(resolve, 50)); // effects have run
  assert.equal(idle.latest().state, 'connecting');
  assert.equal(client.subscriptions.size, 0);
  idle.unmount();

  // React reports a component's error on the console before it rethrows it; keep the output quiet.
  const report = console.error;
  console.error = () => {};
  try {
    assert.throws(() => mount({ user: 'alice' }), /wrap the app in <LiveviewsProvider client=\{client\}>/);
  } finally {
    console.error = report;
  }
  const key = uniqueKey();
  await write([['profiles', key, 'profile', { name: 'given' }]]);
  const explicit = mount({ user: key, options: { client } });
  await waitFor(() => explicit.latest().state === 'live', 'a client given as an option');
  assert.equal(explicit.latest().rows.get('profile')?.name, 'given');
  explicit.unmount();
  await waitFor(() => client.subscriptions.size === 0, 'unmounting to unsubscribe');
});

test('useLiveView follows a filtered prefix: the same filter keeps its subscription, another replaces it', async () => {
  const gateway = fakeGateway();
  const client = makeClient({ url: 'http://gateway.test', transport: 'sse', token: 't', watchOnline: false, heartbeatTimeout: 60_000, fetch: gateway.fetch });
  const renders = [];
  function Probe({ person }) {
    // A new filter object at every render, as a component writes it inline.
    renders.push(useLiveView({ view: 'tasks', prefix: 'b/', filter: { field: 'assignee', eq: person } }));
    return null;
  }
  const tree = (person, n) => h(LiveviewsProvider, { client }, h(Probe, { person, n }));
  const renderer = TestRenderer.create(tree('ada', 0));
  await waitFor(() => gateway.streams.length === 1, 'the stream');
  const filterOf = (stream) => JSON.parse(stream.url.searchParams.get('filter'));
  assert.deepEqual(filterOf(gateway.streams[0]), { field: 'assignee', eq: 'ada' });
  gateway.streams[0].send('snapshot', { view: 'tasks', prefix: 'b/', keys: { 'b/t1': { task: { assignee: 'ada' } } }, frontier: {} }, 'e.1-0~0.0123456789abcdef');
  await waitFor(() => renders.at(-1).keys.size === 1, 'the snapshot to render');
  const sub = renders.at(-1).subscription;
  for (let n = 1; n <= 3; n++) renderer.update(tree('ada', n));
  assert.equal(renders.at(-1).subscription, sub, 'the same filter, written again, keeps the subscription');

  renderer.update(tree('ben', 4));
  await waitFor(() => sub.state === 'closed' && gateway.streams.length === 2, "ben's filter to replace ada's");
  assert.deepEqual(filterOf(gateway.streams[1]), { field: 'assignee', eq: 'ben' });
  assert.equal(renders.at(-1).keys.size, 0, 'nothing of the old filter is shown');
  renderer.unmount();
  await waitFor(() => client.subscriptions.size === 0, 'unmounting to unsubscribe');
});
