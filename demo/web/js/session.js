// Signing in: the gateway's development token endpoint issues a token for any user (it also
// sets the lv_token cookie). The tab remembers who it is signed in as, so a reload keeps it.

const KEY = 'chirp.user';
export const USER_PATTERN = /^[a-z0-9_]{1,32}$/;

export function currentUser() {
  const fromUrl = new URLSearchParams(location.search).get('user');
  if (fromUrl && USER_PATTERN.test(fromUrl)) {
    sessionStorage.setItem(KEY, fromUrl);
    return fromUrl;
  }
  return sessionStorage.getItem(KEY);
}

export function remember(user) {
  sessionStorage.setItem(KEY, user);
}

export function forget() {
  sessionStorage.removeItem(KEY);
  const url = new URL(location.href);
  url.searchParams.delete('user');
  history.replaceState(null, '', url);
}

/** A getToken for the client: a fresh dev token for `user` each time it is asked. */
export function tokenSource(user) {
  return async () => {
    const response = await fetch('/v1/dev/token', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ user }),
    });
    const body = await response.json();
    if (!response.ok) throw new Error(body.message ?? `sign-in failed (${response.status})`);
    return body.token;
  };
}
