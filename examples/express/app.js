// Express + polylimit: every request is decided by the shared rules file.
const path = require('node:path');
const express = require('express');
const { rateLimit } = require('polylimit/express');

const rules = process.env.POLYLIMIT_RULES || path.join(__dirname, '..', 'polylimit.yaml');

const app = express();
const limit = rateLimit({ rulesFile: rules, user: (req) => req.get('x-user') }); // user: stands in for your auth
app.use(limit);
app.get('/api/:name', (req, res) => res.json({ hello: req.params.name }));
app.post('/api/payments/:id', (req, res) => res.json({ paid: req.params.id }));
// An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
// the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
// the model's token usage) and the middleware reconciles after the response.
app.post('/api/llm', (req, res) => {
  const actual = req.get('x-actual-cost');
  if (actual !== undefined) res.locals.polylimitCost = Number(actual);
  res.json({ answered: true });
});
// The demo's one account password; a real app checks its user store. The rules file's `login`
// rule keys by IP and the X-Login-User header, and counts only failed logins.
const DEMO_PASSWORD = 'open-sesame';
app.post('/login', express.json(), (req, res) => {
  const user = req.get('x-login-user');
  if (!user || !req.body || req.body.password !== DEMO_PASSWORD) {
    return res.status(401).json({ error: 'wrong user or password' });
  }
  return res.json({ logged_in: user });
});
// A slow report under the rules file's `reports` rule (at most 10 in flight per client): held
// `ms` milliseconds (default 300); `fail=1` then ends in an error (a 500). `stats` counts the
// requests inside the handler, the app's own measure of what the limit lets in.
const stats = { in_flight: 0, max_in_flight: 0, started: 0 };
app.get('/reports/:id', (req, res, next) => {
  stats.in_flight += 1;
  stats.started += 1;
  stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);
  setTimeout(() => {
    stats.in_flight -= 1;
    if (req.query.fail === '1') return next(new Error(`report ${req.params.id} failed`));
    return res.json({ report: req.params.id });
  }, holdMs(req.query.ms));
});
app.get('/stats', (req, res) => res.json(stats));
app.delete('/stats', (req, res) => {
  Object.assign(stats, { max_in_flight: stats.in_flight, started: 0 });
  res.json(stats);
});
app.get('/metrics', (req, res) => res.type('text/plain').send(limit.limiter.metricsText()));

function holdMs(ms) {
  const n = Number(ms ?? 300);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 30000) : 300;
}

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`express example on http://127.0.0.1:${port}`));
