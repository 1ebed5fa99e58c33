// The board page: sign in (or pick up the tab's user), then follow one board through three
// query-shaped subscriptions: its tasks (a prefix of the `tasks` view; with "My tasks" on, only
// the rows whose assignee is the signed-in person, by a filter the gateway applies), its
// leaderboard (a window of the top 5 rows of its `leaderboard` key) and every board (the whole
// `boards` view). Every action publishes an event and waits until the view it changes reflects it.

import { createClient } from 'liveviews-client';

import { avatar, h, setAvatar, status, testid } from './dom.js';
import { USER_PATTERN, currentUser, forget, remember, tokenSource } from './session.js';

const COLUMNS = ['todo', 'doing', 'done'];
const BOARD_PATTERN = /^[a-z0-9][a-z0-9-]{0,31}$/;
const DEFAULT_BOARD = 'launch';
const LEADERS_SHOWN = 5;
const BADGE = {
  connected: (t) => `Live · ${t === 'ws' ? 'WebSocket' : 'SSE'}`,
  connecting: () => 'Reconnecting…',
  disconnected: () => 'Offline',
  closed: () => 'Closed',
};

/** A task id: unique enough among one board's people, and readable in a URL. */
function newTaskId() {
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? '' : 's'}`;

/** Tasks oldest first, as they were added; ties by id. */
const byCreation = (a, b) => a.created_at - b.created_at || (a.task < b.task ? -1 : 1);

export class Board {
  constructor(user) {
    this.user = user;
    // `?transport=sse` (or `ws`) picks one; by default a WebSocket, or SSE where none opens.
    const transport = new URLSearchParams(location.search).get('transport');
    this.client = createClient({
      url: location.origin, getToken: tokenSource(user), transport: ['ws', 'sse'].includes(transport) ? transport : 'auto',
    });
    this.board = null;
    this.tasks = null;
    /** "My tasks": follow only the tasks assigned to the signed-in person. */
    this.mine = false;
    this.leaders = null;
    /** The page after the top window, `{view, key, limit, after}`, while it is shown. */
    this.next = null;
    this.nextShown = false;
  }

  start(board) {
    this.client.on('state', () => this.showConnection());
    this.showConnection();
    this.boards = this.client.subscribe({ view: 'boards' }, {
      snapshot: () => this.showBoards(),
      change: () => this.showBoards(),
      error: (error) => this.refused(error),
    });
    testid('new-task-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const input = event.target.elements.title;
      const title = input.value.trim();
      if (title) this.createTask(title).then((ok) => { if (ok) input.value = ''; });
    });
    testid('kudos-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const { receiver, note } = event.target.elements;
      this.giveKudos(receiver.value.trim().toLowerCase(), note.value.trim()).then((ok) => {
        if (ok) note.value = '';
      });
    });
    testid('my-tasks').addEventListener('click', () => {
      this.mine = !this.mine;
      this.followTasks();
    });
    testid('leaders-more').addEventListener('click', () => {
      this.nextShown = !this.nextShown;
      this.showLeaders();
    });
    testid('open-board-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const name = event.target.elements.board.value.trim().toLowerCase();
      if (BOARD_PATTERN.test(name)) this.open(name);
    });
    this.open(board);
    window.board = this; // for the curious, in the browser console
  }

  /** Follow `board`: its tasks by prefix (all, or mine), its leaderboard's window; the old board's end. */
  open(board) {
    this.leaders?.unsubscribe();
    this.followNext(null);
    this.nextShown = false;
    this.board = board;
    const url = new URL(location.href);
    url.searchParams.set('board', board);
    history.replaceState(null, '', url);
    testid('board-name').textContent = board;
    document.title = `${board} · Board`;
    this.followTasks();
    this.leaders = this.client.subscribe({ view: 'leaderboard', key: board, limit: LEADERS_SHOWN }, {
      snapshot: () => this.showLeaders(),
      change: () => this.showLeaders(),
      error: (error) => this.refused(error),
    });
    this.showLeaders();
    this.showBoards();
  }

  /**
   * Follow the board's tasks: every one, or with "My tasks" on only the rows whose `assignee`
   * (a field of the `tasks` view's rows) is the signed-in person. The gateway filters them, so
   * a task assigned to someone else never reaches this page; one assigned to us moves in, and
   * one taken from us moves out. The board's columns are empty until the new snapshot, rather
   * than show what the other subscription held.
   */
  followTasks() {
    this.tasks?.unsubscribe();
    const filter = this.mine ? { field: 'assignee', eq: this.user } : null;
    this.tasks = this.client.subscribe({ view: 'tasks', prefix: `${this.board}/`, filter }, {
      snapshot: () => this.showTasks(),
      change: () => this.showTasks(),
      error: (error) => this.refused(error),
    });
    const toggle = testid('my-tasks');
    toggle.setAttribute('aria-pressed', String(this.mine));
    toggle.title = this.mine ? 'Show every task on the board' : `Show only the tasks assigned to ${this.user}`;
    testid('tasks-scope').textContent = this.mine ? `Only the tasks assigned to ${this.user}` : 'Every task on the board';
    this.showTasks();
  }

  close() {
    this.client.close();
  }

  /** A subscription the gateway ended: say why, with its code, rather than show stale rows. */
  refused(error) {
    status(testid('action-status'), `A view stopped: ${error.message} (${error.code})`, 'error');
  }

  showConnection() {
    const badge = testid('connection-state');
    badge.dataset.state = this.client.state;
    badge.dataset.transport = this.client.transport;
    badge.querySelector('.label').textContent = (BADGE[this.client.state] ?? (() => this.client.state))(this.client.transport);
  }

  // ---- rendering ------------------------------------------------------------------------------

  showTasks() {
    const all = [...(this.tasks?.keys.values() ?? [])].map((rows) => rows.get('tasks')).filter(Boolean);
    for (const column of COLUMNS) {
      const lane = testid(`column-${column}`);
      const tasks = all.filter((t) => t.status === column).sort(byCreation);
      renderKeyed(lane.querySelector('[data-role="list"]'), tasks, (t) => this.taskCard(t));
      lane.querySelector('[data-role="count"]').textContent = String(tasks.length);
    }
  }

  taskCard(task) {
    const at = COLUMNS.indexOf(task.status);
    const card = h('li', { class: 'task', 'data-testid': 'task', 'data-task': task.task, 'data-status': task.status },
      h('div', { class: 'task-title', 'data-testid': 'task-title', text: task.title, title: 'Rename', onclick: () => this.rename(task) }),
      h('div', { class: 'task-meta' },
        task.assignee
          ? h('span', { class: 'assignee' }, avatar(task.assignee, task.assignee, 'small'), h('span', { 'data-testid': 'task-assignee', text: task.assignee }))
          : h('span', { class: 'assignee none', 'data-testid': 'task-assignee', text: 'unassigned' }),
        h('span', { class: 'muted small', title: 'last changed by', text: `· ${task.changed_by}` })),
      h('div', { class: 'task-actions' },
        at > 0 && h('button', { type: 'button', 'data-testid': 'move-left', title: `Move to ${COLUMNS[at - 1]}`, onclick: () => this.move(task, COLUMNS[at - 1]) }, '←'),
        at < COLUMNS.length - 1 && h('button', { type: 'button', 'data-testid': 'move-right', title: `Move to ${COLUMNS[at + 1]}`, onclick: () => this.move(task, COLUMNS[at + 1]) }, '→'),
        task.assignee === this.user
          ? h('button', { type: 'button', 'data-testid': 'unassign', onclick: () => this.assign(task, null) }, 'Drop')
          : h('button', { type: 'button', 'data-testid': 'assign-me', onclick: () => this.assign(task, this.user) }, 'Take'),
        h('button', { type: 'button', class: 'delete', 'data-testid': 'delete-task', title: 'Delete', onclick: () => this.remove(task) }, '×')));
    return card;
  }

  showLeaders() {
    const ranked = this.leaders?.ranked ?? [];
    const items = ranked.map(({ row, score, value }, i) => ({ person: row, score, value, place: i + 1 }));
    renderKeyed(testid('leaderboard'), items, (l) => this.leaderItem(l));
    testid('leaderboard-empty').hidden = ranked.length > 0 || this.leaders?.state !== 'live';
    // The next page starts after the top window's last row: when that row changes, so does it.
    const cursor = this.leaders?.nextPage() ?? null;
    this.followNext(this.nextShown ? cursor : null);
    const more = testid('leaders-more');
    more.hidden = cursor === null && !this.nextShown;
    more.textContent = this.nextShown ? 'Top 5 only' : `Next ${LEADERS_SHOWN}`;
    more.setAttribute('aria-expanded', String(this.nextShown));
    this.showNext();
  }

  /** Subscribe to the window after `cursor` (`{score, row}`), or to none when it is null. */
  followNext(cursor) {
    const wanted = cursor && { view: 'leaderboard', key: this.board, limit: LEADERS_SHOWN, after: cursor };
    if (JSON.stringify(wanted) === JSON.stringify(this.next?.query ?? null)) return;
    this.next?.sub.unsubscribe();
    this.next = wanted && {
      query: wanted,
      sub: this.client.subscribe(wanted, {
        snapshot: () => this.showNext(),
        change: () => this.showNext(),
        error: (error) => this.refused(error),
      }),
    };
  }

  showNext() {
    const list = testid('leaderboard-next');
    const ranked = this.next?.sub.ranked ?? [];
    const items = ranked.map(({ row, score, value }, i) => ({ person: row, score, value, place: LEADERS_SHOWN + i + 1 }));
    renderKeyed(list, items, (l) => this.leaderItem(l));
    list.hidden = !this.nextShown;
  }

  leaderItem({ person, score, value, place }) {
    const note = value.last_note ? `“${value.last_note}” — ${value.last_giver}` : `last from ${value.last_giver}`;
    return h('li', { class: 'leader', 'data-testid': 'leader', 'data-person': person },
      h('span', { class: 'place', text: String(place) }),
      avatar(person, person),
      h('span', { class: 'who' }, h('b', { text: person }), h('span', { class: 'muted small', text: note })),
      h('span', { class: 'kudos', 'data-testid': 'leader-kudos', text: String(value.kudos) }),
      person !== this.user && h('button', { type: 'button', 'data-testid': 'thank', title: `Kudos to ${person}`, onclick: () => this.giveKudos(person, '') }, '+1'));
  }

  showBoards() {
    const boards = [...(this.boards?.keys ?? [])].map(([board, rows]) => ({ board, ...rows.get('boards') }));
    if (this.board && !boards.some((b) => b.board === this.board)) boards.push({ board: this.board, tasks: 0, kudos: 0, last_at: 0 });
    boards.sort((a, b) => b.last_at - a.last_at || (a.board < b.board ? -1 : 1));
    for (const b of boards) b.current = b.board === this.board;
    renderKeyed(testid('board-list'), boards, (b) => h('li', {},
      h('button', { type: 'button', class: 'board-item', 'data-testid': 'board-item', 'data-board': b.board, 'aria-pressed': String(b.current), onclick: () => this.open(b.board) },
        h('b', { text: b.board }), h('span', { class: 'muted small', text: `${plural(b.tasks, 'task')} · ${b.kudos} kudos` }))));
  }

  // ---- actions --------------------------------------------------------------------------------

  /** Publish `event`, then wait until `sub`'s view reflects it; false (and a note) if refused. */
  async act(sub, event, done) {
    const line = testid('action-status');
    try {
      const offset = await this.client.publish(event);
      await sub.reflects(offset);
      status(line, done, 'ok');
      return true;
    } catch (error) {
      status(line, `Not done: ${error.message}`, 'error');
      return false;
    }
  }

  task(type, task, fields = {}) {
    return { type, payload: { board: this.board, task: task.task ?? task, person: this.user, ...fields } };
  }

  createTask(title) {
    return this.act(this.tasks, this.task('task_created', newTaskId(), { title }), `Added “${title}”`);
  }

  move(task, status) {
    return this.act(this.tasks, this.task('task_moved', task, { status }), `Moved “${task.title}” to ${status}`);
  }

  assign(task, assignee) {
    const fields = assignee ? { assignee } : {};
    return this.act(this.tasks, this.task('task_assigned', task, fields), assignee ? `${assignee} took “${task.title}”` : `“${task.title}” is unassigned`);
  }

  rename(task) {
    const title = prompt('Rename the task', task.title)?.trim();
    if (!title || title === task.title) return Promise.resolve(false);
    return this.act(this.tasks, this.task('task_renamed', task, { title }), `Renamed to “${title}”`);
  }

  remove(task) {
    return this.act(this.tasks, this.task('task_deleted', task), `Deleted “${task.title}”`);
  }

  giveKudos(receiver, note) {
    const payload = { board: this.board, giver: this.user, receiver, ...(note ? { note } : {}) };
    return this.act(this.leaders, { type: 'kudos_given', payload }, `Kudos to ${receiver}`);
  }
}

/**
 * Make `list`'s children the elements for `items`, in order. An element is kept while its item
 * is the same, and made again when it changed: a card that changed flashes once as it arrives.
 */
function renderKeyed(list, items, create) {
  const existing = new Map([...list.children].map((el) => [el.dataset.key, el]));
  let previous = null;
  for (const item of items) {
    const key = JSON.stringify(item);
    let el = existing.get(key);
    if (el === undefined) {
      el = create(item);
      el.dataset.key = key;
      if (list.dataset.drawn) el.classList.add('fresh');
    } else {
      existing.delete(key);
    }
    const wanted = previous === null ? list.firstChild : previous.nextSibling;
    if (wanted !== el) list.insertBefore(el, wanted);
    previous = el;
  }
  for (const el of existing.values()) el.remove();
  list.dataset.drawn = 'true';
}

function showSignIn() {
  testid('signin').hidden = false;
  testid('signin-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const user = event.target.elements.user.value.trim().toLowerCase();
    if (USER_PATTERN.test(user)) {
      remember(user);
      startAs(user);
    }
  });
}

function startAs(user) {
  testid('signin').hidden = true;
  testid('app').hidden = false;
  testid('me-chip').hidden = false;
  testid('me-name').textContent = user;
  setAvatar(testid('me-chip').querySelector('[data-role="avatar"]'), user, user);
  const wanted = new URLSearchParams(location.search).get('board');
  const board = new Board(user);
  board.start(wanted && BOARD_PATTERN.test(wanted) ? wanted : DEFAULT_BOARD);
  testid('sign-out').onclick = () => {
    board.close();
    forget();
    location.reload();
  };
}

const user = currentUser();
if (user) startAs(user);
else showSignIn();
