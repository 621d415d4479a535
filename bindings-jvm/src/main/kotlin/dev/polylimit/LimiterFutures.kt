@file:JvmName("LimiterFutures")

package dev.polylimit

import java.util.concurrent.CompletableFuture
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.future.future

// The CompletableFuture form of the generated suspend functions, for Java:
// `LimiterFutures.checkFuture(limiter, "user:42")`. No thread waits for the
// store: the coroutine suspends in the native future and resumes, then
// completes the CompletableFuture, on Dispatchers.Default (never on the
// native runtime's threads). Type mapping only; the decisions are the core's.

internal val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)

/**
 * [Limiter.checkAsync] as a CompletableFuture: through the direct call
 * (Limiter.kt; a memory store's decision comes back completed), else the
 * generated call, which throws what it throws.
 */
@JvmOverloads
fun Limiter.checkFuture(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    startDecision(key, cost, nowMs, peek = false) ?: scope.future { generatedCheckAsync(key, cost, nowMs) }

/** [Limiter.peekAsync] as a CompletableFuture (the direct call, else the generated one). */
@JvmOverloads
fun Limiter.peekFuture(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    startDecision(key, cost, nowMs, peek = true) ?: scope.future { generatedPeekAsync(key, cost, nowMs) }

/** [Limiter.resetAsync] as a CompletableFuture. */
fun Limiter.resetFuture(key: String): CompletableFuture<Unit> = scope.future { resetAsync(key) }

/** [Limiter.checkRequestAsync] as a CompletableFuture (the direct call, else the generated one). */
fun Limiter.checkRequestFuture(request: HttpRequest): CompletableFuture<Outcome> =
    startOutcome(request, peek = false) ?: scope.future { generatedCheckRequestAsync(request) }

/** [Limiter.completeAsync] as a CompletableFuture (the direct call, else the generated one). */
@JvmOverloads
fun Limiter.completeFuture(token: String, status: Int? = null): CompletableFuture<Unit> =
    startComplete(token, status) ?: scope.future { generatedCompleteAsync(token, status) }

/** [Limiter.completeCostAsync] as a CompletableFuture (the direct call, else the generated one). */
@JvmOverloads
fun Limiter.completeCostFuture(token: String, status: Int?, cost: Long, nowMs: Long? = null): CompletableFuture<Unit> =
    startComplete(token, status, cost, nowMs) ?: scope.future { generatedCompleteCostAsync(token, status, cost, nowMs) }

/** [Limiter.acquireAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.acquireFuture(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Acquired> =
    scope.future { acquireAsync(key, cost, nowMs) }

/** [Lease.releaseAsync] as a CompletableFuture. */
@JvmOverloads
fun Lease.releaseFuture(nowMs: Long? = null): CompletableFuture<Long> =
    scope.future { releaseAsync(nowMs) }

/** [Limiter.peekRequestAsync] as a CompletableFuture. */
fun Limiter.peekRequestFuture(request: HttpRequest): CompletableFuture<Outcome> =
    scope.future { peekRequestAsync(request) }

/** [Limiter.resetRequestAsync] as a CompletableFuture. */
fun Limiter.resetRequestFuture(request: HttpRequest): CompletableFuture<Long> =
    scope.future { resetRequestAsync(request) }

/** [Limiter.setOverrideAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.setOverrideFuture(
    key: String,
    rate: String,
    policy: String? = null,
    burst: Long? = null,
    ttl: String? = null,
    nowMs: Long? = null,
): CompletableFuture<Override> = scope.future { setOverrideAsync(key, rate, policy, burst, ttl, nowMs) }

/** [Limiter.getOverrideAsync] as a CompletableFuture (completes with null when there is none). */
@JvmOverloads
fun Limiter.getOverrideFuture(key: String, policy: String? = null, nowMs: Long? = null): CompletableFuture<Override?> =
    scope.future { getOverrideAsync(key, policy, nowMs) }

/** [Limiter.reloadAsync] as a CompletableFuture. */
fun Limiter.reloadFuture(): CompletableFuture<Unit> = scope.future { reloadAsync() }

/** [Limiter.removeOverrideAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.removeOverrideFuture(key: String, policy: String? = null): CompletableFuture<Boolean> =
    scope.future { removeOverrideAsync(key, policy) }

/** [Limiter.setLimitAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.setLimitFuture(
    rate: String,
    policy: String? = null,
    burst: Long? = null,
    ttl: String? = null,
    nowMs: Long? = null,
): CompletableFuture<PolicyLimit> = scope.future { setLimitAsync(rate, policy, burst, ttl, nowMs) }

/** [Limiter.getLimitAsync] as a CompletableFuture (completes with null when there is none). */
@JvmOverloads
fun Limiter.getLimitFuture(policy: String? = null, nowMs: Long? = null): CompletableFuture<PolicyLimit?> =
    scope.future { getLimitAsync(policy, nowMs) }

/** [Limiter.removeLimitAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.removeLimitFuture(policy: String? = null): CompletableFuture<Boolean> =
    scope.future { removeLimitAsync(policy) }

/** [Limiter.check] (kept for the code written against 0.1's first fast call). */
@JvmOverloads
@Throws(PolylimitException::class)
fun Limiter.checkFast(key: String, cost: Long? = null, nowMs: Long? = null): Decision = check(key, cost, nowMs)

/** [Limiter.checkFuture] (kept for the code written against 0.1's first fast call). */
@JvmOverloads
fun Limiter.checkFutureFast(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    checkFuture(key, cost, nowMs)

/** The generated `checkAsync` as a CompletableFuture (the direct call's fallback; tests compare with it). */
internal fun Limiter.generatedCheckFuture(key: String, cost: Long?, nowMs: Long?): CompletableFuture<Decision> =
    scope.future { generatedCheckAsync(key, cost, nowMs) }
