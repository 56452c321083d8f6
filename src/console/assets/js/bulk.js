// Acting on many calls from the calls page: rows selected by their boxes
// (each cancelled or re-run by its own request, one after another, counted
// as they go), or "all N matching" the page's filter — one bulk job
// (`POST /v1/bulk-actions` with the list's own filter, under an
// Idempotency-Key made once per confirmation, so a repeated click is the
// same job), whose progress is read every second through `poll` until it
// is done. Each asks for confirmation first, naming how many calls and
// what happens to them.

import {get, request, segment} from './api.js';
import {h, notice, replace} from './dom.js';
import {count} from './format.js';
import {liveView, poll} from './poll.js';

/** The most calls one bulk job acts on (the service's bound). */
export const MAX_BULK_CALLS = 100000;

/** What each action does, in words, for the dialogs. */
const ACTIONS = {
  cancel: {verb: 'Cancel', done: 'cancelled',
    what: 'Pending calls (and those waiting for a retry) are cancelled at once and never run; running ones are asked to stop; calls that have ended are left as they are.'},
  rerun: {verb: 'Re-run', done: 're-run',
    what: 'Failed and cancelled calls run again as the same calls (same call id and effect id, a new attempt); calls in flight or succeeded are left as they are.'},
};

/** A row's selection box. */
export function selectBox(call, selection, changed) {
  return h('input', {type: 'checkbox', class: 'select-call', 'aria-label': `select ${call.call_id}`,
    checked: selection.has(call.call_id), dataset: {callId: call.call_id},
    on: {change: (event) => {
      if (event.target.checked) selection.add(call.call_id);
      else selection.delete(call.call_id);
      changed();
    }}});
}

/** The header's box: every row of this page, or none. */
export function selectAllBox(calls, selection, changed) {
  const all = calls.length > 0 && calls.every((c) => selection.has(c.call_id));
  return h('input', {type: 'checkbox', id: 'select-page', 'aria-label': 'select every call of this page',
    checked: all, on: {change: (event) => {
      for (const c of calls) {
        if (event.target.checked) selection.add(c.call_id);
        else selection.delete(c.call_id);
      }
      changed();
    }}});
}

/**
 * The bar above the table: the selection's actions and the filter's.
 * `filter` is the list API's parameters of the page (no cursor, no limit);
 * `total` the list's `total`; `show(job)` shows a job's progress.
 */
export function bulkBar({selection, total, filter, message, changed, show}) {
  const n = selection.size;
  const matching = total ? (total.exact ? count(total.calls) : `at least ${count(total.calls)}`) : '?';
  return h('div', {class: 'bulk-bar row', id: 'bulk-bar'},
    h('span', {class: 'muted', id: 'selected-count'}, `${count(n)} selected`),
    h('button', {type: 'button', id: 'cancel-selected', disabled: n === 0,
      on: {click: () => confirmSelected('cancel', [...selection], message, () => {
        selection.clear();
        changed();
      })}}, 'Cancel selected…'),
    h('button', {type: 'button', id: 'rerun-selected', disabled: n === 0,
      on: {click: () => confirmSelected('rerun', [...selection], message, () => {
        selection.clear();
        changed();
      })}}, 'Re-run selected…'),
    h('span', {class: 'spacer'}),
    h('button', {type: 'button', class: 'danger', id: 'cancel-matching', disabled: !total || total.calls === 0,
      on: {click: () => confirmMatching('cancel', filter, total, show)}}, `Cancel all ${matching} matching…`),
    h('button', {type: 'button', id: 'rerun-matching', disabled: !total || total.calls === 0,
      on: {click: () => confirmMatching('rerun', filter, total, show)}}, `Re-run all ${matching} matching…`));
}

/** A confirmation dialog; `go()` runs once it is confirmed. */
function confirm(id, title, lines, verb, go) {
  const close = () => {
    dialog.close();
    dialog.remove();
  };
  const dialog = h('dialog', {class: 'dialog', id},
    h('form', {method: 'dialog', on: {submit: (event) => {
      event.preventDefault();
      close();
      go();
    }}},
    h('h2', null, title),
    lines.map((line) => h('p', null, line)),
    h('div', {class: 'row end'},
      h('button', {type: 'button', id: `${id}-dismiss`, on: {click: close}}, 'Keep them'),
      h('button', {type: 'submit', class: 'danger', id: `${id}-confirm`}, verb))));
  document.body.append(dialog);
  dialog.showModal();
}

function confirmSelected(action, ids, message, cleared) {
  const a = ACTIONS[action];
  confirm('bulk-dialog', `${a.verb} ${count(ids.length)} selected call${ids.length === 1 ? '' : 's'}?`,
    [a.what, 'Each is sent as its own request, one after another.'], `${a.verb} ${count(ids.length)}`,
    async () => {
      let done = 0;
      let refused = 0;
      for (const id of ids) {
        replace(message, notice('info', `${a.verb}: ${done + refused} of ${ids.length}…`));
        try {
          await request('POST', `/v1/tool-calls/${segment(id)}/${action}${action === 'cancel' ? '?wait=0' : ''}`);
          done += 1;
        } catch (_) {
          refused += 1;
        }
      }
      replace(message, notice(refused ? 'warn' : 'ok', h('span', {id: 'selected-done'},
        `${count(done)} ${a.done}`, refused ? `, ${count(refused)} left as they were (already ended, or in flight)` : '', '.')));
      cleared();
    });
}

function confirmMatching(action, filter, total, show) {
  const a = ACTIONS[action];
  const n = Math.min(total.calls, MAX_BULK_CALLS);
  const lines = [
    `Every call this page's filter matches now — ${total.exact ? count(total.calls) : `at least ${count(total.calls)}`} — newest first, as a job in the background: 100 calls every 100 ms, each recorded in its audit as done by this job. Calls created from now on are not in it.`,
    a.what,
    total.calls > MAX_BULK_CALLS || !total.exact
      ? `A job acts on at most ${count(MAX_BULK_CALLS)} calls; run it again for the rest.` : null,
  ].filter(Boolean);
  // Made once per confirmation: a second click of the same dialog is the same job.
  const key = `console-${action}-${crypto.randomUUID()}`;
  confirm('bulk-dialog', `${a.verb} all ${count(n)} matching calls?`, lines, `${a.verb} all`, async () => {
    try {
      const answer = await request('POST', '/v1/bulk-actions', {action, filter: filterObject(filter)},
        {headers: {'Idempotency-Key': key}});
      show(answer.body);
    } catch (e) {
      show(null, e);
    }
  });
}

/** The list's parameters as a bulk job's filter (`status` as an array). */
function filterObject(params) {
  const out = {};
  for (const [name, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === '' || (Array.isArray(value) && !value.length)) continue;
    out[name] = value;
  }
  return out;
}

/** A job's progress, read every second until it is done; returns `stop`. */
export function jobProgress(slot, job, error) {
  if (!job) {
    replace(slot, notice('error', `The bulk job was refused: ${error ? error.message : 'no answer'}`));
    return () => {};
  }
  const view = liveView();
  const body = h('div', {id: 'bulk-job', dataset: {jobId: job.job_id}});
  replace(slot, h('section', {class: 'panel bulk-job'},
    h('div', {class: 'page-head'}, h('h2', null, 'Bulk job ', h('code', null, job.job_id)), view.marker),
    view.banner, body));
  return poll({
    read: (signal) => get(`/v1/bulk-actions/${segment(job.job_id)}`, signal),
    draw: (j) => {
      const share = j.max_calls ? Math.min(1, j.matched / Math.max(1, j.max_calls)) : 0;
      body.dataset.state = j.state;
      replace(body,
        h('p', null, h('strong', {id: 'bulk-state'}, j.state), ` · ${ACTIONS[j.action].verb}: `,
          h('span', {id: 'bulk-matched'}, count(j.matched)), ' looked at, ',
          h('span', {id: 'bulk-changed'}, count(j.changed)), ` ${ACTIONS[j.action].done}, `,
          h('span', {id: 'bulk-skipped'}, count(j.skipped)), ' left as they were',
          j.truncated ? ` — stopped at its bound of ${count(j.max_calls)}` : '', '.'),
        j.state === 'done' ? null : h('span', {class: 'bar'}, h('span', {class: 'fill fill-running', dataset: {share: share.toFixed(3)}})),
        j.owner ? h('p', {class: 'muted'}, `worked by ${j.owner}`) : null);
      for (const fill of body.querySelectorAll('.fill[data-share]')) {
        fill.style.width = `${(Number(fill.dataset.share) * 100).toFixed(1)}%`;
      }
    },
    every: 1000,
    done: (j) => j.state === 'done',
    refused: (e) => replace(body, notice('error', `The job could not be read: ${e.message}`)),
    view,
    stale: body,
  }).stop;
}
