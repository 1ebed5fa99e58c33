/**
 * React bindings: `useLiveView(view, key)` keeps a component on a view's current rows, and
 * `useLiveView(query)` on a query's: a prefix's keys, or a window's ranked rows.
 *
 * React is the host application's (a peer dependency), imported here only; the core client
 * does not need it. Give the client to the tree once with `<LiveviewsProvider client={...}>`.
 *
 *   const { rows, state } = useLiveView('timeline', user);
 *   // rows: Map of row id -> value, a new Map after every change; state: the subscription's
 *   const { keys } = useLiveView({ view: 'tasks', prefix: `${board}/` });
 *   const mine = useLiveView({ view: 'tasks', prefix: `${board}/`, filter: { field: 'assignee', eq: me } });
 *   const { ranked, nextPage } = useLiveView({ view: 'kudos', key: team, limit: 10 });
 */

import * as ReactModule from 'react';

import { QueryShape, parseQuery } from './query.js';

// A CommonJS React seen through ESM interop keeps its functions on the default export.
const React = typeof ReactModule.useState === 'function' ? ReactModule : ReactModule.default;

const ClientContext = React.createContext(null);

/** What a component sees of each shape: the subscription's contents (empty before it has any). */
const CONTENTS = {
  [QueryShape.KEY]: (sub) => ({ rows: sub?.rows ?? new Map() }),
  [QueryShape.PREFIX]: (sub) => ({ keys: sub?.keys ?? new Map() }),
  [QueryShape.WINDOW]: (sub) => ({ rows: sub?.rows ?? new Map(), ranked: sub?.ranked ?? [], nextPage: sub?.nextPage() ?? null }),
};
const IDLE = Object.freeze({ state: 'connecting', error: null, subscription: null });
// Nothing is subscribed: whatever the shape, its contents are empty.
const NOTHING = Object.freeze({ ...CONTENTS.key(null), ...CONTENTS.prefix(null), ...CONTENTS.window(null), ...IDLE });

/** Makes `client` the one `useLiveView` uses below it. */
export function LiveviewsProvider({ client, children }) {
  return React.createElement(ClientContext.Provider, { value: client }, children);
}

/** The client given by the nearest LiveviewsProvider. */
export function useLiveviewsClient() {
  return React.useContext(ClientContext);
}

/** `(view, key, options?)` or `(query, options?)` as `{query, options}`; query null for none. */
function readArguments(viewOrQuery, key, options) {
  if (viewOrQuery !== null && typeof viewOrQuery === 'object') return { query: parseQuery(viewOrQuery), options: key ?? {} };
  if (viewOrQuery == null && key !== null && typeof key === 'object') return { query: null, options: key };
  if (viewOrQuery == null || key == null) return { query: null, options: options ?? {} };
  if (typeof viewOrQuery !== 'string' || typeof key !== 'string') {
    throw new TypeError('useLiveView(view, key) takes two strings, or useLiveView(query) a query');
  }
  return { query: parseQuery({ view: viewOrQuery, key }), options: options ?? {} };
}

/**
 * The current contents of `view`/`key`, or of `query`, kept current: `{rows, state, error,
 * subscription}` for a key, `{keys, ...}` for a prefix, `{rows, ranked, nextPage, ...}` for a
 * window. While `view`, `key` or `query` is null nothing is subscribed (e.g. before sign-in).
 * `options.client` overrides the provider's client.
 */
export function useLiveView(viewOrQuery, key, options) {
  const provided = React.useContext(ClientContext);
  const { query, options: given } = readArguments(viewOrQuery, key, options);
  const client = given.client ?? provided;
  if (client === null || client === undefined) {
    throw new Error('useLiveView needs a client: wrap the app in <LiveviewsProvider client={client}>');
  }
  // A query object is new at every render: the subscription follows what it says, not which object it is.
  const identity = query === null ? null : JSON.stringify(query);
  const [current, setCurrent] = React.useState(NOTHING);
  React.useEffect(() => {
    if (query === null) {
      setCurrent(NOTHING);
      return undefined;
    }
    const { shape, ...fields } = query;
    const contents = CONTENTS[shape];
    const sub = client.subscribe(fields);
    const update = () => setCurrent({ ...contents(sub), state: sub.state, error: sub.error, subscription: sub });
    const offs = ['snapshot', 'change', 'state'].map((event) => sub.on(event, update));
    update();
    return () => {
      offs.forEach((off) => off());
      sub.unsubscribe();
    };
  }, [client, identity]);
  return current;
}
