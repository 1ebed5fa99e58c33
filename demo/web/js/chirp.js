// Chirp for one signed-in user: the subscriptions, the panels they feed, and the actions.
//
// Every action publishes an event and then waits until the view it changes reflects the
// event's offset (read-your-writes): what the page shows comes from the views, never from
// guessing ahead.

import { createClient } from 'liveviews-client';

import { TYPES, renderActivity } from './activity.js';
import { setAvatar, status, testid } from './dom.js';
import { renderFeed } from './feed.js';
import { Home } from './home.js';
import { showEntry } from './logpanel.js';
import { Memory } from './memory.js';
import { renderPeople } from './people.js';
import { USER_PATTERN, tokenSource } from './session.js';

export const SEED_USERS = ['alice', 'bob', 'carol', 'dave', 'erin'];
const MAX_PEOPLE = 12;
const BADGE = {
  connected: (t) => `Live · ${t === 'ws' ? 'WebSocket' : 'SSE'}`,
  connecting: () => 'Reconnecting…',
  disconnected: () => (navigator.onLine === false ? 'Offline' : 'Not connected'),
  closed: () => 'Closed',
};

const since = (t0) => `${Math.round(performance.now() - t0)} ms`;

export class Chirp {
  constructor(user) {
    this.user = user;
    this.memory = new Memory(user);
    this.client = createClient({ url: location.origin, getToken: tokenSource(user), transport: 'auto' });
    this.home = new Home(this.client, user, {
      frame: ({ wasRecovering, reason }) => {
        if (wasRecovering) this.note(`resynced (${reason}): the gap could not be replayed, so the timeline was reloaded`);
        this.refresh();
      },
      state: () => this.showViewState(),
      error: (error) => this.note(`timeline: ${error.message}`),
    });
    this.profiles = new Map(); // user -> subscription of profiles/<user>, for people not in `home`
    this.posts = new Map(); // tweet id -> subscription of tweets/<id>
    this.pending = new Set(); // tweet ids and users with an action in flight
    this.seen = new Set(); // users met in the log or the timeline
    this._frame = 0;
  }

  start() {
    const { client, user } = this;
    client.on('state', () => this.showConnection());
    this.showConnection();
    this.home.follow(this.homePeople());
    this.activity = client.subscribe('activity', 'global', { snapshot: () => this.drawActivity(), change: () => this.drawActivity() });
    this.log = client.tailLog({ recent: 30 }, {
      entry: (entry) => this.onLogEntry(entry),
      state: ({ newState }) => { testid('log-state').textContent = newState === 'live' ? 'following' : newState; },
    });
    for (const tweet of this.memory.posts) this.post(tweet);
    this.bindForms();
    this.refresh();
    setInterval(() => this.drawActivity(), 15_000);
    window.chirp = this; // for the curious, in the browser console
  }

  close() {
    this.client.close();
  }

  // ---- subscriptions ----------------------------------------------------------------------

  profile(user) {
    let sub = this.profiles.get(user);
    if (sub === undefined) {
      sub = this.client.subscribe('profiles', user, { snapshot: () => this.refresh(), change: () => this.refresh() });
      this.profiles.set(user, sub);
    }
    return sub;
  }

  /** The group follows `user` now: its own subscription would only repeat it. */
  dropProfile(user) {
    this.profiles.get(user)?.unsubscribe();
    this.profiles.delete(user);
  }

  post(tweet) {
    let sub = this.posts.get(tweet);
    if (sub === undefined) {
      sub = this.client.subscribe('tweets', tweet, { snapshot: () => this.refresh(), change: () => this.refresh() });
      this.posts.set(tweet, sub);
    }
    return sub;
  }

  nameOf(user) {
    if (this.home.has(user)) return this.home.profile(user)?.name ?? null;
    // An author the group does not follow yet (it is being reopened with them): the name on
    // their tweets, from the same group frame, rather than one from another subscription.
    const tweet = [...this.home.timeline.values()].find((t) => t.author === user);
    if (tweet !== undefined) return tweet.name ?? null;
    return this.profiles.get(user)?.rows.get('profile')?.name ?? null;
  }

  /** The people whose profiles `home` follows with the timeline: followed users and authors. */
  homePeople() {
    const followed = [...this.memory.following].filter(([, on]) => on).map(([u]) => u);
    return [...followed, ...[...this.home.timeline.values()].map((t) => t.author)];
  }

  // ---- rendering --------------------------------------------------------------------------

  /** Re-render the lists on the next frame, once however many changes arrive. */
  refresh() {
    if (this._frame) return;
    this._frame = requestAnimationFrame(() => {
      this._frame = 0;
      this.home.follow(this.homePeople());
      this.showMe();
      this.showFeeds();
      this.showPeople();
    });
  }

  showConnection() {
    const badge = testid('connection-state');
    badge.dataset.state = this.client.state;
    badge.dataset.transport = this.client.transport;
    badge.querySelector('.label').textContent = BADGE[this.client.state](this.client.transport);
  }

  showViewState() {
    const state = this.home.state;
    testid('view-state').textContent = state === 'live' ? '' : `timeline ${state}…`;
  }

  note(message) {
    const el = testid('view-state');
    el.textContent = message;
    clearTimeout(this._noteTimer);
    this._noteTimer = setTimeout(() => this.showViewState(), 6_000);
  }

  showMe() {
    const name = this.nameOf(this.user);
    testid('profile-name').textContent = name ?? 'No name yet';
    testid('profile-handle').textContent = `@${this.user}`;
    testid('me-name').textContent = name ?? `@${this.user}`;
    for (const el of document.querySelectorAll('[data-role="avatar"]')) setAvatar(el, this.user, name);
  }

  showFeeds() {
    const liked = this.memory.liked;
    const like = (sub) => (tweet) => this.toggleLike(tweet, sub(tweet));
    renderFeed(testid('timeline'), testid('timeline-empty'), [...this.home.timeline.values()],
      { liked, pending: this.pending, onLike: like(() => this.home) });
    const mine = [...this.posts.values()].map((sub) => sub.rows.get('tweet')).filter(Boolean);
    renderFeed(testid('my-posts'), testid('my-posts-empty'), mine,
      { liked, pending: this.pending, onLike: like((tweet) => this.posts.get(tweet)) });
  }

  isFollowing(user) {
    const remembered = this.memory.following.get(user);
    if (remembered !== undefined) return remembered;
    return [...this.home.timeline.values()].some((t) => t.author === user);
  }

  showPeople() {
    const authors = [...this.home.timeline.values()].map((t) => t.author);
    const followed = [...this.memory.following].filter(([, on]) => on).map(([u]) => u);
    const candidates = [...new Set([...followed, ...authors, ...SEED_USERS, ...this.seen])].filter((u) => u !== this.user);
    const people = candidates.slice(0, Math.max(MAX_PEOPLE, followed.length)).map((user) => {
      if (this.home.has(user)) this.dropProfile(user);
      else this.profile(user);
      return { user, name: this.nameOf(user), following: this.isFollowing(user), pending: this.pending.has(`@${user}`) };
    });
    renderPeople(testid('people'), people, (user) => this.toggleFollow(user));
  }

  drawActivity() {
    renderActivity(testid('activity-chart'), testid('activity-legend'), testid('activity-summary'), [...this.activity.rows.values()]);
  }

  onLogEntry(entry) {
    // The recent entries of the first connection come in one burst: only later ones light up.
    this._logStarted ??= performance.now();
    showEntry(testid('log-panel'), entry, performance.now() - this._logStarted > 1_000);
    const p = entry.payload;
    for (const user of [p.user, p.followee]) if (typeof user === 'string' && TYPES.includes(entry.type)) this.seen.add(user);
    if (entry.type === 'tweet_posted' && p.user === this.user && !this.posts.has(p.tweet)) {
      this.memory.addPost(p.tweet); // posted from another tab as this user
      this.post(p.tweet);
    }
    this.refresh();
  }

  // ---- actions ----------------------------------------------------------------------------

  /** Publish `event`, then wait until `sub`'s view reflects it. */
  async act(sub, event) {
    const offset = await this.client.publish(event);
    await sub.reflects(offset);
    return offset;
  }

  async toggleLike(tweet, sub) {
    const liked = this.memory.liked.has(tweet);
    this.pending.add(tweet);
    this.refresh();
    try {
      await this.act(sub, { type: liked ? 'unlike' : 'like', payload: { user: this.user, tweet } });
      this.memory.setLiked(tweet, !liked);
    } catch (error) {
      this.note(`could not ${liked ? 'unlike' : 'like'}: ${error.message}`);
    } finally {
      this.pending.delete(tweet);
      this.refresh();
    }
  }

  async toggleFollow(user) {
    const following = this.isFollowing(user);
    this.pending.add(`@${user}`);
    this.refresh();
    try {
      await this.act(this.home, { type: following ? 'unfollow' : 'follow', payload: { user: this.user, followee: user } });
      this.memory.setFollowing(user, !following);
    } catch (error) {
      this.note(`could not ${following ? 'unfollow' : 'follow'} @${user}: ${error.message}`);
    } finally {
      this.pending.delete(`@${user}`);
      this.refresh();
    }
  }

  bindForms() {
    const compose = testid('compose-form');
    const text = testid('compose-text');
    const counter = testid('compose-counter');
    text.addEventListener('input', () => { counter.textContent = String(280 - text.value.length); });
    compose.addEventListener('submit', (event) => {
      event.preventDefault();
      this.publishPost(text.value.trim());
    });
    text.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.metaKey || event.ctrlKey)) compose.requestSubmit();
    });

    testid('rename-form').addEventListener('submit', (event) => {
      event.preventDefault();
      this.rename(event.target.elements.name.value.trim());
    });
    testid('follow-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const input = event.target.elements.user;
      const user = input.value.trim().toLowerCase();
      if (!USER_PATTERN.test(user) || user === this.user) return;
      input.value = '';
      this.memory.setFollowing(user, false);
      this.toggleFollow(user);
    });
    for (const tab of document.querySelectorAll('[data-tab]')) tab.addEventListener('click', () => this.showTab(tab.dataset.tab));
  }

  showTab(name) {
    for (const tab of document.querySelectorAll('[data-tab]')) tab.classList.toggle('active', tab.dataset.tab === name);
    for (const panel of document.querySelectorAll('[data-tab-panel]')) panel.hidden = panel.dataset.tabPanel !== name;
    this.showFeeds();
  }

  async publishPost(text) {
    if (!text) return;
    const line = testid('compose-status');
    const button = testid('compose-submit');
    const tweet = `${this.user}:${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
    const t0 = performance.now();
    button.disabled = true;
    status(line, 'Posting…');
    try {
      this.memory.addPost(tweet);
      const sub = this.post(tweet);
      const offset = await this.client.publish({ type: 'tweet_posted', payload: { user: this.user, tweet, text } });
      status(line, `In the log at ${offset.token}, after ${since(t0)}; waiting for the views…`);
      testid('compose-text').value = '';
      testid('compose-counter').textContent = '280';
      await sub.reflects(offset);
      status(line, `✓ Posted: live in tweets and timelines after ${since(t0)}`, 'ok');
    } catch (error) {
      status(line, `Not posted: ${error.message}`, 'error');
    } finally {
      button.disabled = false;
    }
  }

  async rename(name) {
    if (!name) return;
    const line = testid('rename-status');
    const t0 = performance.now();
    status(line, 'Renaming…');
    try {
      await this.act(this.home, { type: 'profile_set', payload: { user: this.user, name } });
      testid('rename-input').value = '';
      status(line, `✓ Renamed everywhere after ${since(t0)}`, 'ok');
    } catch (error) {
      status(line, `Not renamed: ${error.message}`, 'error');
    }
  }
}
