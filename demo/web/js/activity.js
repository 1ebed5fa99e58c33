// The activity chart: events per minute of event time (the activity/global view), stacked by
// type. An event that arrived after its minute had closed is not in the view (docs/VIEWS.md).

import { h } from './dom.js';

export const TYPES = ['tweet_posted', 'like', 'unlike', 'follow', 'unfollow', 'profile_set'];
const LABELS = { tweet_posted: 'posts', like: 'likes', unlike: 'unlikes', follow: 'follows', unfollow: 'unfollows', profile_set: 'renames' };
const MINUTES = 12;
const SVG = 'http://www.w3.org/2000/svg';
const W = 360;
const H = 180;
const PAD = { top: 16, right: 6, bottom: 20, left: 26 };

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) el.append(child);
  return el;
}

const color = (type) => `var(--t-${type}, #98a2b3)`;
const hhmm = (ms) => new Date(ms).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });

/** Draw the last MINUTES minutes of `windows` (rows of activity/global) into `container`. */
export function renderActivity(container, legend, summary, windows, now = Date.now()) {
  const byStart = new Map(windows.map((w) => [Date.parse(w.window_start), w]));
  const newest = Math.max(now - (now % 60_000), ...byStart.keys());
  const starts = Array.from({ length: MINUTES }, (_, i) => newest - (MINUTES - 1 - i) * 60_000);
  const bars = starts.map((start) => {
    const w = byStart.get(start);
    return { start, counts: w?.counts ?? {}, total: w?.total ?? 0 };
  });
  const peak = Math.max(4, ...bars.map((b) => b.total));
  const plotW = W - PAD.left - PAD.right;
  const plotH = H - PAD.top - PAD.bottom;
  const slot = plotW / MINUTES;
  const barW = Math.max(6, slot * 0.66);
  const y = (n) => PAD.top + plotH - (n / peak) * plotH;

  const chart = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Events per minute' });
  for (const tick of [0, Math.round(peak / 2), peak]) {
    chart.append(svg('line', { class: 'grid', x1: PAD.left, x2: W - PAD.right, y1: y(tick), y2: y(tick) }));
    chart.append(svg('text', { class: 'axis', x: PAD.left - 5, y: y(tick) + 3, 'text-anchor': 'end' }, String(tick)));
  }
  bars.forEach((bar, i) => {
    const x = PAD.left + i * slot + (slot - barW) / 2;
    const group = svg('g', {
      'data-testid': 'activity-bar', 'data-window': new Date(bar.start).toISOString(), 'data-total': bar.total,
    });
    let level = 0;
    for (const type of TYPES) {
      const n = bar.counts[type] ?? 0;
      if (!n) continue;
      group.append(svg('rect', { x, width: barW, y: y(level + n), height: y(level) - y(level + n), fill: color(type), rx: 2 },
        svg('title', {}, `${n} ${LABELS[type]} at ${hhmm(bar.start)}`)));
      level += n;
    }
    if (level > 0) group.append(svg('text', { class: 'total', x: x + barW / 2, y: y(level) - 3, 'text-anchor': 'middle' }, String(level)));
    if ((MINUTES - 1 - i) % 3 === 0) {
      group.append(svg('text', { class: 'axis', x: x + barW / 2, y: H - 6, 'text-anchor': 'middle' }, hhmm(bar.start)));
    }
    chart.append(group);
  });
  container.replaceChildren(chart);

  if (!legend.childElementCount) {
    legend.append(...TYPES.map((t) => h('span', {}, h('i', { style: `background:${color(t)}` }), LABELS[t])));
  }
  const total = bars.reduce((n, b) => n + b.total, 0);
  summary.textContent = `${total} events in ${MINUTES} min`;
}
