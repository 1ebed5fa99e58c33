// Type declarations of liveviews-client/react.

import type {
  Client,
  KeyQuery,
  LiveviewsError,
  PageCursor,
  PrefixQuery,
  PrefixSubscription,
  RankedRow,
  Subscription,
  SubscriptionStateName,
  WindowQuery,
  WindowSubscription,
} from './index.js';

interface Live {
  state: SubscriptionStateName;
  error: LiveviewsError | null;
}

export interface LiveView<V> extends Live {
  rows: ReadonlyMap<string, V>;
  subscription: Subscription<V> | null;
}

export interface LivePrefix<V> extends Live {
  keys: ReadonlyMap<string, ReadonlyMap<string, V>>;
  subscription: PrefixSubscription<V> | null;
}

export interface LiveWindow<V> extends Live {
  rows: ReadonlyMap<string, V>;
  ranked: readonly RankedRow<V>[];
  /** The cursor of the next page, or null while the window is not full. */
  nextPage: PageCursor | null;
  subscription: WindowSubscription<V> | null;
}

export interface LiveViewOptions {
  client?: Client;
}

export declare function LiveviewsProvider(props: { client: Client; children?: unknown }): unknown;
export declare function useLiveviewsClient(): Client | null;
export declare function useLiveView<V = unknown>(
  view: string | null | undefined,
  key: string | null | undefined,
  options?: LiveViewOptions,
): LiveView<V>;
export declare function useLiveView<V = unknown>(query: KeyQuery | null | undefined, options?: LiveViewOptions): LiveView<V>;
export declare function useLiveView<V = unknown>(query: PrefixQuery | null | undefined, options?: LiveViewOptions): LivePrefix<V>;
export declare function useLiveView<V = unknown>(query: WindowQuery | null | undefined, options?: LiveViewOptions): LiveWindow<V>;
