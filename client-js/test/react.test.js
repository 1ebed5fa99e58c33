// useLiveView (src/react.js, the `liveviews-client/react` export) against the real gateway,
// with a stand-in React resolved for the 'react' import (test-support/fake-react.js).

import assert from 'node:assert/strict';
import { register } from 'node:module';
import { afterEach, before, test } from 'node:test';

import { closeClients, live, makeClient, token, uniqueKey, waitFor, write } from '../test-support/helpers.js';

const fakeReact = new URL('../test-support/fake-react.js', import.meta.url).href;
let react;
let fake;

before(async () => {
  const hook = `export async function resolve(specifier, context, next) {
    if (specifier === 'react') return { url: ${JSON.stringify(fakeReact)}, shortCircuit: true };
    return next(specifier, context);
  }`;
  register(`data:text/javascript,${encodeURIComponent(hook)}`);
  react = await import('../src/react.js');
  fake = await import(fakeReact);
});
afterEach(closeClients);

/** Render `component` under a LiveviewsProvider of `client`. */
function renderWith(client, component, props) {
  const provider = react.LiveviewsProvider({ client, children: null });
  assert.equal(provider.props.value, client);
  return fake.render(component, props, new Map([[provider.type.context, client]]));
}

test('useLiveView follows a key: connecting, then the rows, then each change', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('alice') });
  const key = uniqueKey();
  await write([['profiles', key, 'profile', { name: 'first' }]]);
  const Profile = ({ user }) => react.useLiveView('profiles', user);
  const view = renderWith(client, Profile, { user: key });
  assert.equal(view.result.state, 'connecting');
  assert.equal(view.result.rows.size, 0);
  await waitFor(() => view.result.rows.get('profile')?.name === 'first', 'the snapshot to render');
  assert.equal(view.result.state, 'live');
  await write([['profiles', key, 'profile', { name: 'second' }]]);
  await waitFor(() => view.result.rows.get('profile')?.name === 'second', 'the change to render');

  const sub = view.result.subscription;
  const other = uniqueKey();
  await write([['profiles', other, 'profile', { name: 'other' }]]);
  view.update({ user: other });
  assert.equal(sub.state, 'closed', 'a new key unsubscribes the old one');
  await waitFor(() => view.result.rows.get('profile')?.name === 'other', 'the other key');

  const current = view.result.subscription;
  view.unmount();
  assert.equal(current.state, 'closed', 'unmounting unsubscribes');
  assert.equal(client.subscriptions.size, 0);
});

test('useLiveView with a null key subscribes to nothing, and needs a client', live, async () => {
  const client = makeClient({ transport: 'sse', token: token('alice') });
  const view = renderWith(client, () => react.useLiveView('timeline', null));
  assert.equal(view.result.state, 'connecting');
  assert.equal(client.subscriptions.size, 0);
  view.unmount();

  const orphan = fake.render(() => react.useLiveView('profiles', 'alice'));
  assert.match(orphan.error.message, /wrap the app in <LiveviewsProvider client=\{client\}>/);
  const key = uniqueKey();
  const explicit = fake.render(() => react.useLiveView('profiles', key, { client }));
  await waitFor(() => explicit.result.state === 'live', 'a client given as an option');
  explicit.unmount();
});
