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
app.get('/metrics', (req, res) => res.type('text/plain').send(limit.limiter.metricsText()));

const port = Number(process.env.PORT || 3000);
app.listen(port, '127.0.0.1', () => console.log(`express example on http://127.0.0.1:${port}`));
