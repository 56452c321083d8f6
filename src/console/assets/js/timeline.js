// A call's audit timeline (`GET /v1/tool-calls/{id}/audit`), told as what
// happened: who claimed each attempt (the owner `pid:thread@instance`),
// each attempt's error (a failure's whole error, a retry's code and
// message), retries, recoveries of expired leases or dead owners,
// completions fenced off because their attempt was stale, releases at a
// stop, cancels, an operator's re-run, approval requests with their
// decision (who, from which source, why), and keyless MCP requests answered
// with the call by their content. Each row has its date and time (in the
// chosen zone) and its offset from the first. The audit's own text is shown
// as it is, as text.

import {h} from './dom.js';
import {preciseTime} from './format.js';

/** How each event reads, and its tone (a class). */
const EVENTS = {
  created: ['Accepted', 'info'],
  claimed: ['Claimed under a lease', 'run'],
  succeeded: ['Succeeded', 'ok'],
  failed: ['Failed', 'bad'],
  retry_scheduled: ['Retry scheduled', 'warn'],
  retry_reset: ['Reset by a same-key retry', 'warn'],
  recover: ['Lease taken back (recovery)', 'warn'],
  stale_completion: ['Stale completion fenced off', 'fence'],
  released: ['Lease released at a stop', 'warn'],
  cancel_requested: ['Cancel requested', 'warn'],
  cancelled: ['Cancelled', 'muted'],
  rerun: ['Re-run by an operator', 'warn'],
  approval_requested: ['Waiting for approval', 'warn'],
  approved: ['Approved', 'ok'],
  denied: ['Denied', 'bad'],
  replayed_by_content: ['Answered again by its content (keyless MCP)', 'info'],
  input_answered: ['Its MCP client answered the approval\'s questions', 'info'],
};

/** A retry's failed attempt, from its row: `attempt N failed (code: message); …`. */
function retryError(detail) {
  const match = /^attempt \d+ failed \(([a-z0-9_]+)(?:: ([^)]*))?\); (.*)$/.exec(detail || '');
  return match ? {code: match[1], message: match[2] || '', rest: match[3]} : null;
}

/** The owner named in a `claimed` row (`pid:thread@instance attempt=N`). */
function owner(detail) {
  const match = /^(\S+@\S+) attempt=\d+$/.exec(detail || '');
  return match ? match[1] : null;
}

/** A failed attempt's error, when the row holds its JSON. */
function errorOf(detail) {
  try {
    const e = JSON.parse(detail);
    return e && typeof e === 'object' && e.code ? e : null;
  } catch (_) {
    return null;
  }
}

function describe(event) {
  const who = event.event === 'claimed' ? owner(event.detail) : null;
  if (who) return ['owner ', h('code', {class: 'owner'}, who)];
  const error = event.event === 'failed' ? errorOf(event.detail) : null;
  if (error) {
    return [h('code', {class: 'attempt-error'}, error.code), ': ', error.message || '',
      error.retryable ? h('span', {class: 'tag'}, 'retryable') : null];
  }
  const retry = event.event === 'retry_scheduled' ? retryError(event.detail) : null;
  if (retry) {
    return [h('code', {class: 'attempt-error'}, retry.code), retry.message ? `: ${retry.message}` : '',
      h('span', {class: 'muted'}, ` · ${retry.rest}`)];
  }
  return event.detail === null || event.detail === undefined ? [] : [String(event.detail)];
}

/** The timeline as an ordered list, oldest first, times relative to the first. */
export function timeline(events) {
  if (!events.length) return h('p', {class: 'muted'}, 'No audit rows.');
  const start = events[0].at;
  return h('ol', {class: 'timeline', id: 'timeline'}, events.map((event) => {
    const [label, tone] = EVENTS[event.event] || [event.event, 'info'];
    return h('li', {class: `event tone-${tone}`, dataset: {event: event.event}},
      h('div', {class: 'event-time'},
        h('time', {datetime: new Date(event.at * 1000).toISOString()}, preciseTime(event.at)),
        h('span', {class: 'muted'}, `+${((event.at - start) * 1000).toFixed(0)} ms`)),
      h('div', {class: 'event-body'},
        h('div', {class: 'event-head'},
          h('strong', null, label),
          h('code', {class: 'event-name'}, event.event),
          event.attempt === null || event.attempt === undefined ? null
            : h('span', {class: 'tag'}, `attempt ${event.attempt}`)),
        h('div', {class: 'event-detail'}, describe(event))));
  }));
}
