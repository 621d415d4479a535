import type { Limiter, LimiterOptions, Policy } from './index';

/** The interceptor's options: a limiter (its rules, or a route rule of it) or the options to build one. */
export interface GrpcOptions extends Omit<LimiterOptions, 'policy'> {
  /** The interceptor's own policy; with `limiter`, the name of one of that limiter's policies. */
  policy?: Policy | string;
  /** A limiter you built: without `key`/`policy` its rules decide (`match.path`: the full method name). */
  limiter?: Limiter;
  /** With `limiter` and `key`/`policy`: the `route` dimension (the full method name) first. */
  perRoute?: boolean;
  /** The call's `key` dimension. */
  keyGenerator?: (metadata: any, call: any) => string | null | undefined | Promise<string | null | undefined>;
  /** The call's `user` dimension (null or undefined: none). */
  user?: (metadata: any, call: any) => string | null | undefined | Promise<string | null | undefined>;
  /** The call's `api_key` dimension (null or undefined: none). */
  apiKey?: (metadata: any, call: any) => string | null | undefined | Promise<string | null | undefined>;
  /** True: the call passes unchecked and uncharged. */
  skip?: (metadata: any, call: any, method: { path: string }) => boolean | Promise<boolean>;
  /** The call's cost (default: its rules'): a whole number, or a function giving it per call (null or undefined: the rules'). */
  cost?: number | ((metadata: any, call: any) => number | null | undefined | Promise<number | null | undefined>);
}

/** A @grpc/grpc-js server interceptor (`new grpc.Server({ interceptors: [...] })`); `limiter` is the one it checks with. */
export type PolylimitInterceptor = ((methodDescriptor: any, call: any) => any) & { limiter: Limiter };

/** `new grpc.Server({ interceptors: [polylimitInterceptor(limiter)] })`. */
export function polylimitInterceptor(limiterOrOptions?: Limiter | GrpcOptions): PolylimitInterceptor;
export default polylimitInterceptor;

/**
 * In a handler: the call's actual cost (an LLM call's tokens), passed to `limiter.complete` as the
 * call ends (the core caps it at the rules' `max_cost`). False when no polylimit interceptor
 * settles this call (its rules carry no cost or `count`).
 */
export function reportCost(call: { metadata: any }, cost: number): boolean;
