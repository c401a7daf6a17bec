// Walks the gpulens dashboard in headless Chromium: every page reachable from the navigation
// (nodes, GPUs, findings, recommendations included), once with JavaScript and once without.
// Records per page what a person would check (title, heading, tables, charts, text) and every
// console error, failed request, failing link and accessibility slip; saves screenshots; then
// measures every page at phone width (390 px).
// Prints one JSON document on stdout; collector/tests/it/browser.rs asserts on it.
//
// usage: node walk.mjs BASE_URL OUT_DIR
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const [base, out] = process.argv.slice(2);
if (!base || !out) {
  console.error("usage: node walk.mjs BASE_URL OUT_DIR");
  process.exit(2);
}
mkdirSync(out, { recursive: true });
const origin = new URL(base).origin;
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

// Pages worth walking: the dashboard's own, not the API, downloads or re-sorted copies.
function walkable(u) {
  if (u.origin !== origin) return false;
  if (u.pathname.startsWith("/api/") || u.pathname === "/metrics") return false;
  if (u.pathname === "/logout") return false;
  for (const k of ["sort", "dir", "format"]) if (u.searchParams.has(k)) return false;
  return true;
}

function slug(u) {
  const s = (u.pathname + (u.search ? "_" + u.search.slice(1) : ""))
    .replace(/[^A-Za-z0-9]+/g, "_")
    .replace(/^_+|_+$/g, "");
  return s || "overview";
}

// A page's template: its path with the GPU or the finding's or step's id left out (the few nodes
// differ in kind: MIG, time-sliced, whole), and the names of its query parameters.
function shape(u) {
  const path = u.pathname
    .replace(/^\/gpus\/.+$/, "/gpus/*")
    .replace(/-[0-9a-f]{16}$/, "-*");
  const keys = [...new Set(u.searchParams.keys())].sort().join("&");
  return keys ? `${path}?${keys}` : path;
}

async function walk(javaScriptEnabled, limit) {
  const shotShapes = new Set();
  const csvShapes = new Set();
  const context = await browser.newContext({
    javaScriptEnabled,
    viewport: { width: 1280, height: 900 },
  });
  const page = await context.newPage();
  const problems = [];
  let current = "";
  page.on("console", (m) => {
    if (m.type() === "error") problems.push({ page: current, kind: "console", text: m.text() });
  });
  page.on("pageerror", (e) => problems.push({ page: current, kind: "pageerror", text: String(e) }));
  page.on("requestfailed", (r) =>
    problems.push({ page: current, kind: "requestfailed", text: `${r.url()} ${r.failure()?.errorText}` }),
  );
  page.on("response", (r) => {
    if (r.status() >= 400) problems.push({ page: current, kind: "http", text: `${r.status()} ${r.url()}` });
  });
  const queue = [new URL("/", base).href];
  const seen = new Set(queue);
  const links = new Set();
  const pages = [];
  while (queue.length && pages.length < limit) {
    const url = queue.shift();
    current = url;
    const resp = await page.goto(url, { waitUntil: "load" });
    const info = await page.evaluate(() => {
      const text = document.body.innerText;
      const unlabeled = [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
        .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label"))
        .map((el) => el.name || el.id || el.tagName);
      const hrefs = [...document.querySelectorAll("a[href]")].map((a) => new URL(a.getAttribute("href"), document.baseURI).href);
      return {
        title: document.title,
        h1: document.querySelector("h1")?.innerText ?? "",
        lang: document.documentElement.lang,
        tables: document.querySelectorAll("table").length,
        rows: document.querySelectorAll("tbody tr").length,
        charts: [...document.querySelectorAll("figure.chart svg")].filter((el) => getComputedStyle(el).display !== "none").length,
        emptyCharts: document.querySelectorAll("figure.chart.empty").length,
        hoverTitles: document.querySelectorAll("svg rect.hover title").length,
        legends: document.querySelectorAll("ul.legend").length,
        forms: document.querySelectorAll("form").length,
        mainLandmark: !!document.querySelector("main"),
        skipLink: !!document.querySelector("a.skip"),
        unlabeled,
        hrefs,
        text: text.slice(0, 12000),
      };
    });
    Object.assign(info, await page.evaluate(layoutProblems));
    // The CSV of each table (once per page template, with JavaScript): parses and matches.
    const csvProblems = [];
    let csvTablesChecked = 0;
    if (javaScriptEnabled && !csvShapes.has(shape(new URL(url)))) {
      csvShapes.add(shape(new URL(url)));
      // What a table's CSV download says against the table: a problem, or null.
      const check = async (t) => {
        if (t.rows < 0) return "no table above the link";
        const r = await context.request.get(new URL(t.href, url).href);
        const rows = parseCsv(await r.text());
        const type = r.headers()["content-type"] || "";
        if (r.status() !== 200 || !type.startsWith("text/csv")) return `${r.status()} ${type}`;
        if (rows.length - 1 !== t.rows) return `${rows.length - 1} CSV rows`;
        if (t.rows > 0 && rows[1][0].replace(/^'/, "") !== t.first) return `first field ${JSON.stringify(rows[1][0])}`;
        if (rows.some((x) => x.length !== rows[0].length)) return "ragged rows";
        return null;
      };
      for (const t of await page.evaluate(csvTables)) {
        csvTablesChecked++;
        let problem = await check(t);
        if (problem && t.rows >= 0) {
          // The demo keeps running: an alert that fired, or a sample that arrived, between
          // the page and its download changes the rows. The page and the download again,
          // back to back; a real mismatch is there both times.
          await page.reload({ waitUntil: "load" });
          const again = (await page.evaluate(csvTables)).find((x) => x.href === t.href);
          problem = again ? await check(again) : "the table is gone on a reload";
        }
        if (problem) csvProblems.push({ ...t, problem });
      }
    }
    info.csvProblems = csvProblems;
    info.csvTablesChecked = csvTablesChecked;
    info.tablesWithoutCsv = await page.evaluate(tablesWithoutCsv);
    const u = new URL(url);
    // A screenshot of the first page of each shape (with JavaScript) or of the first twelve
    // (without): every page is still checked, but pages of one template look alike and a
    // full-page screenshot costs more than the visit.
    const template = shape(u);
    let shot = null;
    if (javaScriptEnabled ? !shotShapes.has(template) : pages.length < 12) {
      shotShapes.add(template);
      shot = `${out}/${javaScriptEnabled ? "" : "nojs-"}${slug(u)}.png`;
      await page.screenshot({ path: shot, fullPage: true });
    }
    // The steps a page links to, in the order it lists them (issue 71: never a step before one
    // it requires).
    const steps = [...new Set(info.hrefs.map((h) => new URL(h).pathname)
      .filter((p) => /^\/recommendations\/[a-z_]+-[0-9a-f]{16}$/.test(p))
      .map((p) => p.slice("/recommendations/".length)))];
    pages.push({ url: u.pathname + u.search, status: resp?.status() ?? 0, screenshot: shot, ...info, steps, hrefs: undefined });
    for (const h of info.hrefs) {
      const n = new URL(h);
      n.hash = "";
      links.add(n.href);
      if (walkable(n) && !seen.has(n.href)) {
        seen.add(n.href);
        queue.push(n.href);
      }
    }
  }
  // Every link on every page must answer (API links, downloads and sort links included).
  const broken = [];
  if (javaScriptEnabled) {
    for (const l of links) {
      if (new URL(l).origin !== origin) continue;
      const r = await context.request.get(l);
      if (r.status() >= 400) broken.push(`${r.status()} ${l}`);
    }
  }
  await context.close();
  return { pages, problems, broken, links: links.size, unvisited: queue.length };
}


// What a reader would call broken on the page as drawn: chart text outside its SVG box, a
// section heading with nothing under it, and a finding whose primary evidence is empty.
function layoutProblems() {
  const visible = (el) => el.getClientRects().length > 0 && getComputedStyle(el).display !== "none";
  const clipped = [];
  const smallText = [];
  for (const svg of document.querySelectorAll("figure.chart svg")) {
    if (!visible(svg)) continue;
    const vb = svg.viewBox.baseVal;
    const scale = svg.getScreenCTM()?.a ?? 1;
    for (const t of svg.querySelectorAll("text")) {
      const b = t.getBBox();
      if (!t.textContent.trim() || b.width === 0) continue;
      // The size the reader sees: the font size in the drawing's units times its scale.
      const px = parseFloat(getComputedStyle(t).fontSize) * scale;
      if (px < 10.95) smallText.push({ text: t.textContent.trim().slice(0, 30), px: Math.round(px * 10) / 10 });
      if (b.x < vb.x - 1 || b.y < vb.y - 1 || b.x + b.width > vb.x + vb.width + 1 || b.y + b.height > vb.y + vb.height + 1) {
        clipped.push(t.textContent.trim().slice(0, 40));
      }
    }
  }
  const emptySections = [];
  for (const h of document.querySelectorAll("main h2")) {
    let n = h.nextElementSibling;
    if (!n || /^H[12]$/.test(n.tagName)) emptySections.push(h.innerText);
  }
  let evidenceEmpty = null;
  const ev = [...document.querySelectorAll("main h2")].find((h) => h.innerText.trim() === "Evidence");
  if (ev) {
    let n = ev.nextElementSibling;
    let fig = null;
    while (n && n.tagName !== "H2" && !fig) {
      fig = n.matches("figure.chart") ? n : n.querySelector("figure.chart");
      n = n.nextElementSibling;
    }
    evidenceEmpty = !fig || fig.classList.contains("empty") || /no data/i.test(fig.innerText);
  }
  return { clipped, smallText: smallText.slice(0, 5), emptySections, evidenceEmpty };
}

// At phone width every table must lead with what matters: in its first row, the first cell
// with a link and the cell under the table's key header (th.key, the column it is sorted by;
// else its first numeric column) lie inside the screen without scrolling sideways, and so does
// the caption's first line. A table of figures without a key header is reported too. Returns
// the tables where any of that fails.
function phoneTables() {
  const vw = document.documentElement.clientWidth;
  const inside = (el) => {
    const r = el.getBoundingClientRect();
    return r.left >= -0.5 && r.right <= vw + 0.5;
  };
  const bad = [];
  for (const table of document.querySelectorAll("main table")) {
    const name = (table.caption?.textContent || table.querySelector("th")?.textContent || "").slice(0, 60);
    const row = table.querySelector("tbody tr");
    if (!row || row.querySelector("td[colspan]")) continue;
    const cells = [...row.children];
    const link = cells.find((c) => c.querySelector("a"));
    if (link && !inside(link)) bad.push({ table: name, cell: "link", text: link.textContent.slice(0, 40) });
    const heads = [...(table.tHead?.rows[0]?.children ?? [])];
    let key = heads.findIndex((h) => h.classList.contains("key"));
    if (key < 0) key = heads.findIndex((h) => h.classList.contains("n"));
    if (heads.length && key < 0 && cells.some((c) => c.classList.contains("n"))) {
      bad.push({ table: name, cell: "no key header" });
    } else if (key >= 0 && cells[key] && !inside(cells[key])) {
      bad.push({ table: name, cell: `key column "${heads[key].textContent.trim()}"`, text: cells[key].textContent.slice(0, 40) });
    }
    if (table.caption) {
      const r = table.caption.getBoundingClientRect();
      if (r.left < -0.5 || Math.min(r.right, r.left + 200) > vw + 0.5) bad.push({ table: name, cell: "caption" });
    }
  }
  return bad;
}

// RFC 4180 CSV into rows of fields.
function parseCsv(text) {
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\r" && text[i + 1] === "\n") { row.push(field); rows.push(row); row = []; field = ""; i++; }
    else field += c;
  }
  if (field || row.length) { row.push(field); rows.push(row); }
  return rows;
}

// Every "download as CSV" link of a page against the table above it: the file parses, has
// a header and as many rows as the table shows, and its first row's first field is the text
// that leads the table's first row.
function csvTables() {
  // A cell's first line: its text up to a line break (a second line under it is detail, such
  // as a mechanism's chooser, that the CSV gives a column of its own).
  const firstLine = (cell) => {
    let text = "";
    for (const n of cell?.childNodes ?? []) {
      if (n.nodeName === "BR") break;
      text += n.textContent;
    }
    return text.trim();
  };
  const out = [];
  for (const a of document.querySelectorAll("main a[download][href*='format=csv']")) {
    let n = a.closest("p")?.previousElementSibling;
    while (n && !n.querySelector?.("table") && n.tagName !== "TABLE") n = n.previousElementSibling;
    const table = n?.tagName === "TABLE" ? n : n?.querySelector("table");
    if (!table) { out.push({ href: a.getAttribute("href"), rows: -1 }); continue; }
    const trs = [...table.tBodies[0].rows].filter((r) => !r.querySelector("td[colspan]"));
    out.push({
      href: a.getAttribute("href"),
      rows: trs.length,
      first: trs[0]?.cells[0]?.querySelector("a")?.textContent.trim() ?? firstLine(trs[0]?.cells[0]),
    });
  }
  return out;
}

// The tables that no "download as CSV" link follows (issue 74.3: every table exports), by
// caption or header.
function tablesWithoutCsv() {
  const out = [];
  for (const table of document.querySelectorAll("main table")) {
    const box = table.parentElement?.classList.contains("scroll") ? table.parentElement : table;
    if (box.nextElementSibling?.querySelector?.("a[download][href*='format=csv']")) continue;
    const name = table.caption?.textContent || table.tHead?.textContent || table.textContent;
    out.push(name.trim().slice(0, 80));
  }
  return out;
}

// The same pages on a phone (390 × 844 CSS px): how wide each document is. Wide tables scroll
// inside their own box; the page itself must not be wider than the screen.
async function phone(urls) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const page = await context.newPage();
  const widths = [];
  for (const url of urls) {
    await page.goto(new URL(url, base).href, { waitUntil: "load" });
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    const { clipped, smallText } = await page.evaluate(layoutProblems);
    const offscreen = await page.evaluate(phoneTables);
    widths.push({ url, width, clipped, smallText, offscreen });
    if (widths.length <= 12) {
      await page.screenshot({ path: `${out}/phone-${slug(new URL(url, base))}.png`, fullPage: true });
    }
  }
  await context.close();
  return widths;
}

// The overview's heatmap as pixels, not markup: the SVG is drawn into a canvas at 4× and each
// cell sampled. An allocated share's colour must lie on the one sequential scale (ColorBrewer
// YlOrRd from its dark end: dark red = allocated and idle, pale yellow = fully used), and an
// idle allocation (0 % of it used) must be drawn in the alarming dark red, far from "no data"
// and the hatch; a cell with nothing allocated must show the hatch (white and grey) and no
// colour of the scale, so "busy but not fully used" never reads as "not allocated".
async function heatmapPixels() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  await page.goto(new URL("/", base).href, { waitUntil: "load" });
  const result = await page.evaluate(async () => {
    const svg = document.querySelector("figure.heatmap svg");
    if (!svg) return { found: false };
    const vb = svg.viewBox.baseVal;
    const k = 4;
    const clone = svg.cloneNode(true);
    clone.setAttribute("width", vb.width * k);
    clone.setAttribute("height", vb.height * k);
    clone.removeAttribute("style");
    const url = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(new XMLSerializer().serializeToString(clone));
    const img = new Image();
    await new Promise((ok, fail) => { img.onload = ok; img.onerror = fail; img.src = url; });
    const canvas = document.createElement("canvas");
    canvas.width = vb.width * k;
    canvas.height = vb.height * k;
    const ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const px = (x, y) => [...ctx.getImageData(Math.round(x * k), Math.round(y * k), 1, 1).data.slice(0, 3)];
    const stops = [[128, 0, 38], [227, 26, 28], [253, 141, 60], [254, 217, 118], [255, 237, 160]];
    // Distance from a colour to the scale (the polyline through its stops).
    const toScale = (c) => {
      let best = Infinity;
      for (let i = 0; i + 1 < stops.length; i++) {
        const [a, b] = [stops[i], stops[i + 1]];
        const ab = a.map((v, j) => b[j] - v);
        const t = Math.max(0, Math.min(1, ab.reduce((s, v, j) => s + v * (c[j] - a[j]), 0) / ab.reduce((s, v) => s + v * v, 0)));
        const d = Math.hypot(...c.map((v, j) => v - (a[j] + ab[j] * t)));
        best = Math.min(best, d);
      }
      return best;
    };
    const grey = [156, 163, 175];
    const near = (c, d, r) => Math.hypot(...c.map((v, j) => v - d[j])) <= r;
    const noData = [248, 250, 252];
    const out = { found: true, allocated: 0, offScale: [], idle: 0, idleNotAlarming: [], hatch: 0, hatchOnScale: 0, hatchWithoutGrey: 0 };
    for (const g of svg.querySelectorAll("g")) {
      const rects = g.querySelectorAll("rect");
      if (!rects.length || !/unallocated/.test(rects[0].getAttribute("fill") || "")) continue;
      const x = +rects[0].getAttribute("x"), y = +rects[0].getAttribute("y");
      const w = +rects[0].getAttribute("width"), h = +rects[0].getAttribute("height");
      if (rects.length > 1) {
        const r = rects[1];
        const cx = +r.getAttribute("x") + +r.getAttribute("width") / 2;
        const cy = +r.getAttribute("y") + +r.getAttribute("height") / 2;
        const c = px(cx, cy);
        out.allocated++;
        if (toScale(c) > 12 || near(c, grey, 30)) out.offScale.push({ colour: c, fill: r.getAttribute("fill") });
        // An idle allocation: the scale's dark end, far from "no data", white and the hatch grey.
        if (/\(0 % of the allocation\)/.test(g.querySelector("title")?.textContent || "")) {
          out.idle++;
          if (!near(c, stops[0], 12) || near(c, noData, 150) || near(c, grey, 100)) out.idleNotAlarming.push(c);
        }
        // The unallocated part above it, where there is more than its edges.
        if (+r.getAttribute("y") - y < 1.5) continue;
      }
      out.hatch++;
      let onScale = false, sawGrey = false;
      const top = y, bottom = rects.length > 1 ? +rects[1].getAttribute("y") : y + h;
      // Inside the cell's edges, where neighbours' colours blend in.
      for (let sx = x + 0.5; sx < x + w - 0.4; sx += 0.25) {
        for (let sy = top + 0.5; sy < bottom - 0.4; sy += 0.25) {
          const c = px(sx, sy);
          if (near(c, grey, 40)) sawGrey = true;
          else if (!near(c, [255, 255, 255], 40) && toScale(c) < 12) onScale = true;
        }
      }
      if (onScale) out.hatchOnScale++;
      if (!sawGrey) out.hatchWithoutGrey++;
    }
    out.offScale = out.offScale.slice(0, 5);
    out.idleNotAlarming = out.idleNotAlarming.slice(0, 5);
    return out;
  });
  await context.close();
  return result;
}

// A range change moves every figure that claims to follow it: the tenants' and teams' total
// rows, the overview's chart captions and the plan (made from the range) at the last 24 hours
// against the default.
async function rangeMoves() {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const read = async (url, what) => {
    await page.goto(new URL(url, base).href, { waitUntil: "load" });
    return page.evaluate((what) => what === "total"
      ? document.querySelector("main tfoot")?.innerText ?? ""
      : what === "plan"
      ? document.querySelector("main section[aria-labelledby=h-plan]")?.innerText ?? ""
      : [...document.querySelectorAll("main figure.chart figcaption")].map((c) => c.innerText).join(" | "), what);
  };
  const out = [];
  for (const [path, what] of [["/tenants", "total"], ["/teams", "total"], ["/", "captions"], ["/recommendations", "plan"]]) {
    const sep = path.includes("?") ? "&" : "?";
    const before = await read(path, what);
    const after = await read(`${path}${sep}range=24h`, what);
    out.push({ path, before, after, moved: before !== "" && after !== "" && before !== after });
  }
  await context.close();
  return out;
}

const withJs = await walk(true, 150);
const withoutJs = await walk(false, 40);
const phoneWidths = await phone(withJs.pages.map((p) => p.url));
const heatmap = await heatmapPixels();
const ranges = await rangeMoves();
await browser.close();
// What each step requires, as the API serves it, to check the order the pages list them in.
const requires = Object.fromEntries(
  (await (await fetch(new URL("/api/v1/recommendations", base))).json()).recommendations.map((r) => [r.id, r.requires]),
);
console.log(JSON.stringify({ withJs, withoutJs, phone: phoneWidths, heatmap, ranges, requires }));
