// The log, live: every event as it is appended, before any view has seen it.

import { clock, h } from './dom.js';

const KEEP = 60;

export function describe({ type, payload: p }) {
  switch (type) {
    case 'tweet_posted': return `@${p.user}: “${p.text}”`;
    case 'like': return `@${p.user} liked ${p.tweet}`;
    case 'unlike': return `@${p.user} took back a like of ${p.tweet}`;
    case 'follow': return `@${p.user} followed @${p.followee}`;
    case 'unfollow': return `@${p.user} unfollowed @${p.followee}`;
    case 'profile_set': return `@${p.user} is now “${p.name}”`;
    default: return JSON.stringify(p);
  }
}

/** Put `entry` (from client.tailLog) at the top of `list`; `fresh` ones light up briefly. */
export function showEntry(list, entry, fresh) {
  const appended = Number(entry.id.split('-')[0]);
  const item = h('li', { class: 'log-entry', 'data-testid': 'log-entry', dataset: { type: entry.type } },
    h('time', { datetime: new Date(appended).toISOString(), text: clock(appended) }),
    h('span', { class: 'what' }, h('span', { class: 'type', dataset: { type: entry.type }, text: entry.type }), describe(entry)),
    h('span', { class: 'where', text: `partition ${entry.partition} · ${entry.id} · key ${entry.key}` }));
  item.title = `event time ${entry.time}`;
  if (fresh) item.classList.add('fresh');
  list.prepend(item);
  while (list.childElementCount > KEEP) list.lastElementChild.remove();
}
