import { chromium } from 'playwright-core';
const base = 'http://127.0.0.1:18080';
const [p, n] = [process.argv[2], +process.argv[3] || 3];
const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
const ctx = await browser.newContext({ viewport: { width: 390, height: 844 } });
const page = await ctx.newPage();
await page.goto(base + p, { waitUntil: 'networkidle' });
const name = p.replace(/[^a-z0-9]+/gi, '_');
for (let i = 0; i < n; i++) {
  await page.screenshot({ path: `/tmp/shots/ph${name}_${i}.png`, fullPage: true, clip: { x: 0, y: i * 844, width: 390, height: 844 } });
}
await browser.close();
