// Groups (docs/PROTOCOL.md, section 5.3) against the real gateway: a user's profile and
// timeline, written by two pipelines that the control server plays (one batch at a time, each
// ending where a source would), released together so that the page never shows half a rename.

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import {
  TcpProxy, closeClients, control, live, makeClient, next, record, token, uniqueKey, waitFor,
} from '../test-support/helpers.js';

afterEach(closeClients);

const profile = (key, name) => [['profiles', key, 'profile', { user: key, name }]];
const tweet = (key, name) => [['timeline', key, `${key}:1`, { text: 'hi', author: { name } }]];
const names = (group) => [
  group.members[0].rows.get('profile')?.name ?? null,
  [...group.members[1].rows.values()][0]?.author?.name ?? null,
];

function shown(group) {
  const seen = [];
  const look = () => {
    const [inProfile, inTimeline] = names(group);
    seen.push([inProfile, inTimeline]);
    assert.equal(inProfile, inTimeline, `half a rename shown: ${inProfile} / ${inTimeline}`);
  };
  group.on('snapshot', look);
  group.on('change', look);
  return seen;
}

async function renamed(key, name) {
  // `profiles` takes the rename at once, past the log's heads; `entities` ends its batch at the
  // cut the gateway appends for it, so both views reflect the rename from that position on.
  const { frontier } = await control('batch', { pipeline: 'profiles', changes: profile(key, name) });
  await control('batch', { pipeline: 'entities', changes: tweet(key, name), at: 'cut', covering: frontier });
}

for (const transport of ['ws', 'sse']) {
test(`a group shows every rename in the profile and the timeline at once (${transport})`, live, async () => {
  const key = uniqueKey('u');
  await control('batch', { pipeline: 'profiles', changes: profile(key, 'A') });
  const { frontier } = await control('batch', { pipeline: 'entities', changes: tweet(key, 'A') });
  const client = makeClient({ transport, token: token(key) });
  const group = client.group([{ view: 'profiles', key }, { view: 'timeline', key }]);
  const seen = shown(group);
  const log = record(group);
  const first = next(group, 'snapshot');
  await control('batch', { pipeline: 'profiles', at: 'cut', covering: frontier }); // both at the first cut
  const opened = await first;
  assert.deepEqual(opened.changed, [0, 1]);
  assert.deepEqual(names(group), ['A', 'A']);
  assert.equal(group.state, 'live');

  for (const name of ['B', 'C']) {
    await renamed(key, name);
    await waitFor(() => names(group)[0] === name, `the rename to ${name}`);
  }
  assert.deepEqual(seen, [['A', 'A'], ['B', 'B'], ['C', 'C']]);
  assert.ok(log.filter((e) => e.event === 'change').every((e) => e.changed.length === 2));

  // reflects(): every member reflects a write once a group frame's frontier covers it.
  const offset = await client.publish({ type: 'follow', payload: { user: key, followee: 'someone' } });
  const reflected = group.reflects(offset);
  // The cut the wait makes the gateway append: both pipelines end a batch there.
  const covering = { [offset.partition]: offset.id };
  await control('batch', { pipeline: 'profiles', at: 'cut', covering });
  await control('batch', { pipeline: 'entities', at: 'cut', covering });
  await reflected;
  group.unsubscribe();
  assert.equal(group.state, 'closed');
});

test(`a group resumes after a cut connection from what it applied (${transport})`, live, async () => {
  const key = uniqueKey('u');
  await control('batch', { pipeline: 'profiles', changes: profile(key, 'A') });
  const { frontier } = await control('batch', { pipeline: 'entities', changes: tweet(key, 'A') });
  const net = await TcpProxy.start();
  try {
    const client = makeClient({ url: net.url, transport, token: token(key) });
    const group = client.group([{ view: 'profiles', key }, { view: 'timeline', key }]);
    const seen = shown(group);
    const first = next(group, 'snapshot');
    await control('batch', { pipeline: 'profiles', at: 'cut', covering: frontier });
    await first;
    net.cut();
    await waitFor(() => group.state === 'reconnecting', 'the group to notice');
    await control('batch', { pipeline: 'profiles', changes: profile(key, 'B') });
    const missed = await control('batch', { pipeline: 'entities', changes: tweet(key, 'B') });
    net.restore();
    await control('batch', { pipeline: 'profiles', at: 'cut', covering: missed.frontier }); // resumed
    await waitFor(() => names(group)[0] === 'B', 'the missed rename');
    assert.deepEqual(seen, [['A', 'A'], ['B', 'B']]);
    assert.equal(group.state, 'live');
  } finally {
    await net.close();
  }
});
}

test('a group is checked when it is opened', live, async () => {
  const client = makeClient({ transport: 'ws', token: token('ann') });
  assert.throws(() => client.group([]), /1 to 16/);
  assert.throws(() => client.group([{ view: 'tasks', prefix: 'b/' }]), /\{view, key\} subscriptions only/);
  const group = client.group([{ view: 'timeline', key: 'bob' }]); // not ann's to read
  await waitFor(() => group.state === 'error', 'the refusal');
  assert.equal(group.error.code, 'forbidden');
});
