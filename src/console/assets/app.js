// The console's shell: the router from `/ui/…` paths to pages, the links
// that move between them without a reload, the sign-in when the service
// answers 401, and the header saying who the console speaks as.
//
// A page is a module with `render(main, context)`; it returns a function
// that stops whatever it started (its `poll`), called before the next page
// is drawn. A path under `/ui/` that names no page gets the console's own
// not-found page. The time-zone choice (`timezone.js`) is the top bar's;
// changing it draws the page again. Every filter a page has lives in the address bar, so a URL can
// be shared and a reload shows the same thing. Who the console speaks as
// is read through `poll` too, so a console opened while the service is
// down says so and starts by itself when the service answers.

import {token, whenUnauthorized} from './js/api.js';
import {forget, signInForm, signOut, whoami} from './js/auth.js';
import {h, notice, replace} from './js/dom.js';
import {liveView, poll} from './js/poll.js';
import {setZone, zone, zoneLabel} from './js/timezone.js';
import * as overview from './js/overview.js';
import * as calls from './js/calls.js';
import * as call from './js/call.js';
import * as tools from './js/tools.js';
import * as verify from './js/verify.js';
import * as approvals from './js/approvals.js';

const ROUTES = [
  [/^\/ui\/?$/, 'overview', overview],
  [/^\/ui\/calls$/, 'calls', calls],
  [/^\/ui\/calls\/([^/]+)$/, 'calls', call],
  [/^\/ui\/approvals$/, 'approvals', approvals],
  [/^\/ui\/tools$/, 'tools', tools],
  [/^\/ui\/verify$/, 'verify', verify],
];

const main = document.getElementById('main');
let stopPage = () => {};

/** Go to a console URL (path and query) and draw its page. */
export function navigate(url, {replaceState = false} = {}) {
  if (replaceState) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  render();
}

function render() {
  stopPage();
  stopPage = () => {};
  const path = location.pathname;
  const route = ROUTES.find(([pattern]) => pattern.test(path));
  markTab(route ? route[1] : null);
  if (!route) {
    document.title = 'Not found · idempotent-tool console';
    replace(main, h('section', {class: 'panel not-found', id: 'not-found'},
      h('h1', null, 'No such page'),
      h('p', null, 'The console has no page at ', h('code', null, path), '. Its pages are:'),
      h('ul', null,
        h('li', null, h('a', {href: '/ui/', 'data-nav': true}, 'Overview')),
        h('li', null, h('a', {href: '/ui/calls', 'data-nav': true}, 'Calls'), ' (one call: /ui/calls/{call_id})'),
        h('li', null, h('a', {href: '/ui/tools', 'data-nav': true}, 'Tools')),
        h('li', null, h('a', {href: '/ui/verify', 'data-nav': true}, 'Promise check')))));
    return;
  }
  document.title = 'idempotent-tool console';
  const [pattern, , page] = route;
  const view = liveView();
  replace(main, view.banner, h('p', {class: 'muted'}, 'Loading…'));
  let stopShown = () => {};
  const reading = poll({
    read: () => whoami(),
    every: null,
    draw: (who) => {
      showWho(who);
      const params = path.match(pattern).slice(1).map(decodeURIComponent);
      const query = new URLSearchParams(location.search);
      replace(main);
      const stop = page.render(main, {params, query, who, navigate});
      if (typeof stop === 'function') stopShown = stop;
    },
    refused: (e) => {
      if (e.status === 401) return showSignIn(e);
      replace(main, notice('error', `The service refused the console: ${e.message}`));
    },
    view,
  });
  stopPage = () => {
    reading.stop();
    stopShown();
  };
}

function showSignIn(refusal) {
  showWho(null);
  const hadToken = Boolean(token());
  signOut();
  signInForm(main, hadToken && refusal.status === 401, () => render());
}

/** The one time-zone choice, in the top bar: UTC or local, the zone said. */
function zonePicker() {
  const select = h('select', {id: 'zone', 'aria-label': 'Time zone', on: {change: () => {
    setZone(select.value);
    render();
  }}}, h('option', {value: 'local'}, 'local time'), h('option', {value: 'utc'}, 'UTC'));
  select.value = zone();
  return h('span', {class: 'zone'}, 'Times: ', select,
    h('span', {class: 'zone-label', id: 'zone-label'}, zoneLabel()), ' · 24 h');
}

function showWho(who) {
  const el = document.getElementById('who');
  if (!who) return replace(el, zonePicker());
  const role = who.admin ? 'admin' : 'tenant';
  replace(el,
    zonePicker(),
    h('span', {class: `role role-${role}`, id: 'role'}, role),
    who.tenant ? h('span', {class: 'tenant', id: 'tenant-name', title: 'tenant'}, who.tenant) : null,
    who.role ? h('span', {class: 'tenant', id: 'token-role', title: `${who.principal || ''}: role`}, who.role) : null,
    who.tokenUsed ? h('button', {type: 'button', class: 'link', id: 'sign-out', on: {click: () => {
      signOut();
      render();
    }}}, 'Sign out') : null);
  document.querySelector('[data-tab="verify"]').hidden = !who.admin;
  // The queue is for those who may act on it.
  document.querySelector('[data-tab="approvals"]').hidden = !['approver', 'admin'].includes(who.role);
}

function markTab(name) {
  for (const tab of document.querySelectorAll('[data-tab]')) {
    if (tab.dataset.tab === name) tab.setAttribute('aria-current', 'page');
    else tab.removeAttribute('aria-current');
  }
}

// Links inside the console move without a reload (and keep the token
// handling and refresh timers in one place).
document.addEventListener('click', (event) => {
  const a = event.target.closest('a[data-nav]');
  if (!a || event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  const url = new URL(a.href);
  if (url.origin !== location.origin) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener('popstate', () => render());

// A 401 mid-session (the token was revoked): sign in again.
whenUnauthorized(() => {
  forget();
  render();
});

render();
