@file:JvmName("FastCheck")

package dev.polylimit

import com.sun.jna.Callback
import com.sun.jna.CallbackThreadInitializer
import com.sun.jna.Native
import java.lang.invoke.MethodHandles
import java.lang.invoke.VarHandle
import java.util.concurrent.CompletableFuture
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.asExecutor

// `Limiter.checkFast`: the blocking `check` through one direct-mapped JNA call
// with primitive arguments (the native `polylimit_jvm_check_fast`, fast.rs)
// instead of the generated path, whose per-call JNA objects (a RustCallStatus,
// a RustBuffer per string or optional argument, a handle clone: each its own
// native call, tracked by JNA's cleaner) cost 11-50 us of CPU. Same core call,
// same Decision. A memory store decides on the calling thread; a remote store
// is waited for on it, as `check` does. Any error (a bad cost or nowMs, a
// closed limiter, a failure) goes to the generated `check`, which throws the
// exception it always throws.

private object FastLib {
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

    /** `polylimit::Source::ALL`'s names, from the library: out[6] indexes it. */
    val sources: Array<String> = run {
        val buf = ByteArray(polylimit_jvm_source_names(null, 0))
        polylimit_jvm_source_names(buf, buf.size)
        String(buf, Charsets.UTF_8).split(',').toTypedArray()
    }

    // The generated Limiter's handle and call counter: the fast call keeps the
    // handle alive exactly as the generated `callWithHandle` does, without
    // its native clone of the handle.
    private val lookup = MethodHandles.privateLookupIn(Limiter::class.java, MethodHandles.lookup())
    val handle: VarHandle = lookup.findVarHandle(Limiter::class.java, "handle", Long::class.javaPrimitiveType)
    val callCounter: VarHandle = lookup.findVarHandle(Limiter::class.java, "callCounter", AtomicLong::class.java)
    val cleanable: VarHandle =
        lookup.findVarHandle(Limiter::class.java, "cleanable", UniffiCleaner.Cleanable::class.java)
}

private const val NONE = Long.MIN_VALUE
private const val PENDING = 5

/** The native completion of a pending `checkFutureFast`: one call per decision, on a runtime thread. */
internal interface Completion : Callback {
    fun invoke(ticket: Long, code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long)
}

private fun decision(f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) = Decision(
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
private object FastAsync {
    val waiting = ConcurrentHashMap<Long, Pending>()
    val tickets = AtomicLong()
    private val executor = Dispatchers.Default.asExecutor()

    class Pending(val limiter: Limiter, val key: String, val cost: Long?, val nowMs: Long?) {
        val future = CompletableFuture<Decision>()
    }

    private val completion = object : Completion {
        override fun invoke(ticket: Long, code: Int, f0: Long, f1: Long, f2: Long, f3: Long, f4: Long, f5: Long, f6: Long) {
            val p = waiting.remove(ticket) ?: return
            if (code == 0) {
                val d = decision(f0, f1, f2, f3, f4, f5, f6)
                executor.execute { p.future.complete(d) }
            } else {
                // The generated path raises the exception it always raises.
                executor.execute {
                    p.limiter.checkFuture(p.key, p.cost, p.nowMs).whenComplete { d, e ->
                        if (e != null) p.future.completeExceptionally(e) else p.future.complete(d)
                    }
                }
            }
        }
    }

    init {
        Native.setCallbackThreadInitializer(completion, CallbackThreadInitializer(true, false, "polylimit-fast"))
        check(FastLib.polylimit_jvm_fast_completion(completion) == 0) { "polylimit: another fast completion is registered" }
    }

    fun ensureInitialized() = Unit
}

/**
 * [Limiter.check] through the fast native path: the same decision (and the
 * same exceptions) at a fraction of the call's CPU. Blocks while a remote
 * store answers, as `check` does.
 */
@JvmOverloads
fun Limiter.checkFast(key: String, cost: Long? = null, nowMs: Long? = null): Decision =
    fastDecision(key, cost, nowMs) ?: check(key, cost, nowMs) // the generated call throws what it throws

/** The decision through the native fast call, or null when it decided nothing (an error, a closed limiter). */
internal fun Limiter.fastDecision(key: String, cost: Long?, nowMs: Long?): Decision? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    val out = LongArray(7)
    val bytes = key.toByteArray(Charsets.UTF_8)
    val code = withRawHandle { handle ->
        FastLib.polylimit_jvm_check_fast(handle, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, out)
    } ?: return null
    if (code != 0) {
        return null
    }
    return decision(out[0], out[1], out[2], out[3], out[4], out[5], out[6])
}

/**
 * [Limiter.checkFuture] through the fast native path: a memory store's
 * decision comes back completed; a remote store's completes through one
 * native callback, on Dispatchers.Default. The same decisions and the same
 * exceptions (any error goes to the generated `checkFuture`).
 */
@JvmOverloads
fun Limiter.checkFutureFast(key: String, cost: Long? = null, nowMs: Long? = null): CompletableFuture<Decision> =
    startFast(key, cost, nowMs) ?: checkFuture(key, cost, nowMs)

/** The future of the native start, or null when it started nothing (an error, a closed limiter). */
internal fun Limiter.startFast(key: String, cost: Long?, nowMs: Long?): CompletableFuture<Decision>? {
    if (cost == NONE || nowMs == NONE) {
        return null
    }
    FastAsync.ensureInitialized()
    val out = LongArray(7)
    val bytes = key.toByteArray(Charsets.UTF_8)
    val ticket = FastAsync.tickets.incrementAndGet()
    val pending = FastAsync.Pending(this, key, cost, nowMs)
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

/**
 * `block` with the limiter's raw handle, kept alive as the generated
 * `callWithHandle` keeps it (its call counter) but without its native clone;
 * null when the limiter is closed.
 */
private inline fun <R> Limiter.withRawHandle(block: (Long) -> R): R? {
    val counter = FastLib.callCounter.get(this) as AtomicLong
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
        return block(FastLib.handle.get(this) as Long)
    } finally {
        if (counter.decrementAndGet() == 0L) {
            (FastLib.cleanable.get(this) as UniffiCleaner.Cleanable?)?.clean()
        }
    }
}
