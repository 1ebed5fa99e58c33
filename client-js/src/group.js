/**
 * A group of key subscriptions released together (docs/PROTOCOL.md, section 5.3):
 * `client.group([{view, key}, ...], handlers?)`. The page never shows one of them reflecting a
 * write that another does not reflect yet: the gateway sends the members' frames only at
 * positions of the log that every member reflects, in one `group` frame, which this applies
 * whole.
 *
 * `members` is a list, in the order given, of `{view, key, rows}` (rows: row id -> value, a new
 * Map after every group frame that changed it). Events as a key's subscription
 * (subscription.js), except that `snapshot` (the first group frame) and `change` (each later one)
 * carry `{members, frontier, changed}`: every member, the frontier they all reflect, and the
 * indexes of the members the frame changed. `reflects(offsets)` resolves once every member
 * reflects the offsets. Over WebSocket a group shares the socket; over SSE it is one stream
 * (`/v1/groups/live`), however many members it has.
 */

import { ProtocolError } from './errors.js';
import { FrameKind, encode } from './frames.js';
import { parseQuery } from './query.js';
import { Subscription, SubscriptionState } from './subscription.js';

const MAX_MEMBERS = 16;

/** The members an application gave, checked: key subscriptions only, 1 to 16 of them. */
export function parseMembers(members) {
  if (!Array.isArray(members) || members.length < 1 || members.length > MAX_MEMBERS) {
    throw new TypeError(`a group is a list of 1 to ${MAX_MEMBERS} {view, key} subscriptions`);
  }
  return members.map((member, i) => {
    const query = parseQuery(member);
    if (query.shape !== 'key') {
      throw new TypeError(`member ${i} of the group is a ${query.shape} subscription: a group holds {view, key} subscriptions only`);
    }
    return Object.freeze({ view: query.view, key: query.key });
  });
}

export class Group extends Subscription {
  /** Made by `client.group(...)`; not meant to be constructed directly. */
  constructor(client, members, handlers = {}) {
    super(client, Object.freeze({ shape: 'group', view: null, members }), handlers);
  }

  _empty() {
    /** Each member: `{view, key, rows}`, in the order the group was opened with. */
    this.members = this.query.members.map((m) => ({ view: m.view, key: m.key, rows: new Map() }));
    this._lastIds = this.members.map(() => null);
  }

  _subscribeMessage(id) {
    return encode.subscribeGroup(id, this.members.map((m, i) => ({
      sub: `m${i}`, view: m.view, key: m.key, lastEventId: this._lastIds[i],
    })));
  }

  _forgetPosition(reason) {
    this._lastIds = this.members.map(() => null);
    super._forgetPosition(reason);
  }

  _dispatch(frame) {
    if (frame.kind === FrameKind.GROUP) this._group(frame);
    // Nothing else is sent to a group; `end` and errors are the transport's.
  }

  _group(frame) {
    const changed = new Set();
    const rows = this.members.map((m) => m.rows);
    const ids = [...this._lastIds];
    let reset = null;
    let snapshots = false;
    for (const member of frame.data.frames) {
      const i = Number(member.sub.slice(1));
      if (!member.sub.startsWith('m') || !Number.isInteger(i) || i < 0 || i >= rows.length) {
        throw new ProtocolError(`a group frame names member ${member.sub}, which the group does not have`);
      }
      if (member.kind === FrameKind.SNAPSHOT) {
        rows[i] = new Map(Object.entries(member.data.rows));
        snapshots = true;
      } else if (member.kind === FrameKind.DELTA) {
        rows[i] = new Map(rows[i]);
        for (const op of member.data.ops) {
          if (op.op === 'upsert') rows[i].set(op.row, op.value);
          else rows[i].delete(op.row);
        }
      } else if (member.kind === FrameKind.RESET) {
        reset = { code: member.data.code, message: member.data.message };
      }
      if (member.id !== null) ids[i] = member.id;
      changed.add(i);
    }
    // Applied whole: nothing above changed the group until here.
    this.members.forEach((m, i) => { m.rows = rows[i]; });
    this._lastIds = ids;
    this.lastEventId = frame.id;
    this.frontier = { ...frame.data.frontier };
    const event = { members: this.members, frontier: this.frontier, changed: [...changed].sort((a, b) => a - b) };
    // A member's snapshot replaces its rows: the group's contents start over from it.
    if (!this._hadSnapshot || reset !== null || snapshots) {
      const wasRecovering = this._hadSnapshot;
      this._hadSnapshot = true;
      this._emit('snapshot', { kind: 'snapshot', ...event, wasRecovering, reason: reset?.code ?? null });
    } else {
      this._emit('change', { kind: 'group', ...event });
    }
    if (this.state !== SubscriptionState.LIVE) this._setState(SubscriptionState.LIVE, null);
    this._settleWaiters();
  }

  _path() {
    return '/v1/groups/live';
  }

  _query() {
    return { view: this.members.map((m) => m.view), key: this.members.map((m) => m.key) };
  }
}
