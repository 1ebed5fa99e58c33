// The home timeline and "your posts": lists of tweets with live names and like counts.

import { ago, avatar, h, renderList, setAvatar } from './dom.js';

function create() {
  const like = h('button', { type: 'button', class: 'like-button', 'data-testid': 'like-button' },
    h('span', { class: 'heart', 'aria-hidden': 'true', text: '♥' }),
    h('span', { class: 'like-count', 'data-testid': 'like-count', text: '0' }));
  return h('li', { class: 'tweet', 'data-testid': 'tweet' },
    avatar('?', '?'),
    h('div', { class: 'body' },
      h('div', { class: 'meta' },
        h('b', { 'data-testid': 'tweet-author' }),
        h('span', { class: 'handle', 'data-role': 'handle' }),
        h('span', { class: 'handle', 'data-role': 'when' })),
      h('p', { class: 'text', 'data-testid': 'tweet-text' }),
      h('div', { class: 'actions' }, like)));
}

/**
 * Render `tweets` (values of the tweets/timeline views) into `list`, newest first.
 * `state`: `{liked: Set, pending: Set, onLike(tweet)}`.
 */
export function renderFeed(list, empty, tweets, state) {
  const ordered = [...tweets].sort((a, b) => (b.posted_at.localeCompare(a.posted_at) || b.tweet.localeCompare(a.tweet)));
  // Posts that arrive after the first rows light up briefly; the first rows just appear.
  const fresh = list.dataset.shown === 'yes';
  const make = () => {
    const el = create();
    if (fresh) el.classList.add('fresh');
    return el;
  };
  renderList(list, ordered, (t) => t.tweet, make, (el, t) => update(el, t, state));
  if (ordered.length > 0) list.dataset.shown = 'yes';
  empty.hidden = ordered.length > 0 || list.hidden;
}

function update(el, t, state) {
  el.dataset.tweetId = t.tweet;
  el.dataset.author = t.author;
  setAvatar(el.querySelector('.avatar'), t.author, t.name);
  el.querySelector('[data-testid="tweet-author"]').textContent = t.name ?? t.author;
  el.querySelector('[data-role="handle"]').textContent = `@${t.author}`;
  const when = el.querySelector('[data-role="when"]');
  when.textContent = `· ${ago(t.posted_at)}`;
  when.title = new Date(t.posted_at).toLocaleString();
  const text = el.querySelector('[data-testid="tweet-text"]');
  if (text.textContent !== t.text) text.textContent = t.text;

  const button = el.querySelector('[data-testid="like-button"]');
  const count = button.querySelector('[data-testid="like-count"]');
  const likes = String(t.likes ?? 0);
  if (count.textContent !== likes) {
    count.textContent = likes;
    button.classList.remove('bump');
    void button.offsetWidth; // restart the animation
    button.classList.add('bump');
  }
  const liked = state.liked.has(t.tweet);
  button.classList.toggle('liked', liked);
  button.setAttribute('aria-pressed', String(liked));
  button.title = liked ? 'Take back your like' : 'Like';
  button.disabled = state.pending.has(t.tweet);
  button.onclick = () => state.onLike(t.tweet);
}
