// The tools this server runs (`GET /v1/tools`): kind, argument schema,
// concurrency limit, retry policy (attempts, timeout), business-key rule,
// and the current load of each from the overview (running, waiting),
// read every 2 s through `poll`.

import {get} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, duration, pretty} from './format.js';
import {liveView, poll} from './poll.js';

export function render(main) {
  const body = h('div', {id: 'tools-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(h('div', {class: 'page-head'}, h('h1', null, 'Tools'), view.marker), view.banner, body);
  // The tools are drawn once; later reads only change their load, so an
  // open argument schema stays open.
  let tools = null;
  return poll({
    read: async (signal) => {
      const [list, overview] = await Promise.all([
        tools ? null : get('/v1/tools', signal),
        get('/v1/overview', signal),
      ]);
      return {list: list && list.tools, load: overview.tools || []};
    },
    draw: ({list, load}) => {
      if (!tools) {
        tools = list;
        replace(body, h('div', {class: 'tool-list'}, tools.map(toolPanel)));
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

function toolPanel(tool) {
  const rule = tool.business_key;
  return panel(null, {class: 'panel tool', dataset: {tool: tool.name}},
    h('div', {class: 'tool-head'},
      h('h2', null, h('code', null, tool.name)),
      h('span', {class: `tag kind-${tool.kind}`}, tool.kind),
      link(`/ui/calls?tool=${encodeURIComponent(tool.name)}`, 'calls »')),
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
