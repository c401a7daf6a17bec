// Signs people in to gpulens through a real OpenID provider in headless Chromium and records
// what each of them meets; collector/tests/it/sign_in.rs asserts on the JSON printed.
//
//   node sign-in.mjs BASE RECOMMENDATION_PATH SCREENSHOT_DIR
import { chromium } from 'playwright-core';

const [base, recPath, shots] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox'],
});
const out = { console_errors: [], trace: [] };
let current = null;

async function shot(page, name) {
  for (const [w, h, tag] of [[1440, 900, 'desktop'], [390, 844, 'phone']]) {
    await page.setViewportSize({ width: w, height: h });
    await page.screenshot({ path: `${shots}/sign-in-${name}-${tag}.png`, fullPage: true });
  }
  await page.setViewportSize({ width: 1440, height: 900 });
}

// Starts where an anonymous person would, and signs in as `login` at the provider.
async function signIn(login, first) {
  const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await ctx.newPage();
  current = page;
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame()) out.trace.push(f.url());
  });
  page.on('console', (m) => {
    // Refusals the test provokes (403s) show as failed loads; script errors are what count.
    if (m.type() === 'error' && page.url().startsWith(base) && !m.text().startsWith('Failed to load resource')) {
      out.console_errors.push(`${login}: ${m.text()}`);
    }
  });
  const r = { };
  await page.goto(`${base}/findings?severity=warning`);
  r.login_url = page.url().slice(base.length);
  r.login_text = await page.innerText('main');
  if (first) await shot(page, 'login');
  await page.click('a:has-text("Sign in with")');
  await page.waitForSelector('input[name=login]');
  r.provider_url = page.url();
  await page.fill('input[name=login]', login);
  await page.fill('input[name=password]', 'any password');
  await page.click('button[type=submit]');
  // The provider asks once for consent to share the profile and groups; its pages navigate
  // on their own, so look again until the browser is back at gpulens.
  for (let i = 0; i < 50 && !page.url().startsWith(base); i++) {
    try {
      await page.waitForLoadState('load');
      if ((await page.locator('input[value=consent]').count()) > 0) {
        await page.click('button[type=submit]');
      }
    } catch (e) {
      // A navigation destroyed the page being looked at: look at the next one.
    }
    await page.waitForTimeout(200);
  }
  await page.waitForURL((u) => u.toString().startsWith(base), { timeout: 20000 });
  await page.waitForLoadState('load');
  // The sign-in page after the callback continues to where the person was going.
  if (page.url().includes('/auth/callback')) {
    const text = await page.innerText('body');
    if (text.includes('Signed in')) {
      await page.waitForURL((u) => !u.toString().includes('/auth/callback'), { timeout: 10000 });
    }
  }
  r.landed = page.url().slice(base.length);
  r.text = await page.innerText('body');
  return { ctx, page, r };
}

async function status(page, path, init) {
  return page.evaluate(async ([p, i]) => {
    const resp = await fetch(p, i);
    return { status: resp.status, body: await resp.text() };
  }, [path, init || {}]);
}

try {
  // Maria: a viewer limited to team ml.
  {
    const { ctx, page, r } = await signIn('maria', true);
    await shot(page, 'scoped-viewer');
    r.tenants = JSON.parse((await status(page, '/api/v1/tenants')).body).tenants.map((t) => t.team);
    const resp = await page.goto(`${base}${recPath}`);
    r.recommendation_status = resp.status();
    r.recommendation_text = await page.innerText('main');
    out.maria = r;
    await ctx.close();
  }
  // Victor: a viewer of every team; the approve form is not his, and a forged post fails.
  {
    const { ctx, page, r } = await signIn('victor', false);
    const resp = await page.goto(`${base}${recPath}`);
    r.recommendation_status = resp.status();
    r.has_form = (await page.$('input[name=csrf]')) !== null;
    r.forged = await status(page, `${recPath}/approve`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'csrf=forged&action=1',
    });
    r.api_approve = await status(page, '/api/v1/label-actions/1/approve', { method: 'POST' });
    out.victor = r;
    await ctx.close();
  }
  // Olga: an operator approves the planned change, then signs out.
  {
    const { ctx, page, r } = await signIn('olga', false);
    await page.goto(`${base}${recPath}`);
    r.has_form = (await page.$('input[name=csrf]')) !== null;
    await shot(page, 'operator-step');
    if (r.has_form) {
      await page.click('form[action$="/approve"] button[type=submit]');
      await page.waitForLoadState('load');
      r.after_approve_url = page.url().slice(base.length);
      r.after_approve_text = await page.innerText('main');
    }
    await page.click('button:has-text("Sign out")');
    await page.waitForLoadState('load');
    await page.goto(`${base}/findings`);
    r.after_sign_out_url = page.url().slice(base.length);
    out.olga = r;
    await ctx.close();
  }
  // Eve: the provider knows her, gpulens gives her groups no role.
  {
    const { ctx, page, r } = await signIn('eve', false);
    await shot(page, 'no-role');
    out.eve = r;
    await ctx.close();
  }
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e);
  if (current) {
    out.error_at = current.url();
    out.error_page = (await current.innerText('body').catch(() => '')) + ' | trace: ' + out.trace.join(' -> ');
  }
}
await browser.close();
console.log(JSON.stringify(out));
