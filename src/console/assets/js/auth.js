// Who the console is speaking as. With `--auth-file` the service answers
// 401 until the operator gives a bearer token; the token is kept in this
// tab's sessionStorage (never a cookie, so no other site's page can make
// the browser send it) and sent as `Authorization: Bearer …`.
//
// Whether the token is an admin's is asked of the service itself (and its
// role, which decides the buttons shown: the overview's `you`): the
// overview lists the nodes to admins only, and an admin always sees at
// least the node answering it; without an overview, the admin-only
// `GET /stats?scope=all` says (200 or 403). The console hides what a
// tenant may not use; the service refuses it either way.

import {clearToken, request, setToken, token} from './api.js';
import {h, notice, replace} from './dom.js';

let identity = null;

/**
 * `{admin, tenant, tokenUsed}` for the current token; rejects with the
 * ApiError of a 401 when the service wants a (different) token.
 */
export async function whoami() {
  if (identity) return identity;
  let admin = false;
  let tenant = null;
  let role = null;
  let principal = null;
  try {
    const overview = (await request('GET', '/v1/overview', undefined, {quiet: true})).body;
    admin = Array.isArray(overview.nodes) && overview.nodes.length > 0;
    // `*` is every tenant: the anonymous admin of a service without auth.
    tenant = overview.scope && overview.scope !== '*' ? overview.scope : null;
    // The token's role decides which actions the console offers.
    role = overview.you ? overview.you.role : null;
    principal = overview.you ? overview.you.principal : null;
  } catch (e) {
    if (e.status === 401) throw e;
    admin = await answers('/stats?scope=all');
  }
  identity = {admin, tenant, role, principal, tokenUsed: Boolean(token())};
  return identity;
}

/** Whether `path` answers this token (200) rather than refusing it (403). */
async function answers(path) {
  try {
    await request('GET', path, undefined, {quiet: true});
    return true;
  } catch (e) {
    if (e.status === 403) return false;
    throw e;
  }
}

/** Forget who we are (a new token, a 401). */
export function forget() {
  identity = null;
}

/** Sign out: the token leaves sessionStorage. */
export function signOut() {
  clearToken();
  forget();
}

/** The sign-in form; `onSignedIn` runs once a token is accepted. */
export function signInForm(main, refused, onSignedIn) {
  const input = h('input', {
    id: 'token-input', type: 'password', autocomplete: 'off', spellcheck: 'false',
    placeholder: 'Bearer token', required: true, 'aria-label': 'Bearer token',
  });
  const message = h('div', {id: 'sign-in-message'});
  if (refused) {
    message.append(notice('error', 'That token was refused (401 unauthorized). Nothing was shown.'));
  }
  const form = h('form', {id: 'sign-in', class: 'sign-in panel', on: {submit: submit}},
    h('h2', null, 'Sign in'),
    h('p', {class: 'muted'},
      'This service runs with an auth file: every request needs a bearer token. ',
      'The console keeps it in this tab only (sessionStorage) and sends it as an ',
      'Authorization header, never as a cookie.'),
    h('div', {class: 'row'}, input, h('button', {type: 'submit', class: 'primary'}, 'Sign in')),
    message);
  replace(main, form);
  input.focus();

  async function submit(event) {
    event.preventDefault();
    setToken(input.value.trim());
    forget();
    try {
      await whoami();
      onSignedIn();
    } catch (e) {
      if (e.status === 401) clearToken();
      replace(message, notice('error', e.status === 401
        ? 'That token was refused (401 unauthorized). Nothing was shown.'
        : `The service did not accept it: ${e.message}`));
    }
  }
}
