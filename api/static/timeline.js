"use strict";
// The timeline picture at the top of the status page, drawn with the vendored Apache ECharts (echarts.min.js):
// the cluster's under-replicated / under-min-ISR / offline counts over time above one lane per broker with its
// intervals and markers, and the incidents as bands across both, listed beside. Data: GET /v1/timeline (SPEC
// §timeline). Times read on the same clock as the rest of the page and the demo's terminal (`clock` in app.js).

// Each interval kind: its sub-row in a broker's lane (0 top), colour and what a person reads.
const INTERVAL_KINDS = {
  out_of_sync: { row: 0, color: "#c62828", label: "out of sync as a follower" },
  offline: { row: 1, color: "#1d2330", label: "offline" },
  fenced: { row: 1, color: "#7a8296", label: "fenced" },
  leading_fewer: { row: 2, color: "#d98a1c", label: "leading fewer partitions" },
  alter_partition_in_flight: { row: 3, color: "#2f5fb3", label: "AlterPartition request in flight" },
  alter_partition_queue: { row: 3, color: "#9db7e6", label: "AlterPartition queue" },
};
const SUB_ROWS = 4;
const MARKER_KINDS = {
  shrink: { symbol: "triangle", rotate: 180, color: "#c62828", label: "shrink" },
  expand: { symbol: "triangle", rotate: 0, color: "#1f8a4c", label: "expand" },
  controller: { symbol: "diamond", rotate: 0, color: "#1d2330", label: "controller change" },
  propagation: { symbol: "circle", rotate: 0, color: "#2f5fb3", label: "propagation batch" },
  divergence: { symbol: "pin", rotate: 0, color: "#a15c00", label: "divergence" },
};
const COUNT_SERIES = [
  ["under_replicated", "under-replicated", "#d98a1c"],
  ["under_min_isr", "under min ISR", "#c62828"],
  ["offline", "offline", "#1d2330"],
];
const CLUSTER_LANE = "cluster"; // markers about no one broker (a controller change)

const timeline = {
  chart: null,
  cluster: null, // the cluster pictured (a store may hold several): the first until one is picked
  rangeMs: 5 * 60000,
  zoomed: null, // the incident the picture is zoomed to, or null: the last `rangeMs`
  data: null,
};

function picturedCluster(clusters) {
  // The cluster picked, or the first (alphabetically); the picker shows when there is a choice.
  const sorted = [...clusters].sort();
  if (!sorted.includes(timeline.cluster)) timeline.cluster = sorted[0] ?? null;
  const select = document.getElementById("timeline-cluster");
  if (select.options.length !== sorted.length || [...select.options].some((o, i) => o.value !== sorted[i])) {
    select.replaceChildren(...sorted.map((c) => el("option", { value: c }, c)));
  }
  select.value = timeline.cluster ?? "";
  document.getElementById("timeline-cluster-control").hidden = sorted.length < 2;
  return timeline.cluster;
}

function timelineWindow(asOf) {
  // The span to ask for: the last 5, 15 or 60 minutes up to the settled watermark, or one incident with a margin.
  const incident = timeline.zoomed;
  if (incident === null) return [asOf - timeline.rangeMs, asOf];
  const end = incident.closed_ms ?? asOf;
  const margin = Math.max(5000, (end - incident.opened_ms) / 5);
  return [incident.opened_ms - margin, Math.min(end + margin, asOf)];
}

function timelinePath(cluster, asOf) {
  const [since, until] = timelineWindow(asOf).map((ms) => Math.max(0, Math.round(ms)));
  return `/v1/timeline?cluster=${encodeURIComponent(cluster)}&since=${since}&until=${until}`;
}

function intervalText(iv) {
  const what = INTERVAL_KINDS[iv.kind].label;
  const on = iv.partitions ? ` on ${iv.partitions} partition${iv.partitions === 1 ? "" : "s"}` : "";
  const until = iv.end_ms === null ? "still now" : clock(iv.end_ms);
  return `broker ${iv.broker}: ${what}${on}<br>${clock(iv.start_ms)} → ${until}`
    + (iv.end_ms === null ? "" : ` (${secs(iv.end_ms - iv.start_ms)})`);
}

function incidentPeriod(incident) {
  return `${clock(incident.opened_ms)} → ${incident.closed_ms === null ? "open" : clock(incident.closed_ms)}`;
}

function renderTimeline(data, known = []) {
  timeline.data = data;
  if (data === null) {
    document.getElementById("timeline-span").textContent = "no micro-batch yet";
    renderIncidentList([]);
    return;
  }
  const node = document.getElementById("timeline-chart");
  if (timeline.chart === null) {
    timeline.chart = echarts.init(node, null, { renderer: "canvas" });
    timeline.chart.on("click", (p) => { if (p.componentType === "markArea") zoomTo(p.data.incident); });
  }
  // One lane per broker: those of the cluster the page lists (with no interval too) and any the data names.
  const ids = new Set([...known, ...data.brokers.map((b) => b.broker),
    ...data.markers.map((m) => m.broker).filter((b) => b !== null && b !== undefined)]);
  const lanes = [CLUSTER_LANE, ...[...ids].sort((a, b) => a - b).map((b) => `broker ${b}`)];
  const laneOf = (broker) => (broker === null || broker === undefined ? 0 : lanes.indexOf(`broker ${broker}`));
  const until = data.until;
  const intervals = Object.entries(INTERVAL_KINDS).map(([kind, style]) => ({
    name: style.label,
    type: "custom",
    xAxisIndex: 1,
    yAxisIndex: 1,
    color: style.color,
    renderItem: drawInterval,
    encode: { x: [1, 2], y: 0 },
    data: data.brokers.flatMap((b) => b.intervals.filter((iv) => iv.kind === kind).map((iv) => ({
      value: [laneOf(b.broker), Math.max(iv.start_ms, data.since), iv.end_ms ?? until, style.row],
      interval: { ...iv, broker: b.broker },
      itemStyle: { color: style.color },
    }))),
  }));
  const markers = Object.entries(MARKER_KINDS).map(([kind, style]) => ({
    name: style.label,
    type: "scatter",
    xAxisIndex: 1,
    yAxisIndex: 1,
    symbol: style.symbol,
    symbolRotate: style.rotate,
    symbolSize: kind === "propagation" ? 7 : 11,
    color: style.color,
    data: data.markers.filter((m) => m.kind === kind).map((m) => ({ value: [m.ts, laneOf(m.broker)], marker: m })),
  }));
  const bands = data.incidents.map((incident) => [
    { xAxis: Math.max(incident.opened_ms, data.since), name: incident.summary, incident },
    { xAxis: incident.closed_ms ?? until },
  ]);
  const counts = COUNT_SERIES.map(([key, label, color], i) => ({
    name: label,
    type: "line",
    step: "end",
    showSymbol: false,
    color,
    lineStyle: { width: 2 },
    data: data.counts.map((c) => [c.ts, c[key]]),
    // The incidents' bands run across the counts too, so a rise reads against its cause.
    markArea: i === 0
      ? { silent: true, itemStyle: { color: "rgba(198, 40, 40, 0.08)" }, label: { show: false }, data: bands }
      : undefined,
  }));
  intervals[0].markArea = {
    itemStyle: { color: "rgba(198, 40, 40, 0.10)", borderColor: "rgba(198, 40, 40, 0.5)", borderWidth: 1 },
    label: { show: false },
    emphasis: { label: { show: false } },
    data: bands,
  };
  const timeAxis = (gridIndex, labels) => ({
    type: "time",
    gridIndex,
    min: data.since,
    max: until,
    axisLabel: { show: labels, formatter: (ms) => clock(ms).slice(0, 8), hideOverlap: true },
    splitLine: { show: true, lineStyle: { color: "#eef0f3" } },
  });
  timeline.chart.setOption({
    animation: false,
    legend: { bottom: 0, itemWidth: 14, itemHeight: 10, itemGap: 8, textStyle: { fontSize: 11 } },
    tooltip: { trigger: "item", confine: true, formatter: timelineTooltip },
    axisPointer: { link: [{ xAxisIndex: "all" }] },
    grid: [
      { left: 80, right: 20, top: 24, height: 80 },
      { left: 80, right: 20, top: 120, bottom: 76 },
    ],
    xAxis: [timeAxis(0, false), timeAxis(1, true)],
    yAxis: [
      { type: "value", gridIndex: 0, minInterval: 1, name: "partitions", nameTextStyle: { fontSize: 10 },
        splitNumber: 2 },
      { type: "category", gridIndex: 1, data: lanes, inverse: true, splitArea: { show: true },
        axisLabel: { fontWeight: "bold" } },
    ],
    series: [...counts, ...intervals, ...markers],
  }, { notMerge: true });
  node.style.height = `${Math.max(260, 190 + lanes.length * 44)}px`;
  timeline.chart.resize();
  renderIncidentList(data.incidents);
  const zoom = document.getElementById("timeline-unzoom");
  zoom.hidden = timeline.zoomed === null;
  document.getElementById("timeline-span").textContent =
    `${clock(data.since)} → ${clock(until)}${timeline.zoomed === null ? "" : " (one incident)"}`;
}

function drawInterval(params, api) {
  // One interval as a bar in its kind's sub-row of its broker's lane (a custom series: ECharts draws lanes of bars
  // with no such chart type of its own).
  const [x0, mid] = api.coord([api.value(1), api.value(0)]);
  const [x1] = api.coord([api.value(2), api.value(0)]);
  const lane = api.size([0, 1])[1] * 0.84;
  const height = lane / SUB_ROWS;
  const rect = echarts.graphic.clipRectByRect(
    { x: x0, y: mid - lane / 2 + api.value(3) * height, width: Math.max(x1 - x0, 2), height: height - 1 },
    { x: params.coordSys.x, y: params.coordSys.y, width: params.coordSys.width, height: params.coordSys.height });
  return rect && { type: "rect", shape: rect, style: api.style() };
}

function timelineTooltip(p) {
  if (p.componentType === "markArea") {
    const incident = p.data.incident;
    return `<b>${incident.kind}</b> ${incidentPeriod(incident)}<br>${incident.summary}`;
  }
  if (p.data && p.data.interval) return intervalText(p.data.interval);
  if (p.data && p.data.marker) {
    const m = p.data.marker;
    return `${clock(m.ts)} ${MARKER_KINDS[m.kind].label}<br>${m.text}`;
  }
  return `${clock(p.value[0])}: ${p.value[1]} ${p.seriesName}`;
}

function renderIncidentList(incidents) {
  const items = [...incidents].sort((a, b) => b.opened_ms - a.opened_ms).map((incident) => {
    const item = el("li", {
      class: `incident ${incident.closed_ms === null ? "open" : "closed"}`
        + (timeline.zoomed && timeline.zoomed.id === incident.id ? " zoomed" : ""),
      dataset: { incident: incident.id, kind: incident.kind },
      title: "zoom the picture to this incident",
      tabindex: "0",
    },
    el("div", { class: "when" }, el("span", { class: `badge ${incident.closed_ms === null ? "bad" : "ok"}` },
      incident.kind), " ", incidentPeriod(incident)),
    el("div", { class: "summary" }, incident.summary));
    item.addEventListener("click", () => zoomTo(incident));
    item.addEventListener("keydown", (event) => { if (event.key === "Enter") zoomTo(incident); });
    return item;
  });
  document.getElementById("incident-list").replaceChildren(
    ...(items.length ? items : [el("li", { class: "empty" }, "no incident in this span")]));
}

function zoomTo(incident) {
  timeline.zoomed = incident;
  refresh();
}

document.getElementById("timeline-range").addEventListener("change", (event) => {
  timeline.rangeMs = Number(event.target.value);
  timeline.zoomed = null;
  refresh();
});
document.getElementById("timeline-cluster").addEventListener("change", (event) => {
  timeline.cluster = event.target.value;
  timeline.zoomed = null;
  refresh();
});
document.getElementById("timeline-unzoom").addEventListener("click", () => {
  timeline.zoomed = null;
  refresh();
});
window.addEventListener("resize", () => timeline.chart && timeline.chart.resize());
