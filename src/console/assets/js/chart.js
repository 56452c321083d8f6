// A small SVG chart of a rate over time (calls created or failed per
// second, one value per step): an area under a line, a y axis rounded to
// a readable maximum, and the time axis in minutes before now. Drawn with
// DOM calls only; every attribute is a number this file computed.

import {h, svg} from './dom.js';
import {rate} from './format.js';

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

/**
 * A chart of `values` (oldest first, one per `stepS` seconds, the last one
 * ending now), titled `title`, coloured by the CSS class `kind`.
 */
export function rateChart(title, values, stepS, kind) {
  const n = values.length;
  const peak = n ? Math.max(...values) : 0;
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
  const ticks = [];
  for (let minutes = Math.floor(span / 60 / 5) * 5; minutes >= 0; minutes -= 5) {
    const i = Math.max(0, n - 1 - (minutes * 60) / stepS);
    if (minutes * 60 > span) continue;
    ticks.push(svg('text', {class: 'axis', x: x(i), y: HEIGHT - 6,
      'text-anchor': minutes === 0 ? 'end' : (i === 0 ? 'start' : 'middle')}, minutes === 0 ? 'now' : `−${minutes} min`));
  }
  const points = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
  const shapes = n ? [
    svg('path', {class: 'area', d: `M${x(0)},${y(0)} L${points.join(' L')} L${x(n - 1)},${y(0)} Z`}),
    svg('path', {class: 'line', d: `M${points.join(' L')}`}),
  ] : [];
  const chart = svg('svg', {class: `chart chart-${kind}`, viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: 'img',
    'aria-label': `${title}: now ${rate(values[n - 1] || 0)} per second, peak ${rate(peak)}`},
  svg('title', null, title), grid, ticks, shapes);

  const average = n ? values.reduce((a, b) => a + b, 0) / n : 0;
  return h('figure', {class: 'chart-box', dataset: {chart: kind}},
    h('figcaption', null,
      h('span', {class: 'chart-title'}, title),
      h('span', {class: 'chart-now'}, h('strong', null, rate(values[n - 1] || 0)), ' /s now')),
    chart,
    h('p', {class: 'chart-summary muted'},
      `peak ${rate(peak)} /s · average ${rate(average)} /s over ${Math.round(span / 60)} min`));
}
