// The clean room's Express app: polylimit from the npm tarballs, one policy.
const express = require('express');
const { rateLimit } = require('polylimit/express');

const app = express();
const limit = rateLimit({ policy: { name: 'api', rate: '10/hour' }, store: process.env.REDIS_URL || 'memory', timeout: '10s', key: ['ip'] }); // decisions, not latency
app.get('/hello', limit, (req, res) => res.json({ hello: 'world' }));
app.get('/version', (req, res) =>
  res.json({ version: require('polylimit/package.json').version, module: require.resolve('polylimit') }));
app.listen(Number(process.env.PORT), '127.0.0.1');
