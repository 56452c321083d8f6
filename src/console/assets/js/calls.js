// The calls (`GET /v1/tool-calls`): every filter of the list API is a
// parameter of this page's URL under the same name (`status` repeated,
// `tool`, `key`, `key_prefix`, `business_key`, `effect_id`, `error_code`,
// `created_after`, `created_before`, `limit`, `tenant` for an admin, and
// `next`, the cursor of the page shown), so a URL can be shared and a
// reload shows the same page. `q` is the one search box (see search.js).
// The list is read every 2 s through `poll` (with a pause toggle), with
// how many calls the filter matches (`total=true`); each row says its
// error code, why a pending call waits, how long a running one has run.
// For an operator or an admin, rows can be selected, and the selection or
// "all N matching" cancelled or re-run (bulk.js).

import {get, query, scope} from './api.js';
import {h, link, notice, replace} from './dom.js';
import {count, dateTime, duration, statusBadge, STATUSES, waitTag, when} from './format.js';
import {liveView, poll} from './poll.js';
import {search} from './search.js';
import {bulkBar, jobProgress, selectAllBox, selectBox} from './bulk.js';
import {fromInputValue, toInputValue, zoneLabel} from './timezone.js';

/** The list API's filters, in the order the form shows them. */
const TEXT_FILTERS = [
  ['key', 'Key (exact)'],
  ['key_prefix', 'Key prefix'],
  ['business_key', 'Business key'],
  ['effect_id', 'Effect id'],
];
const LIMITS = ['20', '50', '100', '200', '500'];
/** Error codes offered as the filter is typed (any code may be typed). */
const ERROR_CODES = ['cancelled', 'bad_args', 'tool_failed', 'downstream_unavailable', 'downstream_timeout',
  'downstream_rejected', 'downstream_certificate', 'downstream_tls', 'downstream_response_too_large',
  'downstream_protocol_error', 'downstream_error', 'command_tempfail', 'command_timeout', 'command_failed',
  'command_killed', 'command_output_too_large', 'command_spawn_failed'];
/** The list API's filter names (what a bulk job's filter takes). */
const FILTER_NAMES = ['tool', 'key', 'key_prefix', 'business_key', 'effect_id', 'error_code',
  'created_after', 'created_before'];

export function render(main, {query: params, who, navigate}) {
  const results = h('div', {id: 'results', class: 'panel results'}, h('p', {class: 'muted'}, 'Loading…'));
  const message = h('div', {id: 'bulk-message'});
  const jobSlot = h('div', {id: 'job-slot'});
  const view = liveView();
  main.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Calls'), view.marker, view.toggle),
    searchBox(params.get('q') || '', navigate),
    filterForm(params, who, navigate),
    message,
    jobSlot,
    view.banner,
    results);
  const q = params.get('q');
  const selection = new Set();
  let last = null;
  let stopJob = () => {};
  const redraw = () => {
    if (last) replace(results, draw(last));
  };
  const show = (job, error) => {
    stopJob();
    stopJob = jobProgress(jobSlot, job, error);
    reading.now();
  };
  function draw(page) {
    if (page.nodes) return page.nodes;
    const filter = apiFilter(params, who);
    // Bulk actions are an operator's (or an admin's): other roles see the
    // list without boxes.
    const operates = ['operator', 'admin'].includes(who.role);
    return [
      operates ? bulkBar({selection, total: page.total, filter, message, changed: () => {
        redraw();
        reading.now();
      }, show}) : null,
      callTable(page.calls, who, null, operates ? {selection, changed: redraw} : null),
      pager(page, params),
    ];
  }
  const reading = poll({
    read: async (signal) => (q
      ? {nodes: await search(q, params, who, navigate, signal)}
      : get(`/v1/tool-calls${query(Object.assign(apiParams(params, who), {total: 'true'}))}`, signal)),
    draw: (page) => {
      last = page;
      replace(results, draw(page));
    },
    refused: (e) => replace(results, notice('error', failure(e))),
    view,
    stale: results,
  });
  return () => {
    reading.stop();
    stopJob();
  };
}

function failure(e) {
  if (e.status === 400) return `The service refused the filters: ${e.message}`;
  if (e.status === 403) return `Not allowed for this token: ${e.message}`;
  return `The calls could not be read: ${e.message}`;
}

/** The list API's parameters from this page's URL (the same names). */
function apiParams(params, who) {
  const out = apiFilter(params, who);
  for (const name of ['limit', 'next']) out[name] = params.get(name);
  return out;
}

/** The page's filter alone (no page size, no cursor): a bulk job's. */
function apiFilter(params, who) {
  const out = {status: params.getAll('status')};
  for (const name of FILTER_NAMES) out[name] = params.get(name);
  out.tenant = scope(params, who);
  return out;
}

/** The count of the filter's calls, and the links to the next page and the first. */
function pager(answer, params) {
  const calls = answer.calls || [];
  const here = new URLSearchParams(params);
  here.delete('next');
  const first = `/ui/calls${here.toString() ? `?${here}` : ''}`;
  const total = answer.total;
  const matching = total
    ? `${total.exact ? '' : 'at least '}${count(total.calls)} matching`
    : null;
  return h('nav', {class: 'pager', 'aria-label': 'Pages'},
    params.get('next') ? link(first, '« First page') : null,
    h('span', {class: 'muted', id: 'page-size'},
      matching ? h('strong', {id: 'total'}, matching) : null, matching ? ' · ' : '',
      `${count(calls.length)} call${calls.length === 1 ? '' : 's'} on this page`),
    answer.next ? link(`/ui/calls?${withParam(params, 'next', answer.next)}`, 'Next page »') : null);
}

function withParam(params, name, value) {
  const next = new URLSearchParams(params);
  next.set(name, value);
  return next.toString();
}

/** What a row says beside its status: why it waits, or how long it has run. */
function stateNote(c) {
  if (c.status === 'pending') return waitTag(c.waiting_for);
  if (c.status === 'running') {
    return h('span', {class: 'tag', title: c.lease_until ? `lease until ${dateTime(c.lease_until)}` : ''},
      `runs ${duration(Date.now() / 1000 - c.updated_at)}`);
  }
  return null;
}

/**
 * The table of calls; `matched` (optional) names why each was found;
 * `select` (optional: `{selection, changed}`) adds a box to each row.
 */
export function callTable(calls, who, matched, select) {
  if (!calls.length) {
    return h('p', {class: 'empty muted', id: 'no-calls'}, 'No calls match.');
  }
  const showTenant = who.admin && calls.some((c) => c.tenant !== undefined);
  const head = [select ? selectAllBox(calls, select.selection, select.changed) : null,
    'Status', 'Call', 'Tool', 'Key', 'Error', showTenant ? 'Tenant' : null,
    matched ? 'Found by' : null, 'Attempt', 'Created', 'Updated'].filter(Boolean);
  return h('table', {class: 'table calls', id: 'calls-table'},
    h('thead', null, h('tr', null, head.map((c) => h('th', null, c)))),
    h('tbody', null, calls.map((c, i) => h('tr', {dataset: {callId: c.call_id, status: c.status}},
      select ? h('td', {'data-label': 'Select', class: 'select'}, selectBox(c, select.selection, select.changed)) : null,
      h('td', {'data-label': 'Status'}, statusBadge(c.status), stateNote(c)),
      h('td', {'data-label': 'Call'}, link(`/ui/calls/${encodeURIComponent(c.call_id)}`, h('code', null, c.call_id))),
      h('td', {'data-label': 'Tool'}, c.tool),
      h('td', {'data-label': 'Key', class: 'key'}, h('code', {class: 'idem-key'}, c.idem_key)),
      h('td', {'data-label': 'Error', class: 'error-cell'}, c.error && c.error.code
        ? link(`/ui/calls?${new URLSearchParams({error_code: c.error.code})}`, h('code', {class: 'error-code'}, c.error.code))
        : null),
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
  const codes = h('datalist', {id: 'error-codes'}, ERROR_CODES.map((code) => h('option', {value: code})));
  const zoned = ` (${zoneLabel()})`;
  const form = h('form', {id: 'filters', on: {submit}},
    h('fieldset', {class: 'statuses'}, h('legend', null, 'Status'), statusBoxes),
    h('div', {class: 'fields'},
      h('label', {class: 'field'}, h('span', null, 'Tool'), tool),
      text('error_code', 'Error code', params.get('error_code'), {list: 'error-codes', placeholder: 'any'}),
      TEXT_FILTERS.map(([name, label]) => text(name, label, params.get(name))),
      text('created_after', `Created after${zoned}`, toInput(params.get('created_after')), {type: 'datetime-local', step: 1}),
      text('created_before', `Created before${zoned}`, toInput(params.get('created_before')), {type: 'datetime-local', step: 1}),
      who.admin ? text('tenant', 'Tenant', params.get('tenant'), {placeholder: 'every tenant'}) : null,
      h('label', {class: 'field'}, h('span', null, 'Per page'), limit)),
    codes,
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

/** A `datetime-local` value (in the chosen zone) as RFC 3339 in UTC, to the second. */
function toRfc3339(value) {
  const d = fromInputValue(value);
  return d && !Number.isNaN(d.getTime()) ? d.toISOString().replace(/\.\d{3}Z$/, 'Z') : value;
}

/** RFC 3339 back into a `datetime-local` value (in the chosen zone), for the form. */
function toInput(rfc3339) {
  if (!rfc3339) return '';
  const d = new Date(rfc3339);
  return Number.isNaN(d.getTime()) ? '' : toInputValue(d);
}
