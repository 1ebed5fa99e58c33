// Gateways in this process, at the protocol edge, for the offline tests: a scripted WebSocket and
// a fetch that streams SSE frames the test writes. They speak the wire format of
// docs/PROTOCOL.md and nothing else, so what the client sends and does can be checked exactly.

/** One SSE event as the gateway writes it. */
export const sse = (kind, data, id) => `event: ${kind}\n${id ? `id: ${id}\n` : ''}data: ${JSON.stringify(data)}\n\n`;

/** A WebSocket whose gateway side is `script(socket, message)`, called for every client message. */
export function scriptedWebSocket(script) {
  const sockets = [];
  class Scripted {
    constructor(url) {
      this.url = url;
      this.sent = [];
      this.closed = false;
      sockets.push(this);
      setTimeout(() => this.onopen?.(), 1);
    }

    send(text) {
      const message = JSON.parse(text);
      this.sent.push(message);
      setTimeout(() => script(this, message), 1);
    }

    deliver(message) {
      if (!this.closed) this.onmessage?.({ data: JSON.stringify(message) });
    }

    close() {
      this.closed = true;
    }
  }
  return { WebSocket: Scripted, sockets };
}

/**
 * A gateway in this process, as `fetch`: each stream request gets a stream the test writes to
 * (`streams[i].send(kind, data, id)`, `.close()`); each wait posted is kept in `waits` and
 * answered with `waitStatus` (0: a network failure).
 */
export function fakeGateway() {
  const gateway = { streams: [], waits: [], waitStatus: 204 };
  const encoder = new TextEncoder();
  gateway.fetch = async (url, init = {}) => {
    const at = new URL(url);
    if (init.method === 'POST') {
      gateway.waits.push({ path: at.pathname, headers: init.headers, credentials: init.credentials, body: JSON.parse(init.body) });
      if (gateway.waitStatus === 0) throw new TypeError('fetch failed');
      if (gateway.waitStatus === 204) return new Response(null, { status: 204 });
      return Response.json({ code: 'store_unavailable', message: 'try again' }, { status: gateway.waitStatus });
    }
    let controller;
    const body = new ReadableStream({ start(c) { controller = c; } });
    gateway.streams.push({
      url: at,
      headers: init.headers,
      send: (kind, data, id) => controller.enqueue(encoder.encode(sse(kind, data, id))),
      close: () => controller.close(),
    });
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  };
  return gateway;
}
