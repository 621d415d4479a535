// NestJS (Express platform) + polylimit: every request is decided by the shared rules file (the
// same app as ../express/app.js). Plain JavaScript: the decorators are called as functions; in
// TypeScript they are the usual `@Controller()`, `@Get()`, `@RateLimit()`, `@SkipRateLimit()`.
import 'reflect-metadata';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { Body, Controller, Delete, Get, HttpCode, HttpException, Module, Param, Post, Query, Req, Res } from '@nestjs/common';
import { POLYLIMIT, PolylimitGuard, PolylimitModule, SkipRateLimit } from 'polylimit/nestjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const rules = process.env.POLYLIMIT_RULES || path.join(here, '..', 'polylimit.yaml');

// The demo's one account password; a real app checks its user store.
const DEMO_PASSWORD = 'open-sesame';
const stats = { in_flight: 0, max_in_flight: 0, started: 0 };

class AppController {
  constructor(polylimit) {
    this.polylimit = polylimit;
  }
  hello(name) {
    return { hello: name };
  }
  pay(id) {
    return { paid: id };
  }
  // An LLM-style endpoint: the rules file's `llm` rule reserves the X-Reserve header's cost before
  // the handler; the handler reports the actual cost (here read from X-Actual-Cost, in a real app
  // the model's token usage) on the request and the guard reconciles after the response.
  llm(req) {
    const actual = req.get('x-actual-cost');
    if (actual !== undefined) req.polylimitCost = Number(actual);
    return { answered: true };
  }
  login(req, body) {
    const user = req.get('x-login-user');
    if (!user || !body || body.password !== DEMO_PASSWORD) throw new HttpException({ error: 'wrong user or password' }, 401);
    return { logged_in: user };
  }
  async report(id, ms, fail) {
    stats.in_flight += 1;
    stats.started += 1;
    stats.max_in_flight = Math.max(stats.max_in_flight, stats.in_flight);
    await new Promise((resolve) => setTimeout(resolve, holdMs(ms)));
    stats.in_flight -= 1;
    if (fail === '1') throw new Error(`report ${id} failed`);
    return { report: id };
  }
  stats() {
    return stats;
  }
  resetStats() {
    Object.assign(stats, { max_in_flight: stats.in_flight, started: 0 });
    return stats;
  }
  metrics(res) {
    res.type('text/plain').send(this.polylimit.limiter.metricsText());
  }
}

/** `@decorators` on `Class.prototype[name]`, and parameter decorators by index. */
function decorate(cls, name, decorators, params = []) {
  const descriptor = Object.getOwnPropertyDescriptor(cls.prototype, name);
  for (const d of decorators) d(cls.prototype, name, descriptor);
  params.forEach((p, i) => p(cls.prototype, name, i));
}
decorate(AppController, 'hello', [Get('api/:name')], [Param('name')]);
decorate(AppController, 'pay', [Post('api/payments/:id'), HttpCode(200)], [Param('id')]);
decorate(AppController, 'llm', [Post('api/llm'), HttpCode(200)], [Req()]);
decorate(AppController, 'login', [Post('login'), HttpCode(200)], [Req(), Body()]);
decorate(AppController, 'report', [Get('reports/:id')], [Param('id'), Query('ms'), Query('fail')]);
decorate(AppController, 'stats', [Get('stats'), SkipRateLimit()]);
decorate(AppController, 'resetStats', [Delete('stats'), SkipRateLimit()]);
decorate(AppController, 'metrics', [Get('metrics'), SkipRateLimit()], [Res()]);
Reflect.defineMetadata('self:paramtypes', [{ index: 0, param: POLYLIMIT }], AppController);
Controller()(AppController);

class AppModule {}
Module({
  imports: [PolylimitModule.forRoot({ rulesFile: rules, user: (req) => req.get('x-user') || null })], // user: stands in for your auth
  controllers: [AppController],
  providers: [{ provide: APP_GUARD, useClass: PolylimitGuard }],
})(AppModule);

function holdMs(ms) {
  const n = Number(ms ?? 300);
  return Number.isFinite(n) ? Math.min(Math.max(n, 0), 30000) : 300;
}

const app = await NestFactory.create(AppModule, { logger: ['error'] });
const port = Number(process.env.PORT || 3000);
await app.listen(port, '127.0.0.1');
console.log(`nestjs example on http://127.0.0.1:${port}`);
