// Opens the API's /docs (Swagger UI) and /redoc (ReDoc) in Debian's headless chromium with playwright-core, with
// every request that leaves the API's own origin refused (as offline), and prints as one JSON object what each page
// showed: the operations Swagger UI lists, the operations ReDoc lists, every request refused (it left the origin),
// blocked by the page's Content-Security-Policy before it left, or failed.
// Usage: PLAYWRIGHT_CORE=/path/to/playwright-core node docs_offline.cjs BASE_URL
"use strict";

const { chromium } = require(process.env.PLAYWRIGHT_CORE);

const [base] = process.argv.slice(2);
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync"];

(async () => {
  const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ARGS });
  const refused = [];
  const blocked = [];
  const failed = [];
  const seen = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.route("**/*", (route) => {
      const url = route.request().url();
      if (url.startsWith(base) || url.startsWith("data:")) return route.continue();
      refused.push(url);
      return route.abort("internetdisconnected");
    });
    page.on("requestfailed", (r) => {
      const why = r.failure()?.errorText;
      if (why === "csp") blocked.push(r.url());
      else if (!refused.includes(r.url())) failed.push(`${r.url()} ${why}`);
    });
    page.on("response", (r) => { if (r.status() >= 400) failed.push(`HTTP ${r.status()}: ${r.url()}`); });

    await page.goto(`${base}/docs`, { waitUntil: "load" });
    await page.waitForSelector(".opblock-summary-path", { timeout: 30000 });
    seen.swagger = await page.$$eval(".opblock-summary-path", (els) => els.map((e) => e.textContent.trim()));

    await page.goto(`${base}/redoc`, { waitUntil: "load" });
    await page.waitForSelector("[data-section-id^='operation/']", { timeout: 30000 });
    seen.redoc = await page.$$eval("[data-section-id^='operation/']", (els) => els.map((e) => e.dataset.sectionId));
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify({ ...seen, refused, blocked, failed }));
})().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
