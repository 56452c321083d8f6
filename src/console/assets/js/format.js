// How values read on the page: times, ages, rates, statuses. Pure
// functions of their inputs (and of the one time-zone choice,
// `timezone.js`); they return strings or nodes built with `h`. Every time
// is on the 24-hour clock.

import {h} from './dom.js';
import {formatDateTime, formatPrecise, formatTimeOfDay} from './timezone.js';

/** Every status a call can have, in the order a call moves through them. */
export const STATUSES = ['awaiting_approval', 'pending', 'running', 'succeeded', 'failed', 'cancelled', 'denied'];

/** Terminal statuses: nothing more happens to such a call. */
export const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'denied']);

/** A glyph per status, so a status reads without its colour too. */
const GLYPHS = {awaiting_approval: '⏸', pending: '○', running: '◐', succeeded: '✓', failed: '✕', cancelled: '⊘', denied: '⛔'};

/** A status as a badge: glyph and word, coloured by a class. */
export function statusBadge(status) {
  const known = STATUSES.includes(status) ? status : 'unknown';
  return h('span', {class: `status status-${known}`, dataset: {status: String(status)}},
    h('span', {class: 'glyph', 'aria-hidden': 'true'}, GLYPHS[known] || '?'), String(status));
}

/** Unix seconds as a date and time in the chosen zone, to the second. */
export function dateTime(unix) {
  if (unix === null || unix === undefined) return null;
  return formatDateTime(new Date(unix * 1000));
}

/** A `Date` as a time of day in the chosen zone, to the second: `14:03:27`. */
export function timeOfDay(date) {
  return formatTimeOfDay(date);
}

/** Unix seconds as a date and time with milliseconds (the audit timeline). */
export function preciseTime(unix) {
  if (unix === null || unix === undefined) return null;
  return formatPrecise(new Date(unix * 1000));
}

/** A duration in seconds, short: `850 ms`, `12 s`, `4 min 3 s`, `2 h 5 min`. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return null;
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  if (s < 3600) return two(Math.floor(s / 60), 'min', Math.floor(s % 60), 's');
  if (s < 86400) return two(Math.floor(s / 3600), 'h', Math.floor((s % 3600) / 60), 'min');
  return two(Math.floor(s / 86400), 'd', Math.floor((s % 86400) / 3600), 'h');
}

/** `4 min 3 s`, or `4 min` when the smaller unit is 0. */
function two(big, bigUnit, small, smallUnit) {
  return small ? `${big} ${bigUnit} ${small} ${smallUnit}` : `${big} ${bigUnit}`;
}

/** How long ago a Unix time was: `3 s ago`. */
export function ago(unix) {
  if (unix === null || unix === undefined) return null;
  return `${duration(Date.now() / 1000 - unix)} ago`;
}

/** How long until a Unix time: `in 12 s`, or `overdue 3 s`. */
export function until(unix) {
  if (unix === null || unix === undefined) return null;
  const left = unix - Date.now() / 1000;
  return left >= 0 ? `in ${duration(left)}` : `overdue ${duration(-left)}`;
}

/** Why a pending call waits (`waiting_for`), in words. */
export const WAITS = {
  paused: 'its tool is paused',
  backoff: 'backoff before its next attempt',
  slot: 'a slot of its tool (max_concurrency)',
  rate: 'a token of its tool\u2019s rate',
  worker: 'a worker to claim it',
};

/** A pending call's reason to wait, as a small tag. */
export function waitTag(reason) {
  if (!reason) return null;
  return h('span', {class: `tag wait wait-${reason}`, dataset: {wait: reason}, title: WAITS[reason] || reason},
    reason === 'paused' ? '⏸ paused' : `waits: ${reason}`);
}

/** A time shown as its age, the exact time in its tooltip. */
export function when(unix) {
  if (unix === null || unix === undefined) return null;
  return h('time', {datetime: new Date(unix * 1000).toISOString(), title: dateTime(unix)}, ago(unix));
}

/** A count with thousands separators. */
export function count(n) {
  return n === null || n === undefined ? '—' : Number(n).toLocaleString('en-US');
}

/** A rate per second: `0`, `0.35`, `12.4`, `1,250`. */
export function rate(r) {
  if (!r) return '0';
  if (r < 1) return r.toFixed(2);
  if (r < 100) return r.toFixed(1);
  return Math.round(r).toLocaleString('en-US');
}

/** JSON, indented, for a `<pre>`. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}
