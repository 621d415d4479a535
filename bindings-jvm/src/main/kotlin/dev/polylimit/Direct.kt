@file:JvmName("Direct")

package dev.polylimit

import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import com.sun.jna.Pointer
import java.nio.CharBuffer
import java.nio.charset.CharacterCodingException
import java.nio.charset.CodingErrorAction
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.ExecutionException
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicLong
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.asExecutor

// The direct calls of the facade (Limiter.kt): the C ABI of polylimit-capi
// (bindings-go/capi/include/polylimit.h, Go's), linked into this library, through
// JNA direct mapping: primitive arguments and arrays, no per-call JNA object.
// A result ready at once (the memory store) comes back in the call; otherwise
// the call hands back a pending operation, started with polylimit_pending_start
// and finished by one native callback (the runtime's threads stay attached to
// the JVM). An error comes back with its code and fields and is thrown as the
// sealed PolylimitException: nothing is retried, so a store error after the
// core charged never charges a second time.

internal object CAbi {
    init {
        UniffiLib.ensureInitialized()
        val name = System.getProperty("uniffi.component.polylimit_jvm.libraryOverride") ?: "polylimit_jvm"
        Native.register(CAbi::class.java, name)
    }

    @JvmStatic external fun polylimit_limiter_try_check(
        l: Long, key: ByteArray, keyLen: Long, cost: Long, nowMs: Long, out: LongArray, pending: LongArray, err: LongArray,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_peek(
        l: Long, key: ByteArray, keyLen: Long, cost: Long, nowMs: Long, out: LongArray, pending: LongArray, err: LongArray,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_check_request(
        l: Long, request: ByteArray, requestLen: Long, cost: Long, nowMs: Long, flags: Int,
        out: ByteArray, outCap: Long, outLen: LongArray, outOwned: LongArray, pending: LongArray, err: LongArray,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_complete(
        l: Long, token: ByteArray, tokenLen: Long, status: Short, pending: LongArray, err: LongArray,
    ): Int

    @JvmStatic external fun polylimit_limiter_reset(l: Long, key: ByteArray, keyLen: Long, err: LongArray): Int

    @JvmStatic external fun polylimit_limiter_reads_header(l: Long, name: ByteArray, nameLen: Long): Int

    @JvmStatic external fun polylimit_pending_start(pending: Long, callback: DoneCallback, ctx: Long): Int

    @JvmStatic external fun polylimit_error_free(err: Long)

    @JvmStatic external fun polylimit_bytes_free(bytes: Long, len: Long)

    @JvmStatic external fun polylimit_source_name(source: Int): Pointer

    @JvmStatic external fun polylimit_limiter_free(l: Long)

    /** The shared source names, by `polylimit_source_t`. */
    val sources: Array<String> = Array(8) { polylimit_source_name(it).getString(0, "UTF-8") }
}

internal const val OK = 0
internal const val PENDING = 1
private const val CONFIG = 2
private const val STORE_UNAVAILABLE = 3
private const val STORE = 4
private const val CLOSED = 5

/** `polylimit_callback_t`: called once per started operation, on a runtime thread. */
internal interface DoneCallback : Callback {
    fun invoke(ctx: Long, status: Int, decision: Pointer?, text: Pointer?, textLen: Long, error: Pointer?)
}

/** The error at `address` (a `polylimit_error_t *`) as the sealed exception; freed when `free`. */
internal fun errorAt(address: Long, free: Boolean): PolylimitException {
    val p = Pointer(address)
    val code = p.getInt(0)
    val text = p.getPointer(8)?.getString(0, "UTF-8") ?: ""
    val field = p.getPointer(16)?.getString(0, "UTF-8") ?: ""
    val value = p.getPointer(24)?.getString(0, "UTF-8") ?: ""
    if (free) {
        CAbi.polylimit_error_free(address)
    }
    return when (code) {
        CONFIG -> PolylimitException.Config(text, field, value)
        STORE_UNAVAILABLE -> PolylimitException.StoreUnavailable(text)
        // The C error carries no key (the message names it).
        STORE -> PolylimitException.Store(text, "")
        CLOSED -> PolylimitException.Closed(text)
        else -> PolylimitException.Internal(text)
    }
}

/** A `polylimit_decision_t` read as 8 longs (its C layout on a 64-bit target). */
internal fun decision(d: LongArray) = Decision(
    allowed = d[0] and 0xff != 0L,
    limit = saturated(d[1]),
    remaining = saturated(d[2]),
    resetAfterMs = saturated(d[3]),
    retryAfterMs = if (d[4] and 0xff != 0L) saturated(d[5]) else null,
    delayMs = saturated(d[6]),
    source = CAbi.sources[d[7].toInt()],
)

/** A u64 as the record's Long, saturated as the uniffi path does. */
private fun saturated(n: Long) = if (n < 0) Long.MAX_VALUE else n

/**
 * Operations waiting for the store, by ticket: the callback reads what it is
 * lent (the decision, the packed outcome, the error) and completes the
 * future on Dispatchers.Default, never on the runtime's threads.
 */
internal object Pending {
    private val waiting = ConcurrentHashMap<Long, Waiter<*>>()
    private val tickets = AtomicLong()
    private val executor = Dispatchers.Default.asExecutor()

    class Waiter<T>(val read: (Pointer?, Pointer?, Long) -> T) {
        val future = CompletableFuture<T>()
    }

    private val callback = object : DoneCallback {
        override fun invoke(ctx: Long, status: Int, decision: Pointer?, text: Pointer?, textLen: Long, error: Pointer?) {
            val waiter = waiting.remove(ctx) ?: return
            complete(waiter, status, decision, text, textLen, error)
        }
    }

    private fun <T> complete(w: Waiter<T>, status: Int, decision: Pointer?, text: Pointer?, textLen: Long, error: Pointer?) {
        val result: Result<T> = try {
            if (status == OK) Result.success(w.read(decision, text, textLen))
            else Result.failure(errorAt(Pointer.nativeValue(error), free = false))
        } catch (e: Throwable) {
            Result.failure(e)
        }
        executor.execute { result.fold({ w.future.complete(it) }, { w.future.completeExceptionally(it) }) }
    }

    init {
        Native.setCallbackThreadInitializer(callback, CallbackThreadInitializer(true, false, "polylimit-direct"))
    }

    /** Starts the pending operation at `pending`; its future gets what `read` makes of the result. */
    fun <T> start(pending: Long, read: (Pointer?, Pointer?, Long) -> T): CompletableFuture<T> {
        val waiter = Waiter(read)
        val ticket = tickets.incrementAndGet()
        waiting[ticket] = waiter
        if (CAbi.polylimit_pending_start(pending, callback, ticket) != PENDING) {
            waiting.remove(ticket)
            waiter.future.completeExceptionally(PolylimitException.Internal("polylimit: cannot start a pending call"))
        }
        return waiter.future
    }
}

/** The value of a future a blocking call waits for, its exception thrown as is. */
internal fun <T> CompletableFuture<T>.join0(): T = try {
    get()
} catch (e: ExecutionException) {
    throw e.cause ?: e
}

/**
 * The C-ABI handle of one facade: calls hold it as uniffi's generated
 * `callWithHandle` holds its own; it is freed once closed and idle.
 */
internal class DirectHandle(internal val raw: Long) {
    internal val calls = AtomicLong(1)
    private val closed = AtomicBoolean(false)

    /** `block(handle)`, or null when the facade is closed. */
    inline fun <R> use(block: (Long) -> R): R? {
        while (true) {
            val c = calls.get()
            if (c == 0L) {
                return null
            }
            if (calls.compareAndSet(c, c + 1)) {
                break
            }
        }
        try {
            return block(raw)
        } finally {
            release()
        }
    }

    fun release() {
        if (calls.decrementAndGet() == 0L) {
            CAbi.polylimit_limiter_free(raw)
        }
    }

    fun close() {
        if (closed.compareAndSet(false, true)) {
            release()
        }
    }

    /** [close], holding nothing but this handle (a cleaner's action). */
    fun closer() = Runnable { close() }
}

/**
 * `text` as UTF-8 for a direct call, or null when it is not valid UTF-16 (a
 * lone surrogate): the generated call, whose encoder rejects it, throws then.
 */
internal fun utf8(text: String): ByteArray? {
    for (c in text) {
        if (c.isSurrogate()) {
            return try {
                val b = Charsets.UTF_8.newEncoder().onMalformedInput(CodingErrorAction.REPORT).encode(CharBuffer.wrap(text))
                ByteArray(b.remaining()).also { b.get(it) }
            } catch (e: CharacterCodingException) {
                null
            }
        }
    }
    return text.toByteArray(Charsets.UTF_8)
}
