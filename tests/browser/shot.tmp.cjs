const { chromium } = require('playwright-core');
(async () => {
  const exe = process.env.CHROME || '/usr/bin/chromium';
  const b = await chromium.launch({ executablePath: exe, args: ['--no-sandbox'] });
  const base = 'http://127.0.0.1:18092';
  const pages = [['recs', '/recommendations'], ['step', '/recommendations/per_gpu_sharing-e8e3640a2f4158b1'], ['node', '/nodes/dra-node/l40s-solo']];
  for (const [w, tag] of [[1440, 'd'], [390, 'p']]) {
    const ctx = await b.newContext({ viewport: { width: w, height: 900 } });
    const p = await ctx.newPage();
    for (const [name, path] of pages) {
      const r = await p.goto(base + path);
      const sw = await p.evaluate(() => document.documentElement.scrollWidth);
      console.log(name, tag, r.status(), 'scrollWidth', sw);
      await p.screenshot({ path: `/tmp/shot-${name}-${tag}.png`, fullPage: true });
    }
    await ctx.close();
  }
  await b.close();
})();
