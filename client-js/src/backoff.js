/**
 * Reconnect delays with full jitter: a random delay between 0 and an exponentially growing
 * cap, so that many clients cut off together do not come back together.
 */

/** The delay before retry number `attempt` (0-based), in milliseconds. */
export function fullJitter(attempt, minDelay, maxDelay, random = Math.random) {
  const cap = Math.min(maxDelay, minDelay * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * cap);
}

export class Backoff {
  constructor({ minDelay = 500, maxDelay = 20_000, random = Math.random } = {}) {
    this.minDelay = minDelay;
    this.maxDelay = maxDelay;
    this.random = random;
    this.attempts = 0;
  }

  next() {
    return fullJitter(this.attempts++, this.minDelay, this.maxDelay, this.random);
  }

  reset() {
    this.attempts = 0;
  }
}
