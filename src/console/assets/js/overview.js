// The overview (`GET /v1/overview`, every 2 s through `poll`, with a pause
// toggle): calls by status, the backlog and the age of the oldest pending
// call, the calls awaiting approval and the oldest wait, created and failed
// per second and the failures grouped by error code over the range chosen
// (`?range=`, 15 minutes to 7 days: readings the service keeps in its
// database, so a restart loses none), each tool's load (a paused tool
// marked), the nodes and their heartbeats, retention and the version. An
// admin sees every tenant unless `?tenant=` names one; a tenant sees its own
// calls. While the service cannot be read, the last numbers stay, greyed.

import {get, query, scope} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, dateTime, duration, statusBadge, STATUSES, when} from './format.js';
import {rateChart} from './chart.js';
import {summary as approvalSummary} from './approvals.js';
import {liveView, poll} from './poll.js';

/** The ranges the overview offers (the API's names). */
const RANGES = [['15m', '15 minutes'], ['1h', '1 hour'], ['6h', '6 hours'], ['24h', '24 hours'],
  ['3d', '3 days'], ['7d', '7 days']];

export function render(main, {query: params, who, navigate}) {
  const tenant = scope(params, who);
  const range = RANGES.some(([r]) => r === params.get('range')) ? params.get('range') : '15m';
  const body = h('div', {id: 'overview-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(
    h('div', {class: 'page-head'},
      h('h1', null, 'Overview'),
      view.marker, view.toggle,
      rangePicker(range, params, navigate),
      who.admin ? scopeForm(tenant, navigate) : null),
    view.banner,
    body);
  return poll({
    read: (signal) => get(`/v1/overview${query({tenant, range: range === '15m' ? null : range})}`, signal),
    draw: (data) => draw(body, data, tenant, range),
    refused: (e) => replace(body, notice('error', `The overview could not be read: ${e.message}`)),
    view,
    stale: body,
  }).stop;
}

/** The range of the charts and of the failures by code, in the address. */
function rangePicker(range, params, navigate) {
  const select = h('select', {id: 'range', 'aria-label': 'Range', on: {change: () => {
    const next = new URLSearchParams(params);
    if (select.value === '15m') next.delete('range');
    else next.set('range', select.value);
    navigate(`/ui/${next.toString() ? `?${next}` : ''}`);
  }}}, RANGES.map(([value, label]) => h('option', {value}, `last ${label}`)));
  select.value = range;
  return h('label', {class: 'range'}, 'Range ', select);
}

/** An admin's scope: every tenant (`*`, the default), or one by name. */
function scopeForm(tenant, navigate) {
  const input = h('input', {name: 'tenant', value: tenant === '*' ? '' : tenant, placeholder: 'every tenant',
    'aria-label': 'Tenant scope', size: 16});
  return h('form', {class: 'scope', on: {submit: (event) => {
    event.preventDefault();
    navigate(`/ui/${query({tenant: input.value.trim()})}`);
  }}}, h('label', null, 'Scope ', input), h('button', {type: 'submit'}, 'Apply'));
}

function draw(body, data, tenant, range) {
  const byStatus = data.by_status || {};
  const total = data.calls || 0;
  const backlog = data.backlog || {};
  const rates = data.rates || {created: [], failed: [], step_s: 10};
  const scoped = tenant === '*' ? null : tenant;
  const listLink = (status) => `/ui/calls${query({status, tenant: scoped})}`;
  const label = (RANGES.find(([r]) => r === range) || RANGES[0])[1];
  replace(body,
    h('div', {class: 'cards'},
      card('Calls', count(total), 'count-calls', 'in scope, every status'),
      card('Effects', count(data.effects), 'count-effects', 'side effects recorded'),
      card('Backlog', count(backlog.pending), 'backlog-pending', 'calls pending'),
      card('Oldest pending', backlog.oldest_pending_age_s === null || backlog.oldest_pending_age_s === undefined
        ? 'none' : duration(backlog.oldest_pending_age_s), 'oldest-pending', 'age of the oldest pending call'),
      card('Running', count(byStatus.running || 0), 'count-running-card', 'held under a lease now')),
    h('div', {class: 'grid-2 overview-grid'},
      panel('Calls by status', {id: 'status-counts'},
        h('ul', {class: 'bars'}, STATUSES.map((status) => {
          const n = byStatus[status] || 0;
          const share = total ? n / total : 0;
          return h('li', {dataset: {status}},
            link(listLink(status), statusBadge(status)),
            h('span', {class: 'bar', 'aria-hidden': 'true'},
              h('span', {class: `fill fill-${status}`, dataset: {share: share.toFixed(3)}})),
            h('span', {class: 'count', id: `count-${status}`}, count(n)));
        })),
        settledSummary(byStatus)),
      panel(`Throughput, last ${label}`, {id: 'rates'},
        rateChart('Calls created per second', rates.created || [], rates.step_s || 10, 'created'),
        rateChart('Calls failed per second', rates.failed || [], rates.step_s || 10, 'failed'))),
    approvalSummary(data.approvals),
    panel(`Failures by error code, last ${label}`, {id: 'failures'},
      failuresTable(data.failures_by_code || [], rates, scoped)),
    panel('Tools', {id: 'tool-load'}, toolTable(data.tools || [])),
    panel('Nodes', {id: 'nodes'}, nodeTable(data.nodes || [])),
    panel('Service', {id: 'service'}, facts([
      ['Version', data.version, 'version'],
      ['Backend', data.backend, 'backend'],
      ['Scope', data.scope === '*' ? 'every tenant' : data.scope, 'scope'],
      ['Keys kept', retention(data.retention), 'retention'],
    ])));
  // Bar widths are set as properties, not a style attribute (the CSP has no
  // 'unsafe-inline'): CSSOM writes are allowed.
  for (const fill of body.querySelectorAll('.fill[data-share]')) {
    fill.style.width = `${(Number(fill.dataset.share) * 100).toFixed(1)}%`;
  }
}

/** The share of settled calls that failed or were cancelled. */
function settledSummary(byStatus) {
  const settled = (byStatus.succeeded || 0) + (byStatus.failed || 0) + (byStatus.cancelled || 0);
  if (!settled) return h('p', {class: 'muted summary'}, 'No call has settled yet.');
  const pct = (n) => `${((100 * (n || 0)) / settled).toFixed(1)}%`;
  return h('p', {class: 'muted summary'},
    `Of ${count(settled)} settled: ${pct(byStatus.succeeded)} succeeded, `,
    `${pct(byStatus.failed)} failed, ${pct(byStatus.cancelled)} cancelled.`);
}

function card(label, value, id, hint) {
  return h('div', {class: 'card'},
    h('div', {class: 'card-label'}, label),
    h('div', {class: 'card-value', id}, value),
    h('div', {class: 'card-hint muted'}, hint));
}

function retention(r) {
  if (!r) return null;
  return r.key_ttl_s ? `${duration(r.key_ttl_s)} after a call settles` : 'forever';
}

/** Calls that failed over the range, by code, each a link to those calls. */
function failuresTable(rows, rates, tenant) {
  const since = rates.since ? `counted since ${dateTime(rates.since)}` : 'no reading yet';
  if (!rows.length) {
    return h('p', {class: 'muted', id: 'no-failures'}, `No call failed over this range (${since}).`);
  }
  const most = rows[0].calls || 1;
  return [
    h('table', {class: 'table', id: 'failures-table'},
      h('thead', null, h('tr', null, ['Error code', 'Calls failed', ''].map((c) => h('th', null, c)))),
      h('tbody', null, rows.map((row) => h('tr', {dataset: {code: row.error_code}},
        h('td', {'data-label': 'Error code'}, row.error_code
          ? link(`/ui/calls${query({error_code: row.error_code, tenant})}`, h('code', null, row.error_code))
          : h('span', {class: 'muted'}, 'no code')),
        h('td', {'data-label': 'Calls failed', class: 'num'}, count(row.calls)),
        h('td', {'data-label': 'Share'}, h('span', {class: 'bar small'},
          h('span', {class: 'fill fill-failed', dataset: {share: (row.calls / most).toFixed(3)}}))))))),
    h('p', {class: 'muted summary'}, `Entries into failed, ${since}; each code opens its calls (those still failed or waiting to retry).`),
  ];
}

function toolTable(tools) {
  if (!tools.length) return h('p', {class: 'muted'}, 'No tools.');
  return h('table', {class: 'table'},
    h('thead', null, h('tr', null, ['Tool', 'Kind', 'Running', 'Waiting', 'Limit', 'Load'].map((c) => h('th', null, c)))),
    h('tbody', null, tools.map((t) => {
      const limit = t.max_concurrency;
      const share = limit ? Math.min(1, t.running / limit) : 0;
      return h('tr', {dataset: {tool: t.name, paused: t.paused ? 'true' : 'false'}},
        h('td', {'data-label': 'Tool'}, link(`/ui/calls${query({tool: t.name})}`, h('code', null, t.name)),
          t.paused ? h('span', {class: 'tag wait wait-paused'}, '⏸ paused') : null),
        h('td', {'data-label': 'Kind'}, t.kind),
        h('td', {'data-label': 'Running', class: 'num'}, count(t.running)),
        h('td', {'data-label': 'Waiting', class: 'num'}, count(t.waiting)),
        h('td', {'data-label': 'Limit', class: 'num'}, limit === null || limit === undefined ? 'none' : count(limit)),
        h('td', {'data-label': 'Load'}, limit
          ? h('span', {class: 'bar small', title: `${t.running} of ${limit}`},
            h('span', {class: 'fill fill-running', dataset: {share: share.toFixed(3)}}))
          : h('span', {class: 'muted'}, 'uncapped')));
    })));
}

function nodeTable(nodes) {
  if (!nodes.length) {
    return h('p', {class: 'muted'}, 'Nodes are shown to admins.');
  }
  return h('table', {class: 'table'},
    h('thead', null, h('tr', null, ['Instance', 'Host', 'PID', 'Started', 'Heartbeat', 'State', 'Running']
      .map((c) => h('th', null, c)))),
    h('tbody', null, nodes.map((n) => h('tr', {dataset: {instance: n.instance_id}},
      h('td', {'data-label': 'Instance'}, h('code', null, n.instance_id)),
      h('td', {'data-label': 'Host'}, n.host),
      h('td', {'data-label': 'PID', class: 'num'}, String(n.pid)),
      h('td', {'data-label': 'Started'}, when(n.started_at)),
      h('td', {'data-label': 'Heartbeat'}, when(n.heartbeat_at)),
      h('td', {'data-label': 'State'}, n.alive
        ? h('span', {class: 'state state-alive'}, '● alive')
        : h('span', {class: 'state state-gone'}, n.stopped_at ? '■ stopped' : '▲ silent')),
      h('td', {'data-label': 'Running', class: 'num'}, count(n.running))))));
}
