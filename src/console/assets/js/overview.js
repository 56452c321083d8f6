// The overview (`GET /v1/overview`, every 2 s through `poll`): calls by
// status, the backlog and the age of the oldest pending call, the calls
// awaiting approval and the oldest wait, created and failed per second over
// the last 15 minutes, each tool's load, the nodes and their heartbeats,
// retention and the version. An admin sees every tenant unless `?tenant=`
// names one; a tenant sees its own calls. While the service cannot be read,
// the last numbers stay, greyed.

import {get, query, scope} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, duration, statusBadge, STATUSES, when} from './format.js';
import {rateChart} from './chart.js';
import {summary as approvalSummary} from './approvals.js';
import {liveView, poll} from './poll.js';

export function render(main, {query: params, who, navigate}) {
  const tenant = scope(params, who);
  const body = h('div', {id: 'overview-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(
    h('div', {class: 'page-head'},
      h('h1', null, 'Overview'),
      view.marker,
      who.admin ? scopeForm(tenant, navigate) : null),
    view.banner,
    body);
  return poll({
    read: (signal) => get(`/v1/overview${query({tenant})}`, signal),
    draw: (data) => draw(body, data, tenant),
    refused: (e) => replace(body, notice('error', `The overview could not be read: ${e.message}`)),
    view,
    stale: body,
  }).stop;
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

function draw(body, data, tenant) {
  const byStatus = data.by_status || {};
  const total = data.calls || 0;
  const backlog = data.backlog || {};
  const rates = data.rates || {created: [], failed: [], step_s: 10};
  const listLink = (status) => `/ui/calls${query({status, tenant: tenant === '*' ? null : tenant})}`;
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
      panel('Throughput, last 15 minutes', {id: 'rates'},
        rateChart('Calls created per second', rates.created || [], rates.step_s || 10, 'created'),
        rateChart('Calls failed per second', rates.failed || [], rates.step_s || 10, 'failed'))),
    approvalSummary(data.approvals),
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

function toolTable(tools) {
  if (!tools.length) return h('p', {class: 'muted'}, 'No tools.');
  return h('table', {class: 'table'},
    h('thead', null, h('tr', null, ['Tool', 'Kind', 'Running', 'Waiting', 'Limit', 'Load'].map((c) => h('th', null, c)))),
    h('tbody', null, tools.map((t) => {
      const limit = t.max_concurrency;
      const share = limit ? Math.min(1, t.running / limit) : 0;
      return h('tr', {dataset: {tool: t.name}},
        h('td', {'data-label': 'Tool'}, link(`/ui/calls${query({tool: t.name})}`, h('code', null, t.name))),
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
