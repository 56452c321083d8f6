// One call (`GET /v1/tool-calls/{id}` and its audit): status, tool, key,
// business key, args, result or error, effect id and what the downstream
// said (the effect's detail), attempts, its approval request and decision,
// the audit timeline with every attempt's error; while it runs, its
// lease's expiry, how long it has run and how long its tool has left
// before its timeout; while it is pending, why it waits. While it is
// awaiting approval, pending or running, for a role that may cancel, a
// cancel button that asks for confirmation (and an optional reason) before
// it sends `POST /v1/tool-calls/{id}/cancel`; once it failed or was
// cancelled, for an operator or an admin, a re-run button (`rerun.js`).
// Read every 2 s through `poll` (with a pause toggle) until the call is
// settled; while the service cannot be read, the last state read stays,
// greyed, and its buttons are off.

import {get, request, segment} from './api.js';
import {facts, h, link, notice, panel, replace} from './dom.js';
import {dateTime, duration, pretty, statusBadge, TERMINAL, until, WAITS, when} from './format.js';
import {liveView, poll} from './poll.js';
import {rerunButton, rerunnable} from './rerun.js';
import {timeline} from './timeline.js';

export function render(main, {params, who}) {
  const callId = params[0];
  const view = liveView();
  // The status and the cancel button, redrawn with each read; the id and
  // the reading marker stay.
  const state = h('span', {class: 'call-state'});
  const head = h('div', {class: 'page-head'},
    h('h1', null, 'Call ', h('code', {id: 'call-id'}, callId)), state, view.marker, view.toggle);
  const body = h('div', {id: 'call-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const message = h('div', {id: 'call-message'});
  main.append(h('p', {class: 'crumbs'}, link('/ui/calls', '« Calls')), head, view.banner, message, body);

  let tools = null;
  async function read(signal) {
    const [call, audit] = await Promise.all([
      get(`/v1/tool-calls/${segment(callId)}`, signal),
      get(`/v1/tool-calls/${segment(callId)}/audit`, signal),
    ]);
    if (!tools) tools = await get('/v1/tools', signal).then((t) => t.tools).catch(() => null);
    const events = audit.events || [];
    const gated = events.some((e) => e.event === 'approval_requested');
    const approval = gated
      ? await get(`/v1/tool-calls/${segment(callId)}/approval`, signal).catch(() => null) : null;
    return {call, events, effect: audit.effect || null, approval};
  }

  const reading = poll({
    read,
    draw: ({call, events, effect, approval}) => draw(call, events, effect, approval),
    done: ({call}) => TERMINAL.has(call.status),
    refused: (e) => {
      replace(state);
      replace(body, notice('error', e.status === 404
        ? 'No such call here (unknown, purged after its retention, or another tenant\u2019s).'
        : `The call could not be read: ${e.message}`));
    },
    view,
    stale: [state, body],
  });

  function draw(call, events, effect, approval) {
    const settled = TERMINAL.has(call.status);
    const awaiting = call.status === 'awaiting_approval';
    replace(state,
      h('span', {id: 'call-status'}, statusBadge(call.status)),
      awaiting && ['approver', 'admin'].includes(who.role)
        ? h('a', {href: '/ui/approvals', 'data-nav': true, id: 'decide-link'}, 'Approve or deny in the queue')
        : null,
      settled || who.role === 'viewer' ? null : h('button', {type: 'button', class: 'danger', id: 'cancel-button',
        on: {click: () => confirmCancel(call)}}, 'Cancel call…'),
      rerunnable(call, who) ? rerunButton(call, message, () => reading.now()) : null);
    const tool = (tools || []).find((t) => t.name === call.tool);
    replace(body,
      panel('Call', {id: 'call-facts'}, facts([
        ['Status', statusBadge(call.status), 'status'],
        ['Tool', link(`/ui/calls?tool=${encodeURIComponent(call.tool)}`, call.tool), 'tool'],
        ['Key', h('code', {class: 'idem-key'}, call.idem_key), 'key'],
        ['Business key', businessKey(call), 'business-key'],
        call.tenant !== undefined ? ['Tenant', call.tenant, 'tenant'] : null,
        ['Effect id', h('code', null, call.effect_id), 'effect-id'],
        ['Attempts', String(call.attempt), 'attempt'],
        ['Client', call.client_id === null ? null
          : `${call.client_id}${call.seq === null ? '' : ` · seq ${call.seq}`}`, 'client'],
        ['Created', dateTime(call.created_at), 'created'],
        ['Updated', when(call.updated_at), 'updated'],
        ['Next attempt', call.next_attempt_at ? dateTime(call.next_attempt_at) : null, 'next-attempt'],
        call.status === 'pending' ? ['Waiting for', waiting(call), 'waiting-for'] : null,
        ...running(call, tool),
        ['Cancel asked', call.cancel_requested_at ? dateTime(call.cancel_requested_at) : null, 'cancel-requested'],
        ['Progress', progressText(call.progress), 'progress'],
        approval ? ['Approval', decision(approval), 'approval'] : null,
        ['Kept until', call.expires_at ? dateTime(call.expires_at) : (settled ? 'forever' : 'while in flight'), 'expires'],
      ])),
      h('div', {class: 'grid-2'},
        panel('Args', null, h('pre', {class: 'json', id: 'call-args'}, pretty(call.args))),
        call.error
          ? panel('Error', {class: 'panel panel-bad'}, h('pre', {class: 'json', id: 'call-error'}, pretty(call.error)))
          : panel('Result', null, call.result === null || call.result === undefined
            ? h('p', {class: 'muted', id: 'call-result'}, settled ? 'No result.' : 'Not yet: the call has not settled.')
            : h('pre', {class: 'json', id: 'call-result'}, pretty(call.result)))),
      effect ? panel('Effect', {id: 'effect'}, facts([
        ['Effect id', h('code', null, effect.effect_id), 'effect-effect-id'],
        ['Recorded', dateTime(effect.created_at), 'effect-created'],
        effect.amount === null || effect.amount === undefined ? null : ['Amount', String(effect.amount), 'effect-amount'],
      ]), h('h3', null, 'What the downstream said'),
      effect.detail === null || effect.detail === undefined
        ? h('p', {class: 'muted', id: 'effect-detail'}, 'Nothing recorded (a built-in tool).')
        : h('pre', {class: 'json', id: 'effect-detail'}, pretty(effect.detail))) : null,
      panel('Audit timeline', {id: 'audit'}, timeline(events)));
  }

  /** Why a pending call waits, as the service said. */
  function waiting(call) {
    if (!call.waiting_for) return null;
    return h('span', {id: 'waiting-for', dataset: {wait: call.waiting_for}},
      h('strong', null, call.waiting_for), ` — ${WAITS[call.waiting_for] || ''}`,
      call.waiting_for === 'backoff' && call.next_attempt_at ? ` (${until(call.next_attempt_at)})` : '');
  }

  /** A running call's lease and time: expiry, time running, time left. */
  function running(call, tool) {
    if (call.status !== 'running') return [];
    // A claim sets `updated_at`; a lease's extension does not.
    const ran = Date.now() / 1000 - call.updated_at;
    const timeout = tool ? tool.timeout_ms / 1000 : null;
    return [
      ['Lease expires', call.lease_until ? `${dateTime(call.lease_until)} (${until(call.lease_until)})` : null, 'lease-expires'],
      ['Running for', duration(ran), 'running-for'],
      ['Time left', timeout === null ? null : `${duration(Math.max(0, timeout - ran))} of its ${duration(timeout)} timeout`, 'time-left'],
    ];
  }

  /** A running call's last progress report: "message (2 of 5)"; null if none. */
  function progressText(progress) {
    if (!progress) return null;
    const done = progress.total === null ? String(progress.progress)
      : `${progress.progress} of ${progress.total}`;
    return progress.message ? `${progress.message} (${done})` : done;
  }

  /** A request and its decision, in words. */
  function decision(approval) {
    const d = approval.decision;
    if (!d) return `waiting, open until ${dateTime(approval.expires_at)}`;
    const by = d.by ? ` by ${d.by}` : '';
    return `${d.decision}${by} (${d.source}) at ${dateTime(d.at)}${d.reason ? `: ${d.reason}` : ''}`;
  }

  /** The call's business key, from its tool's rule (JSON Pointers into args). */
  function businessKey(call) {
    if (call.business_key !== undefined) return call.business_key;
    const tool = (tools || []).find((t) => t.name === call.tool);
    const rule = tool && tool.business_key;
    if (!rule || !call.args) return null;
    const values = rule.fields.map((pointer) => pointer.split('/').slice(1)
      .map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
      .reduce((v, p) => (v === null || v === undefined ? v : v[p]), call.args));
    return h('code', null, JSON.stringify(values));
  }

  function confirmCancel(call) {
    const reason = h('textarea', {id: 'cancel-reason', rows: 2, maxlength: 500,
      placeholder: 'Why (optional, recorded in the audit)'});
    const dialog = h('dialog', {class: 'dialog', id: 'cancel-dialog'},
      h('form', {method: 'dialog', on: {submit: async (event) => {
        event.preventDefault();
        dialog.close();
        dialog.remove();
        await sendCancel(call, reason.value.trim());
      }}},
      h('h2', null, 'Cancel this call?'),
      h('p', null, call.status === 'running'
        ? 'It is running: the service asks its tool to stop. If the tool\u2019s answer is recorded first, the call stays settled. An http tool\u2019s request may already have reached its downstream.'
        : `It has not started${call.status === 'awaiting_approval' ? ' (it waits for approval)' : ''}: it will never run. Its key will then replay the cancelled call; a new attempt needs a new key.`),
      h('label', {class: 'field'}, h('span', null, 'Reason'), reason),
      h('div', {class: 'row end'},
        h('button', {type: 'button', id: 'cancel-dismiss', on: {click: () => {
          dialog.close();
          dialog.remove();
        }}}, 'Keep it'),
        h('button', {type: 'submit', class: 'danger', id: 'cancel-confirm'}, 'Cancel call'))));
    document.body.append(dialog);
    dialog.showModal();
  }

  async function sendCancel(call, reason) {
    try {
      const answer = await request('POST', `/v1/tool-calls/${segment(call.call_id)}/cancel`,
        reason ? {reason} : undefined);
      replace(message, answer.status === 202
        ? notice('warn', 'Stop requested: the tool has not ended yet. This page follows it.')
        : notice('ok', 'Cancelled.'));
    } catch (e) {
      replace(message, notice('error', e.code === 'call_settled'
        ? `Not cancelled: the call had already ${e.body && e.body.call ? e.body.call.status : 'settled'}.`
        : `Not cancelled: ${e.message}`));
    }
    // Read at once (not at the next tick) to show what the cancel did.
    reading.now();
  }

  return reading.stop;
}
