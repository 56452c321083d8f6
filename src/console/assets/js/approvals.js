// The approval queue (`GET /v1/approvals`, every 2 s through `poll`, which
// keeps the last queue greyed while the service cannot be read): each call awaiting a
// person's decision — its tool, tenant, key, how long it has waited and how
// long its request stays open, and its arguments as text: what will run.
// A token that may decide (approver, admin) gets Approve and Deny, each
// asking for a reason (required to deny) and a confirmation before it sends
// `POST /v1/tool-calls/{id}/approve` or `/deny`, bound to the fingerprint
// shown. Another role sees the queue and no button; the service refuses it
// either way. An admin sees every tenant's queue unless `?tenant=` names one.

import {get, query, request, segment} from './api.js';
import {h, link, notice, panel, replace} from './dom.js';
import {count, duration, pretty} from './format.js';
import {liveView, poll} from './poll.js';

/** Roles whose decision the service accepts. */
const DECIDERS = new Set(['approver', 'admin']);

export function render(main, {query: params, who}) {
  const tenant = who.admin ? params.get('tenant') || '*' : null;
  const mayDecide = DECIDERS.has(who.role);
  const message = h('div', {id: 'approval-message'});
  const body = h('div', {id: 'approvals-body'}, h('p', {class: 'muted'}, 'Loading…'));
  const view = liveView();
  main.append(
    h('div', {class: 'page-head'},
      h('h1', null, 'Approvals'),
      h('span', {class: 'muted', id: 'approvals-count'}),
      view.marker),
    mayDecide ? null : notice('info',
      `Your role (${who.role || 'unknown'}) may read this queue but not approve or deny: `,
      'that takes the approver role.'),
    view.banner, message, body);

  let open = false;
  const reading = poll({
    read: (signal) => get(`/v1/approvals${query({tenant, limit: 500})}`, signal),
    // A dialog is open: leave the list as it is until it closes.
    draw: (data) => {
      if (!open) draw(data.approvals || []);
    },
    refused: (e) => replace(body, notice('error', `The queue could not be read: ${e.message}`)),
    view,
    stale: body,
  });

  function draw(approvals) {
    replace(document.getElementById('approvals-count'),
      `${count(approvals.length)} waiting`);
    if (!approvals.length) {
      replace(body, h('p', {class: 'muted', id: 'approvals-empty'}, 'No call is waiting for approval.'));
      return;
    }
    const now = Date.now() / 1000;
    replace(body, h('div', {id: 'approvals'}, approvals.map((a) => item(a, now))));
  }

  function item(a, now) {
    const left = a.expires_at - now;
    return h('article', {class: 'approval', dataset: {callId: a.call_id}},
      h('div', {class: 'approval-head'},
        h('strong', {class: 'tool'}, a.tool),
        who.admin ? h('span', {class: 'tenant'}, `tenant ${a.tenant}`) : null,
        h('span', null, 'key ', h('code', {class: 'idem-key'}, a.idem_key)),
        h('span', {class: 'age muted'}, `waiting ${duration(now - a.requested_at)}`),
        h('span', {class: left < 3600 ? 'time-left soon' : 'time-left'},
          left > 0 ? `${duration(left)} left` : 'expiring'),
        link(`/ui/calls/${segment(a.call_id)}`, h('code', null, a.call_id))),
      h('div', {class: 'muted'}, 'It will run ', h('code', null, a.tool), ' with these arguments:'),
      h('pre', {class: 'json args'}, pretty(a.args)),
      h('div', {class: 'muted approvers'}, a.approvers === 'people_or_client'
        ? 'An approver, or the MCP client that made the call, may decide.'
        : 'An approver decides.'),
      mayDecide ? h('div', {class: 'row'},
        h('button', {type: 'button', class: 'primary approve', on: {click: () => confirm(a, 'approve')}}, 'Approve…'),
        h('button', {type: 'button', class: 'danger deny', on: {click: () => confirm(a, 'deny')}}, 'Deny…')) : null);
  }

  /** The confirmation: what will (or will not) run, and a reason. */
  function confirm(a, verb) {
    const approving = verb === 'approve';
    const reason = h('textarea', {id: 'decision-reason', rows: 2, maxlength: 500,
      required: approving ? null : true,
      placeholder: approving ? 'Why (optional, recorded in the audit)' : 'Why (required, recorded in the audit)'});
    const close = () => {
      open = false;
      dialog.close();
      dialog.remove();
    };
    const dialog = h('dialog', {class: 'dialog', id: 'decision-dialog'},
      h('form', {method: 'dialog', on: {submit: async (event) => {
        event.preventDefault();
        const why = reason.value.trim();
        if (!approving && !why) {
          reason.focus();
          return;
        }
        close();
        await send(a, verb, why);
      }}},
      h('h2', null, approving ? 'Approve this call?' : 'Deny this call?'),
      h('p', null, approving
        ? `It will run ${a.tool} once, with the arguments below, as ${a.tenant}.`
        : 'It will never run: the call ends denied, and its key replays the denial.'),
      h('pre', {class: 'json'}, pretty(a.args)),
      h('label', {class: 'field'}, h('span', null, 'Reason'), reason),
      h('div', {class: 'row end'},
        h('button', {type: 'button', id: 'decision-dismiss', on: {click: close}}, 'Back'),
        h('button', {type: 'submit', class: approving ? 'primary' : 'danger', id: 'decision-confirm'},
          approving ? 'Approve' : 'Deny'))));
    document.body.append(dialog);
    open = true;
    dialog.showModal();
  }

  async function send(a, verb, reason) {
    const body = {fingerprint: a.fingerprint};
    if (reason) body.reason = reason;
    try {
      const answer = await request('POST', `/v1/tool-calls/${segment(a.call_id)}/${verb}`, body);
      replace(message, notice('ok', verb === 'approve'
        ? `Approved: ${a.tool} (${a.call_id}) is ${answer.body.call.status} and runs now.`
        : `Denied: ${a.tool} (${a.call_id}) will never run.`));
    } catch (e) {
      const decided = e.body && e.body.approval && e.body.approval.decision;
      replace(message, notice('error', e.code === 'already_decided' && decided
        ? `Not ${verb === 'approve' ? 'approved' : 'denied'}: already ${decided.decision}` +
          `${decided.by ? ` by ${decided.by}` : ''}.`
        : `Not ${verb === 'approve' ? 'approved' : 'denied'}: ${e.message}`));
    }
    // Read at once (not at the next tick) to show what the decision did.
    reading.now();
  }

  return reading.stop;
}

/** The queue as a panel of the overview: how many wait, the oldest wait. */
export function summary(approvals) {
  const a = approvals || {};
  return panel('Approvals', {id: 'approvals-summary'},
    h('p', null,
      link('/ui/approvals', h('span', {id: 'count-awaiting'}, count(a.awaiting || 0)), ' awaiting approval'),
      a.oldest_wait_s === null || a.oldest_wait_s === undefined ? null
        : h('span', {class: 'muted', id: 'oldest-approval'}, `, the oldest for ${duration(a.oldest_wait_s)}`)));
}
