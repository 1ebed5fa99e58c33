// Chirp's entry point: sign in (or pick up the tab's user), then run Chirp for that user.

import { Chirp, SEED_USERS } from './chirp.js';
import { avatar, h, testid } from './dom.js';
import { USER_PATTERN, currentUser, forget, remember } from './session.js';

function showSignIn() {
  testid('signin').hidden = false;
  testid('app').hidden = true;
  testid('me-chip').hidden = true;
  const grid = testid('user-grid');
  grid.replaceChildren(...SEED_USERS.map((user) => h('button', {
    type: 'button', class: 'user-card', 'data-testid': `signin-${user}`, onclick: () => signIn(user),
  }, avatar(user, user), h('span', {}, h('b', { text: `@${user}` }), h('span', { class: 'handle', text: 'sign in' })))));
  testid('signin-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const user = event.target.elements.user.value.trim().toLowerCase();
    if (USER_PATTERN.test(user)) signIn(user);
  });
}

function signIn(user) {
  remember(user);
  start(user);
}

function start(user) {
  testid('signin').hidden = true;
  testid('app').hidden = false;
  testid('me-chip').hidden = false;
  document.title = `@${user} · Chirp`;
  const chirp = new Chirp(user);
  chirp.start();
  testid('sign-out').onclick = () => {
    chirp.close();
    forget();
    location.reload();
  };
}

const user = currentUser();
if (user) start(user);
else showSignIn();
