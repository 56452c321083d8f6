// The tools this server runs (`GET /v1/tools`): kind, argument schema,
// concurrency limit, retry policy (attempts, timeout), business-key rule,
// and the current load of each from the overview (running, waiting),
// read every 2 s through `poll` in the same scope as the overview's: an
// admin sees the load of every tenant (or of `?tenant=`), a tenant its own.

import {get, query, scope} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, duration, pretty} from './format.js';
import {liveView, poll} from './poll.js';

export function render(main, {query: params, who}) {
  const tenant = scope(params, who);
  const body = h('div', {id: 'tools-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(h('div', {class: 'page-head'}, h('h1', null, 'Tools'), view.marker,
    h('span', {class: 'muted', id: 'tools-scope'}, tenant === '*' ? 'load of every tenant\u2019s calls'
      : tenant ? `load of tenant ${tenant}\u2019s calls` : 'load of this tenant\u2019s calls')),
  view.banner, body);
  // The tools are drawn once; later reads only change their load, so an
  // open argument schema stays open.
  let tools = null;
  return poll({
    read: async (signal) => {
      const [list, overview] = await Promise.all([
        tools ? null : get('/v1/tools', signal),
        get(`/v1/overview${query({tenant})}`, signal),
      ]);
      return {list: list && list.tools, load: overview.tools || []};
    },
    draw: ({list, load}) => {
      if (!tools) {
        tools = list;
        replace(body, h('div', {class: 'tool-list'}, tools.map((tool) => toolPanel(tool, tenant))));
      }
      showLoad(body, new Map(load.map((t) => [t.name, t])));
    },
    refused: (e) => replace(body, notice('error', `The tools could not be read: ${e.message}`)),
    view,
    stale: body,
  }).stop;
}

/** Each tool's running and waiting calls, from the overview's `tools`. */
function showLoad(body, load) {
  for (const panelEl of body.querySelectorAll('.tool[data-tool]')) {
    const now = load.get(panelEl.dataset.tool);
    for (const name of ['running', 'waiting']) {
      const dd = panelEl.querySelector(`[data-fact=${name}] dd`);
      replace(dd, now ? count(now[name]) : h('span', {class: 'muted'}, '—'));
    }
  }
}

function toolPanel(tool, tenant) {
  const rule = tool.business_key;
  return panel(null, {class: 'panel tool', dataset: {tool: tool.name}},
    h('div', {class: 'tool-head'},
      h('h2', null, h('code', null, tool.name)),
      h('span', {class: `tag kind-${tool.kind}`}, tool.kind),
      link(`/ui/calls${query({tool: tool.name, tenant: tenant === '*' ? null : tenant})}`, 'calls »')),
    facts([
      ['Running now', null, 'running'],
      ['Waiting for a slot', null, 'waiting'],
      ['Concurrency limit', tool.max_concurrency === null ? 'none' : count(tool.max_concurrency), 'limit'],
      ['Attempts', tool.max_attempts > 1
        ? `up to ${tool.max_attempts} (a retryable failure is retried)`
        : '1 (no automatic retry)', 'attempts'],
      ['Timeout', duration(tool.timeout_ms / 1000), 'timeout'],
      ['Business key', rule
        ? `${rule.fields.join(' + ')} · one live call per ${duration(rule.window_secs)} · duplicate: ${rule.on_duplicate}`
        : 'none (keys only)', 'business-key'],
    ]),
    h('details', {class: 'schema'},
      h('summary', null, 'Argument schema'),
      h('pre', {class: 'json'}, pretty(tool.input_schema))));
}
