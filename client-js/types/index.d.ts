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

/** Partition -> entry id (`<ms>-<seq>`) up to which the views reflect the log. */
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
}

type Listener<T> = (value: T) => void;
type Off = () => void;

export declare class LiveviewsError extends Error {
  readonly code: string;
  readonly status: number | null;
  readonly retryable: boolean;
  /** Extra fields of the gateway's answer, e.g. `index` and `field` of a refused event. */
  readonly details: Record<string, unknown>;
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

export interface SnapshotEvent<V> {
  kind: 'snapshot';
  rows: ReadonlyMap<string, V>;
  frontier: Frontier;
  /** Ms the view was behind the log when this frontier was committed (0: caught up); null: unknown. */
  lagMs: number | null;
  eventId: string;
  /** True when a resume failed and these rows start over (see `reason`). */
  wasRecovering: boolean;
  /** The reset code when `wasRecovering`: `epoch_changed`, `history_trimmed`, ... */
  reason: string | null;
}

export type Op<V> = { op: 'upsert'; row: string; value: V } | { op: 'delete'; row: string };

export interface ChangeEvent<V> {
  kind: 'delta';
  ops: Op<V>[];
  rows: ReadonlyMap<string, V>;
  eventId: string;
}

export interface SubscriptionEvents<V> {
  snapshot: SnapshotEvent<V>;
  change: ChangeEvent<V>;
  progress: { frontier: Frontier; lagMs: number | null };
  state: StateChange<SubscriptionStateName>;
  error: LiveviewsError;
}

export type SubscriptionHandlers<V> = { [E in keyof SubscriptionEvents<V>]?: Listener<SubscriptionEvents<V>[E]> };

export declare class Subscription<V = unknown> {
  readonly view: string;
  readonly key: string;
  readonly state: SubscriptionStateName;
  /** The current rows; a new Map after every change. Read-only. */
  readonly rows: ReadonlyMap<string, V>;
  readonly frontier: Frontier;
  /** Ms the view was behind the log when its latest frontier was committed (0: caught up);
   *  null until a frame says, or when the gateway does not. */
  readonly lagMs: number | null;
  /** Where a reconnect resumes; opaque. */
  readonly lastEventId: string | null;
  readonly error: LiveviewsError | null;
  readonly active: boolean;
  on<E extends keyof SubscriptionEvents<V>>(event: E, fn: Listener<SubscriptionEvents<V>[E]>): Off;
  off<E extends keyof SubscriptionEvents<V>>(event: E, fn: Listener<SubscriptionEvents<V>[E]>): void;
  once<E extends keyof SubscriptionEvents<V>>(event: E, fn: Listener<SubscriptionEvents<V>[E]>): Off;
  /** Resolves at the first snapshot. */
  ready(): Promise<this>;
  /** Resolves once this view reflects every offset (read-your-writes). */
  reflects(offsets: OffsetLike | OffsetLike[], options?: { signal?: AbortSignal }): Promise<void>;
  unsubscribe(): void;
  [Symbol.asyncIterator](): AsyncIterableIterator<SnapshotEvent<V> | ChangeEvent<V>>;
}

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
  readonly subscriptions: ReadonlySet<Subscription>;
  on<E extends keyof ClientEvents>(event: E, fn: Listener<ClientEvents[E]>): Off;
  off<E extends keyof ClientEvents>(event: E, fn: Listener<ClientEvents[E]>): void;
  subscribe<V = unknown>(view: string, key: string, handlers?: SubscriptionHandlers<V>): Subscription<V>;
  publish(event: Event): Promise<Offset>;
  publishBatch(events: Event[]): Promise<Offset[]>;
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
