// The decoder and encoder (src/frames.js) against protocol/golden/, the files the Python
// encoder is tested against too; and the SSE parser across every way a stream can be cut.

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';

import { ProtocolError } from '../src/errors.js';
import { SseParser, decodeSseEvent, decodeWsMessage, encode, floatText, frame, snapshotShape } from '../src/frames.js';
import { parseQuery } from '../src/query.js';

const GOLDEN = new URL('../../protocol/golden/', import.meta.url);
const files = readdirSync(GOLDEN).filter((f) => f.endsWith('.json')).sort();
const golden = files.map((name) => ({ name, ...JSON.parse(readFileSync(new URL(name, GOLDEN), 'utf8')) }));

function decodeSse(text) {
  const parser = new SseParser();
  return parser.push(text).map(decodeSseEvent);
}

const FRAME_KINDS = new Set(['snapshot', 'delta', 'progress', 'reset', 'end']);

test('there are golden files of every frame kind', () => {
  const kinds = new Set(golden.map((g) => g.kind));
  for (const kind of [...FRAME_KINDS, 'heartbeat', 'error', 'published', 'unsubscribed', 'authenticated']) {
    assert.ok(kinds.has(kind), kind);
  }
});

// `builder` names the gateway's encoder of a golden frame; its `kind` is the frame's kind.
const SNAPSHOT_SHAPES = { snapshot: 'key', prefix_snapshot: 'prefix', window_snapshot: 'window' };

test('there are golden frames of every query shape', () => {
  const builders = new Set(golden.map((g) => g.builder ?? g.kind));
  for (const builder of [...Object.keys(SNAPSHOT_SHAPES), 'window_delta']) assert.ok(builders.has(builder), builder);
});

for (const g of golden.filter((x) => x.kind === 'snapshot')) {
  const shape = SNAPSHOT_SHAPES[g.builder ?? g.kind];
  test(`golden ${g.name} decodes as the snapshot of a ${shape}`, () => {
    const { frame: decoded } = decodeWsMessage(g.ws.text);
    assert.equal(snapshotShape(decoded.data), shape);
  });
}

test('golden delta-window carries the score of every row it upserts', () => {
  const g = golden.find((x) => x.builder === 'window_delta');
  const { frame: decoded } = decodeWsMessage(g.ws.text);
  const upserts = decoded.data.ops.filter((op) => op.op === 'upsert');
  assert.ok(upserts.length > 0);
  assert.ok(upserts.every((op) => Number.isFinite(op.score)));
});

for (const g of golden.filter((x) => x.direction === 'server')) {
  test(`decodes golden ${g.name}`, () => {
    const { event_id: eventId = null, ...data } = g.input;
    if (g.kind === 'group') {
      // Each member frame as it would decode on its own, then the frontier.
      const members = g.input.members.map((m) => {
        const { event_id: id = null, ...memberData } = m.input;
        return { kind: m.builder, id, data: memberData, sub: m.sub };
      });
      const expected = { kind: 'group', id: eventId, data: { frames: members, frontier: g.input.frontier } };
      assert.deepEqual(decodeSse(g.sse), [{ ...expected, sub: null }]);
      assert.deepEqual(decodeWsMessage(g.ws.text), { type: 'frame', frame: { ...expected, sub: g.ws.sub } });
      return;
    }
    if (g.sse !== undefined) {
      const frames = decodeSse(g.sse);
      assert.equal(frames.length, 1);
      if (g.kind === 'heartbeat') {
        assert.equal(frames[0].kind, 'heartbeat');
      } else {
        assert.deepEqual(frames[0], { kind: g.kind, id: eventId, data, sub: null });
      }
    }
    const msg = decodeWsMessage(g.ws.text);
    if (FRAME_KINDS.has(g.kind)) {
      assert.deepEqual(msg, { type: 'frame', frame: { kind: g.kind, id: eventId, data, sub: g.ws.sub } });
    } else if (g.kind === 'heartbeat') {
      assert.deepEqual(msg, { type: 'heartbeat' });
    } else if (g.kind === 'authenticated') {
      assert.deepEqual(msg, { type: 'authenticated', subject: g.input.subject, expiresAt: g.input.expires_at });
    } else if (g.kind === 'published') {
      assert.deepEqual(msg, { type: 'published', req: g.input.req, offsets: g.input.offsets });
    } else if (g.kind === 'unsubscribed') {
      assert.deepEqual(msg, { type: 'unsubscribed', sub: g.input.sub });
    } else if (g.kind === 'error') {
      assert.equal(msg.type, 'error');
      assert.equal(msg.sub, g.input.sub ?? null);
      assert.equal(msg.req, g.input.req ?? null);
      assert.equal(msg.error.code, g.input.code);
      assert.equal(msg.error.message, g.input.message);
      if (g.input.index !== undefined) assert.equal(msg.error.details.index, g.input.index);
      if (g.input.last_event_id !== undefined) assert.equal(msg.error.details.lastEventId, g.input.last_event_id);
    } else {
      assert.fail(`no expectation for golden kind ${g.kind}`);
    }
  });
}

for (const g of golden.filter((x) => x.direction === 'client')) {
  test(`encodes golden ${g.name} byte for byte`, () => {
    const i = g.input;
    const text = {
      auth: () => encode.auth(i.token),
      subscribe: () => (i.members
        ? encode.subscribeGroup(i.sub, i.members.map((m) => ({ ...m, lastEventId: m.last_event_id })))
        : encode.subscribe(i.sub, i, i.last_event_id ?? null)),
      unsubscribe: () => encode.unsubscribe(i.sub),
      publish: () => encode.publish(i.req, i.events, i.idempotency_key ?? null),
      wait: () => encode.wait(i.sub, i.offsets),
    }[g.kind]();
    assert.equal(text, g.ws.text);
  });
}

test('a subscribe message is written from a checked query of each shape', () => {
  const text = (query, id = null) => encode.subscribe('s9', parseQuery(query), id);
  assert.equal(text({ view: 'tasks' }), '{"type":"subscribe","sub":"s9","view":"tasks","prefix":""}');
  assert.equal(text({ view: 'tasks', prefix: 'b/' }, 'e.1-0~0'), '{"type":"subscribe","sub":"s9","view":"tasks","prefix":"b/","last_event_id":"e.1-0~0"}');
  assert.equal(text({ view: 'scores', key: 'g', limit: 5 }), '{"type":"subscribe","sub":"s9","view":"scores","key":"g","limit":5}');
  // A score decoded from the gateway's 9.0 is the number 9: it goes back as the float 9.0.
  const after = JSON.parse('{"score":9.0,"row":"bob"}');
  assert.equal(
    text({ view: 'scores', key: 'g', limit: 2, after }, 'e.5-0.WzkuMCwiYm9iIl0'),
    '{"type":"subscribe","sub":"s9","view":"scores","key":"g","limit":2,"after":{"score":9.0,"row":"bob"},"last_event_id":"e.5-0.WzkuMCwiYm9iIl0"}',
  );
});

test("scores are written as the gateway's JSON writes floats", () => {
  const cases = [
    [9, '9.0'], [-0, '-0.0'], [0.5, '0.5'], [-12.25, '-12.25'], [0.0001, '0.0001'], [0.00001, '1e-05'],
    [1e15, '1000000000000000.0'], [1e16, '1e+16'], [1.5e16, '1.5e+16'], [0.1 + 0.2, '0.30000000000000004'],
    [5e-324, '5e-324'], [1.7976931348623157e308, '1.7976931348623157e+308'],
  ];
  for (const [x, text] of cases) assert.equal(floatText(x), text, String(x));
  for (const bad of [NaN, Infinity, '1']) assert.throws(() => floatText(bad), /finite number/);
});

test('the SSE parser gives the same frames however the stream is cut', () => {
  const stream = golden.filter((g) => g.sse !== undefined).map((g) => g.sse).join('');
  const whole = decodeSse(stream);
  assert.equal(whole.length, golden.filter((g) => g.sse !== undefined).length);
  for (let cut = 1; cut < stream.length; cut += 7) {
    const parser = new SseParser();
    const parts = [...parser.push(stream.slice(0, cut)), ...parser.push(stream.slice(cut))];
    assert.deepEqual(parts.map(decodeSseEvent), whole, `cut at ${cut}`);
  }
  // One character at a time, with CRLF and CR line ends as the standard allows.
  for (const eol of ['\r\n', '\r']) {
    const parser = new SseParser();
    const out = [];
    for (const ch of stream.replaceAll('\n', eol)) out.push(...parser.push(ch));
    // A lone CR at the very end waits for a possible LF: the last blank line completes it.
    out.push(...parser.push('\n'));
    assert.deepEqual(out.map(decodeSseEvent), whole, JSON.stringify(eol));
  }
});

test('the SSE parser follows the standard: one space dropped, multi-line data, no data no event', () => {
  const parser = new SseParser();
  const out = parser.push('event:x\ndata:  two spaces\ndata: second\nid: 1\n\nevent: y\n\n: c\n\n');
  assert.deepEqual(out, [{ event: 'x', id: '1', data: ' two spaces\nsecond' }, { comment: 'c' }]);
});

test('malformed frames are protocol errors, not crashes', () => {
  assert.throws(() => decodeSse('event: delta\nid: e.1-0\ndata: {not json\n\n'), ProtocolError);
  assert.throws(() => decodeSse('event: delta\nid: e.1-0\ndata: {"view":"v","key":"k"}\n\n'), ProtocolError);
  assert.throws(() => decodeSse('event: snapshot\ndata: {"view":"v","key":"k","rows":{},"frontier":{}}\n\n'), ProtocolError);
  assert.throws(() => decodeWsMessage('[1,2]'), ProtocolError);
  assert.throws(() => decodeWsMessage('{"type":"delta","data":{}}'), ProtocolError);
  assert.throws(() => frame('delta', 'e.1-0', { view: 'v', key: 'k', ops: [{ op: 'move', row: 'r' }] }), ProtocolError);
  // The shapes of section 5.1: a prefix's keys each map to rows; every row of a window has a score.
  const frontier = {};
  assert.throws(() => frame('snapshot', 'e.1-0', { view: 'v', prefix: 'p', keys: { p1: 3 }, frontier }), /keys that map each key to its rows/);
  assert.throws(() => frame('snapshot', 'e.1-0', { view: 'v', prefix: 'p', frontier }), ProtocolError);
  assert.throws(() => frame('snapshot', 'e.1-0', { view: 'v', key: 'k', limit: 2, rows: { a: 1 }, scores: {}, frontier }), /score of every row/);
  assert.throws(() => frame('snapshot', 'e.1-0', { view: 'v', key: 'k', limit: 0, rows: {}, scores: {}, frontier }), /limit/);
  assert.throws(() => frame('delta', 'e.1-0', { view: 'v', key: 'k', ops: [{ op: 'upsert', row: 'r', value: 1, score: '3' }] }), /score/);
  // A kind this client does not know passes, so a newer gateway can add kinds.
  assert.equal(decodeSse('event: novel\ndata: {}\n\n')[0].kind, 'novel');
  assert.equal(decodeWsMessage('{"type":"novel"}').type, 'unknown');
});

test('a log frame of the log feed decodes', () => {
  const data = { partition: 1, id: '5-0', type: 'like', key: 'bob', time: '2026-01-31T12:00:00.000Z', payload: { user: 'a', tweet: 'bob:1' } };
  assert.deepEqual(decodeSse(`event: log\ndata: ${JSON.stringify(data)}\n\n`), [{ kind: 'log', id: null, data, sub: null }]);
});

test('a wait names only the latest offset of each partition', () => {
  const offsets = [{ partition: 2, id: '5-0' }, { partition: 1, id: '1-0' }, { partition: 2, id: '7-0', token: '2:7-0' }];
  assert.deepEqual(JSON.parse(encode.wait('s1', offsets)).offsets, [{ partition: 2, id: '7-0' }, { partition: 1, id: '1-0' }]);
});
