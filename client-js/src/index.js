/**
 * liveviews-client: read a Liveviews view once, then keep it up to date as it changes.
 *
 *   import { createClient } from 'liveviews-client';
 *   const client = createClient({ url: 'http://127.0.0.1:8000', getToken });
 *   const sub = client.subscribe('timeline', 'alice', { change: ({ rows }) => render(rows) });
 *   const offset = await client.publish({ type: 'like', payload: { user: 'alice', tweet: 'bob:1' } });
 *   await sub.reflects(offset); // the view now shows the like
 *
 *   const board = client.subscribe({ view: 'tasks', prefix: 'board1/' }); // board.keys: key -> rows
 *   const top = client.subscribe({ view: 'kudos', key: 'team', limit: 10 }); // top.ranked, top.nextPage()
 */

export { Client, ClientState, createClient } from './client.js';
export { Subscription, SubscriptionState } from './subscription.js';
export { PrefixSubscription } from './prefix.js';
export { WindowSubscription } from './window.js';
export { Group } from './group.js';
export { LogTail } from './log.js';
export { ConnectionError, LiveviewsError, ProtocolError, RequestError, StateError } from './errors.js';
export { compareEntryIds, covers, parseOffset } from './offsets.js';
export { fullJitter } from './backoff.js';
