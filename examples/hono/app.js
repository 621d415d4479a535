// Hono on Node (@hono/node-server) + polylimit: every request is decided by the shared rules
// file (the same app as ../express/app.js).
const path = require('node:path');
const { Hono } = require('hono');
const { serve } = require('@hono/node-server');
const { rateLimit } = require('polylimit/hono');

const rules = process.env.POLYLIMIT_RULES || path.join(__dirname, '..', 'polylimit.yaml');

const app = new Hono();
const limit = rateLimit({ rulesFile: rules, user: (c) => c.req.header('x-user') || null }); // user: stands in for your auth
app.use(limit);

app.get('/api/:name', (c) => c.json({ hello: c.req.param('name') }));
app.post('/api/payments/:id', (c) => c.json({ paid: c.req.param('id') }));
// An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
// the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
// the model's token usage) and the middleware reconciles after the response.
app.post('/api/llm', (c) => {
  const actual = c.req.header('x-actual-cost');
  if (actual !== undefined) c.set('polylimitCost', Number(actual));
  return c.json({ answered: true });
});
// The demo's one account password; a real app checks its user store. The rules file's `login`
// rule keys by IP and the X-Login-User header, and counts only failed logins.
const DEMO_PASSWORD = 'open-sesame';
app.post('/login', async (c) => {
  const body = await c.req.json().catch(() => null);
  const user = c.req.header('x-login-user');
  if (!user || !body || body.password !== DEMO_PASSWORD) return c.json({ error: 'wrong user or password' }, 401);
  return c.json({ logged_in: user });
});
// A slow report under the rules file's `reports` rule (at most 10 in flight per client): held
// `ms` milliseconds (default 300); `fail=1` then ends in an error (a 500). `stats` counts the
// requests inside the handler, the app's own measure of what the limit lets in.
const stats = { in_flight: 0, max_in_flight: 0, started: 0 };
app.get('/reports/:id', async (c) => {
  stats.in_flight += 1;
  stats.started += 1;
  stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);
  await new Promise((resolve) => setTimeout(resolve, holdMs(c.req.query('ms'))));
  stats.in_flight -= 1;
  if (c.req.query('fail') === '1') throw new Error(`report ${c.req.param('id')} failed`);
  return c.json({ report: c.req.param('id') });
});
app.get('/stats', (c) => c.json(stats));
app.delete('/stats', (c) => {
  Object.assign(stats, { max_in_flight: stats.in_flight, started: 0 });
  return c.json(stats);
});
app.get('/metrics', (c) => c.text(limit.limiter.metricsText()));
app.onError((err, c) => c.json({ error: err.message }, 500));

function holdMs(ms) {
  const n = Number(ms ?? 300);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 30000) : 300;
}

const port = Number(process.env.PORT || 3000);
serve({ fetch: app.fetch, port, hostname: '127.0.0.1' }, () => console.log(`hono example on http://127.0.0.1:${port}`));
