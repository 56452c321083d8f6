// The one time-zone choice of the console: every time a page shows is in
// UTC or in the browser's local zone, as the operator chose (remembered in
// localStorage, `local` until chosen), always on the 24-hour clock, and the
// zone is said once in the top bar (`UTC`, or `local · Europe/Paris,
// UTC+01:00`). Pure functions but for the choice itself.

const ZONE_KEY = 'idempotent-tool.zone';

/** `utc` or `local`. */
export function zone() {
  try {
    return localStorage.getItem(ZONE_KEY) === 'utc' ? 'utc' : 'local';
  } catch (_) {
    return 'local';
  }
}

/** Remember `utc` or `local`. */
export function setZone(value) {
  try {
    localStorage.setItem(ZONE_KEY, value === 'utc' ? 'utc' : 'local');
  } catch (_) {
    // A browser that keeps nothing: the choice lasts this page.
  }
}

/** The chosen zone, said: `UTC`, or `local · Area/City, UTC±hh:mm`. */
export function zoneLabel(at = new Date()) {
  if (zone() === 'utc') return 'UTC';
  const name = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local';
  const offset = -at.getTimezoneOffset();
  const sign = offset < 0 ? '−' : '+';
  const abs = Math.abs(offset);
  return `local · ${name}, UTC${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

function pad(n, width = 2) {
  return String(n).padStart(width, '0');
}

/** A `Date`'s fields in the chosen zone. */
function fields(d) {
  if (zone() === 'utc') {
    return [d.getUTCFullYear(), d.getUTCMonth() + 1, d.getUTCDate(), d.getUTCHours(),
      d.getUTCMinutes(), d.getUTCSeconds(), d.getUTCMilliseconds()];
  }
  return [d.getFullYear(), d.getMonth() + 1, d.getDate(), d.getHours(), d.getMinutes(),
    d.getSeconds(), d.getMilliseconds()];
}

/** `2026-12-07 14:03:27` in the chosen zone. */
export function formatDateTime(d) {
  const [y, mo, da, h, mi, s] = fields(d);
  return `${y}-${pad(mo)}-${pad(da)} ${pad(h)}:${pad(mi)}:${pad(s)}`;
}

/** `14:03:27` in the chosen zone. */
export function formatTimeOfDay(d) {
  const [, , , h, mi, s] = fields(d);
  return `${pad(h)}:${pad(mi)}:${pad(s)}`;
}

/** `2026-12-07 14:03:27.481` in the chosen zone. */
export function formatPrecise(d) {
  const ms = fields(d)[6];
  return `${formatDateTime(d)}.${pad(ms, 3)}`;
}

/** `12-07 14:03` (a chart's axis) in the chosen zone. */
export function formatShort(d) {
  const [, mo, da, h, mi] = fields(d);
  return `${pad(mo)}-${pad(da)} ${pad(h)}:${pad(mi)}`;
}

/**
 * A `datetime-local` value (`2026-12-07T14:03:27`) read in the chosen zone,
 * as a `Date`; and a `Date` as such a value.
 */
export function fromInputValue(value) {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(value || '');
  if (!m) return null;
  const [y, mo, da, h, mi, s] = m.slice(1).map((x) => Number(x || 0));
  return zone() === 'utc'
    ? new Date(Date.UTC(y, mo - 1, da, h, mi, s))
    : new Date(y, mo - 1, da, h, mi, s);
}

export function toInputValue(d) {
  const [y, mo, da, h, mi, s] = fields(d);
  return `${y}-${pad(mo)}-${pad(da)}T${pad(h)}:${pad(mi)}:${pad(s)}`;
}
