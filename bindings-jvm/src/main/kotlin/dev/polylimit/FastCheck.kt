@file:JvmName("FastCheck")

package dev.polylimit

import com.sun.jna.Native
import java.lang.invoke.MethodHandles
import java.lang.invoke.VarHandle
import java.util.concurrent.atomic.AtomicLong

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
    val out = LongArray(7)
    val code = try {
        val bytes = key.toByteArray(Charsets.UTF_8)
        FastLib.polylimit_jvm_check_fast(FastLib.handle.get(this) as Long, bytes, bytes.size, cost ?: NONE, nowMs ?: NONE, out)
    } finally {
        if (counter.decrementAndGet() == 0L) {
            (FastLib.cleanable.get(this) as UniffiCleaner.Cleanable?)?.clean()
        }
    }
    if (code != 0) {
        return null
    }
    return Decision(
        allowed = out[0] != 0L,
        limit = out[1],
        remaining = out[2],
        resetAfterMs = out[3],
        retryAfterMs = if (out[4] == NONE) null else out[4],
        delayMs = out[5],
        source = FastLib.sources[out[6].toInt()],
    )
}
