/**
 * Offsets and frontiers, for read-your-writes. A publish answers each event's offset
 * `{partition, id}`; a view reflects it once the frontier's position for that partition is at
 * or after `id`. A position is a Redis Streams entry id `<ms>-<seq>` or, on a Kafka log, `<n>`,
 * the event's Kafka offset plus one; positions compare as pairs of numbers (`<n>` as `<n>-0`),
 * not as strings.
 */

import { ProtocolError } from './errors.js';

const ENTRY_ID = /^(\d{1,20})(?:-(\d{1,20}))?$/;

function entryTuple(id) {
  const match = ENTRY_ID.exec(id);
  if (match === null) throw new ProtocolError(`'${id}' is not a log position of the form <ms>-<seq> or <n>`);
  return [BigInt(match[1]), BigInt(match[2] ?? 0)];
}

/** -1, 0 or 1 as entry id `a` is before, equal to or after `b`. */
export function compareEntryIds(a, b) {
  const [am, as] = entryTuple(a);
  const [bm, bs] = entryTuple(b);
  if (am !== bm) return am < bm ? -1 : 1;
  if (as !== bs) return as < bs ? -1 : 1;
  return 0;
}

/**
 * An offset from what a publish answered: `{partition, id}` (with or without `token`), or a
 * token string `"<partition>:<ms>-<seq>"` (`"<partition>:<n>"` on a Kafka log).
 */
export function parseOffset(offset) {
  if (typeof offset === 'string') {
    const at = offset.indexOf(':');
    const partition = Number(offset.slice(0, at));
    const id = offset.slice(at + 1);
    if (at < 1 || !Number.isInteger(partition) || !ENTRY_ID.test(id)) {
      throw new TypeError(`offset '${offset}' is not of the form '<partition>:<ms>-<seq>' or '<partition>:<n>'`);
    }
    return { partition, id };
  }
  if (offset !== null && typeof offset === 'object') {
    if (typeof offset.token === 'string' && offset.id === undefined) return parseOffset(offset.token);
    if (Number.isInteger(offset.partition) && typeof offset.id === 'string' && ENTRY_ID.test(offset.id)) {
      return { partition: offset.partition, id: offset.id };
    }
  }
  throw new TypeError('an offset is {partition, id} or a "<partition>:<position>" token, as publish answers');
}

/** Whether `frontier` (partition -> entry id) covers every one of `offsets`. */
export function covers(frontier, offsets) {
  for (const { partition, id } of offsets) {
    const have = frontier[String(partition)];
    if (have === undefined || compareEntryIds(have, id) < 0) return false;
  }
  return true;
}

/** The newer entry id of each partition: a frontier never moves back within one epoch. */
export function mergeFrontier(older, newer) {
  const out = { ...older };
  for (const [partition, id] of Object.entries(newer)) {
    if (out[partition] === undefined || compareEntryIds(out[partition], id) < 0) out[partition] = id;
  }
  return out;
}

/** The latest offset of each partition among `offsets`: a frontier covers them all once it
 *  covers these. */
export function latestOfEach(offsets) {
  const latest = new Map();
  for (const offset of offsets) {
    const have = latest.get(offset.partition);
    if (have === undefined || compareEntryIds(have.id, offset.id) < 0) latest.set(offset.partition, offset);
  }
  return [...latest.values()];
}
