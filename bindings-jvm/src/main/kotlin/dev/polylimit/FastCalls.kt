@file:JvmName("FastCalls")

package dev.polylimit

import com.sun.jna.Pointer
import java.util.concurrent.CompletableFuture
import kotlinx.coroutines.future.await
import kotlinx.coroutines.future.future

// `peek`, `reset`, `complete`, `acquire` and the lease's `release` (blocking,
// suspend, CompletableFuture where one exists), the
// suspend/future `checkRequest` and `peekRequest` through the native calls
// of fast_calls.rs / fast_request.rs, as FastCheck.kt does for `check`: one
// direct-mapped JNA call with primitive arguments (a packed request for the
// HTTP calls) instead of the generated path's per-call JNA objects. Ticket 0
// blocks the calling thread; a ticket completes a future through the one
// native callback FastCheck.kt registers (a memory store answers at once).
// Any error goes to the generated call (`generatedPeek`…, counted by
// GeneratedCalls), which throws the exception it always throws.

private const val PENDING = 5
private const val REQUEST_PENDING = -5
private const val NO_STATUS = Int.MIN_VALUE
private const val PEEK = 8

/**
 * A pending call whose result `read` takes from the callback's f0, f1 (an
 * address is readable only during the callback); on an error, `fallback`
 * (the generated call) completes it with what it raises.
 */
private class ValueWaiter<T>(
    private val fallback: () -> CompletableFuture<T>,
    private val read: (Long, Long) -> T,
) : FastAsync.Waiter {
    val future = CompletableFuture<T>()

    override fun done(code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) {
        if (code == 0) {
            val value = read(f0, f1)
            FastAsync.executor.execute { future.complete(value) }
        } else {
            fallback().whenComplete { v, e -> if (e != null) future.completeExceptionally(e) else future.complete(v) }
        }
    }
}

/**
 * `call(handle, ticket)` with a fresh ticket for `waiter`: its `future` when
 * the native call went on (`pending`), `ready(code)` when it answered at
 * once, null when it started nothing (an error, a closed limiter).
 */
private inline fun <T> Limiter.startCall(
    waiter: FastAsync.Waiter,
    future: CompletableFuture<T>,
    pending: Int,
    call: (Long, Long) -> Int,
    ready: (Int) -> T?,
): CompletableFuture<T>? = startCall(this, FastLib.limiter, waiter, future, pending, call, ready)

private inline fun <T> Lease.startCall(
    waiter: FastAsync.Waiter,
    future: CompletableFuture<T>,
    pending: Int,
    call: (Long, Long) -> Int,
    ready: (Int) -> T?,
): CompletableFuture<T>? = startCall(this, FastLib.lease, waiter, future, pending, call, ready)

private inline fun <T> startCall(
    obj: Any,
    fields: RawHandle,
    waiter: FastAsync.Waiter,
    future: CompletableFuture<T>,
    pending: Int,
    call: (Long, Long) -> Int,
    ready: (Int) -> T?,
): CompletableFuture<T>? {
    FastAsync.ensureInitialized()
    val ticket = FastAsync.tickets.incrementAndGet()
    FastAsync.waiting[ticket] = waiter
    val code = withRawHandle(obj, fields) { call(it, ticket) }
    if (code == pending) {
        return future
    }
    FastAsync.waiting.remove(ticket)
    return code?.let(ready)?.let { CompletableFuture.completedFuture(it) }
}

/** `peek`'s fast form: the decision, or null when the native call decided nothing. */
internal fun Limiter.fastPeek(key: String, cost: Long?, nowMs: Long?): Decision? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    val out = LongArray(7)
    val code = withRawHandle {
        FastLib.polylimit_jvm_peek(it, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, 0L, out)
    }
    return if (code == 0) decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6]) else null
}

/** `peekAsync`/`peekFuture`'s fast form, or null when the native call started nothing. */
internal fun Limiter.startPeek(key: String, cost: Long?, nowMs: Long?): CompletableFuture<Decision>? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    val out = LongArray(7)
    val waiter = FastAsync.Pending { scope.future { generatedPeekAsync(key, cost, nowMs) } }
    return startCall(waiter, waiter.future, PENDING, { h, t ->
        FastLib.polylimit_jvm_peek(h, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, t, out)
    }) { code -> if (code == 0) decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6]) else null }
}

internal suspend fun Limiter.fastPeekAsync(key: String, cost: Long?, nowMs: Long?): Decision? =
    startPeek(key, cost, nowMs)?.await()

/** `reset`'s fast form: true when the native call reset the key. */
internal fun Limiter.fastReset(key: String): Boolean {
    val bytes = utf8(key) ?: return false
    return withRawHandle { FastLib.polylimit_jvm_reset(it, bytes, bytes.size, 0L) } == 0
}

/** `resetAsync`/`resetFuture`'s fast form, or null when the native call started nothing. */
internal fun Limiter.startReset(key: String): CompletableFuture<Unit>? {
    val bytes = utf8(key) ?: return null
    val waiter = ValueWaiter({ scope.future { generatedResetAsync(key) } }) { _, _ -> }
    return startCall(waiter, waiter.future, PENDING, { h, t ->
        FastLib.polylimit_jvm_reset(h, bytes, bytes.size, t)
    }) { code -> if (code == 0) Unit else null }
}

internal suspend fun Limiter.fastResetAsync(key: String): Boolean = startReset(key)?.await() != null

/** `complete`'s fast form: true when the native call settled the token. */
internal fun Limiter.fastComplete(token: String, status: Int?): Boolean {
    if (status == NO_STATUS) {
        return false
    }
    val bytes = utf8(token) ?: return false
    return withRawHandle { FastLib.polylimit_jvm_complete(it, bytes, bytes.size, status ?: NO_STATUS, 0L) } == 0
}

/** `completeAsync`/`completeFuture`'s fast form, or null when the native call started nothing. */
internal fun Limiter.startComplete(token: String, status: Int?): CompletableFuture<Unit>? {
    if (status == NO_STATUS) {
        return null
    }
    val bytes = utf8(token) ?: return null
    val waiter = ValueWaiter({ scope.future { generatedCompleteAsync(token, status) } }) { _, _ -> }
    return startCall(waiter, waiter.future, PENDING, { h, t ->
        FastLib.polylimit_jvm_complete(h, bytes, bytes.size, status ?: NO_STATUS, t)
    }) { code -> if (code == 0) Unit else null }
}

internal suspend fun Limiter.fastCompleteAsync(token: String, status: Int?): Boolean =
    startComplete(token, status)?.await() != null

/** The decision's seven fields and the new lease's handle (0: none), as the generated `Acquired`. */
private fun acquired(out: LongArray) = Acquired(
    decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6]),
    if (out[7] == 0L) null else FfiConverterTypeLease.lift(out[7]),
)

/** `acquire`'s fast form, or null when the native call decided nothing. */
internal fun Limiter.fastAcquire(key: String, cost: Long?, nowMs: Long?): Acquired? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    val out = LongArray(8)
    val code = withRawHandle {
        FastLib.polylimit_jvm_acquire(it, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, 0L, out)
    }
    return if (code == 0) acquired(out) else null
}

/** `acquireAsync`'s fast form, or null when the native call started nothing. */
internal fun Limiter.startAcquire(key: String, cost: Long?, nowMs: Long?): CompletableFuture<Acquired>? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    val out = LongArray(8)
    val waiter = ValueWaiter({ scope.future { generatedAcquireAsync(key, cost, nowMs) } }) { address, _ ->
        acquired(Pointer(address).getLongArray(0, 8))
    }
    return startCall(waiter, waiter.future, PENDING, { h, t ->
        FastLib.polylimit_jvm_acquire(h, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, t, out)
    }) { code -> if (code == 0) acquired(out) else null }
}

internal suspend fun Limiter.fastAcquireAsync(key: String, cost: Long?, nowMs: Long?): Acquired? =
    startAcquire(key, cost, nowMs)?.await()

/** `Lease.release`'s fast form: how many slots were live, or null when the native call released nothing. */
internal fun Lease.fastRelease(nowMs: Long?): Long? {
    if (nowMs == NONE) {
        return null
    }
    val out = LongArray(1)
    val code = withRawHandle { FastLib.polylimit_jvm_release(it, nowMs ?: NONE, 0L, out) }
    return if (code == 0) out[0] else null
}

/** `Lease.releaseAsync`'s fast form, or null when the native call started nothing. */
internal fun Lease.startRelease(nowMs: Long?): CompletableFuture<Long>? {
    if (nowMs == NONE) {
        return null
    }
    val out = LongArray(1)
    val waiter = ValueWaiter({ scope.future { generatedReleaseAsync(nowMs) } }) { count, _ -> count }
    return startCall(waiter, waiter.future, PENDING, { h, t -> FastLib.polylimit_jvm_release(h, nowMs ?: NONE, t, out) }) { code ->
        if (code == 0) out[0] else null
    }
}

internal suspend fun Lease.fastReleaseAsync(nowMs: Long?): Long? = startRelease(nowMs)?.await()

/** `checkRequestAsync`/`checkRequestFuture`'s fast form, or null when the native call started nothing. */
internal fun Limiter.startOutcome(request: HttpRequest): CompletableFuture<Outcome>? {
    val r = request
    if (r.cost == NONE || r.nowMs == NONE) {
        return null
    }
    val packer = Packer()
    if (!packer.request(r.method, r.path, r.route, r.peer, r.user, r.apiKey, r.key, r.headers)) {
        return null
    }
    val flags = WITH_DECISIONS or flags(r.caseInsensitive, r.ignoreTrailingSlash)
    var out = ByteArray(2048)
    val waiter = ValueWaiter({ scope.future { generatedCheckRequestAsync(request) } }) { address, len ->
        Pointer(address).getByteArray(0, len.toInt()).let { Unpacker(it, it.size).outcome() }
    }
    return startCall(waiter, waiter.future, REQUEST_PENDING, { h, t ->
        FastLib.polylimit_jvm_check_request_start(
            h, packer.bytes, packer.size, r.cost ?: NONE, r.nowMs ?: NONE, flags, t, out, out.size,
        )
    }) { len ->
        when {
            len < 0 -> null
            len > out.size -> {
                // Kept on this thread by the native call: decided once, fetched here.
                out = ByteArray(len)
                FastLib.polylimit_jvm_take_outcome(out, out.size)
                Unpacker(out, len).outcome()
            }
            else -> Unpacker(out, len).outcome()
        }
    }
}

internal suspend fun Limiter.fastOutcomeAsync(request: HttpRequest): Outcome? = startOutcome(request)?.await()

/** `peekRequest`'s fast form: the outcome, or null when the native call decided nothing. */
internal fun Limiter.fastPeekOutcome(request: HttpRequest): Outcome? {
    val packer = Packer()
    val r = request
    if (!packer.request(r.method, r.path, r.route, r.peer, r.user, r.apiKey, r.key, r.headers)) {
        return null
    }
    return packedOutcome(packer, r.cost, r.nowMs, PEEK or WITH_DECISIONS or flags(r.caseInsensitive, r.ignoreTrailingSlash))
}
