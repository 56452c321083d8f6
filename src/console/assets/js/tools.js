// The tools this server runs (`GET /v1/tools`): kind, argument schema,
// concurrency limit, retry policy (attempts, timeout), business-key rule,
// whether it is paused (since when, by whom, why) with a Pause / Resume
// button for an operator or an admin, and the current load of each from the overview
// (running, waiting), read every 2 s through `poll` (with a pause toggle)
// in the same scope as the overview's: an admin sees the load of every
// tenant (or of `?tenant=`), a tenant its own.

import {get, query, request, scope} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {count, dateTime, duration, pretty} from './format.js';
import {liveView, poll} from './poll.js';

export function render(main, {query: params, who}) {
  const tenant = scope(params, who);
  const body = h('div', {id: 'tools-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const message = h('div', {id: 'tools-message'});
  const view = liveView();
  main.append(h('div', {class: 'page-head'}, h('h1', null, 'Tools'), view.marker, view.toggle,
    h('span', {class: 'muted', id: 'tools-scope'}, tenant === '*' ? 'load of every tenant\u2019s calls'
      : tenant ? `load of tenant ${tenant}\u2019s calls` : 'load of this tenant\u2019s calls')),
  view.banner, message, body);
  // The tools are drawn once; later reads only change their load and their
  // paused state, so an open argument schema stays open.
  let tools = null;
  const reading = poll({
    read: async (signal) => {
      const [list, overview] = await Promise.all([
        get('/v1/tools', signal),
        get(`/v1/overview${query({tenant})}`, signal),
      ]);
      return {list: list.tools, load: overview.tools || []};
    },
    draw: ({list, load}) => {
      if (!tools) {
        tools = list;
        replace(body, h('div', {class: 'tool-list'}, tools.map((tool) => toolPanel(tool, tenant))));
      }
      showLoad(body, new Map(load.map((t) => [t.name, t])));
      showPaused(body, list, who, toggle);
    },
    refused: (e) => replace(body, notice('error', `The tools could not be read: ${e.message}`)),
    view,
    stale: body,
  });

  /** Pause or resume `tool` (operators, admins); read again at once to show it. */
  async function toggle(tool, pause) {
    try {
      await request('POST', `/v1/tools/${encodeURIComponent(tool)}/${pause ? 'pause' : 'resume'}`,
        pause ? {reason: 'paused from the console'} : undefined);
      replace(message, notice('ok', pause
        ? `${tool} is paused: its calls are accepted and wait; none is claimed until it is resumed.`
        : `${tool} is resumed: its waiting calls are claimed, oldest first.`));
    } catch (e) {
      replace(message, notice('error', `Not ${pause ? 'paused' : 'resumed'}: ${e.message}`));
    }
    reading.now();
  }
  return reading.stop;
}

/** Each tool's paused state, and (for an operator or an admin) its Pause or Resume button. */
function showPaused(body, list, who, toggle) {
  for (const tool of list) {
    const panelEl = body.querySelector(`.tool[data-tool="${CSS.escape(tool.name)}"]`);
    if (!panelEl) continue;
    panelEl.dataset.paused = tool.paused ? 'true' : 'false';
    const dd = panelEl.querySelector('[data-fact=paused] dd');
    replace(dd, tool.paused
      ? h('span', {class: 'tag wait wait-paused', id: `paused-${tool.name}`},
        `⏸ paused since ${dateTime(tool.pause.paused_at)} by ${tool.pause.paused_by}`,
        tool.pause.reason ? ` — ${tool.pause.reason}` : '')
      : h('span', {class: 'muted'}, 'no: its calls are claimed as they come'));
    const slot = panelEl.querySelector('.tool-action');
    if (!['operator', 'admin'].includes(who.role)) {
      replace(slot);
      continue;
    }
    replace(slot, h('button', {type: 'button', class: tool.paused ? 'primary' : 'danger',
      dataset: {action: tool.paused ? 'resume' : 'pause'},
      on: {click: () => toggle(tool.name, !tool.paused)}}, tool.paused ? 'Resume' : 'Pause'));
  }
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
      h('span', {class: 'tool-action'}),
      link(`/ui/calls${query({tool: tool.name, tenant: tenant === '*' ? null : tenant})}`, 'calls »')),
    facts([
      ['Paused', null, 'paused'],
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
