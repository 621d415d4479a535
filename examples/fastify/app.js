// Fastify + polylimit: every request is decided by the shared rules file.
const path = require('node:path');
const Fastify = require('fastify');
const polylimit = require('polylimit/fastify');

const rules = process.env.POLYLIMIT_RULES || path.join(__dirname, '..', 'polylimit.yaml');

const DEMO_PASSWORD = 'open-sesame';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function holdMs(ms) {
  const n = Number(ms ?? 300);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 30000) : 300;
}

async function main() {
  const app = Fastify();
  await app.register(polylimit, { rulesFile: rules, user: (request) => request.headers['x-user'] }); // user: stands in for your auth
  app.get('/api/:name', async (request) => ({ hello: request.params.name }));
  app.post('/api/payments/:id', async (request) => ({ paid: request.params.id }));
  // An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
  // the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
  // the model's token usage) and the middleware reconciles after the response.
  app.post('/api/llm', async (request, reply) => {
    const actual = request.headers['x-actual-cost'];
    if (actual !== undefined) reply.polylimitCost = Number(actual);
    return { answered: true };
  });
  // The demo's one account password; a real app checks its user store. The rules file's `login`
  // rule keys by IP and the X-Login-User header, and counts only failed logins.
  app.post('/login', async (request, reply) => {
    const user = request.headers['x-login-user'];
    if (!user || !request.body || request.body.password !== DEMO_PASSWORD) {
      return reply.code(401).send({ error: 'wrong user or password' });
    }
    return { logged_in: user };
  });
  // A slow report under the rules file's `reports` rule (at most 10 in flight per client): held
  // `ms` milliseconds (default 300); `fail=1` then throws (a 500). `stats` counts the requests
  // inside the handler, the app's own measure of what the limit lets in.
  const stats = { in_flight: 0, max_in_flight: 0, started: 0 };
  app.get('/reports/:id', async (request) => {
    stats.in_flight += 1;
    stats.started += 1;
    stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);
    try {
      await sleep(holdMs(request.query.ms));
    } finally {
      stats.in_flight -= 1;
    }
    if (request.query.fail === '1') throw new Error(`report ${request.params.id} failed`);
    return { report: request.params.id };
  });
  app.get('/stats', async () => stats);
  app.delete('/stats', async () => Object.assign(stats, { max_in_flight: stats.in_flight, started: 0 }));
  app.get('/metrics', async (request, reply) => reply.type('text/plain').send(app.polylimit.metricsText()));
  const port = Number(process.env.PORT || 3001);
  await app.listen({ port, host: '127.0.0.1' });
  console.log(`fastify example on http://127.0.0.1:${port}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
