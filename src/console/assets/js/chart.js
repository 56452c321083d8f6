// A small SVG chart of a rate over time (calls created or failed per
// second, one value per step; `null` where no reading covers the step, drawn
// as a gap, never as a zero): an area under a line, a y axis rounded to a
// readable maximum, and the time axis before now, in minutes, hours or days
// as the range asks. Drawn with DOM calls only; every attribute is a number
// this file computed.

import {h, svg} from './dom.js';
import {duration, rate} from './format.js';

const WIDTH = 640;
const HEIGHT = 180;
const PAD = {left: 44, right: 12, top: 12, bottom: 24};

/** The smallest of 1, 2, 5 × 10^n at or above `x` (at least 1). */
function niceCeiling(x) {
  if (!(x > 1)) return 1;
  const power = 10 ** Math.floor(Math.log10(x));
  for (const m of [1, 2, 5, 10]) if (m * power >= x) return m * power;
  return 10 * power;
}

/** Tick spacing for a span of `span` seconds: (seconds, unit, unit seconds). */
function tickSpacing(span) {
  if (span <= 3600) return [300, 'min', 60];
  if (span <= 6 * 3600) return [3600, 'h', 3600];
  if (span <= 24 * 3600) return [6 * 3600, 'h', 3600];
  if (span <= 3 * 86400) return [12 * 3600, 'h', 3600];
  return [86400, 'd', 86400];
}

/** Runs of consecutive values that are there, as lists of indexes. */
function runs(values) {
  const out = [];
  let current = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      if (current.length) out.push(current);
      current = [];
    } else {
      current.push(i);
    }
  });
  if (current.length) out.push(current);
  return out;
}

/**
 * A chart of `values` (oldest first, one per `stepS` seconds, the last one
 * ending now), titled `title`, coloured by the CSS class `kind`.
 */
export function rateChart(title, values, stepS, kind) {
  const n = values.length;
  const known = values.filter((v) => v !== null && v !== undefined);
  const peak = known.length ? Math.max(...known) : 0;
  const top = niceCeiling(peak);
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const x = (i) => PAD.left + (n <= 1 ? plotW : (i / (n - 1)) * plotW);
  const y = (v) => PAD.top + plotH - (Math.max(0, v) / top) * plotH;

  const grid = [0, 0.5, 1].map((f) => [
    svg('line', {class: 'grid', x1: PAD.left, x2: WIDTH - PAD.right, y1: y(top * f), y2: y(top * f)}),
    svg('text', {class: 'axis', x: PAD.left - 6, y: y(top * f) + 4, 'text-anchor': 'end'}, rate(top * f)),
  ]);
  const span = n * stepS;
  const [every, unit, unitS] = tickSpacing(span);
  const ticks = [];
  for (let back = Math.floor(span / every) * every; back >= 0; back -= every) {
    const i = Math.max(0, n - 1 - back / stepS);
    const label = back === 0 ? 'now' : `−${Math.round(back / unitS)} ${unit}`;
    ticks.push(svg('text', {class: 'axis', x: x(i), y: HEIGHT - 6,
      'text-anchor': back === 0 ? 'end' : (i === 0 ? 'start' : 'middle')}, label));
  }
  const shapes = runs(values).flatMap((run) => {
    const points = run.map((i) => `${x(i).toFixed(1)},${y(values[i]).toFixed(1)}`);
    const [first, last] = [run[0], run[run.length - 1]];
    return [
      svg('path', {class: 'area', d: `M${x(first)},${y(0)} L${points.join(' L')} L${x(last)},${y(0)} Z`}),
      svg('path', {class: 'line', d: `M${points.join(' L')}`}),
    ];
  });
  const latest = [...values].reverse().find((v) => v !== null && v !== undefined);
  const chart = svg('svg', {class: `chart chart-${kind}`, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img',
    'aria-label': `${title}: now ${rate(latest || 0)} per second, peak ${rate(peak)}`},
  svg('title', null, title), grid, ticks, shapes);

  const average = known.length ? known.reduce((a, b) => a + b, 0) / known.length : 0;
  const gaps = n - known.length;
  return h('figure', {class: 'chart-box', dataset: {chart: kind}},
    h('figcaption', null,
      h('span', {class: 'chart-title'}, title),
      h('span', {class: 'chart-now'}, h('strong', null, latest === undefined ? '—' : rate(latest)), ' /s now')),
    chart,
    h('p', {class: 'chart-summary muted'},
      `peak ${rate(peak)} /s · average ${rate(average)} /s over ${duration(span)}`,
      gaps ? ` · ${gaps} of ${n} steps without a reading` : ''));
}
