/**
 * React bindings: `useLiveView(view, key)` keeps a component on a view's current rows.
 *
 * React is the host application's (a peer dependency), imported here only; the core client
 * does not need it. Give the client to the tree once with `<LiveviewsProvider client={...}>`.
 *
 *   const { rows, state } = useLiveView('timeline', user);
 *   // rows: Map of row id -> value, a new Map after every change; state: the subscription's
 */

import * as ReactModule from 'react';

// A CommonJS React seen through ESM interop keeps its functions on the default export.
const React = typeof ReactModule.useState === 'function' ? ReactModule : ReactModule.default;

const ClientContext = React.createContext(null);
const NOTHING = Object.freeze({ rows: new Map(), state: 'connecting', error: null, subscription: null });

/** Makes `client` the one `useLiveView` uses below it. */
export function LiveviewsProvider({ client, children }) {
  return React.createElement(ClientContext.Provider, { value: client }, children);
}

/** The client given by the nearest LiveviewsProvider. */
export function useLiveviewsClient() {
  return React.useContext(ClientContext);
}

/**
 * The rows of `view`/`key`, kept current: `{rows, state, error, subscription}`. While `view`
 * or `key` is null nothing is subscribed (e.g. before sign-in). `options.client` overrides the
 * provider's client.
 */
export function useLiveView(view, key, options = {}) {
  const provided = React.useContext(ClientContext);
  const client = options.client ?? provided;
  if (client === null || client === undefined) {
    throw new Error('useLiveView needs a client: wrap the app in <LiveviewsProvider client={client}>');
  }
  const [current, setCurrent] = React.useState(NOTHING);
  React.useEffect(() => {
    if (view == null || key == null) {
      setCurrent(NOTHING);
      return undefined;
    }
    const sub = client.subscribe(view, key);
    const update = () => setCurrent({ rows: sub.rows, state: sub.state, error: sub.error, subscription: sub });
    const offs = ['snapshot', 'change', 'state'].map((event) => sub.on(event, update));
    update();
    return () => {
      offs.forEach((off) => off());
      sub.unsubscribe();
    };
  }, [client, view, key]);
  return current;
}
