// Drives the status page in Debian's headless chromium with playwright-core and prints, as one JSON
// object, what a person would see: the partitions table, the summary cards, the decisions and batches,
// and every console error, page error, failed request or HTTP error the page caused.
// Usage: PLAYWRIGHT_CORE=/path/to/playwright-core node status_page.cjs URL SCREENSHOT.png [WAIT_FOR_SELECTOR]
// With TOKEN set, the page is expected to ask for the API token: the script first gives a wrong one, then
// TOKEN, and reports what the login form said ("login") and whether a reload asked again.
"use strict";

const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const [url, screenshot, waitFor = "#partitions tbody tr[data-partition]"] = process.argv.slice(2);
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

function tableRows(selector) {
  return [...document.querySelectorAll(`${selector} tbody tr`)].map((tr) => ({
    dataset: { ...tr.dataset },
    classes: [...tr.classList],
    cells: [...tr.cells].map((td) => td.textContent.trim()),
  }));
}

// The text of the picture's visible tooltip (ECharts draws it as an absolutely placed div), "" when none shows.
const TOOLTIP = `[...document.querySelectorAll("#timeline-chart div")]
  .filter((d) => getComputedStyle(d).visibility !== "hidden" && d.style.display !== "none"
    && d.style.position === "absolute" && d.textContent).map((d) => d.textContent).join(" | ")`;

// What the timeline picture was given to draw: its span, lanes, intervals, markers, count series and incident
// bands (each data item carries the API's record it was drawn from), and the incident list beside it.
function pictured() {
  const node = document.getElementById("timeline-chart");
  const chart = window.echarts && echarts.getInstanceByDom(node);
  const picker = document.getElementById("timeline-cluster");
  const clusters = document.getElementById("timeline-cluster-control").hidden ? null
    : { options: [...picker.options].map((o) => o.value), value: picker.value };
  const listed = [...document.querySelectorAll("#incident-list li[data-incident]")].map((li) => ({
    id: li.dataset.incident, kind: li.dataset.kind, classes: [...li.classList], text: li.textContent.trim(),
  }));
  if (!chart) return { span: document.getElementById("timeline-span").textContent, clusters, incidents: listed, bands: [] };
  const option = chart.getOption();
  const custom = option.series.filter((s) => s.type === "custom");
  const bandData = (custom[0] && custom[0].markArea && custom[0].markArea.data) || [];
  return {
    span: document.getElementById("timeline-span").textContent,
    clusters,
    since: option.xAxis[1].min,
    until: option.xAxis[1].max,
    lanes: option.yAxis[1].data,
    intervals: custom.flatMap((s) => s.data.map((d) => d.interval)),
    markers: option.series.filter((s) => s.type === "scatter").flatMap((s) => s.data.map((d) => d.marker)),
    counts: Object.fromEntries(option.series.filter((s) => s.type === "line").map((s) => [s.name, s.data])),
    bands: bandData.map(([from, to]) => ({ id: from.incident.id, start: from.xAxis, end: to.xAxis, summary: from.name })),
    incidents: listed,
    height: node.getBoundingClientRect().height,
  };
}

(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ARGS });
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") problems.push(`console ${m.type()}: ${m.text()}`); });
    page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
    page.on("requestfailed", (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
    // A 401 to a request without the right token is the page finding out it needs one (or the wrong one given).
    const refused = (r) => r.status() === 401 && r.request().headers()["authorization"] !== `Bearer ${process.env.TOKEN}`;
    page.on("response", (r) => { if (r.status() >= 400 && !(process.env.TOKEN && refused(r))) problems.push(`HTTP ${r.status()}: ${r.url()}`); });

    await page.goto(url, { waitUntil: "load" });
    let login = null;
    if (process.env.TOKEN) {
      await page.waitForSelector("#login:not([hidden])", { timeout: 20000 });
      login = { askedFirst: true };
      await page.fill("#token", "not-the-token");
      await page.click("#login button");
      await page.waitForSelector("#login:not([hidden])", { timeout: 20000 });
      await page.waitForFunction(() => document.getElementById("login-error").textContent !== "");
      login.wrongToken = await page.textContent("#login-error");
      await page.fill("#token", process.env.TOKEN);
      await page.click("#login button");
      await page.waitForSelector(waitFor, { timeout: 20000 });
      // The browser's console lines for those 401s carry no request: the ones logged until the data showed are
      // theirs (the requests sent with the wrong token may answer after the right one was given).
      const beforeLogin = problems.length;
      await page.reload({ waitUntil: "load" }); // the token is kept for the tab's session
      await page.waitForSelector(waitFor, { timeout: 20000 });
      login.askedAgainAfterReload = !(await page.$eval("#login", (f) => f.hidden));
      const expected = (p) => p.startsWith("HTTP 401") || p.includes("status of 401 (Unauthorized)");
      problems.splice(0, beforeLogin, ...problems.slice(0, beforeLogin).filter((p) => !expected(p)));
    }
    await page.waitForSelector(waitFor, { timeout: 20000 });
    await page.waitForTimeout(2500); // one more poll, so a refresh is seen too
    const seen = await page.evaluate((fn) => {
      const rows = new Function(`return (${fn})`)();
      return {
        title: document.title,
        status: document.getElementById("status").textContent,
        error: document.getElementById("error").hidden ? null : document.getElementById("error").textContent,
        summary: Object.fromEntries([...document.querySelectorAll("#summary .card")].map(
          (c) => [c.dataset.metric, { value: c.querySelector(".value").textContent, classes: [...c.classList] }])),
        partitions: [...document.querySelectorAll("#partitions tbody tr[data-partition]")].map((tr) => ({
          partition: tr.dataset.partition,
          problem: tr.classList.contains("problem"),
          leader: tr.querySelector(".leader").textContent,
          replicas: [...tr.querySelectorAll(".replicas .replica")].map((s) => ({
            id: Number(s.dataset.replica), oos: s.classList.contains("oos"),
            background: getComputedStyle(s).backgroundColor,
          })),
          isr: tr.querySelector(".isr").textContent,
          badges: [...tr.querySelectorAll(".badge")].map((b) => b.textContent),
        })),
        followers: rows("#followers"),
        decisions: rows("#decisions"),
        propagations: rows("#propagations"),
        divergences: rows("#divergences"),
        timingCauses: [...document.querySelectorAll("#timing-causes [data-cause]")].map((s) => s.textContent),
        stream: rows("#stream"),
        brokers: rows("#brokers"),
        alterPartitionShown: !document.getElementById("alter-partition").hidden,
        propagationsShown: !document.getElementById("propagation-section").hidden,
        isrPending: rows("#isr-pending"),
        alterPartitionBrokers: rows("#alter-partition-brokers"),
      };
    }, tableRows.toString());
    seen.timeline = await page.evaluate(pictured);
    // The first screen as a person opens the page (the README shows it): the picture, the cards.
    if (screenshot) await page.screenshot({ path: screenshot.replace(/\.png$/, "-top.png") });
    if (seen.timeline && seen.timeline.bands.length) {
      // Hover the first incident's band where no interval or marker lies (the cluster lane): its summary shows; a
      // click on its entry in the list zooms the picture to it.
      const band = seen.timeline.bands[0];
      const at = await page.evaluate(([start, end]) => {
        const chart = echarts.getInstanceByDom(document.getElementById("timeline-chart"));
        const [x, y] = chart.convertToPixel({ xAxisIndex: 1, yAxisIndex: 1 }, [(start + end) / 2, 0]);
        const box = document.getElementById("timeline-chart").getBoundingClientRect();
        return [box.left + x, box.top + y + 12];
      }, [band.start, band.end]);
      // The tooltip shows after ECharts handles the move (a loaded machine takes a while, and the page's refresh
      // redraws the picture): wait for it, moving in again a few times, rather than a fixed pause.
      for (let tries = 0; tries < 5 && !seen.timeline.hovered; tries++) {
        await page.mouse.move(0, 0);
        await page.mouse.move(at[0], at[1], { steps: 2 });
        await page.waitForFunction(`(${TOOLTIP}).length > 0`, null, { timeout: 3000 }).catch(() => {});
        seen.timeline.hovered = await page.evaluate(TOOLTIP);
      }
      await page.mouse.move(0, 0);
      await page.click(`#incident-list li[data-incident="${band.id}"]`);
      await page.waitForFunction(() => document.getElementById("timeline-span").textContent.includes("one incident"),
        null, { timeout: 10000 });
      seen.timeline.zoomed = await page.evaluate(pictured);
      if (screenshot) await page.screenshot({ path: screenshot.replace(/\.png$/, "-zoomed.png") });
      await page.click("#timeline-unzoom");
      await page.waitForFunction(() => !document.getElementById("timeline-span").textContent.includes("one incident"),
        null, { timeout: 10000 });
    }
    await page.check("#problems-only");
    seen.problemsOnly = await page.$$eval("#partitions tbody tr[data-partition]", (trs) => trs.map((tr) => tr.dataset.partition));
    await page.uncheck("#problems-only");
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    seen.problems = problems;
    seen.login = login;
    process.stdout.write(JSON.stringify(seen));
  } finally {
    await browser.close();
  }
})().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
