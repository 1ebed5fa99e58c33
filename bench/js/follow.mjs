// Follows keys of one view through client-js under Node and counts the deltas it applies, for
// bench.clients: `node --experimental-websocket follow.mjs URL TOKEN VIEW KEY...`. Prints
// "ready" once every subscription has its snapshot, and on SIGTERM one JSON line with the
// deltas applied and the process's CPU seconds.
import { createClient } from '../../client-js/src/index.js';

const [url, token, view, ...keys] = process.argv.slice(2);
const client = createClient({ url, getToken: async () => token, transport: 'ws' });
let deltas = 0;
const subs = keys.map((key) => client.subscribe(view, key, { change: () => { deltas += 1; } }));
await Promise.all(subs.map((s) => s.ready()));
const began = process.cpuUsage();
deltas = 0;
process.stdout.write('ready\n');
process.on('SIGTERM', () => {
  const used = process.cpuUsage(began);
  process.stdout.write(`${JSON.stringify({ deltas, cpu_s: (used.user + used.system) / 1e6 })}\n`);
  process.exit(0);
});
