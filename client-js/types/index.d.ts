// Type declarations of liveviews-client, written by hand to match src/.

export type ClientStateName = 'disconnected' | 'connecting' | 'connected' | 'closed';
export type SubscriptionStateName = 'connecting' | 'live' | 'reconnecting' | 'reset' | 'closed' | 'error';

export declare const ClientState: Readonly<{
  DISCONNECTED: 'disconnected';
  CONNECTING: 'connecting';
  CONNECTED: 'connected';
  CLOSED: 'closed';
}>;

export declare const SubscriptionState: Readonly<{
  CONNECTING: 'connecting';
  LIVE: 'live';
  RECONNECTING: 'reconnecting';
  RESET: 'reset';
  CLOSED: 'closed';
  ERROR: 'error';
}>;

/** Partition -> log position (`<ms>-<seq>`, or `<n>` on a Kafka log) up to which the views reflect the log. */
export type Frontier = Record<string, string>;

/** Where publish put an event: its log partition and entry id. */
export interface Offset {
  partition: number;
  id: string;
  /** `"<partition>:<id>"` */
  token: string;
}

/** What `reflects` accepts: an offset as publish answered it, or its token. */
export type OffsetLike = Offset | { partition: number; id: string } | { token: string } | string;

export interface Event<P = Record<string, unknown>> {
  type: string;
  payload: P;
  /** Event time: milliseconds since 1970 or an ISO-8601 string; the append time by default. */
  time?: number | string;
}

export interface Reason {
  code: string;
  message: string;
}

export interface ClientOptions {
  /** The gateway's http(s) URL; in a browser the page's origin by default. */
  url?: string;
  /** A bearer token. Without token or getToken, the `lv_token` cookie is the credential. */
  token?: string;
  /** Called for a token, and again when it expires or is refused. */
  getToken?: () => Promise<string | { token: string }> | string | { token: string };
  /** `auto` (default): WebSocket, or SSE where no WebSocket can be opened. */
  transport?: 'auto' | 'ws' | 'sse';
  /** How SSE sends the token: `Authorization` header (default) or `access_token` query. */
  sseAuth?: 'header' | 'query';
  /** Reconnect delays with full jitter, in ms (defaults 500 and 20000). */
  backoff?: { minDelay?: number; maxDelay?: number };
  /** Ms without a byte before a connection counts as dead (default 45000: 3 heartbeats). */
  heartbeatTimeout?: number;
  /** Ms before a connection attempt counts as failed (default 10000). */
  connectTimeout?: number;
  fetch?: typeof fetch;
  WebSocket?: unknown;
  /** Read SSE with this EventSource instead of fetch; the token then goes in the query. */
  EventSource?: unknown;
  /** Follow the browser's online/offline events (default true). */
  watchOnline?: boolean;
  /** Times a batch whose answer was lost (or a 5xx) is sent again with its idempotency key
   *  before publish rejects (default 3). */
  publishRetries?: number;
}

/** How a batch is published: under this idempotency key (1 to 200 visible ASCII characters)
 *  rather than a new one, e.g. the `idempotencyKey` of an earlier publish's error. */
export interface PublishOptions {
  idempotencyKey?: string;
}

type Listener<T> = (value: T) => void;
type Off = () => void;

export declare class LiveviewsError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly retryable: boolean;
  /** Extra fields of the gateway's answer, e.g. `index` and `field` of a refused event. */
  readonly details: Record<string, unknown>;
  /** On an error that ended a publish: the batch's key, to send it again without appending it twice. */
  readonly idempotencyKey?: string;
}
export declare class RequestError extends LiveviewsError {}
export declare class ConnectionError extends LiveviewsError {}
export declare class ProtocolError extends LiveviewsError {}
export declare class StateError extends LiveviewsError {}

export interface StateChange<S extends string> {
  oldState: S;
  newState: S;
  /** Why, when there is a reason: the lost connection, the reset, the refusal. */
  reason: Reason | LiveviewsError | null;
}

/** One key: the same as `subscribe(view, key)`. The query shapes are docs/PROTOCOL.md, section 5.1. */
export interface KeyQuery {
  view: string;
  key: string;
  prefix?: never;
  filter?: never;
  limit?: never;
  after?: never;
}

/**
 * The keys of `view` that start with `prefix`; without one (or ''), the whole view. With a
 * `filter` (null: none), only their rows that match it (docs/PROTOCOL.md, section 5.2).
 */
export interface PrefixQuery {
  view: string;
  prefix?: string;
  filter?: Filter | null;
  key?: never;
  limit?: never;
  after?: never;
}

/** The `limit` rows of `key` of highest score, or the `limit` rows after the row `after` names. */
export interface WindowQuery {
  view: string;
  key: string;
  limit: number;
  after?: PageCursor | null;
  prefix?: never;
  filter?: never;
}

/** A field of a row's value (a JSON object): its name, or a path of names into nested objects. */
export type FilterField = string | readonly string[];

/** What a field is compared with: a string, a finite number or a boolean. */
export type FilterValue = string | number | boolean;

/** Each comparison's operator and what it takes. */
interface FilterOperators {
  eq: FilterValue;
  ne: FilterValue;
  in: readonly FilterValue[];
  lt: number | string;
  lte: number | string;
  gt: number | string;
  gte: number | string;
  /** true: the field is absent or null; false: present and not null. */
  null: boolean;
}

type FilterOperator = keyof FilterOperators;

/** `{field, <one operator>: value}`: a field and exactly one operator. */
export type FilterComparison = {
  [O in FilterOperator]: { field: FilterField } & { [P in O]: FilterOperators[P] } & { [P in Exclude<FilterOperator, O>]?: never } & {
    and?: never; or?: never; not?: never;
  };
}[FilterOperator];

type NoComparison = { field?: never } & { [P in FilterOperator]?: never };

/**
 * A filter of rows by their fields (docs/PROTOCOL.md, section 5.2): a comparison, or `and`, `or`
 * (1 to 32 filters) and `not`. The gateway checks it and its limits, and refuses it with
 * `invalid_filter` and a sentence naming the place.
 */
export type Filter =
  | FilterComparison
  | (NoComparison & { and: readonly Filter[]; or?: never; not?: never })
  | (NoComparison & { or: readonly Filter[]; and?: never; not?: never })
  | (NoComparison & { not: Filter; and?: never; or?: never });

export type Query = KeyQuery | PrefixQuery | WindowQuery;

/** A row of a window, where a page starts after: its score and its row id. */
export interface PageCursor {
  score: number;
  row: string;
}

/** A row of a window in the window's order. */
export interface RankedRow<V> {
  readonly row: string;
  readonly score: number;
  readonly value: V;
}

interface SnapshotInfo {
  kind: 'snapshot';
  frontier: Frontier;
  /** Ms the view was behind the log when this frontier was committed (0: caught up); null: unknown. */
  lagMs: number | null;
  eventId: string;
  /** True when a resume failed and these rows start over (see `reason`). */
  wasRecovering: boolean;
  /** The reset code when `wasRecovering`: `epoch_changed`, `history_trimmed`, ... */
  reason: string | null;
}

export interface SnapshotEvent<V> extends SnapshotInfo {
  rows: ReadonlyMap<string, V>;
}

/** A prefix's snapshot: each key that has rows, with its rows. */
export interface PrefixSnapshotEvent<V> extends SnapshotInfo {
  keys: ReadonlyMap<string, ReadonlyMap<string, V>>;
}

export interface WindowSnapshotEvent<V> extends SnapshotInfo {
  rows: ReadonlyMap<string, V>;
  ranked: readonly RankedRow<V>[];
}

export type Op<V> = { op: 'upsert'; row: string; value: V } | { op: 'delete'; row: string };

/** A window's op: an upsert carries the row's score. */
export type WindowOp<V> = { op: 'upsert'; row: string; value: V; score: number } | { op: 'delete'; row: string };

export interface ChangeEvent<V> {
  kind: 'delta';
  ops: Op<V>[];
  rows: ReadonlyMap<string, V>;
  eventId: string;
}

/**
 * One key's delta in a prefix: `rows` is that key's rows after it (empty: the key was dropped, or
 * never held). A delta that changes nothing (a delete of a row not held, which a filtered
 * prefix may be sent on a resume) leaves `keys` the same Map as before.
 */
export interface PrefixChangeEvent<V> {
  kind: 'delta';
  key: string;
  ops: Op<V>[];
  rows: ReadonlyMap<string, V>;
  keys: ReadonlyMap<string, ReadonlyMap<string, V>>;
  eventId: string;
}

export interface WindowChangeEvent<V> {
  kind: 'delta';
  ops: WindowOp<V>[];
  rows: ReadonlyMap<string, V>;
  ranked: readonly RankedRow<V>[];
  eventId: string;
}

interface FollowEvents {
  progress: { frontier: Frontier; lagMs: number | null };
  state: StateChange<SubscriptionStateName>;
  error: LiveviewsError;
}

export interface SubscriptionEvents<V> extends FollowEvents {
  snapshot: SnapshotEvent<V>;
  change: ChangeEvent<V>;
}

export interface PrefixSubscriptionEvents<V> extends FollowEvents {
  snapshot: PrefixSnapshotEvent<V>;
  change: PrefixChangeEvent<V>;
}

export interface WindowSubscriptionEvents<V> extends FollowEvents {
  snapshot: WindowSnapshotEvent<V>;
  change: WindowChangeEvent<V>;
}

export type Handlers<E> = { [K in keyof E]?: Listener<E[K]> };
export type SubscriptionHandlers<V> = Handlers<SubscriptionEvents<V>>;
export type PrefixSubscriptionHandlers<V> = Handlers<PrefixSubscriptionEvents<V>>;
export type WindowSubscriptionHandlers<V> = Handlers<WindowSubscriptionEvents<V>>;

/**
 * What every subscription has, whatever it follows: its state machine, frontier, resume
 * position and events (`E`), and the snapshots and changes it iterates (`Item`).
 */
export interface SubscriptionBase<E, Item> {
  readonly view: string;
  readonly state: SubscriptionStateName;
  readonly frontier: Frontier;
  /** Ms the view was behind the log when its latest frontier was committed (0: caught up);
   *  null until a frame says, or when the gateway does not. */
  readonly lagMs: number | null;
  /** Where a reconnect resumes; opaque. */
  readonly lastEventId: string | null;
  readonly error: LiveviewsError | null;
  readonly active: boolean;
  on<K extends keyof E>(event: K, fn: Listener<E[K]>): Off;
  off<K extends keyof E>(event: K, fn: Listener<E[K]>): void;
  once<K extends keyof E>(event: K, fn: Listener<E[K]>): Off;
  /** Resolves at the first snapshot. */
  ready(): Promise<this>;
  /** Resolves once this view reflects every offset (read-your-writes). The gateway is asked
   *  for the covering frontier at once: a `wait` on the WebSocket, or over SSE one posted for
   *  the subscription's stream; a lost wait is answered by the gateway's progress, later. */
  reflects(offsets: OffsetLike | OffsetLike[], options?: { signal?: AbortSignal }): Promise<void>;
  unsubscribe(): void;
  [Symbol.asyncIterator](): AsyncIterableIterator<Item>;
}

/** One key's rows. (At run time the prefix and window subscriptions extend this class.) */
export interface Subscription<V = unknown> extends SubscriptionBase<SubscriptionEvents<V>, SnapshotEvent<V> | ChangeEvent<V>> {}
export declare class Subscription<V = unknown> {
  readonly key: string;
  /** The current rows; a new Map after every change. Read-only. */
  readonly rows: ReadonlyMap<string, V>;
}

/** The keys of a view that start with a prefix (or every key), each with its rows. */
export interface PrefixSubscription<V = unknown>
  extends SubscriptionBase<PrefixSubscriptionEvents<V>, PrefixSnapshotEvent<V> | PrefixChangeEvent<V>> {}
export declare class PrefixSubscription<V = unknown> {
  readonly prefix: string;
  /** The filter its rows match (a frozen copy of the one given), or null: every row. */
  readonly filter: Filter | null;
  /** Key -> its rows; a new Map after every change, as is the changed key's. Read-only. */
  readonly keys: ReadonlyMap<string, ReadonlyMap<string, V>>;
}

/** A window of a key: its top rows by score, or the page after `after`. */
export interface WindowSubscription<V = unknown>
  extends SubscriptionBase<WindowSubscriptionEvents<V>, WindowSnapshotEvent<V> | WindowChangeEvent<V>> {}
export declare class WindowSubscription<V = unknown> {
  readonly key: string;
  readonly limit: number;
  readonly after: PageCursor | null;
  readonly rows: ReadonlyMap<string, V>;
  readonly scores: ReadonlyMap<string, number>;
  /** The rows by score descending, ties by row id descending (UTF-8 byte order). */
  readonly ranked: readonly RankedRow<V>[];
  /** The cursor of the next page (this window's last row), or null while it is not full. */
  nextPage(): PageCursor | null;
}

/** One member of a group: a key and its rows, as of the group's latest frame. */
export interface GroupMember<V = unknown> {
  readonly view: string;
  readonly key: string;
  /** A new Map after every group frame that changed it. Read-only. */
  readonly rows: ReadonlyMap<string, V>;
}

interface GroupInfo<V> {
  /** Every member, in the order the group was opened with. */
  members: readonly GroupMember<V>[];
  /** The log position every member reflects. */
  frontier: Frontier;
  /** The indexes of the members this frame changed. */
  changed: number[];
}

export interface GroupSnapshotEvent<V> extends GroupInfo<V> {
  kind: 'snapshot';
  wasRecovering: boolean;
  reason: string | null;
}

export interface GroupChangeEvent<V> extends GroupInfo<V> {
  kind: 'group';
}

export interface GroupEvents<V> extends FollowEvents {
  snapshot: GroupSnapshotEvent<V>;
  change: GroupChangeEvent<V>;
}

export type GroupHandlers<V> = Handlers<GroupEvents<V>>;

/**
 * Keys followed as one group (docs/PROTOCOL.md, section 5.3): released together, so that the
 * page never shows one of them reflecting a write another does not reflect yet.
 */
export interface Group<V = unknown> extends SubscriptionBase<GroupEvents<V>, GroupSnapshotEvent<V> | GroupChangeEvent<V>> {}
export declare class Group<V = unknown> {
  readonly members: readonly GroupMember<V>[];
}

export type AnySubscription = Subscription | PrefixSubscription | WindowSubscription | Group;

export interface LogEntry {
  partition: number;
  id: string;
  type: string;
  key: string;
  /** Event time, ISO-8601. */
  time: string;
  payload: Record<string, unknown>;
}

export interface LogTailEvents {
  entry: LogEntry;
  state: StateChange<Exclude<SubscriptionStateName, 'reset'>>;
  error: LiveviewsError;
}

export declare class LogTail {
  readonly state: Exclude<SubscriptionStateName, 'reset'>;
  readonly entries: readonly LogEntry[];
  readonly error: LiveviewsError | null;
  on<E extends keyof LogTailEvents>(event: E, fn: Listener<LogTailEvents[E]>): Off;
  off<E extends keyof LogTailEvents>(event: E, fn: Listener<LogTailEvents[E]>): void;
  close(): void;
}

export interface ClientEvents {
  state: { oldState: ClientStateName; newState: ClientStateName };
  error: LiveviewsError;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly url: string;
  readonly state: ClientStateName;
  /** The transport in use: `auto` becomes `ws` or `sse`. */
  readonly transport: 'ws' | 'sse';
  readonly subscriptions: ReadonlySet<AnySubscription>;
  on<E extends keyof ClientEvents>(event: E, fn: Listener<ClientEvents[E]>): Off;
  off<E extends keyof ClientEvents>(event: E, fn: Listener<ClientEvents[E]>): void;
  subscribe<V = unknown>(view: string, key: string, handlers?: SubscriptionHandlers<V>): Subscription<V>;
  subscribe<V = unknown>(query: KeyQuery, handlers?: SubscriptionHandlers<V>): Subscription<V>;
  subscribe<V = unknown>(query: PrefixQuery, handlers?: PrefixSubscriptionHandlers<V>): PrefixSubscription<V>;
  subscribe<V = unknown>(query: WindowQuery, handlers?: WindowSubscriptionHandlers<V>): WindowSubscription<V>;
  /** Follow several keys as one group (docs/PROTOCOL.md, section 5.3). */
  group<V = unknown>(members: KeyQuery[], handlers?: GroupHandlers<V>): Group<V>;
  publish(event: Event, options?: PublishOptions): Promise<Offset>;
  publishBatch(events: Event[], options?: PublishOptions): Promise<Offset[]>;
  get<V = unknown>(view: string, key: string): Promise<{ rows: Map<string, V>; frontier: Frontier; lagMs: number | null; position: string }>;
  tailLog(options?: { recent?: number; keep?: number }, handlers?: { [E in keyof LogTailEvents]?: Listener<LogTailEvents[E]> }): LogTail;
  setToken(token: string): void;
  disconnect(): void;
  connect(): void;
  close(): void;
}

export declare function createClient(options?: ClientOptions): Client;
export declare function compareEntryIds(a: string, b: string): -1 | 0 | 1;
export declare function covers(frontier: Frontier, offsets: { partition: number; id: string }[]): boolean;
export declare function parseOffset(offset: OffsetLike): { partition: number; id: string };
export declare function fullJitter(attempt: number, minDelay: number, maxDelay: number, random?: () => number): number;
