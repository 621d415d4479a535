@file:JvmName("FastRequest")

package dev.polylimit

import com.sun.jna.Memory
import com.sun.jna.Pointer
import java.nio.ByteBuffer
import java.nio.ByteOrder

// A request packed in the core's layout (polylimit::wire::packed, the C
// ABI's) for the facade's `checkRequest`, `peekRequest` and `checkPacked`
// (Limiter.kt); the outcome the core packs back is read by Packed.kt.
// Nothing is computed on this side.

internal const val WITH_DECISIONS = 1
private const val CASE_INSENSITIVE = 2
private const val IGNORE_TRAILING_SLASH = 4
private const val GRPC = 32

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

    /**
     * A gRPC call (the core's `kind: grpc`): `path` is its full method name,
     * `peer` the peer string as the gRPC library gives it, the headers its
     * metadata; the outcome answers with a gRPC code and trailers.
     */
    var grpc: Boolean = false

    /** Adds a header (repeated names repeated, in order). */
    fun header(name: String, value: String): PackedRequest {
        headers.add(Header(name, value))
        return this
    }

    /** The same request as the generated call's record. */
    fun toHttpRequest(): HttpRequest =
        HttpRequest(method, path, route, peer, headers.toList(), user, apiKey, key, cost, nowMs, caseInsensitive, ignoreTrailingSlash)

    internal fun pack(scratch: Scratch): Packer? {
        val p = Packer(scratch)
        return if (p.request(method, path, route, peer, user, apiKey, key, headers)) p else null
    }

    internal fun flags(): Int = flags(caseInsensitive, ignoreTrailingSlash) or (if (grpc) GRPC else 0)

    /**
     * The generated call's record has no kind: a gRPC call that cannot be
     * packed (a string that is not valid UTF-16) is refused, never decided as HTTP.
     */
    internal fun generatedForm(): HttpRequest {
        if (grpc) {
            throw PolylimitException.Config("a gRPC call's fields must be valid UTF-16", "kind", "grpc")
        }
        return toHttpRequest()
    }
}

/**
 * One packed request, written little-endian into the calling thread's
 * scratch memory (Direct.kt), or into memory of its own once it outgrows it.
 */
internal class Packer(scratch: Scratch) {
    private var memory: Memory? = null
    private var buf: ByteBuffer = scratch.buf
    private var base = Scratch.INPUT_AT
    private var cap = Scratch.INPUT_CAP
    private val scratchAddress = scratch.address + Scratch.INPUT_AT
    var size = 0
        private set

    /** Where the packed bytes are (held while `this` is). */
    val address: Long get() = memory?.let { Pointer.nativeValue(it) } ?: scratchAddress

    private fun room(n: Int) {
        if (size + n <= cap) {
            return
        }
        val bigger = maxOf(cap * 2, size + n)
        val m = Memory(bigger.toLong())
        val moved = m.getByteBuffer(0, bigger.toLong()).order(ByteOrder.LITTLE_ENDIAN)
        val bytes = ByteArray(size)
        buf.get(base, bytes)
        moved.put(0, bytes)
        memory = m
        buf = moved
        base = 0
        cap = bigger
    }

    private fun u32(n: Int) {
        room(4)
        buf.putInt(base + size, n)
        size += 4
    }

    /** Appends `s` (or the absent mark); false when it is not valid UTF-16. */
    private fun string(s: String?): Boolean {
        if (s == null) {
            u32(ABSENT)
            return true
        }
        val n = s.length
        room(4 + n)
        val at = base + size + 4
        for (i in 0 until n) {
            val c = s[i].code
            if (c >= 0x80) {
                val b = utf8(s) ?: return false
                u32(b.size)
                room(b.size)
                buf.put(base + size, b)
                size += b.size
                return true
            }
            buf.put(at + i, c.toByte())
        }
        buf.putInt(base + size, n)
        size += 4 + n
        return true
    }

    fun request(
        method: String, path: String, route: String?, peer: String?, user: String?, apiKey: String?, key: String?,
        headers: List<Header>,
    ): Boolean {
        if (!string(method) || !string(path) || !string(route) || !string(peer) || !string(user) || !string(apiKey) ||
            !string(key)
        ) {
            return false
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

internal fun flags(caseInsensitive: Boolean, ignoreTrailingSlash: Boolean): Int =
    (if (caseInsensitive) CASE_INSENSITIVE else 0) or (if (ignoreTrailingSlash) IGNORE_TRAILING_SLASH else 0)
