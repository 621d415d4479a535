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
app.get('/metrics', (req, res) => res.type('text/plain').send(limit.limiter.metricsText()));

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`express example on http://127.0.0.1:${port}`));
