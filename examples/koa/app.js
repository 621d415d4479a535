// Koa + @koa/router + polylimit: every request is decided by the shared rules file (the same
// app as ../express/app.js).
const path = require('node:path');
const Koa = require('koa');
const Router = require('@koa/router');
const { rateLimit } = require('polylimit/koa');

const rules = process.env.POLYLIMIT_RULES || path.join(__dirname, '..', 'polylimit.yaml');

const app = new Koa();
const router = new Router();
// `router`: the middleware runs before it and asks it for the route template.
const limit = rateLimit({ rulesFile: rules, router, user: (ctx) => ctx.get('x-user') || null }); // user: stands in for your auth
app.use(limit);

router.get('/api/:name', (ctx) => (ctx.body = { hello: ctx.params.name }));
router.post('/api/payments/:id', (ctx) => (ctx.body = { paid: ctx.params.id }));
// An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
// the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
// the model's token usage) and the middleware reconciles after the response.
router.post('/api/llm', (ctx) => {
  const actual = ctx.get('x-actual-cost');
  if (actual !== '') ctx.state.polylimitCost = Number(actual);
  ctx.body = { answered: true };
});
// The demo's one account password; a real app checks its user store. The rules file's `login`
// rule keys by IP and the X-Login-User header, and counts only failed logins.
const DEMO_PASSWORD = 'open-sesame';
router.post('/login', async (ctx) => {
  const body = await readJson(ctx);
  const user = ctx.get('x-login-user');
  if (!user || !body || body.password !== DEMO_PASSWORD) {
    ctx.status = 401;
    ctx.body = { error: 'wrong user or password' };
    return;
  }
  ctx.body = { logged_in: user };
});
// A slow report under the rules file's `reports` rule (at most 10 in flight per client): held
// `ms` milliseconds (default 300); `fail=1` then ends in an error (a 500). `stats` counts the
// requests inside the handler, the app's own measure of what the limit lets in.
const stats = { in_flight: 0, max_in_flight: 0, started: 0 };
router.get('/reports/:id', async (ctx) => {
  stats.in_flight += 1;
  stats.started += 1;
  stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);
  await new Promise((resolve) => setTimeout(resolve, holdMs(ctx.query.ms)));
  stats.in_flight -= 1;
  if (ctx.query.fail === '1') throw new Error(`report ${ctx.params.id} failed`);
  ctx.body = { report: ctx.params.id };
});
router.get('/stats', (ctx) => (ctx.body = stats));
router.delete('/stats', (ctx) => {
  Object.assign(stats, { max_in_flight: stats.in_flight, started: 0 });
  ctx.body = stats;
});
router.get('/metrics', (ctx) => {
  ctx.type = 'text/plain';
  ctx.body = limit.limiter.metricsText();
});
app.use(router.routes());
app.silent = true; // the failing reports are on purpose

function holdMs(ms) {
  const n = Number(ms ?? 300);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 30000) : 300;
}

async function readJson(ctx) {
  let text = '';
  for await (const chunk of ctx.req) text += chunk;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`koa example on http://127.0.0.1:${port}`));
