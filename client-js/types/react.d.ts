// Type declarations of liveviews-client/react.

import type { Client, LiveviewsError, Subscription, SubscriptionStateName } from './index.js';

export interface LiveView<V> {
  rows: ReadonlyMap<string, V>;
  state: SubscriptionStateName;
  error: LiveviewsError | null;
  subscription: Subscription<V> | null;
}

export declare function LiveviewsProvider(props: { client: Client; children?: unknown }): unknown;
export declare function useLiveviewsClient(): Client | null;
export declare function useLiveView<V = unknown>(
  view: string | null | undefined,
  key: string | null | undefined,
  options?: { client?: Client },
): LiveView<V>;
