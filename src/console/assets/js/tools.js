// The tools this server runs (`GET /v1/tools`): kind, argument schema,
// concurrency limit, retry policy (attempts, timeout), business-key rule,
// and the current load of each from the overview (running, waiting).

import {get} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, duration, pretty} from './format.js';

export function render(main) {
  const body = h('div', {id: 'tools-body'}, h('p', {class: 'muted'}, 'Loading…'));
  main.append(h('div', {class: 'page-head'}, h('h1', null, 'Tools')), body);
  let stopped = false;
  Promise.all([
    get('/v1/tools'),
    get('/v1/overview').catch(() => ({tools: []})),
  ]).then(([{tools}, overview]) => {
    if (stopped) return;
    const load = new Map((overview.tools || []).map((t) => [t.name, t]));
    replace(body, h('div', {class: 'tool-list'}, tools.map((tool) => toolPanel(tool, load.get(tool.name)))));
  }).catch((e) => {
    if (!stopped) replace(body, notice('error', `The tools could not be read: ${e.message}`));
  });
  return () => {
    stopped = true;
  };
}

function toolPanel(tool, load) {
  const rule = tool.business_key;
  return panel(null, {class: 'panel tool', dataset: {tool: tool.name}},
    h('div', {class: 'tool-head'},
      h('h2', null, h('code', null, tool.name)),
      h('span', {class: `tag kind-${tool.kind}`}, tool.kind),
      link(`/ui/calls?tool=${encodeURIComponent(tool.name)}`, 'calls »')),
    facts([
      ['Running now', load ? count(load.running) : null, 'running'],
      ['Waiting for a slot', load ? count(load.waiting) : null, 'waiting'],
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
