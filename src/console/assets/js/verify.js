// The promise check (`GET /v1/verify`, admins only): the service runs
// `idempotent-tool verify` on its own database, read-only, in one
// snapshot, bounded in time, and this page shows the verdict and every
// invariant with its violations.

import {request} from './api.js';
import {facts, h, notice, panel, replace} from './dom.js';
import {count, dateTime, duration} from './format.js';

const TIMEOUTS = ['5', '10', '30', '60'];

export function render(main, {who}) {
  const result = h('div', {id: 'verify-result'});
  const timeout = h('select', {name: 'timeout_s', id: 'verify-timeout'}, TIMEOUTS.map((s) => h('option', {value: s}, `${s} s`)));
  timeout.value = '10';
  const run = h('button', {type: 'submit', class: 'primary', id: 'verify-run'}, 'Run the check');
  main.append(
    h('div', {class: 'page-head'}, h('h1', null, 'Promise check')),
    h('p', {class: 'lead'},
      'Checks every invariant the service promises on its database — one call per key, at most one effect per call, ',
      'every effect its call\u2019s, every running call under a lease — read-only, in one snapshot, on a connection ',
      'of its own, stopped when its time is up.'),
    who.admin
      ? h('form', {class: 'row', id: 'verify-form', on: {submit}},
        h('label', null, 'Time limit ', timeout), run)
      : notice('info', 'The promise check is for admin tokens.'),
    result);
  let stopped = false;

  async function submit(event) {
    event.preventDefault();
    run.disabled = true;
    replace(result, h('p', {class: 'muted'}, 'Checking…'));
    try {
      const {body} = await request('GET', `/v1/verify?timeout_s=${timeout.value}`);
      if (!stopped) replace(result, report(body));
    } catch (e) {
      if (!stopped) replace(result, notice('error', `No verdict: ${e.message}`));
    } finally {
      run.disabled = false;
    }
  }
  return () => {
    stopped = true;
  };
}

function report(r) {
  const violated = r.checks.filter((c) => !c.ok);
  return h('div', null,
    r.ok
      ? notice('ok', h('strong', {id: 'verdict'}, 'Every invariant holds.'), ` ${r.checks.length} checks.`)
      : notice('error', h('strong', {id: 'verdict'}, `${violated.length} invariant${violated.length === 1 ? '' : 's'} violated.`),
        ' Each is listed below with examples.'),
    panel('Snapshot', null, facts([
      ['Checked at', dateTime(r.checked_at)],
      ['Took', duration(r.elapsed_s)],
      ['Backend', r.backend],
      ['Calls', count(r.calls)],
      ['Effects', count(r.effects)],
      ['Tenants', r.tenants === null ? null : count(r.tenants)],
    ])),
    panel('Invariants', null, h('ul', {class: 'checks', id: 'checks'}, r.checks.map((c) =>
      h('li', {class: c.ok ? 'check-ok' : 'check-bad', dataset: {check: c.name}},
        h('span', {class: 'verdict'}, c.ok ? '✓ holds' : `✕ ${count(c.violations)} violation${c.violations === 1 ? '' : 's'}`),
        h('div', null,
          h('div', null, c.invariant),
          h('code', {class: 'muted'}, c.name),
          c.ok ? null : h('ul', {class: 'examples'}, c.examples.map((e) => h('li', null, h('code', null, e))))))))));
}
