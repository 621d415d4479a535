// polylimit/client: a fetch that honours Retry-After (the rules are the core's, through the addon).

export interface RetryOptions {
  /** Retries after the first attempt (default 3). */
  maxRetries?: number;
  /** Longest single wait; a longer Retry-After returns the response at once (default 60000). */
  maxWaitMs?: number;
  /** No wait ends later than this after the first attempt; else the last response is returned (default 120000). */
  budgetMs?: number;
  /** Up to this fraction of the wait is added at random (default 0.1; 0 to 1). */
  jitter?: number;
  /** Statuses retried (default [429, 503]). */
  statuses?: number[];
  /**
   * Retry a status other than 429 for a method that is not idempotent (POST,
   * PATCH, …) too (default false: a 503 may come after the app processed the
   * request; 429 is retried for every method).
   */
  retryNonIdempotent?: boolean;
  /** Waits `ms`, rejecting when `signal` aborts (default: a timer). */
  sleep?: (ms: number, signal?: unknown) => Promise<void>;
  /** The wall clock in ms (default Date.now). */
  now?: () => number;
  /** A number in [0, 1) (default Math.random). */
  random?: () => number;
}

/** What retryFetch reads of a response (a fetch Response has it). */
export interface ResponseLike {
  status: number;
  headers: { get(name: string): string | null };
  body?: { cancel(): Promise<void> } | null;
}
export type FetchLike = (input: any, init?: any) => Promise<ResponseLike>;
/** The global fetch's type where the environment declares one. */
type GlobalFetch = typeof globalThis extends { fetch: infer F } ? F : FetchLike;

/** A function like `fetchFn` that retries 429/503 after Retry-After. */
export declare function retryFetch<F extends FetchLike>(fetchFn: F, options?: RetryOptions): F;
/** The global fetch, retrying 429/503 after Retry-After. */
export declare function retryFetch(options?: RetryOptions): GlobalFetch;
/** Milliseconds to wait from `nowMs` per a Retry-After value (seconds or HTTP-date); null when unreadable. */
export declare function parseRetryAfter(value: string | null | undefined, nowMs: number): number | null;
/** The wait (ms) retryFetch makes after such a response, or null when it returns it. */
export declare function retryWait(
  options: RetryOptions,
  response: { method?: string; status: number; retryAfter?: string | null; retries?: number; startedMs?: number },
): number | null;
export declare const DEFAULTS: Readonly<Required<Pick<RetryOptions, 'maxRetries' | 'maxWaitMs' | 'budgetMs' | 'jitter' | 'statuses' | 'retryNonIdempotent'>>>;
export default retryFetch;
