@file:JvmName("FastRequest")

package dev.polylimit

import java.nio.ByteBuffer
import java.nio.ByteOrder

// A request packed in one byte array in the core's layout
// (polylimit::wire::packed, the C ABI's) and the reader of the outcome the
// core packs back (status, the headers it formatted, body, delay, decisions,
// completion token): the facade's `checkRequest`, `peekRequest` and
// `checkPacked` (Limiter.kt). Nothing is computed on this side.

internal const val WITH_DECISIONS = 1
private const val CASE_INSENSITIVE = 2
private const val IGNORE_TRAILING_SLASH = 4
private const val ABSENT = -1 // 0xFFFFFFFF: an absent string

/**
 * A request for [checkPacked], packed as it is built: method, path, route,
 * peer, user, API key, key, then the headers ([header]) that the limiter's
 * rules read ([readsHeader] says which; the others may be left out: the
 * core leaves them out anyway).
 */
class PackedRequest @JvmOverloads constructor(
    private val method: String,
    private val path: String,
    private val route: String? = null,
    private val peer: String? = null,
    private val user: String? = null,
    private val apiKey: String? = null,
    private val key: String? = null,
) {
    private val headers = ArrayList<Header>(4)

    /** Units the request costs (null: the default, 1). */
    var cost: Long? = null

    /** Decide at this time (ms since the epoch; null: the store's clock). */
    var nowMs: Long? = null

    /** Match routes case-insensitively (the framework's setting). */
    var caseInsensitive: Boolean = false

    /** `/a/` matches `/a` (the framework's setting). */
    var ignoreTrailingSlash: Boolean = false

    /** Adds a header (repeated names repeated, in order). */
    fun header(name: String, value: String): PackedRequest {
        headers.add(Header(name, value))
        return this
    }

    /** The same request as the generated call's record. */
    fun toHttpRequest(): HttpRequest =
        HttpRequest(method, path, route, peer, headers.toList(), user, apiKey, key, cost, nowMs, caseInsensitive, ignoreTrailingSlash)

    internal fun pack(): Packer? {
        val p = Packer()
        return if (p.request(method, path, route, peer, user, apiKey, key, headers)) p else null
    }

    internal fun flags(): Int = flags(caseInsensitive, ignoreTrailingSlash)
}

/** A growing little-endian byte buffer holding one packed request. */
internal class Packer {
    var bytes = ByteArray(256)
    var size = 0

    private fun room(n: Int) {
        if (size + n > bytes.size) {
            bytes = bytes.copyOf(maxOf(bytes.size * 2, size + n))
        }
    }

    private fun u32(n: Int) {
        room(4)
        bytes[size] = n.toByte()
        bytes[size + 1] = (n ushr 8).toByte()
        bytes[size + 2] = (n ushr 16).toByte()
        bytes[size + 3] = (n ushr 24).toByte()
        size += 4
    }

    /** Appends `s` (or the absent mark); false when it is not valid UTF-16. */
    private fun string(s: String?): Boolean {
        if (s == null) {
            u32(ABSENT)
            return true
        }
        val b = utf8(s) ?: return false
        u32(b.size)
        room(b.size)
        System.arraycopy(b, 0, bytes, size, b.size)
        size += b.size
        return true
    }

    fun request(
        method: String, path: String, route: String?, peer: String?, user: String?, apiKey: String?, key: String?,
        headers: List<Header>,
    ): Boolean {
        for (s in arrayOf(method, path, route, peer, user, apiKey, key)) {
            if (!string(s)) {
                return false
            }
        }
        u32(headers.size)
        for (h in headers) {
            if (!string(h.name) || !string(h.value)) {
                return false
            }
        }
        return true
    }
}

/** Reads the core's packed outcome (`polylimit::wire::packed::write_outcome`). */
internal class Unpacker(bytes: ByteArray, len: Int) {
    private val buf: ByteBuffer = ByteBuffer.wrap(bytes, 0, len).order(ByteOrder.LITTLE_ENDIAN)

    fun u8(): Int = buf.get().toInt() and 0xff
    fun u16(): Int = buf.short.toInt() and 0xffff
    fun u32(): Int = buf.int

    /** A u64 as the uniffi record's Long (saturated, as the native `long()`). */
    fun u64(): Long = buf.long.let { if (it < 0) Long.MAX_VALUE else it }

    fun string(): String? {
        val n = u32()
        if (n == ABSENT) {
            return null
        }
        val s = String(buf.array(), buf.position(), n, Charsets.UTF_8)
        buf.position(buf.position() + n)
        return s
    }

    fun outcome(): Outcome {
        val status = u16()
        val hasBody = u8() != 0
        val delay = u64()
        val n = u32()
        val headers = ArrayList<Header>(n.coerceIn(0, 64))
        repeat(n) { headers.add(Header(string()!!, string()!!)) }
        val body = if (hasBody) string() else null
        val count = u32()
        val decisions = ArrayList<RuleDecision>(count)
        repeat(count) {
            val rule = string()!!
            val policy = string()!!
            val bits = u8()
            val limit = u64()
            val remaining = u64()
            val reset = u64()
            val retry = u64()
            val delayMs = u64()
            val source = CAbi.sources[u8()]
            val d = Decision(bits and 1 != 0, limit, remaining, reset, if (bits and 4 != 0) retry else null, delayMs, source)
            decisions.add(RuleDecision(rule, policy, d, bits and 2 != 0))
        }
        val completion = string()
        return Outcome(if (status == 0) null else status, headers, body, delay, decisions, completion)
    }
}

internal fun flags(caseInsensitive: Boolean, ignoreTrailingSlash: Boolean): Int =
    (if (caseInsensitive) CASE_INSENSITIVE else 0) or (if (ignoreTrailingSlash) IGNORE_TRAILING_SLASH else 0)
