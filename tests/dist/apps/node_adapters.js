// The clean room's Node adapters: every subpath of the npm tarball loads, and a Koa app
// (polylimit/koa) answers 200 200 429 to three requests against a 2/hour policy.
const http = require('node:http');
const Koa = require('koa');
const { rateLimit } = require('polylimit/koa');

for (const subpath of ['polylimit/hono', 'polylimit/nestjs', 'polylimit/grpc']) require(subpath);

const app = new Koa();
app.use(rateLimit({ policy: { name: 'api', rate: '2/hour' }, store: 'memory', key: ['ip'] }));
app.use((ctx) => { ctx.body = 'hello'; });
const server = app.listen(0, '127.0.0.1', async () => {
  const { port } = server.address();
  const statuses = [];
  for (let i = 0; i < 3; i++) {
    statuses.push(await new Promise((resolve, reject) =>
      http.get({ host: '127.0.0.1', port, path: '/' }, (res) => { res.resume(); resolve(res.statusCode); }).on('error', reject)));
  }
  console.log(`koa ${statuses.join(' ')}`);
  server.close();
});
