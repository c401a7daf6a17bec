import { chromium } from 'playwright-core';
const base = 'http://127.0.0.1:18080';
const pages = process.argv.slice(2);
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
for (const [w, h, tag] of [[1366, 900, 'd'], [390, 844, 'p']]) {
  const ctx = await browser.newContext({ viewport: { width: w, height: h } });
  const page = await ctx.newPage();
  for (const p of pages) {
    await page.goto(base + p, { waitUntil: 'networkidle' });
    const name = p.replace(/[^a-z0-9]+/gi, '_') || 'root';
    const sw = await page.evaluate(() => document.documentElement.scrollWidth);
    await page.screenshot({ path: `/tmp/shots/${tag}${name}.png`, fullPage: true });
    console.log(tag, p, 'scrollWidth', sw);
  }
  await ctx.close();
}
await browser.close();
