'use strict';
// One Express app for bench/express.js: `node express_app.js <polylimit|express-rate-limit> <redis url>`.
// Prints the port once listening.
const express = require('express');

const [which, redisUrl] = process.argv.slice(2);
const app = express();
let client;
if (which === 'polylimit') {
  const { rateLimit } = require('../express');
  app.use(rateLimit({ policy: { algorithm: 'fixed_window', rate: '1000000000/min' }, store: redisUrl, prefix: 'bench-express' }));
} else {
  const { rateLimit } = require('express-rate-limit');
  const { RedisStore } = require('rate-limit-redis');
  const Redis = require('ioredis');
  client = new Redis(redisUrl);
  app.use(
    rateLimit({
      windowMs: 60000,
      limit: 1000000000,
      standardHeaders: 'draft-7',
      legacyHeaders: true,
      store: new RedisStore({ sendCommand: (command, ...args) => client.call(command, ...args), prefix: 'bench-erl:' }),
    }),
  );
}
app.get('/', (req, res) => res.send('ok'));
const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('disconnect', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
