// How an application uses liveviews-client, checked by the TypeScript compiler (`tsc -p
// client-js`, run by tests/client/test_types.py). Each `@ts-expect-error` is a misuse the
// declarations must refuse: if they ever accept it, the directive itself fails the check.

import {
  ClientState,
  ConnectionError,
  LiveviewsError,
  RequestError,
  SubscriptionState,
  compareEntryIds,
  covers,
  createClient,
  fullJitter,
  parseOffset,
  type AnySubscription,
  type ChangeEvent,
  type Client,
  type Filter,
  type Frontier,
  type Offset,
  type PageCursor,
  type PrefixSubscription,
  type RankedRow,
  type SnapshotEvent,
  type Subscription,
  type WindowSubscription,
} from 'liveviews-client';
import { FrameKind, SseParser, encode, frame, snapshotShape, type Frame } from 'liveviews-client/frames';
import {
  LiveviewsProvider, useLiveView, useLiveviewsClient, type LiveView, type LivePrefix, type LiveWindow,
} from 'liveviews-client/react';

interface Post {
  author: string;
  text: string;
}

const client: Client = createClient({
  url: 'http://127.0.0.1:8000',
  getToken: async () => ({ token: 'signed' }),
  transport: 'auto',
  backoff: { minDelay: 250 },
});
// @ts-expect-error: a transport is 'auto', 'ws' or 'sse'
createClient({ transport: 'tcp' });
// @ts-expect-error: the url is a string
createClient({ url: 8000 });

const timeline: Subscription<Post> = client.subscribe<Post>('timeline', 'alice', {
  snapshot: (s: SnapshotEvent<Post>) => {
    const reason: string | null = s.wasRecovering ? s.reason : null;
    const lag: number | null = s.lagMs;
    void [reason, lag, s.frontier, s.eventId];
  },
  change: (c: ChangeEvent<Post>) => {
    for (const op of c.ops) {
      if (op.op === 'upsert') {
        const text: string = op.value.text;
        void text;
      } else {
        // @ts-expect-error: a delete carries no value
        void op.value;
      }
    }
  },
});
// @ts-expect-error: there is no 'delta' handler; changes come as 'change'
client.subscribe('timeline', 'alice', { delta: () => undefined });
// @ts-expect-error: the key is a string
client.subscribe('timeline', 42);

const first: Post | undefined = timeline.rows.get('t1');
void first;
// @ts-expect-error: rows are read-only
timeline.rows.set('t1', { author: 'a', text: 'b' });

// A query of a key is the same subscription as (view, key).
const same: Subscription<Post> = client.subscribe<Post>({ view: 'timeline', key: 'alice' });
void same;

interface Task {
  title: string;
}

// The keys of a view with a prefix (or the whole view): key -> rows.
const board: PrefixSubscription<Task> = client.subscribe<Task>({ view: 'tasks', prefix: 'board1/' }, {
  snapshot: (s) => {
    const titles: string[] = [...s.keys.values()].flatMap((rows) => [...rows.values()].map((t) => t.title));
    void titles;
  },
  change: (c) => {
    const key: string = c.key;
    const dropped: boolean = c.rows.size === 0;
    void [key, dropped, c.keys];
  },
});
const whole: PrefixSubscription = client.subscribe({ view: 'tasks' });
const firstTask: Task | undefined = board.keys.get('board1/t1')?.get('task');
const prefix: string = board.prefix;
void [whole, firstTask, prefix];
// @ts-expect-error: keys are read-only
board.keys.delete('board1/t1');
// @ts-expect-error: a prefix subscription has keys, not rows
void board.rows;
// @ts-expect-error: a query names a key or a prefix, not both
client.subscribe({ view: 'tasks', key: 'k', prefix: 'p' });

// A prefix's rows that match a filter (docs/PROTOCOL.md, section 5.2).
interface Assigned {
  title: string;
  assignee: string | null;
}
const mine: Filter = { field: 'assignee', eq: 'ada' };
const myTasks: PrefixSubscription<Assigned> = client.subscribe<Assigned>({ view: 'tasks', prefix: 'board1/', filter: mine });
const held: Filter | null = myTasks.filter;
const urgent: Filter = {
  and: [{ field: ['meta', 'owner'], in: ['ada', 'ben'] }, { not: { field: 'done', eq: true } }, { or: [{ field: 'due', lt: '2027-01-01' }, { field: 'points', gte: 8 }] }],
};
const unassigned: Filter = { field: 'assignee', null: true };
void [held, unassigned, client.subscribe({ view: 'tasks', filter: urgent }), client.subscribe({ view: 'tasks', prefix: 'b/', filter: null })];
// @ts-expect-error: a filter narrows a prefix's rows, not one key's
client.subscribe({ view: 'tasks', key: 'board1/t1', filter: mine });
// @ts-expect-error: nor a window's
client.subscribe({ view: 'kudos', key: 'team', limit: 10, filter: mine });
// @ts-expect-error: a filter is a JSON object, not a string of SQL
client.subscribe({ view: 'tasks', filter: 'assignee = ada' });
// @ts-expect-error: a comparison has exactly one operator
const twoOperators: Filter = { field: 'points', gt: 1, lt: 5 };
// @ts-expect-error: a field is compared with a string, a number or a boolean
const objectValue: Filter = { field: 'assignee', eq: { name: 'ada' } };
// @ts-expect-error: `and` takes filters, beside no field
const mixed: Filter = { field: 'assignee', eq: 'ada', and: [mine] };
void [twoOperators, objectValue, mixed];

// A window of a key: its top rows by score, paged by the last row.
interface Kudos {
  name: string;
  count: number;
}
const top: WindowSubscription<Kudos> = client.subscribe<Kudos>({ view: 'kudos', key: 'team', limit: 10 }, {
  change: (c) => {
    for (const op of c.ops) {
      const score: number | undefined = op.op === 'upsert' ? op.score : undefined;
      void score;
    }
    const leader: RankedRow<Kudos> | undefined = c.ranked[0];
    void leader?.value.name;
  },
});
const cursor: PageCursor | null = top.nextPage();
const page2: WindowSubscription<Kudos> = client.subscribe<Kudos>({ view: 'kudos', key: 'team', limit: 10, after: cursor });
const scoreOf: number | undefined = page2.scores.get('alice');
const limit: number = top.limit;
void [scoreOf, limit, page2.after];
for (const { row, score, value } of top.ranked) void [row, score, value.count];
// @ts-expect-error: the ranking is read-only
top.ranked.push({ row: 'x', score: 1, value: { name: 'x', count: 1 } });
// @ts-expect-error: after names a page of a window: it needs a limit
client.subscribe({ view: 'kudos', key: 'team', after: { score: 1, row: 'bob' } });
// @ts-expect-error: a window is of a key
client.subscribe({ view: 'kudos', limit: 10 });
// @ts-expect-error: a cursor is {score, row}
client.subscribe({ view: 'kudos', key: 'team', limit: 10, after: { score: '1', row: 'bob' } });
const all: number = [...client.subscriptions].filter((s: AnySubscription) => s.active).length;
void all;

const off: () => void = timeline.on('state', ({ oldState, newState, reason }) => {
  const live: boolean = newState === SubscriptionState.LIVE && oldState !== 'closed';
  const code: string | undefined = reason?.code;
  void [live, code];
});
off();

async function publishAndWait(): Promise<void> {
  const offset: Offset = await client.publish({ type: 'post', payload: { user: 'alice', text: 'hi' } });
  await timeline.reflects(offset);
  await timeline.reflects([offset.token, { partition: offset.partition, id: offset.id }]);
  // @ts-expect-error: an event needs a type
  await client.publish({ payload: {} });
  const offsets: Offset[] = await client.publishBatch([{ type: 'like', payload: {}, time: '2026-11-24T00:00:00Z' }]);
  try {
    await client.publishBatch([{ type: 'like', payload: {} }], { idempotencyKey: 'like-1' });
  } catch (error) {
    const key: string | undefined = (error as LiveviewsError).idempotencyKey;
    if (key !== undefined) await client.publish({ type: 'like', payload: {} }, { idempotencyKey: key });
  }
  const frontier: Frontier = timeline.frontier;
  const done: boolean = covers(frontier, offsets);
  const order: -1 | 0 | 1 = compareEntryIds('1-0', '1-1');
  const parsed: { partition: number; id: string } = parseOffset('0:1-0');
  void [done, order, parsed];
  for await (const item of timeline) {
    const kind: 'snapshot' | 'delta' = item.kind;
    void kind;
    break;
  }
  const once = await client.get<Post>('timeline', 'alice');
  const rows: Map<string, Post> = once.rows;
  void [rows, once.position, once.lagMs];
}
void publishAndWait;

function describe(error: unknown): string {
  if (error instanceof RequestError) return `${error.code} (${error.status ?? 'ws'}): ${error.message}`;
  if (error instanceof ConnectionError) return error.retryable ? 'retrying' : 'stopped';
  if (error instanceof LiveviewsError) return error.code;
  return String(error);
}
void describe;

const tail = client.tailLog({ recent: 10 }, { entry: (e) => void e.payload });
const newest: string | undefined = tail.entries.at(-1)?.type;
void newest;
tail.close();

const connected: boolean = client.state === ClientState.CONNECTED;
const delay: number = fullJitter(3, 500, 20_000);
void [connected, delay];

const f: Frame = frame(FrameKind.DELTA, '1-0', { ops: [] });
const items = new SseParser().push('event: delta\ndata: {}\n\n');
const shape: 'key' | 'prefix' | 'window' = snapshotShape({ view: 'tasks', prefix: '', keys: {}, frontier: {} });
const message: string = encode.subscribe('s1', { view: 'kudos', key: 'team', limit: 3 }, null);
void [f, items, shape, message];

function Timeline({ user }: { user: string | null }): number {
  const { rows, state, error }: LiveView<Post> = useLiveView<Post>('timeline', user);
  const same: Client | null = useLiveviewsClient();
  void [state, error, same];
  // @ts-expect-error: the hook's view is a string
  useLiveView(3, user);
  return rows.size;
}
void Timeline;

function Board({ id }: { id: string | null }): number {
  const { keys, state }: LivePrefix<Task> = useLiveView<Task>(id === null ? null : { view: 'tasks', prefix: `${id}/` });
  const { ranked, nextPage, subscription }: LiveWindow<Kudos> = useLiveView<Kudos>({ view: 'kudos', key: 'team', limit: 5 }, { client });
  const next: PageCursor | null = nextPage;
  void [state, next, subscription?.limit];
  // @ts-expect-error: a prefix's hook gives keys, not ranked rows
  void useLiveView({ view: 'tasks', prefix: 'b/' }).ranked;
  const { keys: myKeys }: LivePrefix<Assigned> = useLiveView<Assigned>({ view: 'tasks', prefix: 'b/', filter: { field: 'assignee', eq: 'ada' } });
  void myKeys;
  return keys.size + ranked.length;
}
void Board;
void LiveviewsProvider({ client, children: null });

client.close();
