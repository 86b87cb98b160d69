// Charts as SVG made with DOM calls (createElementNS and attributes): no markup strings and no
// style attributes, so the page's Content Security Policy holds. Colours come from classes in
// app.css (a segment's `fill`, a legend swatch's `background`).

import { el, formatNumber } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const GLYPH = 0.62; // a digit's width, in font sizes (for room under labels)

/** An SVG element: svg("rect", { x: 1, class: "c" }, "its text"). */
export function svg(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== null) node.textContent = text;
  return node;
}

/**
 * A stacked bar chart: one bar per bucket, left to right, one segment per group that has a
 * value there (the first group at the bottom), a value axis from 0 with three ticks, and as
 * many bucket labels under the bars as fit.
 * `buckets`: [{ key, label }]; `groups`: [{ key, label, className }];
 * `value(bucket, group)`: a number; `describe(bucket, group, value)`: a segment's tooltip;
 * `label`: the chart's accessible name; `valueLabel`, `bucketLabel`: the axes' titles;
 * `width`, `height`, `fontSize`: in the SVG's units (one CSS pixel when drawn at `width`).
 * Each segment is a <rect> with data-bucket, data-group and data-value.
 */
export function stackedBars({ buckets, groups, value, describe, label, valueLabel = "",
                              bucketLabel = "", width = 300, height = 136, fontSize = 8 }) {
  const totals = buckets.map((bucket) => groups.reduce((sum, group) => sum + value(bucket, group), 0));
  const most = roundUp(Math.max(...totals));
  const ticks = [0, most / 2, most].map(formatNumber);
  const bucketChars = Math.max(1, ...buckets.map((bucket) => bucket.label.length));
  const left = Math.ceil(Math.max(...ticks.map((tick) => tick.length)) * fontSize * GLYPH) + 6;
  const top = valueLabel ? fontSize * 2 : fontSize;
  const bottom = fontSize * (bucketLabel ? 3 : 1.8);
  const right = Math.ceil((bucketChars * fontSize * GLYPH) / 2);
  const plot = { width: width - left - right, height: height - top - bottom };
  const step = plot.width / Math.max(1, buckets.length);
  const gap = Math.min(2, step * 0.15);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label,
                             "font-size": fontSize });
  const baseline = top + plot.height;
  chart.append(svg("line", { x1: left, y1: baseline, x2: left + plot.width, y2: baseline,
                             class: "axis" }),
               svg("line", { x1: left, y1: top, x2: left, y2: baseline, class: "axis" }));
  ticks.forEach((tick, index) => {
    const y = baseline - (index * plot.height) / 2;
    chart.append(svg("text", { x: left - 4, y: y + fontSize / 3, class: "tick end" }, tick));
  });
  if (valueLabel) chart.append(svg("text", { x: 0, y: fontSize, class: "tick" }, valueLabel));
  buckets.forEach((bucket, index) => {
    let y = baseline;
    for (const group of groups) {
      const amount = value(bucket, group);
      if (!amount) continue;
      const tall = (amount / most) * plot.height;
      y -= tall;
      const bar = svg("rect", { x: left + index * step + gap, y, width: Math.max(1, step - 2 * gap),
                                height: tall, class: group.className });
      Object.assign(bar.dataset, { bucket: bucket.key, group: group.key, value: String(amount) });
      bar.append(svg("title", {}, describe(bucket, group, amount)));
      chart.append(bar);
    }
  });
  const every = Math.ceil(((bucketChars + 2) * fontSize * GLYPH) / step);
  buckets.forEach((bucket, index) => {
    if (index % every) return;
    chart.append(svg("text", { x: left + (index + 0.5) * step, y: baseline + fontSize * 1.3,
                               class: "tick middle" }, bucket.label));
  });
  if (bucketLabel) {
    chart.append(svg("text", { x: width, y: height - 2, class: "tick end" }, bucketLabel));
  }
  return chart;
}

// The top of a value axis: `value` or more, a round number whose half is whole (2, 4, 6, 8,
// 10, 20, 40, ... 100, 200 ...).
function roundUp(value) {
  if (value <= 2) return 2;
  const scale = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 4, 6, 8, 10].map((step) => step * scale).find((top) => top >= value);
}

/** The legend of a chart's groups: a swatch (the group's class) and its label each. */
export function chartLegend(groups) {
  return el("ul", { className: "legend inline" }, ...groups.map((group) =>
    el("li", { dataset: { group: group.key } },
       el("span", { className: `swatch ${group.className}` }), group.label)));
}
