import type { Limiter, MiddlewareOptions, Outcome } from './index';

/** The module's options: `rateLimit()`'s (Express). */
export interface PolylimitModuleOptions extends MiddlewareOptions {
  /** Answers a refused request instead (throw your own HttpException); the outcome's headers are already set. */
  handler?: (context: any, outcome: Outcome) => boolean | Promise<boolean>;
  /** Where the outcome is stored on the request (default `rateLimit`). */
  requestPropertyName?: string | false;
}

/** `@RateLimit()`'s options: a rule of the module's limiter (a policy name, key, count), or a limit of its own. */
export type RateLimitOptions = Omit<MiddlewareOptions, 'limiter' | 'skip' | 'keyGenerator' | 'user' | 'apiKey'>;

/** The injection token of the module's `Polylimit`. */
export const POLYLIMIT: 'POLYLIMIT';

/** The module's state: `limiter`, the limiter its options built or were given. */
export class Polylimit {
  readonly limiter: Limiter;
  onModuleDestroy(): void;
}

/** The guard: `{ provide: APP_GUARD, useClass: PolylimitGuard }` or `@UseGuards(PolylimitGuard)`. */
export class PolylimitGuard {
  constructor(polylimit: Polylimit);
  canActivate(context: any): Promise<boolean>;
}

/** `imports: [PolylimitModule.forRoot({ policy: { rate: '100/min' } })]` (global). */
export class PolylimitModule {
  static forRoot(options?: PolylimitModuleOptions): { module: typeof PolylimitModule; global: boolean; providers: unknown[]; exports: unknown[] };
}

/** A handler's or controller's own rule (`{ policy: 'name' }`, `{ key: ['user'] }`, `{ policy: { rate: '5/min' } }`). */
export function RateLimit(options?: RateLimitOptions): MethodDecorator & ClassDecorator;
/** Exempts a handler or controller (`false`: undoes a controller's). */
export function SkipRateLimit(skip?: boolean): MethodDecorator & ClassDecorator;
