// Re-running a call from its page: a button on a `failed` or `cancelled`
// call that asks for confirmation (and an optional reason) before it sends
// `POST /v1/tool-calls/{id}/rerun`, saying what the downstream will see —
// the same effect id again — and then what the service answered.

import {request, segment} from './api.js';
import {h, notice, replace} from './dom.js';

/** Whether `call` may be re-run from its page by `who` (an operator or an admin). */
export function rerunnable(call, who) {
  return (call.status === 'failed' || call.status === 'cancelled')
    && ['operator', 'admin'].includes(who.role);
}

/** The Re-run button for `call`; `message` shows the answer, `after` reads again. */
export function rerunButton(call, message, after) {
  return h('button', {type: 'button', class: 'primary', id: 'rerun-button',
    on: {click: () => confirmRerun(call, message, after)}}, 'Re-run call…');
}

function confirmRerun(call, message, after) {
  const reason = h('textarea', {id: 'rerun-reason', rows: 2, maxlength: 500,
    placeholder: 'Why (optional, recorded in the audit)'});
  const close = () => {
    dialog.close();
    dialog.remove();
  };
  const dialog = h('dialog', {class: 'dialog', id: 'rerun-dialog'},
    h('form', {method: 'dialog', on: {submit: async (event) => {
      event.preventDefault();
      close();
      await send(call, reason.value.trim(), message);
      after();
    }}},
    h('h2', null, 'Re-run this call?'),
    h('p', null, `It ${call.status === 'failed' ? 'failed' : 'was cancelled'} after attempt ${call.attempt}. `,
      'It runs again as the same call: same call id, same key, same effect id, a new attempt. ',
      'Its downstream is sent the same effect id again; one that deduplicates on it answers from its ',
      'own record if it had applied it.'),
    h('label', {class: 'field'}, h('span', null, 'Reason'), reason),
    h('div', {class: 'row end'},
      h('button', {type: 'button', id: 'rerun-dismiss', on: {click: close}}, 'Keep it'),
      h('button', {type: 'submit', class: 'primary', id: 'rerun-confirm'}, 'Re-run call'))));
  document.body.append(dialog);
  dialog.showModal();
}

async function send(call, reason, message) {
  try {
    await request('POST', `/v1/tool-calls/${segment(call.call_id)}/rerun`, reason ? {reason} : undefined);
    replace(message, notice('ok', 'Re-run: the call is pending again. This page follows it.'));
  } catch (e) {
    const said = {
      call_succeeded: 'it succeeded: its effect happened, and it never runs again.',
      call_in_flight: 'it has not ended (someone re-ran it already?).',
      call_expired: 'it is past its retention and may be purged.',
      duplicate_intent: `another live call (${e.body && e.body.error ? e.body.error.call_id : '?'}) holds its business key.`,
    }[e.code];
    replace(message, notice('error', `Not re-run: ${said || e.message}`));
  }
}
