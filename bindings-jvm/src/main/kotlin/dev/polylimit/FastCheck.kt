@file:JvmName("FastCheck")

package dev.polylimit

import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import java.lang.invoke.MethodHandles
import java.lang.invoke.VarHandle
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ConcurrentHashMap
import java.nio.CharBuffer
import java.nio.charset.CharacterCodingException
import java.nio.charset.CodingErrorAction
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.LongAdder
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.asExecutor
import kotlinx.coroutines.future.await

// The standard `check`, `checkAsync` and `checkFuture` go through one
// direct-mapped JNA call with primitive arguments (the native
// `polylimit_jvm_check_fast` / `polylimit_jvm_check_start`, fast.rs) instead
// of the generated path, whose per-call JNA objects (a RustCallStatus, a
// RustBuffer per string or optional argument, a handle clone: each its own
// native call, tracked by JNA's cleaner) cost 11-50 us of CPU. (The generated
// `check`/`checkAsync` are routed here by the one edit `make jvm-kotlin` makes
// to uniffi's output: tests/kotlin.rs.) Same core call, same Decision. A
// memory store decides on the calling thread; a remote store is waited for
// on it (`check`) or completes a future through one native callback
// (`checkAsync`, `checkFuture`). Any error (a bad cost or nowMs, a closed
// limiter, a failure, a key that is not valid UTF-16) goes to the generated
// call, which throws the exception it always throws.

internal object FastLib {
    init {
        UniffiLib.ensureInitialized()
        val name = System.getProperty("uniffi.component.polylimit_jvm.libraryOverride") ?: "polylimit_jvm"
        Native.register(FastLib::class.java, name)
    }

    @JvmStatic
    external fun polylimit_jvm_check_fast(handle: Long, key: ByteArray, keyLen: Int, cost: Long, nowMs: Long, out: LongArray): Int

    @JvmStatic
    external fun polylimit_jvm_check_start(
        handle: Long, key: ByteArray, keyLen: Int, cost: Long, nowMs: Long, ticket: Long, out: LongArray,
    ): Int

    @JvmStatic
    external fun polylimit_jvm_fast_completion(callback: Completion): Int

    @JvmStatic
    external fun polylimit_jvm_source_names(buf: ByteArray?, cap: Int): Int

    @JvmStatic
    external fun polylimit_jvm_check_request_packed(
        handle: Long, request: ByteArray, requestLen: Int, cost: Long, nowMs: Long, flags: Int, out: ByteArray, outCap: Int,
    ): Int

    @JvmStatic
    external fun polylimit_jvm_take_outcome(out: ByteArray, outCap: Int): Int

    @JvmStatic
    external fun polylimit_jvm_reads_header(handle: Long, name: ByteArray, nameLen: Int): Int

    @JvmStatic
    external fun polylimit_jvm_peek(
        handle: Long, key: ByteArray, keyLen: Int, cost: Long, nowMs: Long, ticket: Long, out: LongArray,
    ): Int

    @JvmStatic
    external fun polylimit_jvm_reset(handle: Long, key: ByteArray, keyLen: Int, ticket: Long): Int

    @JvmStatic
    external fun polylimit_jvm_complete(handle: Long, token: ByteArray, tokenLen: Int, status: Int, ticket: Long): Int

    @JvmStatic
    external fun polylimit_jvm_acquire(
        handle: Long, key: ByteArray, keyLen: Int, cost: Long, nowMs: Long, ticket: Long, out: LongArray,
    ): Int

    @JvmStatic
    external fun polylimit_jvm_release(lease: Long, nowMs: Long, ticket: Long, out: LongArray): Int

    @JvmStatic
    external fun polylimit_jvm_check_request_start(
        handle: Long, request: ByteArray, requestLen: Int, cost: Long, nowMs: Long, flags: Int, ticket: Long,
        out: ByteArray, outCap: Int,
    ): Int

    /** `polylimit::Source::ALL`'s names, from the library: out[6] indexes it. */
    val sources: Array<String> = run {
        val buf = ByteArray(polylimit_jvm_source_names(null, 0))
        polylimit_jvm_source_names(buf, buf.size)
        String(buf, Charsets.UTF_8).split(',').toTypedArray()
    }

    // The generated Limiter's (and Lease's) handle and call counter: the fast
    // call keeps the handle alive exactly as the generated `callWithHandle`
    // does, without its native clone of the handle.
    val limiter = RawHandle(Limiter::class.java)
    val lease = RawHandle(Lease::class.java)
}

internal const val NONE = Long.MIN_VALUE
private const val PENDING = 5

/** The native completion of a pending `checkFutureFast`: one call per decision, on a runtime thread. */
internal interface Completion : Callback {
    fun invoke(ticket: Long, code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long)
}

internal fun decision(f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) = Decision(
    allowed = f0 != 0L,
    limit = f1,
    remaining = f2,
    resetAfterMs = f3,
    retryAfterMs = if (f4 == NONE) null else f4,
    delayMs = f5,
    source = FastLib.sources[f6.toInt()],
)

// The futures waiting for the store, by ticket. The callback is registered
// once; the runtime's threads stay attached to the JVM (attaching per call
// is what costs), and the futures complete on Dispatchers.Default, never on
// the runtime's threads (as LimiterFutures' do).
internal object FastAsync {
    val waiting = ConcurrentHashMap<Long, Waiter>()
    val tickets = AtomicLong()
    val executor = Dispatchers.Default.asExecutor()

    /** A call waiting for the store: the callback's code and fields, once. */
    interface Waiter {
        fun done(code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long)
    }

    /** A decision; on an error, `fallback` (the generated call) completes it with what it raises. */
    class Pending(private val fallback: () -> CompletableFuture<Decision>) : Waiter {
        val future = CompletableFuture<Decision>()

        override fun done(code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) {
            if (code == 0) {
                val d = decision(f0, f1, f2, f3, f4, f5, f6)
                executor.execute { future.complete(d) }
            } else {
                fallback().whenComplete { d, e -> if (e != null) future.completeExceptionally(e) else future.complete(d) }
            }
        }
    }

    private val completion = object : Completion {
        override fun invoke(ticket: Long, code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) {
            waiting.remove(ticket)?.done(code, f0, f1, f2, f3, f4, f5, f6)
        }
    }

    init {
        Native.setCallbackThreadInitializer(completion, CallbackThreadInitializer(true, false, "polylimit-fast"))
        check(FastLib.polylimit_jvm_fast_completion(completion) == 0) { "polylimit: another fast completion is registered" }
    }

    fun ensureInitialized() = Unit
}

/**
 * The calls of the uniffi-generated `check`, `checkAsync` and `checkRequest`
 * bodies (`generatedCheck`…): the standard calls take them only when the fast
 * native call cannot decide (an error, which they throw). Tests read it.
 */
object GeneratedCalls {
    private val calls = LongAdder()

    /** How many generated-path calls were made so far. */
    @JvmStatic
    fun count(): Long = calls.sum()

    internal fun record() = calls.increment()

    /** [record], then null: `recorded() ?: generatedBody` counts an expression-bodied generated call. */
    internal fun recorded(): Nothing? {
        record()
        return null
    }
}

/**
 * `text` as UTF-8 for a fast call, or null when it is not valid UTF-16 (a
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

/**
 * [Limiter.check], which is now the fast path itself (kept for the code
 * written against 0.1's first fast call).
 */
@JvmOverloads
@Throws(PolylimitException::class)
fun Limiter.checkFast(key: String, cost: Long? = null, nowMs: Long? = null): Decision = check(key, cost, nowMs)

/** The decision through the native fast call, or null when it decided nothing (an error, a closed limiter). */
internal fun Limiter.fastDecision(key: String, cost: Long?, nowMs: Long?): Decision? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    val out = LongArray(7)
    val code = withRawHandle { handle ->
        FastLib.polylimit_jvm_check_fast(handle, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, out)
    } ?: return null
    if (code != 0) {
        return null
    }
    return decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6])
}

/**
 * [Limiter.checkFuture], which is now the fast path itself (kept for the code
 * written against 0.1's first fast call).
 */
@JvmOverloads
fun Limiter.checkFutureFast(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    checkFuture(key, cost, nowMs)

/** `checkAsync`'s fast form: the decision, or null when the native call started nothing (an error). */
internal suspend fun Limiter.fastDecisionAsync(key: String, cost: Long?, nowMs: Long?): Decision? =
    startFast(key, cost, nowMs)?.await()

/** The future of the native start, or null when it started nothing (an error, a closed limiter). */
internal fun Limiter.startFast(key: String, cost: Long?, nowMs: Long?): CompletableFuture<Decision>? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val bytes = utf8(key) ?: return null
    FastAsync.ensureInitialized()
    val out = LongArray(7)
    val ticket = FastAsync.tickets.incrementAndGet()
    val pending = FastAsync.Pending { generatedCheckFuture(key, cost, nowMs) }
    FastAsync.waiting[ticket] = pending
    val code = withRawHandle { handle ->
        FastLib.polylimit_jvm_check_start(handle, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, ticket, out)
    }
    return when (code) {
        PENDING -> pending.future
        0 -> {
            FastAsync.waiting.remove(ticket)
            CompletableFuture.completedFuture(decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6]))
        }
        else -> {
            FastAsync.waiting.remove(ticket)
            null
        }
    }
}

/** The private fields of a generated object that `withRawHandle` reads. */
internal class RawHandle(cls: Class<*>) {
    private val lookup = MethodHandles.privateLookupIn(cls, MethodHandles.lookup())
    val handle: VarHandle = lookup.findVarHandle(cls, "handle", Long::class.javaPrimitiveType)
    val callCounter: VarHandle = lookup.findVarHandle(cls, "callCounter", AtomicLong::class.java)
    val cleanable: VarHandle = lookup.findVarHandle(cls, "cleanable", UniffiCleaner.Cleanable::class.java)
}

/**
 * `block` with the limiter's raw handle, kept alive as the generated
 * `callWithHandle` keeps it (its call counter) but without its native clone;
 * null when the limiter is closed.
 */
internal inline fun <R> Limiter.withRawHandle(block: (Long) -> R): R? = withRawHandle(this, FastLib.limiter, block)

/** `block` with the lease's raw handle, as [Limiter.withRawHandle]; null when the lease is closed. */
internal inline fun <R> Lease.withRawHandle(block: (Long) -> R): R? = withRawHandle(this, FastLib.lease, block)

internal inline fun <R> withRawHandle(obj: Any, fields: RawHandle, block: (Long) -> R): R? {
    val counter = fields.callCounter.get(obj) as AtomicLong
    while (true) {
        val c = counter.get()
        if (c == 0L || c == Long.MAX_VALUE) {
            return null
        }
        if (counter.compareAndSet(c, c + 1L)) {
            break
        }
    }
    try {
        return block(fields.handle.get(obj) as Long)
    } finally {
        if (counter.decrementAndGet() == 0L) {
            (fields.cleanable.get(obj) as UniffiCleaner.Cleanable?)?.clean()
        }
    }
}
