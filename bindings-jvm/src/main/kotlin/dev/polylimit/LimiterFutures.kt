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

private val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default)

/** [Limiter.checkAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.checkFuture(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    scope.future { checkAsync(key, cost, nowMs) }

/** [Limiter.peekAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.peekFuture(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    scope.future { peekAsync(key, cost, nowMs) }

/** [Limiter.resetAsync] as a CompletableFuture. */
fun Limiter.resetFuture(key: String): CompletableFuture<Unit> = scope.future { resetAsync(key) }

/** [Limiter.checkRequestAsync] as a CompletableFuture. */
fun Limiter.checkRequestFuture(request: HttpRequest): CompletableFuture<Outcome> =
    scope.future { checkRequestAsync(request) }

/** [Limiter.completeAsync] as a CompletableFuture. */
@JvmOverloads
fun Limiter.completeFuture(token: String, status: Int? = null): CompletableFuture<Unit> =
    scope.future { completeAsync(token, status) }
