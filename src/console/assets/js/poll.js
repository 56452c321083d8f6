// Reading the service again and again, and saying so truthfully: the one
// place every page's refresh goes through. A page hands `poll` a read and
// a draw; `poll` reads, draws, waits and reads again, and owns what the
// page shows about the reading itself: "● live" while the service answers,
// "offline since HH:MM:SS" while it cannot be read.
//
// A failed read never ends the polling: the next read comes after a
// backoff (1 s, doubling up to 10 s) and the page recovers by itself when
// the service answers again. While it cannot read, the page keeps the
// last numbers it read, greyed (class `stale`, their buttons disabled),
// never wiped and never shown as live. A read that hangs (a paused
// service) is given up after READ_TIMEOUT_MS and counts as failed.
//
// A page that follows live data has a pause toggle (`view.toggle`):
// paused, it reads nothing until resumed, and says "paused" with the time
// of its last read — never "live".
//
// An outage is a read the service did not answer: no connection, a
// timeout, or a 5xx/408/429. Any other refusal (a 404 for an unknown
// call, a 400 for a bad filter) is the service's answer: the page shows
// it through `refused`, and a page that follows live data keeps asking.

import {ApiError} from './api.js';
import {h, replace} from './dom.js';
import {timeOfDay} from './format.js';

/** How often a page that follows live data reads it while the service answers. */
export const REFRESH_MS = 2000;
/** The wait after the first failed read in a row; each further one doubles it… */
export const FIRST_RETRY_MS = 1000;
/** …up to this. */
export const MAX_RETRY_MS = 10000;
/** A read that has not answered by then is given up (and counts as failed). */
export const READ_TIMEOUT_MS = 10000;

/** The wait before the next read after `failures` failed reads in a row. */
export function retryDelay(failures) {
  return Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.max(0, failures - 1));
}

/** Whether a failed read means the service cannot be read now (not an answer). */
export function isOutage(error) {
  const status = error && error.status;
  return !status || status >= 500 || status === 408 || status === 429;
}

/**
 * What a page shows about its reading: `marker` goes in the page's head
 * ("● live", "offline since …"), `banner` above the data it reads (empty
 * unless offline). `poll` fills both.
 */
export function liveView() {
  return {
    marker: h('span', {class: 'live-state', id: 'live-state', dataset: {state: 'loading'}}),
    banner: h('div', {class: 'offline-slot'}),
    toggle: h('button', {type: 'button', class: 'pause-toggle', id: 'pause-toggle', hidden: true,
      'aria-pressed': 'false', title: 'Stop refreshing this page (and start again)'}, 'Pause'),
  };
}

/**
 * Read with `read(signal)`, show the answer with `draw(data)`, and again.
 *
 * - `every`: ms between reads while the service answers; `null` reads
 *   until the first answer (a page that shows one snapshot).
 * - `done(data)`: true when nothing more can change (a settled call).
 * - `refused(error)`: shows a refusal that is not an outage.
 * - `view`: from `liveView()`; `stale`: the elements holding the data,
 *   greyed while the service cannot be read.
 *
 * Returns `stop` (called when the page is left) and `now` (read at once,
 * e.g. after an action, or a "Retry now").
 */
export function poll({read, draw, every = REFRESH_MS, done = () => false, refused, view, stale = []}) {
  const greyed = [].concat(stale);
  let stopped = false;
  let timer = null;
  let inFlight = null;
  let failures = 0;
  let offlineSince = null;
  let lastGood = null;
  let paused = false;
  const switchedOff = new Set();
  if (view.toggle && every !== null) {
    view.toggle.hidden = false;
    view.toggle.addEventListener('click', () => {
      paused = !paused;
      view.toggle.textContent = paused ? 'Resume' : 'Pause';
      view.toggle.setAttribute('aria-pressed', String(paused));
      if (paused) {
        clearTimeout(timer);
        showMarker('paused');
      } else {
        once();
      }
    });
  }

  async function once() {
    clearTimeout(timer);
    if (inFlight) inFlight.abort();
    const controller = new AbortController();
    inFlight = controller;
    let data;
    let error = null;
    try {
      data = await withDeadline(read, controller);
    } catch (e) {
      error = e;
    }
    // Left, or overtaken by a "Retry now": this answer is no one's.
    if (stopped || inFlight !== controller) return;
    inFlight = null;
    if (error) return failed(error);
    failures = 0;
    offlineSince = null;
    lastGood = new Date();
    setStale(false);
    replace(view.banner);
    draw(data);
    const finished = every === null || done(data);
    if (paused) return showMarker('paused');
    showMarker(finished ? 'read' : 'live');
    if (!finished) timer = setTimeout(once, every);
  }

  function failed(error) {
    if (paused) return;
    failures += 1;
    const wait = retryDelay(failures);
    const next = new Date(Date.now() + wait);
    if (isOutage(error)) {
      offlineSince = offlineSince || new Date();
      setStale(true);
      showMarker('offline');
      replace(view.banner, offlineBanner(error, next, wait));
      timer = setTimeout(once, wait);
      return;
    }
    offlineSince = null;
    setStale(false);
    replace(view.banner);
    showMarker('refused');
    if (refused) refused(error);
    if (every !== null) timer = setTimeout(once, wait);
  }

  function showMarker(state) {
    const m = view.marker;
    if (!m) return;
    m.dataset.state = state;
    if (state === 'live') {
      m.title = `refreshes every ${every / 1000} s`;
      replace(m, h('span', {class: 'dot', 'aria-hidden': 'true'}), 'live',
        h('span', {class: 'muted'}, ` · updated ${timeOfDay(lastGood)}`));
    } else if (state === 'read') {
      m.title = '';
      replace(m, h('span', {class: 'muted'}, `read at ${timeOfDay(lastGood)}`));
    } else if (state === 'paused') {
      m.title = 'not refreshing; Resume reads again';
      replace(m, h('span', {class: 'pause-mark', 'aria-hidden': 'true'}, '⏸'), 'paused',
        h('span', {class: 'muted'}, lastGood ? ` · read at ${timeOfDay(lastGood)}` : ''));
    } else if (state === 'offline') {
      m.title = 'the service cannot be read; the page keeps trying';
      replace(m, h('span', {class: 'square', 'aria-hidden': 'true'}), `offline since ${timeOfDay(offlineSince)}`);
    } else {
      m.title = '';
      replace(m);
    }
  }

  function offlineBanner(error, next, wait) {
    return h('div', {class: 'notice notice-offline', id: 'offline', role: 'alert',
      dataset: {failures, retryMs: wait}},
    h('strong', null, `Offline since ${timeOfDay(offlineSince)}`), ': ', error.message || 'no answer', '. ',
    lastGood
      ? `Showing what was read at ${timeOfDay(lastGood)}, greyed. `
      : 'Nothing has been read yet. ',
    `Next try at ${timeOfDay(next)}. `,
    h('button', {type: 'button', class: 'link', id: 'retry-now', on: {click: () => once()}}, 'Retry now'));
  }

  // Buttons in greyed data act on what may no longer be true (a Cancel for
  // a call that has settled meanwhile): off while the data is greyed.
  function setStale(on) {
    for (const el of greyed) {
      el.classList.toggle('stale', on);
      if (on) {
        for (const b of el.querySelectorAll('button:not(:disabled)')) {
          b.disabled = true;
          switchedOff.add(b);
        }
      }
    }
    if (!on) {
      for (const b of switchedOff) b.disabled = false;
      switchedOff.clear();
    }
  }

  once();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      if (inFlight) inFlight.abort();
    },
    now() {
      if (!stopped) once();
    },
  };
}

/**
 * `read(signal)`, given up after READ_TIMEOUT_MS or when `controller`
 * aborts (the page left, a "Retry now"): a read that ignores the signal
 * still cannot hold the polling up.
 */
function withDeadline(read, controller) {
  return new Promise((resolve, reject) => {
    const giveUp = setTimeout(() => {
      reject(new ApiError(0, 'timeout', `the service did not answer within ${READ_TIMEOUT_MS / 1000} s`));
      controller.abort();
    }, READ_TIMEOUT_MS);
    controller.signal.addEventListener('abort', () => {
      clearTimeout(giveUp);
      reject(new ApiError(0, 'aborted', 'the read was given up'));
    });
    read(controller.signal).then(resolve, reject).finally(() => clearTimeout(giveUp));
  });
}
