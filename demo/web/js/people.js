// People to follow: each with a live display name and a follow button.

import { avatar, h, renderList, setAvatar } from './dom.js';

function create(person) {
  return h('li', { class: 'person', 'data-testid': 'person' },
    avatar(person.user, person.name),
    h('div', { class: 'who' }, h('b', { 'data-role': 'name' }), h('span', { class: 'handle', text: `@${person.user}` })),
    h('button', { type: 'button', 'data-testid': `follow-${person.user}` }));
}

function update(el, person, onToggle) {
  el.dataset.user = person.user;
  setAvatar(el.querySelector('.avatar'), person.user, person.name);
  el.querySelector('[data-role="name"]').textContent = person.name ?? person.user;
  const button = el.querySelector('button');
  button.textContent = person.following ? 'Following' : 'Follow';
  button.classList.toggle('following', person.following);
  button.setAttribute('aria-pressed', String(person.following));
  button.title = person.following ? `Unfollow @${person.user}` : `Follow @${person.user}`;
  button.disabled = person.pending;
  button.onclick = () => onToggle(person.user);
}

/** `people`: `[{user, name, following, pending}]`, shown followed first, then by handle. */
export function renderPeople(list, people, onToggle) {
  const ordered = [...people].sort((a, b) => (Number(b.following) - Number(a.following)) || a.user.localeCompare(b.user));
  renderList(list, ordered, (p) => p.user, create, (el, p) => update(el, p, onToggle));
}
