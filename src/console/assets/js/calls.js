// The calls (`GET /v1/tool-calls`): every filter of the list API is a
// parameter of this page's URL under the same name (`status` repeated,
// `tool`, `key`, `key_prefix`, `business_key`, `effect_id`,
// `created_after`, `created_before`, `limit`, `tenant` for an admin, and
// `next`, the cursor of the page shown), so a URL can be shared and a
// reload shows the same page. `q` is the one search box (see search.js).
// The list is one snapshot, read through `poll` (which says when it was
// read, and tries again with backoff until the service answers).

import {get, query, scope} from './api.js';
import {h, link, notice, replace} from './dom.js';
import {count, dateTime, statusBadge, STATUSES, when} from './format.js';
import {liveView, poll} from './poll.js';
import {search} from './search.js';

/** The list API's filters, in the order the form shows them. */
const TEXT_FILTERS = [
  ['key', 'Key (exact)'],
  ['key_prefix', 'Key prefix'],
  ['business_key', 'Business key'],
  ['effect_id', 'Effect id'],
];
const LIMITS = ['20', '50', '100', '200', '500'];

export function render(main, {query: params, who, navigate}) {
  const results = h('div', {id: 'results', class: 'panel results'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Calls'), view.marker),
    searchBox(params.get('q') || '', navigate),
    filterForm(params, who, navigate),
    view.banner,
    results);
  const q = params.get('q');
  return poll({
    read: (signal) => (q ? search(q, params, who, navigate, signal) : listPage(params, who, signal)),
    draw: (nodes) => replace(results, nodes),
    every: null,
    refused: (e) => replace(results, notice('error', failure(e))),
    view,
    stale: results,
  }).stop;
}

function failure(e) {
  if (e.status === 400) return `The service refused the filters: ${e.message}`;
  if (e.status === 403) return `Not allowed for this token: ${e.message}`;
  return `The calls could not be read: ${e.message}`;
}

/** The list API's parameters from this page's URL (the same names). */
function apiParams(params, who) {
  const out = {status: params.getAll('status')};
  for (const name of ['tool', 'key', 'key_prefix', 'business_key', 'effect_id',
    'created_after', 'created_before', 'limit', 'next']) {
    out[name] = params.get(name);
  }
  out.tenant = scope(params, who);
  return out;
}

/** One page of the list, with the links to the next and the first. */
async function listPage(params, who, signal) {
  const answer = await get(`/v1/tool-calls${query(apiParams(params, who))}`, signal);
  const calls = answer.calls || [];
  const here = new URLSearchParams(params);
  here.delete('next');
  const first = `/ui/calls${here.toString() ? `?${here}` : ''}`;
  const pager = h('nav', {class: 'pager', 'aria-label': 'Pages'},
    params.get('next') ? link(first, '« First page') : null,
    h('span', {class: 'muted', id: 'page-size'}, `${count(calls.length)} call${calls.length === 1 ? '' : 's'} on this page`),
    answer.next ? link(`/ui/calls?${withParam(params, 'next', answer.next)}`, 'Next page »') : null);
  return [callTable(calls, who), pager];
}

function withParam(params, name, value) {
  const next = new URLSearchParams(params);
  next.set(name, value);
  return next.toString();
}

/** The table of calls; `matched` (optional) names why each was found. */
export function callTable(calls, who, matched) {
  if (!calls.length) {
    return h('p', {class: 'empty muted', id: 'no-calls'}, 'No calls match.');
  }
  const showTenant = who.admin && calls.some((c) => c.tenant !== undefined);
  const columns = ['Status', 'Call', 'Tool', 'Key', showTenant ? 'Tenant' : null,
    matched ? 'Found by' : null, 'Attempt', 'Created', 'Updated'].filter(Boolean);
  return h('table', {class: 'table calls', id: 'calls-table'},
    h('thead', null, h('tr', null, columns.map((c) => h('th', null, c)))),
    h('tbody', null, calls.map((c, i) => h('tr', {dataset: {callId: c.call_id, status: c.status}},
      h('td', {'data-label': 'Status'}, statusBadge(c.status)),
      h('td', {'data-label': 'Call'}, link(`/ui/calls/${encodeURIComponent(c.call_id)}`, h('code', null, c.call_id))),
      h('td', {'data-label': 'Tool'}, c.tool),
      h('td', {'data-label': 'Key', class: 'key'}, h('code', {class: 'idem-key'}, c.idem_key)),
      showTenant ? h('td', {'data-label': 'Tenant', class: 'tenant-cell'}, c.tenant) : null,
      matched ? h('td', {'data-label': 'Found by'}, matched[i]) : null,
      h('td', {'data-label': 'Attempt', class: 'num'}, String(c.attempt)),
      h('td', {'data-label': 'Created'}, h('span', {title: dateTime(c.created_at)}, dateTime(c.created_at))),
      h('td', {'data-label': 'Updated'}, when(c.updated_at))))));
}

function searchBox(value, navigate) {
  const input = h('input', {type: 'search', name: 'q', id: 'search-input', value,
    placeholder: 'Call id, key, business key or effect id', 'aria-label': 'Search calls', spellcheck: 'false'});
  return h('form', {class: 'search', role: 'search', id: 'search', on: {submit: (event) => {
    event.preventDefault();
    const q = input.value.trim();
    navigate(q ? `/ui/calls?${new URLSearchParams({q})}` : '/ui/calls');
  }}}, input, h('button', {type: 'submit', class: 'primary'}, 'Find'));
}

function filterForm(params, who, navigate) {
  const chosen = new Set(params.getAll('status'));
  const statusBoxes = STATUSES.map((status) => h('label', {class: 'check'},
    h('input', {type: 'checkbox', name: 'status', value: status, checked: chosen.has(status)}),
    statusBadge(status)));
  const text = (name, label, value, extra) => h('label', {class: 'field'}, h('span', null, label),
    h('input', Object.assign({name, value: value || '', spellcheck: 'false'}, extra || {})));
  const tool = h('select', {name: 'tool'}, h('option', {value: ''}, 'any tool'));
  toolOptions(tool, params.get('tool'));
  const limit = h('select', {name: 'limit'}, LIMITS.map((n) => h('option', {value: n}, n)));
  limit.value = LIMITS.includes(params.get('limit')) ? params.get('limit') : '50';
  const active = [...params.keys()].filter((name) => name !== 'q' && name !== 'next').length;
  const form = h('form', {id: 'filters', on: {submit}},
    h('fieldset', {class: 'statuses'}, h('legend', null, 'Status'), statusBoxes),
    h('div', {class: 'fields'},
      h('label', {class: 'field'}, h('span', null, 'Tool'), tool),
      TEXT_FILTERS.map(([name, label]) => text(name, label, params.get(name))),
      text('created_after', 'Created after', toLocal(params.get('created_after')), {type: 'datetime-local', step: 1}),
      text('created_before', 'Created before', toLocal(params.get('created_before')), {type: 'datetime-local', step: 1}),
      who.admin ? text('tenant', 'Tenant', params.get('tenant'), {placeholder: 'every tenant'}) : null,
      h('label', {class: 'field'}, h('span', null, 'Per page'), limit)),
    h('div', {class: 'row'},
      h('button', {type: 'submit', class: 'primary', id: 'apply-filters'}, 'Apply filters'),
      link('/ui/calls', 'Clear')));
  // Open on a laptop, or when a filter is set; a summary line on a phone.
  const open = active > 0 || window.matchMedia('(min-width: 701px)').matches;
  return h('details', {class: 'filters panel', open},
    h('summary', null, active ? `Filters (${active} set)` : 'Filters'), form);

  function submit(event) {
    event.preventDefault();
    const data = new FormData(form);
    const out = new URLSearchParams();
    for (const status of data.getAll('status')) out.append('status', status);
    for (const [name, value] of data.entries()) {
      if (name === 'status' || !value) continue;
      if (name === 'limit' && value === '50') continue;
      out.set(name, name.startsWith('created_') ? toRfc3339(value) : value.trim());
    }
    navigate(`/ui/calls${out.toString() ? `?${out}` : ''}`);
  }
}

async function toolOptions(select, current) {
  try {
    const {tools} = await get('/v1/tools');
    for (const t of tools) select.append(h('option', {value: t.name}, t.name));
  } catch (_) {
    // The filter still works typed into the URL.
  }
  if (current) {
    if (![...select.options].some((o) => o.value === current)) select.append(h('option', {value: current}, current));
    select.value = current;
  }
}

/** A `datetime-local` value (local time) as RFC 3339 in UTC, to the second. */
function toRfc3339(local) {
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? local : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** RFC 3339 back into a `datetime-local` value, for the form. */
function toLocal(rfc3339) {
  if (!rfc3339) return '';
  const d = new Date(rfc3339);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}
