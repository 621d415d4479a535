@file:JvmName("Packed")

package dev.polylimit

import java.nio.ByteBuffer
import java.nio.ByteOrder

// The one reader of what the core packs (polylimit::wire::packed; the layout
// is documented at the top of core/src/wire/packed.rs and pinned by
// tests/conformance/wire/packed.json): little-endian integers, a string as a
// u32 byte length and its UTF-8 bytes. An outcome, and the records of the
// calls the completion bridge finished (Direct.kt). Nothing is computed here.

/** The length that marks an absent string. */
internal const val ABSENT = -1

/** An acquire's decision and the leases it took (record kind 6). */
internal class PackedAcquired(val decision: Decision, val leases: List<PackedLease>)

/** One lease of an acquire: its policy's index, key and id. */
internal data class PackedLease(val policy: Int, val key: String, val id: String)

/**
 * One finished call: the caller's `ctx` and its value (null for a unit),
 * or the error it ended with. A u64 value (a count) is its raw bits.
 */
internal class PackedRecord(val ctx: Long, val value: Any?, val error: PolylimitException?)

/** Reads packed bytes from `start` to `end` of `buf` (any byte order: absolute reads, little-endian). */
internal class PackedReader(buf: ByteBuffer, start: Int, private val end: Int) {
    private val buf: ByteBuffer = if (buf.order() == ByteOrder.LITTLE_ENDIAN) buf else buf.duplicate().order(ByteOrder.LITTLE_ENDIAN)
    private var pos = start

    /** Whether every byte was read. */
    val done: Boolean get() = pos >= end

    private fun take(n: Int): Int {
        if (n < 0 || n > end - pos) {
            throw PolylimitException.Internal("polylimit: a packed record is truncated")
        }
        return pos.also { pos += n }
    }

    fun u8(): Int = buf.get(take(1)).toInt() and 0xff
    fun u16(): Int = buf.getShort(take(2)).toInt() and 0xffff
    fun u32(): Int = buf.getInt(take(4))

    /** A u64's raw bits. */
    fun u64(): Long = buf.getLong(take(8))

    /** A u64 as the uniffi record's Long (saturated, as the generated path does). */
    private fun saturated(): Long = u64().let { if (it < 0) Long.MAX_VALUE else it }

    fun string(): String? {
        val n = u32()
        if (n == ABSENT) {
            return null
        }
        val at = take(n)
        val bytes = ByteArray(n)
        buf.get(at, bytes)
        return String(bytes, Charsets.UTF_8)
    }

    private fun required(): String = string() ?: throw PolylimitException.Internal("polylimit: a packed string is absent")

    /** A header name: [Names]' copy when it has one (the core's names are few and the same on every outcome). */
    private fun name(): String {
        val n = u32()
        if (n == ABSENT) {
            throw PolylimitException.Internal("polylimit: a packed string is absent")
        }
        return Names.get(buf, take(n), n)
    }

    /** A decision after its `bits` (1 allowed, 4 has a retry-after). */
    private fun decision(bits: Int): Decision {
        val limit = saturated()
        val remaining = saturated()
        val reset = saturated()
        val retry = saturated()
        val delay = saturated()
        val source = CAbi.sources[u8()]
        return Decision(bits and 1 != 0, limit, remaining, reset, if (bits and 4 != 0) retry else null, delay, source)
    }

    fun decision(): Decision = decision(u8())

    fun outcome(): Outcome {
        val status = u16()
        val hasBody = u8() != 0
        val delay = saturated()
        val headers = headers()
        val trailers = headers()
        val body = if (hasBody) required() else null
        val count = u32()
        val decisions = if (count == 0) emptyList() else ArrayList<RuleDecision>(count.coerceAtMost(64))
        repeat(count) {
            val rule = required()
            val policy = required()
            val bits = u8()
            (decisions as ArrayList).add(RuleDecision(rule, policy, decision(bits), bits and 2 != 0))
        }
        val completion = string()
        return Outcome(if (status == 0) null else status, headers, body, trailers, delay, decisions, completion)
    }

    /** A count of (name, value) pairs and the pairs. */
    private fun headers(): List<Header> {
        val n = u32()
        if (n == 0) return emptyList()
        val headers = ArrayList<Header>(n.coerceAtMost(16))
        repeat(n) { headers.add(Header(name(), required())) }
        return headers
    }

    /** An error record's payload as the sealed exception. */
    fun error(): PolylimitException {
        val kind = u8()
        val message = required()
        val field = string()
        val value = string()
        val key = string()
        return when (kind) {
            0 -> PolylimitException.Config(message, field ?: "", value ?: "")
            1 -> PolylimitException.StoreUnavailable(message)
            2 -> PolylimitException.Store(message, key ?: "")
            3 -> PolylimitException.Closed(message)
            else -> PolylimitException.Internal(message)
        }
    }

    /** The next record of a batch. */
    fun record(): PackedRecord {
        val ctx = u64()
        val value: Any? = when (val kind = u8()) {
            0 -> return PackedRecord(ctx, null, error())
            1 -> null
            2 -> u8() != 0
            3 -> u64()
            4 -> decision()
            5 -> List(u32()) { decision() }
            6 -> PackedAcquired(decision(), List(u32()) { PackedLease(u32(), required(), required()) })
            7 -> outcome()
            8 -> required()
            else -> throw PolylimitException.Internal("polylimit: unknown packed record kind $kind")
        }
        return PackedRecord(ctx, value, null)
    }
}

/**
 * The header names outcomes carried, decoded once: a name is looked up by
 * its bytes (hash, then compare) instead of decoded on every outcome. A slot
 * holds the last name that hashed to it; the entries are immutable, so
 * threads may race on a slot and still read a whole one.
 */
internal object Names {
    private class Entry(val bytes: ByteArray, val name: String)

    private const val SLOTS = 64
    private val slots = arrayOfNulls<Entry>(SLOTS)

    /** The `n` UTF-8 bytes at `at` of `buf` as a String. */
    fun get(buf: ByteBuffer, at: Int, n: Int): String {
        var h = n
        for (i in 0 until n) {
            h = 31 * h + buf.get(at + i)
        }
        val slot = h and (SLOTS - 1)
        val e = slots[slot]
        if (e != null && e.bytes.size == n && same(e.bytes, buf, at)) {
            return e.name
        }
        val bytes = ByteArray(n)
        buf.get(at, bytes)
        return String(bytes, Charsets.UTF_8).also { slots[slot] = Entry(bytes, it) }
    }

    private fun same(bytes: ByteArray, buf: ByteBuffer, at: Int): Boolean {
        for (i in bytes.indices) {
            if (bytes[i] != buf.get(at + i)) {
                return false
            }
        }
        return true
    }
}
