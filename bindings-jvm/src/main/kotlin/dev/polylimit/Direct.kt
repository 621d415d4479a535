@file:JvmName("Direct")

package dev.polylimit

import com.sun.jna.Memory
import com.sun.jna.Native
import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder
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
// JNA direct mapping with primitive arguments only: every buffer and out
// parameter is native memory of the calling thread (Scratch), passed by
// address, so JNA copies no array in or out. A result ready at once (the
// memory store) comes back in the call; otherwise the call hands back a
// pending operation: a caller that blocks for it waits for the store on its
// own thread (Scratch.await), any other submits it to the process's one
// completion bridge, finished by its reader thread (Bridge). An error comes back with its code
// and fields and is thrown as the sealed PolylimitException: nothing is
// retried, so a store error after the core charged never charges a second time.

internal object CAbi {
    init {
        UniffiLib.ensureInitialized()
        val name = System.getProperty("uniffi.component.polylimit_jvm.libraryOverride") ?: "polylimit_jvm"
        Native.register(CAbi::class.java, name)
    }

    @JvmStatic external fun polylimit_limiter_try_check(
        l: Long, key: Long, keyLen: Long, cost: Long, nowMs: Long, out: Long, pending: Long, err: Long,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_peek(
        l: Long, key: Long, keyLen: Long, cost: Long, nowMs: Long, out: Long, pending: Long, err: Long,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_check_request(
        l: Long, request: Long, requestLen: Long, cost: Long, nowMs: Long, flags: Int,
        out: Long, outCap: Long, outLen: Long, outOwned: Long, pending: Long, err: Long,
    ): Int

    @JvmStatic external fun polylimit_limiter_try_complete_call_cost(
        l: Long, token: Long, tokenLen: Long, code: Int, hasCost: Byte, cost: Long, hasNowMs: Byte, nowMs: Long,
        pending: Long, err: Long,
    ): Int

    @JvmStatic external fun polylimit_limiter_reset(l: Long, key: ByteArray, keyLen: Long, err: LongArray): Int

    @JvmStatic external fun polylimit_limiter_reads_header(l: Long, name: ByteArray, nameLen: Long): Int

    @JvmStatic external fun polylimit_limiter_reads_route(l: Long): Int

    @JvmStatic external fun polylimit_limiter_rules_generation(l: Long): Long

    @JvmStatic external fun polylimit_bridge_open(wakeFd: Int): Long

    @JvmStatic external fun polylimit_pending_submit(pending: Long, bridge: Long, ctx: Long): Int

    @JvmStatic external fun polylimit_bridge_take_wait(bridge: Long, timeoutMs: Int, records: Long, len: Long): Long

    @JvmStatic external fun polylimit_pending_wait(pending: Long, out: Long, outCap: Long, outLen: Long, outOwned: Long): Int

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

/** The error at `address` (a `polylimit_error_t *`) as the sealed exception; freed when `free`. */
internal fun errorAt(address: Long, free: Boolean): PolylimitException {
    val p = Pointer(address)
    val code = p.getInt(0)
    val text = p.getPointer(8)?.getString(0, "UTF-8") ?: ""
    val field = p.getPointer(16)?.getString(0, "UTF-8") ?: ""
    val value = p.getPointer(24)?.getString(0, "UTF-8") ?: ""
    val key = p.getPointer(32)?.getString(0, "UTF-8") ?: ""
    if (free) {
        CAbi.polylimit_error_free(address)
    }
    return when (code) {
        CONFIG -> PolylimitException.Config(text, field, value)
        STORE_UNAVAILABLE -> PolylimitException.StoreUnavailable(text)
        STORE -> PolylimitException.Store(text, key)
        CLOSED -> PolylimitException.Closed(text)
        else -> PolylimitException.Internal(text)
    }
}

/** A u64 as the record's Long, saturated as the uniffi path does. */
private fun saturated(n: Long) = if (n < 0) Long.MAX_VALUE else n

/**
 * A thread's native memory for its direct calls: the out parameters, a
 * `polylimit_decision_t`, the packed request (or a key) and the outcome the
 * core writes back, each at a fixed offset.
 */
internal class Scratch {
    val memory = Memory(SIZE.toLong())
    val address = Pointer.nativeValue(memory)
    val buf: ByteBuffer = memory.getByteBuffer(0, SIZE.toLong()).order(ByteOrder.LITTLE_ENDIAN)

    /** The pending operation the last call handed back. */
    val pending: Long get() = buf.getLong(PENDING_AT)

    /** The error the last call handed back (to free). */
    val error: Long get() = buf.getLong(ERROR_AT)

    /** The `polylimit_decision_t` at DECISION_AT. */
    fun decision() = Decision(
        allowed = buf.get(DECISION_AT).toInt() != 0,
        limit = saturated(buf.getLong(DECISION_AT + 8)),
        remaining = saturated(buf.getLong(DECISION_AT + 16)),
        resetAfterMs = saturated(buf.getLong(DECISION_AT + 24)),
        retryAfterMs = if (buf.get(DECISION_AT + 32).toInt() != 0) saturated(buf.getLong(DECISION_AT + 40)) else null,
        delayMs = saturated(buf.getLong(DECISION_AT + 48)),
        source = CAbi.sources[buf.getInt(DECISION_AT + 56)],
    )

    /**
     * The outcome a request call packed at OUTPUT_AT (or, when it outgrew
     * OUTPUT_CAP, into bytes of the core's, freed here).
     */
    fun outcome(): Outcome = output { it.outcome() }

    /** What `read` makes of the bytes a call wrote at OUTPUT_AT (or into bytes of the core's, freed here). */
    private inline fun <T> output(read: (PackedReader) -> T): T {
        val n = buf.getLong(OUT_LEN_AT)
        val owned = buf.getLong(OWNED_AT)
        if (owned == 0L) {
            return read(PackedReader(buf, OUTPUT_AT, OUTPUT_AT + n.toInt()))
        }
        try {
            return read(PackedReader(Pointer(owned).getByteBuffer(0, n), 0, n.toInt()))
        } finally {
            CAbi.polylimit_bytes_free(owned, n)
        }
    }

    /**
     * Waits on the calling thread for the pending operation the last call
     * handed back (`polylimit_pending_wait`: the store's answer wakes this
     * thread itself, no bridge thread in between); what `read` makes of its
     * record's value, or its error thrown.
     */
    fun <T> await(read: (Any?) -> T): T {
        val a = address
        if (CAbi.polylimit_pending_wait(pending, a + OUTPUT_AT, OUTPUT_CAP.toLong(), a + OUT_LEN_AT, a + OWNED_AT) != OK) {
            throw PolylimitException.Internal("polylimit: cannot wait for a pending call")
        }
        val record = output { it.record() }
        throw record.error ?: return read(record.value)
    }

    /**
     * The pending operation the last call handed back, finished: by the
     * calling thread itself when it blocks for the result anyway
     * (`blocking`, [await]), else by the bridge ([Bridge.submit]).
     */
    fun <T> finish(blocking: Boolean, read: (Any?) -> T): CompletableFuture<T> {
        if (!blocking) {
            return Bridge.submit(pending, read)
        }
        return try {
            CompletableFuture.completedFuture(await(read))
        } catch (e: Exception) {
            CompletableFuture.failedFuture(e)
        }
    }

    /**
     * `text` as UTF-8 at INPUT_AT; its length, or -1 when it does not fit or
     * is not valid UTF-16 (the caller then takes another way).
     */
    fun text(text: String): Int {
        val n = text.length
        if (n > INPUT_CAP) {
            return -1
        }
        for (i in 0 until n) {
            val c = text[i].code
            if (c >= 0x80) {
                val b = utf8(text) ?: return -1
                if (b.size > INPUT_CAP) {
                    return -1
                }
                buf.put(INPUT_AT, b)
                return b.size
            }
            buf.put(INPUT_AT + i, c.toByte())
        }
        return n
    }

    companion object {
        const val OUT_LEN_AT = 0
        const val OWNED_AT = 8
        const val PENDING_AT = 16
        const val ERROR_AT = 24
        const val DECISION_AT = 32
        const val INPUT_AT = 96
        const val INPUT_CAP = 4096
        const val OUTPUT_AT = INPUT_AT + INPUT_CAP
        const val OUTPUT_CAP = 4096
        const val SIZE = OUTPUT_AT + OUTPUT_CAP

        private val mine = ThreadLocal.withInitial { Scratch() }

        /** The calling thread's. */
        fun get(): Scratch = mine.get()
    }
}

/**
 * The process's completion bridge: a pending operation is submitted with a
 * ticket, and one daemon thread waits for the bridge's batches of packed
 * records, decodes each (Packed.kt) and completes its future on
 * Dispatchers.Default (a continuation may block).
 */
internal object Bridge {
    private val handle: Long = CAbi.polylimit_bridge_open(-1)
    private val waiting = ConcurrentHashMap<Long, Waiter<*>>()
    private val tickets = AtomicLong()
    private val executor = Dispatchers.Default.asExecutor()

    class Waiter<T>(val read: (Any?) -> T) {
        val future = CompletableFuture<T>()
    }

    init {
        val reader = Thread(::drain, "polylimit-bridge")
        reader.isDaemon = true
        reader.start()
    }

    private fun drain() {
        val out = Memory(16)
        val at = Pointer.nativeValue(out)
        while (true) {
            if (CAbi.polylimit_bridge_take_wait(handle, 1000, at, at + 8) == 0L) {
                continue
            }
            val len = out.getLong(8).toInt()
            val bytes = out.getPointer(0).getByteBuffer(0, len.toLong())
            val reader = PackedReader(bytes, 0, len)
            while (!reader.done) {
                val record = reader.record()
                waiting.remove(record.ctx)?.let { complete(it, record) }
            }
        }
    }

    private fun <T> complete(w: Waiter<T>, record: PackedRecord) {
        val result: Result<T> = record.error?.let { Result.failure(it) }
            ?: try {
                Result.success(w.read(record.value))
            } catch (e: Throwable) {
                Result.failure(e)
            }
        val finish = Runnable { result.fold({ w.future.complete(it) }, { w.future.completeExceptionally(it) }) }
        executor.execute(finish)
    }

    /**
     * Submits the pending operation at `pending`; its future gets what `read`
     * makes of the record's value, completed on Dispatchers.Default (a
     * continuation may block). A caller that blocks for it waits on its own
     * thread instead ([Scratch.finish]).
     */
    fun <T> submit(pending: Long, read: (Any?) -> T): CompletableFuture<T> {
        val waiter = Waiter(read)
        val ticket = tickets.incrementAndGet()
        waiting[ticket] = waiter
        if (CAbi.polylimit_pending_submit(pending, handle, ticket) != PENDING) {
            waiting.remove(ticket)
            waiter.future.completeExceptionally(PolylimitException.Internal("polylimit: cannot submit a pending call"))
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
