"use strict";
// isrwatch status page: polls the JSON API and /metrics every few seconds and renders plain DOM
// (no framework, no build step). Times are event time; "now" is the store's settled watermark.

const REFRESH_MS = 2000;
const FOLLOWERS_SHOWN = 8;
const LIVE_BATCH_AGE_S = 30;
const STUCK_IN_FLIGHT_MS = 30000; // the IsrwatchIsrChangePending alert's threshold
const CLOCK_SKEW_MS = 30000; // the IsrwatchBrokerClockSkew alert's threshold

const view = {
  asOf: null, // event time the data is judged at (the watermark)
  fetchedAt: 0, // wall clock of that read, to run countdowns between polls while the stream is live
  live: false,
  partitions: [],
  clusters: [],
  timer: null,
};

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// -- the API token: asked for once when the API wants one, kept for this browser tab's session -------

const TOKEN_KEY = "isrwatch-api-token";

class NeedsToken extends Error {}

function authorization() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function get(path, accept) {
  const response = await fetch(path, { headers: { Accept: accept, ...authorization() } });
  if (response.status === 401) throw new NeedsToken(path);
  if (!response.ok) throw new Error(`${path} answered HTTP ${response.status}`);
  return response;
}

async function getJSON(path) {
  return (await get(path, "application/json")).json();
}

async function getText(path) {
  return (await get(path, "text/plain")).text();
}

function askForToken() {
  const form = document.getElementById("login");
  const rejected = sessionStorage.getItem(TOKEN_KEY) !== null;
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("login-error").textContent = rejected ? "That token was not accepted." : "";
  form.hidden = false;
  document.getElementById("token").focus();
  const status = document.getElementById("status");
  status.textContent = "token needed";
  status.className = "pill down";
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  if (!input.value) return;
  sessionStorage.setItem(TOKEN_KEY, input.value);
  input.value = "";
  document.getElementById("login").hidden = true;
  refresh();
});

// Prometheus text exposition -> Map(name -> [{labels, value}])
function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[3]) });
  }
  return out;
}

function series(metrics, name, match = {}) {
  return (metrics.get(name) || []).filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v));
}

function total(metrics, name, match) {
  const found = series(metrics, name, match);
  return found.length ? found.reduce((sum, s) => sum + s.value, 0) : null;
}

// -- formatting ---------------------------------------------------------------------------------

function clock(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function secs(ms) {
  return ms === null || ms === undefined ? "—" : `${(ms / 1000).toFixed(1)} s`;
}

function offset(ms) {
  // A broker's clock offset, signed, in the largest unit that keeps it readable (a year ahead reads in days).
  const size = Math.abs(ms);
  const [scale, unit] = size < 120000 ? [1000, "s"] : size < 7200000 ? [60000, "min"] : size < 172800000 ? [3600000, "h"] : [86400000, "d"];
  return `${ms < 0 ? "−" : "+"}${(size / scale).toFixed(1)} ${unit}`;
}

function clusterAsOf(metrics, cluster) {
  // A cluster's own settled event time (each settles on its own, SPEC §6): the picture of one ends there, not at the
  // newest cluster's; the store's watermark stands for a store that keeps none.
  const [own] = series(metrics, "isrwatch_stream_cluster_event_time_seconds", { cluster });
  return own === undefined ? view.asOf : Math.round(own.value * 1000);
}

function eventNow() {
  return view.asOf + (view.live ? Date.now() - view.fetchedAt : 0);
}

function partitionName(p) {
  const name = `${p.topic}-${p.partition}`;
  return view.clusters.length > 1 ? `${p.cluster}/${name}` : name;
}

function replicaChip(id, { leader, outOfSync }) {
  const classes = ["replica", outOfSync ? "oos" : "in-sync"];
  if (leader) classes.push("leader");
  const title = `broker ${id}${leader ? ", leader" : ""}, ${outOfSync ? "out of sync" : "in sync"}`;
  return el("span", { class: classes.join(" "), title, dataset: { replica: id } }, id);
}

function fillTable(id, rows, emptyText, columns) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...(rows.length ? rows : [el("tr", { class: "empty" }, el("td", { colspan: columns }, emptyText))]));
}

// -- sections -----------------------------------------------------------------------------------

const SEVERITY = [
  ["offline", "offline", "bad"],
  ["under_min_isr", "under min ISR", "bad"],
  ["under_replicated", "under-replicated", "bad"],
  ["at_min_isr", "at min ISR", "warn"],
  ["shrink_predicted", "shrink predicted", "warn"],
];

function pendingChange(p) {
  return p.isr_state !== undefined && p.isr_state !== "committed";
}

function severity(p) {
  const index = SEVERITY.findIndex(([flag]) => p[flag]);
  return index >= 0 ? index : pendingChange(p) ? SEVERITY.length - 1 : SEVERITY.length;
}

function renderSummary(metrics, brokers, batching) {
  const count = (state) => total(metrics, "isrwatch_partitions", { state });
  const cards = [
    ["total", "partitions", count("total"), ""],
    ["under_replicated", "under-replicated", count("under_replicated"), "bad"],
    ["under_min_isr", "under min ISR", count("under_min_isr"), "bad"],
    ["at_min_isr", "at min ISR", count("at_min_isr"), "warn"],
    ["offline", "offline", count("offline"), "bad"],
    ["predicted", "followers near their lag limit", total(metrics, "isrwatch_followers_predicted_to_shrink"), "warn"],
    ["brokers", "brokers", brokers.length, ""],
    // Partitions whose ISR change is proposed (or written) and not committed: the AlterPartition panel's rows.
    ["pending", "pending ISR changes", count("isr_pending"), "warn"],
  ];
  if (batching) {
    // ZooKeeper mode: ISR changes written and not yet announced in a batch (each leader's pending set).
    cards.push(["unannounced", "ISR changes awaiting their batch",
      brokers.reduce((s, b) => s + b.pending_isr_change_count, 0), "warn"]);
  }
  document.getElementById("summary").replaceChildren(...cards.map(([key, label, value, alarm]) => {
    const level = value ? alarm : key === "total" || key === "brokers" ? "" : "ok";
    return el("div", { class: `card ${level}`, dataset: { metric: key } },
      el("div", { class: "value" }, value ?? 0), el("div", { class: "label" }, label));
  }));
}

function renderPartitions() {
  const onlyProblems = document.getElementById("problems-only").checked;
  const topic = document.getElementById("topic-filter").value.trim();
  const shown = view.partitions
    .filter((p) => (!onlyProblems || severity(p) < SEVERITY.length) && (!topic || p.topic.includes(topic)))
    .sort((a, b) => severity(a) - severity(b) || a.cluster.localeCompare(b.cluster)
      || a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const rows = shown.map((p) => {
    const outOfSync = new Set(p["out-of-sync"]);
    const level = severity(p);
    const badges = SEVERITY.filter(([flag]) => p[flag]).map(([, text, cls]) => el("span", { class: `badge ${cls}` }, text));
    if (pendingChange(p)) {
      // Proposed, not committed: the ISR shown is the committed one until the controller answers.
      badges.push(el("span", { class: "badge warn pending", title: "proposed, not committed yet" }, p.isr_state.replace("_", " ")));
    }
    return el("tr", {
      class: level < 3 ? "problem" : level < SEVERITY.length ? "warning" : undefined,
      dataset: { partition: `${p.topic}-${p.partition}`, cluster: p.cluster },
    },
    el("td", {}, view.clusters.length > 1 ? `${p.cluster}/${p.topic}` : p.topic),
    el("td", { class: "num" }, p.partition),
    el("td", { class: "leader" }, p.leader === -1 ? "none" : p.leader ?? "—"),
    el("td", { class: "replicas" }, p.replicas.map((r) => replicaChip(r, { leader: r === p.leader, outOfSync: outOfSync.has(r) }))),
    el("td", { class: "isr" }, p["in-sync"].join(", ")),
    el("td", { class: "out-of-sync" }, p["out-of-sync"].map((r) => replicaChip(r, { leader: r === p.leader, outOfSync: true }))),
    el("td", {}, badges.length ? badges : el("span", { class: "badge ok" }, "in sync")),
    el("td", { class: "num" }, p.hw),
    el("td", { class: "num" }, p.leader_leo));
  });
  fillTable("partitions", rows, view.partitions.length ? "no partition matches" : "no partitions yet", 9);
}

async function nearestFollowers(metrics) {
  // /metrics lists the top ISR followers behind their leader, longest since caught up first: the ones
  // nearest their lag limit. Their partitions' records carry the eligible and predicted shrink times.
  const top = series(metrics, "isrwatch_follower_time_since_caught_up_seconds")
    .sort((a, b) => b.value - a.value).slice(0, FOLLOWERS_SHOWN);
  const keys = [...new Set(top.map((s) => JSON.stringify([s.labels.cluster, s.labels.topic, s.labels.partition])))];
  const details = new Map(await Promise.all(keys.map(async (key) => {
    const [cluster, topic, partition] = JSON.parse(key);
    const path = `/v1/partitions/${encodeURIComponent(topic)}/${partition}?cluster=${encodeURIComponent(cluster)}`;
    return [key, await getJSON(path)];
  })));
  return top.flatMap((s) => {
    const detail = details.get(JSON.stringify([s.labels.cluster, s.labels.topic, s.labels.partition]));
    const follower = detail.followers.find((f) => String(f.replica) === s.labels.replica);
    return follower && follower.in_sync && follower.shrink_eligible_at_ms !== null ? [{ detail, follower }] : [];
  });
}

function renderFollowers(followers) {
  const rows = followers.map(({ detail, follower: f }) => el("tr", { class: f.shrink_predicted ? "warning" : undefined },
    el("td", {}, partitionName(detail)),
    el("td", {}, replicaChip(f.replica, { leader: false, outOfSync: false })),
    el("td", {}, el("span", { class: "countdown", dataset: { at: f.last_caught_up_ms, kind: "since" } })),
    el("td", { class: "num" }, f.lag_offsets ?? "—"),
    el("td", {}, el("span", { class: "countdown", dataset: { at: f.shrink_eligible_at_ms, kind: "eligible" } })),
    el("td", {}, el("span", { class: "countdown", dataset: { at: f.predicted_shrink_at_ms ?? "", kind: "check" } }))));
  fillTable("followers", rows, "every in-sync follower is caught up", 6);
  tickCountdowns();
}

function tickCountdowns() {
  if (view.asOf === null) return;
  const now = eventNow();
  for (const span of document.querySelectorAll(".countdown")) {
    if (span.dataset.at === "") {
      span.textContent = "—";
      continue;
    }
    const remaining = Number(span.dataset.at) - now;
    if (span.dataset.kind === "since") {
      span.textContent = `${secs(-remaining)} ago`;
    } else if (span.dataset.kind === "eligible") {
      span.textContent = remaining > 0 ? secs(remaining) : `over by ${secs(-remaining)}`;
      span.className = `countdown ${remaining <= 0 ? "over" : remaining < 5000 ? "soon" : ""}`;
    } else {
      span.textContent = remaining > 0 ? `in ${secs(remaining)}` : "due";
    }
  }
}

function decisionWhy(d) {
  if (d.kind === "shrink") return Object.entries(d.reasons).map(([r, why]) => `${r} ${why}`).join(", ");
  if (d.kind === "expand") return `${d.replicas_changed.join(", ")} caught up`;
  if (d.kind === "rejected") return d.error;
  return `leader ${d.leader}, epoch ${d.leader_epoch}`;
}

function decisionKind(d) {
  // A proposal (AlterPartition) reads as one, with what became of it: a refused one is no shrink.
  if (!d.proposal) return el("td", { class: `kind-${d.kind}` }, d.kind);
  const outcome = d.proposal.state === "refused" ? `refused ${d.proposal.error}` : d.proposal.state;
  return el("td", { class: `kind-proposal kind-${d.proposal.state}`, title: `${d.kind} proposed to the controller` },
    `${d.kind} proposed → ${outcome}`);
}

function renderDecisions(decisions) {
  const rows = decisions.map((d) => el("tr", { dataset: d.proposal ? { kind: d.kind, proposal: d.proposal.state } : { kind: d.kind } },
    el("td", {}, clock(d.ts)),
    el("td", {}, partitionName(d)),
    decisionKind(d),
    el("td", {}, d.leader),
    el("td", {}, `[${d.isr_before.join(",")}] → [${d.isr_after.join(",")}]`),
    el("td", { class: "why" }, decisionWhy(d))));
  fillTable("decisions", rows, "no decisions yet", 6);
}

function renderPropagations(batches) {
  const rows = batches.map((b) => {
    const names = b.partitions.map((p) => `${p.topic}-${p.partition}`);
    const listed = names.length > 4 ? `${names.slice(0, 4).join(", ")} … (+${names.length - 4})` : names.join(", ");
    return el("tr", { dataset: { trigger: b.trigger } },
      el("td", {}, clock(b.ts)),
      el("td", {}, b.broker),
      el("td", { title: names.join(", ") }, `${names.length}: ${listed}`),
      el("td", {}, el("span", { class: `badge ${b.trigger === "linger" ? "ok" : "warn"}` }, b.trigger)),
      el("td", { class: "num delay" }, b.first_change_ts === null ? "—" : secs(b.ts - b.first_change_ts)));
  });
  fillTable("propagations", rows, "no ISR-change batch yet", 5);
}

function divergenceSide(side) {
  if (!side) return "—";
  if (side.partitions) return side.partitions.map((p) => `${p.topic}-${p.partition}`).join(", ") || "(empty)";
  return `${side.kind} → [${side.isr.join(",")}]`;
}

// Timing divergences counted by the rule that excused each (SPEC §7), from isrwatch_divergences_total{cause}.
function renderTimingCauses(metrics) {
  const byCause = new Map();
  for (const s of series(metrics, "isrwatch_divergences_total", { kind: "timing" })) {
    byCause.set(s.labels.cause, (byCause.get(s.labels.cause) || 0) + s.value);
  }
  const causes = [...byCause].filter(([, count]) => count > 0).sort(([a], [b]) => a.localeCompare(b));
  document.getElementById("timing-causes").replaceChildren(
    causes.length ? "timing divergences by cause: " : "no timing divergence",
    ...causes.map(([cause, count]) => el("span", { class: "badge ok", dataset: { cause } }, `${cause} ${count}`)));
}

function renderDivergences(divergences) {
  const rows = divergences.map((d) => el("tr", { dataset: d.cause ? { kind: d.kind, cause: d.cause } : { kind: d.kind }, class: d.kind === "timing" ? undefined : "problem" },
    el("td", {}, clock(d.ts)),
    el("td", {}, view.clusters.length > 1 ? `${d.cluster}/${d.broker}` : d.broker),
    el("td", {}, d.subject === "isr" ? `${d.topic}-${d.partition} epoch ${d.partition_epoch}` : "ISR-change batch"),
    el("td", {}, el("span", { class: `badge ${d.kind === "timing" ? "ok" : "warn"}` }, d.kind), d.cause ? [" ", el("span", { class: "cause" }, d.cause)] : null),
    el("td", {}, divergenceSide(d.model)),
    el("td", {}, divergenceSide(d.observed)),
    el("td", { class: "num" }, d.margin_ms === null ? "—" : `${d.margin_ms} ms`)));
  fillTable("divergences", rows, "no divergence: the brokers did what the model decided (or no agent input)", 7);
}

function renderStream(metrics) {
  const value = (name) => total(metrics, name);
  const age = value("isrwatch_stream_last_batch_age_seconds");
  const lag = value("isrwatch_stream_watermark_lag_seconds");
  const fmt = (v, unit, digits = 1) => (v === null ? "—" : `${v.toFixed(digits)}${unit}`);
  const rows = [
    ["last micro-batch", age === null ? "none yet" : `${fmt(age, " s")} ago`],
    ["watermark", view.asOf === null ? "—" : `${clock(view.asOf)} (${fmt(lag, " s")} behind the wall clock)`],
    ["input", fmt(value("isrwatch_stream_input_rows_per_second"), " rows/s", 0)],
    ["batch duration", fmt(value("isrwatch_stream_batch_duration_seconds"), " s", 2)],
    ["state rows", fmt(value("isrwatch_stream_state_rows"), "", 0)],
    ["rows read", fmt(value("isrwatch_stream_input_rows_total"), "", 0)],
    ["late events", fmt(value("isrwatch_late_events_total") ?? 0, "", 0)],
    ["dead letters", fmt(value("isrwatch_dead_letters_total") ?? 0, "", 0)],
    ["ignored fetches", fmt(value("isrwatch_ignored_fetches_total") ?? 0, "", 0)],
  ];
  document.querySelector("#stream tbody").replaceChildren(...rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
  const status = document.getElementById("status");
  view.live = age !== null && age < LIVE_BATCH_AGE_S;
  status.textContent = age === null ? "no batch yet" : view.live ? "live" : `stale: last batch ${fmt(age, " s")} ago`;
  status.className = `pill ${age === null ? "" : view.live ? "live" : "stale"}`;
}

function renderBrokers(brokers, metrics) {
  const rows = brokers.map((b) => {
    const labels = { cluster: b.cluster, broker: String(b.broker) };
    const removed = total(metrics, "isrwatch_follower_shrinks_total", labels);
    const pending = total(metrics, "isrwatch_broker_isr_pending_partitions", labels);
    const proposes = b.queue_size !== undefined; // sends no batch: AlterPartition
    // A broker whose clock is off from its cluster's by more than the alert's threshold is judged on a wrong clock.
    const skewed = b.clock_offset_ms !== null && b.clock_offset_ms !== undefined && Math.abs(b.clock_offset_ms) > CLOCK_SKEW_MS;
    return el("tr", { class: b.out_of_sync_replicas || skewed ? "problem" : undefined, dataset: { broker: b.broker, cluster: b.cluster } },
      el("td", {}, view.clusters.length > 1 ? `${b.cluster}/${b.broker}` : b.broker),
      el("td", { class: "num" }, b.partitions_led),
      el("td", { class: "num" }, b.replicas),
      el("td", { class: "num" }, b.out_of_sync_replicas),
      el("td", { class: "num removed" }, removed ?? 0),
      el("td", { class: "num pending" }, pending ?? 0),
      el("td", { class: "num awaiting" }, proposes ? "—" : b.pending_isr_change_count),
      el("td", { class: "last-propagation" }, b.last_propagation_ms === null ? "—" : `${secs(b.time_since_last_propagation_ms)} ago`),
      el("td", { class: "clock" }, b.clock_offset_ms === null || b.clock_offset_ms === undefined ? "—" : offset(b.clock_offset_ms),
        skewed ? [" ", el("span", { class: "badge bad", title: "its clock is off from its cluster's median clock" }, "clock skewed")] : null));
  });
  fillTable("brokers", rows, "no brokers yet", 9);
}

function renderAlterPartition(pending, brokers) {
  // Shown only when some leader proposes with AlterPartition (or a write is in flight): ZooKeeper-mode pages keep
  // their sections.
  const managed = brokers.filter((b) => b.queue_size !== undefined);
  document.getElementById("alter-partition").hidden = !managed.length && !pending.length;
  const rows = pending.map((p) => el("tr", { class: "warning", dataset: { partition: `${p.topic}-${p.partition}`, cluster: p.cluster } },
    el("td", {}, partitionName(p)),
    el("td", {}, p.leader),
    el("td", {}, el("span", { class: "badge warn" }, p.isr_state.replace("_", " "))),
    el("td", { class: "isr" }, p["in-sync"].join(", ")),
    el("td", { class: "maximal" }, (p.maximal_isr || []).join(", ")),
    el("td", {}, el("span", { class: "countdown", dataset: { at: p.pending_since_ms ?? "", kind: "since" } }))));
  fillTable("isr-pending", rows, "no ISR change pending", 6);
  const brokerRows = managed.map((b) => el("tr", {
    // A request in flight is normal for milliseconds; past the alert's 30 s the channel looks stuck.
    class: b.in_flight_age_ms === null ? undefined : b.in_flight_age_ms > STUCK_IN_FLIGHT_MS ? "problem" : "warning",
    dataset: { broker: b.broker, cluster: b.cluster },
  },
  el("td", {}, view.clusters.length > 1 ? `${b.cluster}/${b.broker}` : b.broker),
  el("td", { class: "num queued" }, b.queue_size),
  el("td", { class: "num in-flight" }, b.in_flight_partitions === null ? "none"
    : `${b.in_flight_partitions} partition${b.in_flight_partitions === 1 ? "" : "s"}`),
  el("td", { class: "age" }, b.in_flight_age_ms === null ? "—" : secs(b.in_flight_age_ms))));
  fillTable("alter-partition-brokers", brokerRows, "no broker proposes with AlterPartition", 4);
  tickCountdowns();
}

async function recentDecisions() {
  if (document.getElementById("decision-kinds").value === "all") {
    return (await getJSON("/v1/decisions?page_size=20")).decisions;
  }
  const [shrinks, expands] = await Promise.all(["shrink", "expand"].map((kind) => getJSON(`/v1/decisions?kind=${kind}&page_size=20`)));
  return [...shrinks.decisions, ...expands.decisions].sort((a, b) => b.ts - a.ts).slice(0, 20);
}

// -- polling ------------------------------------------------------------------------------------

async function refresh() {
  clearTimeout(view.timer);
  const error = document.getElementById("error");
  try {
    const [partitions, pending, brokers, decisions, propagations, divergences, metricsText] = await Promise.all([
      getJSON("/v1/partitions?page_size=1000"),
      getJSON("/v1/partitions?state=isr_pending&page_size=50"),
      getJSON("/v1/brokers"),
      recentDecisions(),
      getJSON("/v1/propagations?page_size=15"),
      getJSON("/v1/divergences?page_size=15"),
      getText("/metrics"),
    ]);
    const metrics = parseMetrics(metricsText);
    const followers = await nearestFollowers(metrics);
    view.asOf = partitions.as_of_ms;
    view.fetchedAt = Date.now();
    view.partitions = partitions.partitions;
    view.clusters = [...new Set([...partitions.partitions.map((p) => p.cluster), ...brokers.brokers.map((b) => b.cluster)])];
    // The picture of one cluster, over the span its range or zoom asks for.
    const pictured = picturedCluster(view.clusters);
    const pictureAsOf = pictured === null ? null : clusterAsOf(metrics, pictured);
    const pictureData = pictureAsOf === null ? null : await getJSON(timelinePath(pictured, pictureAsOf));
    document.getElementById("clusters").textContent = view.clusters.length ? `cluster ${view.clusters.join(", ")}` : "";
    document.getElementById("as-of").textContent = view.asOf === null ? "" : `as of ${clock(view.asOf)}`;
    const more = document.getElementById("partitions-more");
    more.hidden = !partitions.next_page_token;
    more.textContent = "Showing the first 1000 partitions; narrow them with the topic filter or use the API.";
    renderTimeline(pictureData, brokers.brokers.filter((b) => b.cluster === pictured).map((b) => b.broker));
    // Leaders that propose with AlterPartition send no ISR-change batch: the propagation panel and card say
    // nothing about them, so they show only where some leader batches (or a batch was sent).
    const batching = propagations.propagations.length > 0 || !brokers.brokers.some((b) => b.queue_size !== undefined);
    document.getElementById("propagation-section").hidden = !batching;
    renderStream(metrics);
    renderSummary(metrics, brokers.brokers, batching);
    renderBrokers(brokers.brokers, metrics);
    renderPartitions();
    renderAlterPartition(pending.partitions, brokers.brokers);
    renderFollowers(followers);
    renderDecisions(decisions);
    renderPropagations(propagations.propagations);
    renderDivergences(divergences.divergences);
    renderTimingCauses(metrics);
    error.hidden = true;
  } catch (err) {
    if (err instanceof NeedsToken) {
      askForToken(); // polling resumes when a token is given
      return;
    }
    error.textContent = `Cannot read the API: ${err.message}. Retrying…`;
    error.hidden = false;
    const status = document.getElementById("status");
    status.textContent = "API unreachable";
    status.className = "pill down";
  }
  view.timer = setTimeout(refresh, REFRESH_MS);
}

document.getElementById("problems-only").addEventListener("change", renderPartitions);
document.getElementById("topic-filter").addEventListener("input", renderPartitions);
document.getElementById("decision-kinds").addEventListener("change", refresh);
setInterval(tickCountdowns, 250);
refresh();
