// A real OpenID Connect provider (oidc-provider, pinned in package.json) for the tests: it signs
// JWT access tokens for one resource server with the client_credentials grant. Started and
// stopped by tests/support/oidc.py, which writes its configuration:
//
//   node provider.mjs CONFIG.json [PORT]     (PORT defaults to $OIDC_PORT)
//
// CONFIG.json holds:
//   keys             a JWKS of private keys, {"keys": [...]}: the first signs, all are published
//   alg              the access tokens' signing algorithm (default: the first key's alg)
//   audience         the tokens' aud (default "liveviews")
//   resource         the resource indicator clients ask for (an absolute URI; default
//                    "urn:liveviews:<audience>" unless the audience is an absolute URI itself); it is
//                    also the default, so a client that names no resource gets the same token
//   scope            the scopes the resource server allows (default "read publish service")
//   access_token_ttl seconds (default 3600)
//   claims           extra claims put in every token, e.g. {"realm_access": {"roles": ["read"]}}
//   clients          [{client_id, client_secret, subject?, claims?}]: subject is the tokens' sub
//                    (default: the client id), claims are added to that client's tokens
//
// Prints "ready <issuer>" on stdout once it listens on 127.0.0.1; exits 0 on SIGTERM or SIGINT,
// and, when OIDC_STOP_ON_STDIN_EOF is set, once its stdin ends: a test process that holds the other
// end of that pipe cannot leave it running, even when it is killed itself.

import { readFileSync } from 'node:fs';

import { Provider, errors } from 'oidc-provider';

const [configPath, portArg] = process.argv.slice(2);
const port = Number(portArg ?? process.env.OIDC_PORT);
if (!configPath || !Number.isInteger(port) || port <= 0) {
  console.error('usage: node provider.mjs CONFIG.json PORT (or OIDC_PORT in the environment)');
  process.exit(2);
}

const config = JSON.parse(readFileSync(configPath, 'utf8'));
const keys = Array.isArray(config.keys) ? config.keys : config.keys?.keys;
if (!keys?.length) {
  console.error(`${configPath}: "keys" must be a JWKS with at least one private key`);
  process.exit(2);
}
const alg = config.alg ?? keys[0].alg;
const audience = config.audience ?? 'liveviews';
const isUri = (value) => URL.parse(value) !== null;
// oidc-provider refuses a resource indicator that is no absolute URI ("liveviews" is none): the
// indicator and the audience the token carries are distinct settings of the resource server.
const resource = config.resource ?? (isUri(audience) ? audience : `urn:liveviews:${audience}`);
const scope = config.scope ?? 'read publish service';
const ttl = config.access_token_ttl ?? 3600;
const commonClaims = config.claims ?? {};
const clients = config.clients ?? [];
const byId = new Map(clients.map((c) => [c.client_id, c]));

const issuer = `http://127.0.0.1:${port}`;

const provider = new Provider(issuer, {
  clients: clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  })),
  jwks: { keys },
  // A client's ID tokens default to RS256, and oidc-provider refuses a client (at its first
  // request: invalid_client_metadata "id_token_signed_response_alg must be 'ES256'") whose
  // algorithm no key of the provider has. No ID token is made here; the tokens' alg serves.
  clientDefaults: { id_token_signed_response_alg: alg },
  features: {
    // The default dev interactions render login pages for the authorization code flow; nothing
    // here uses a browser.
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (indicator !== resource) {
          throw new errors.InvalidTarget(`unknown resource indicator ${indicator}; this provider knows ${resource}`);
        }
        return {
          audience,
          scope,
          accessTokenTTL: ttl,
          accessTokenFormat: 'jwt',
          // The key with this kid signs: the first of the JWKS, whatever else has its alg.
          jwt: { sign: { alg, kid: keys[0].kid } },
        };
      },
    },
  },
  ttl: {
    AccessToken: ttl,
    ClientCredentials: ttl,
  },
  // Claims added to each token; the standard ones (sub included) override these, so the
  // subject is set by the customizer below.
  extraTokenClaims: (ctx, token) => {
    const extra = { ...commonClaims, ...(byId.get(token.clientId)?.claims ?? {}) };
    return Object.keys(extra).length ? extra : undefined;
  },
  formats: {
    customizers: {
      jwt: (ctx, token, jwt) => {
        const subject = byId.get(token.clientId)?.subject;
        if (subject) {
          jwt.payload.sub = subject;
        }
      },
    },
  },
  // No sessions or interactions happen here; fixed keys keep oidc-provider from warning.
  cookies: { keys: ['liveviews-tests-only'] },
});

for (const event of ['server_error', 'grant.error', 'jwks.error']) {
  provider.on(event, (ctx, error) => {
    console.error(`${event}: ${error?.message ?? error}${error?.error_description ? ` (${error.error_description})` : ''}`);
  });
}

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
server.on('error', (error) => {
  console.error(`cannot listen on 127.0.0.1:${port}: ${error.message}`);
  process.exit(1);
});

function stop() {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
if (process.env.OIDC_STOP_ON_STDIN_EOF) {
  process.stdin.on('end', stop).on('error', stop).resume();
}
