/**
 * The client's errors: one root, each with a `code` a program can switch on and a `message`
 * for people. Errors the gateway answers keep its code and status (docs/PROTOCOL.md, section 2);
 * failures of the network and of the protocol itself are translated here, once.
 */

export class LiveviewsError extends Error {
  /**
   * @param {string} message
   * @param {{code?: string, status?: number | null, retryable?: boolean, cause?: unknown,
   *          details?: Record<string, unknown>}} [options]
   */
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? 'error';
    this.status = options.status ?? null;
    this.retryable = options.retryable ?? false;
    this.details = options.details ?? {};
  }
}

/** The gateway refused a request, over HTTP (with a status) or WebSocket. */
export class RequestError extends LiveviewsError {}

/** The gateway could not be reached, or the connection to it was lost. Always retryable. */
export class ConnectionError extends LiveviewsError {
  constructor(message, options = {}) {
    super(message, { code: 'connection_lost', ...options, retryable: true });
  }
}

/** The gateway sent something that is not what docs/PROTOCOL.md describes. */
export class ProtocolError extends LiveviewsError {
  constructor(message, options = {}) {
    super(message, { code: 'protocol_error', ...options });
  }
}

/** A call that the object's state does not allow, e.g. on a closed client. */
export class StateError extends LiveviewsError {
  constructor(message, options = {}) {
    super(message, { code: 'invalid_state', ...options });
  }
}

const RETRYABLE_STATUSES = new Set([429, 500, 502, 503, 504]);
const TOKEN_CODES = new Set(['token_missing', 'token_invalid', 'token_expired']);

/** Whether a refusal can go away by refreshing the token. */
export function isTokenError(error) {
  return error instanceof RequestError && TOKEN_CODES.has(error.code);
}

/** A gateway error object `{code, message, ...}` as a RequestError. */
export function requestError(body, status = null) {
  const { code, message, type: _type, sub: _sub, req: _req, ...details } = body;
  if (typeof details.last_event_id !== 'undefined') {
    details.lastEventId = details.last_event_id;
    delete details.last_event_id;
  }
  return new RequestError(typeof message === 'string' ? message : `the gateway answered ${code}`, {
    code: typeof code === 'string' ? code : 'error',
    status,
    retryable: status !== null && RETRYABLE_STATUSES.has(status),
    details,
  });
}

/** The error a non-2xx HTTP response stands for. */
export async function errorFromResponse(response) {
  let body = null;
  try {
    body = JSON.parse(await response.text());
  } catch {
    body = null;
  }
  if (body === null || typeof body !== 'object' || typeof body.code !== 'string') {
    body = { code: `http_${response.status}`, message: `the gateway answered HTTP ${response.status}` };
  }
  return requestError(body, response.status);
}
