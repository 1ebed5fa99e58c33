// Type declarations of liveviews-client/frames: the wire format, for tools and tests.

import type { Offset, Query, RequestError } from './index.js';

export type FrameKindName = 'snapshot' | 'delta' | 'progress' | 'reset' | 'end' | 'log' | 'group' | 'heartbeat';

export declare const FrameKind: Readonly<{
  SNAPSHOT: 'snapshot';
  DELTA: 'delta';
  PROGRESS: 'progress';
  RESET: 'reset';
  END: 'end';
  LOG: 'log';
  GROUP: 'group';
  HEARTBEAT: 'heartbeat';
}>;

export interface Frame {
  kind: FrameKindName | string;
  id: string | null;
  data: Record<string, unknown> | null;
  sub: string | null;
}

export type SseItem = { event: string; id: string | null; data: string } | { comment: string };

export declare class SseParser {
  push(text: string): SseItem[];
}

export declare function frame(kind: string, id: string | null | undefined, data: unknown, sub?: string | null): Frame;
export declare function decodeSseEvent(item: SseItem): Frame;
export declare function decodeOffsets(offsets: unknown): Offset[];
/** Which query a snapshot's data answers. */
export declare function snapshotShape(data: Record<string, unknown>): 'key' | 'prefix' | 'window';
/** A score as the gateway's JSON writes a float (`9.0`, `1e-05`). */
export declare function floatText(score: number): string;

export type WsMessage =
  | { type: 'frame'; frame: Frame }
  | { type: 'heartbeat' }
  | { type: 'authenticated'; subject: string; expiresAt: number }
  | { type: 'published'; req: string; offsets: Offset[] }
  | { type: 'unsubscribed'; sub: string | null }
  | { type: 'error'; sub: string | null; req: string | null; error: RequestError }
  | { type: 'unknown'; message: Record<string, unknown> };

export declare function decodeWsMessage(text: string): WsMessage;

export declare const encode: Readonly<{
  auth(token: string): string;
  subscribe(sub: string, query: Query, lastEventId?: string | null): string;
  /** A group of key subscriptions, released together (docs/PROTOCOL.md, section 5.3). */
  subscribeGroup(
    sub: string,
    members: { sub: string; view: string; key: string; lastEventId?: string | null }[],
  ): string;
  unsubscribe(sub: string): string;
  publish(req: string, events: unknown[], idempotencyKey?: string | null): string;
}>;
