/** A small event emitter: `on` returns the function that removes the listener. */

export class Emitter {
  constructor() {
    /** @type {Map<string, Set<Function>>} */
    this._listeners = new Map();
  }

  /** Call `fn` on every `event`; returns a function that stops it. */
  on(event, fn) {
    if (typeof fn !== 'function') throw new TypeError(`the listener of '${event}' must be a function`);
    let set = this._listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this._listeners.set(event, set);
    }
    set.add(fn);
    return () => this.off(event, fn);
  }

  off(event, fn) {
    this._listeners.get(event)?.delete(fn);
  }

  /** Call `fn` on the next `event` only. */
  once(event, fn) {
    const off = this.on(event, (value) => {
      off();
      fn(value);
    });
    return off;
  }

  _emit(event, value) {
    const set = this._listeners.get(event);
    if (set === undefined) return;
    for (const fn of [...set]) {
      try {
        fn(value);
      } catch (error) {
        // A failing listener must not break the state machine that called it: report it
        // where uncaught errors go (the browser's reportError, else an uncaught exception).
        report(error);
      }
    }
  }
}

function report(error) {
  if (typeof globalThis.reportError === 'function') {
    globalThis.reportError(error);
    return;
  }
  queueMicrotask(() => {
    throw error;
  });
}
