package dev.polylimit

import java.util.concurrent.ExecutionException
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * A fixed clock for outcomes compared byte for byte: at `nowMs = 0` the
 * `X-RateLimit-Reset` header is taken from the wall clock, which may tick to
 * the next second between the two calls compared.
 */
internal const val FIXED_NOW_MS = 1_700_000_000_000L

/**
 * The standard `check`, `checkAsync`, `checkFuture` and `checkRequest`
 * (FastCheck.kt, FastRequest.kt): decided by the native fast calls, the same
 * decisions and exceptions as the uniffi-generated calls they fall back to.
 */
class FastCheckTest {
    private val gcra = """{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 2}}"""

    @Test
    fun `the fast call decides what check decides`() {
        Limiter(gcra).use { fast: Limiter ->
            Limiter(gcra).use { slow: Limiter ->
                for (now in listOf(0L, 0L, 0L, 0L, 50L, 100L, 250L)) {
                    for (key in listOf("k", "ключ:\u00e9", "")) {
                        // Decided natively (null would mean the fallback answered).
                        val got = fast.fastDecision(key, null, now)
                        assertNotNull(got, "key $key at $now: not decided by the fast call")
                        assertEquals(slow.generatedCheck(key, null, now), got, "key $key at $now")
                    }
                }
                assertEquals(slow.generatedCheck("c", 2, 0), fast.check("c", 2, 0))
                assertEquals(Decision(false, 2, 0, 200, null, 0, "store"), fast.checkFast("c", 3, 0))
                // The store's clock when nowMs is left out.
                assertEquals("store", fast.checkFast("clock").source)
            }
        }
    }

    @Test
    fun `checkFutureFast decides what check decides, memory and Redis`() {
        RedisServer().use { redis ->
            for (store in listOf("memory", redis.url)) {
                fun options(prefix: String) =
                    """{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 2}, "store": "$store", "timeout": "10s", "prefix": "$prefix"}"""
                Limiter(options("fast")).use { fast: Limiter ->
                    Limiter(options("slow")).use { slow: Limiter ->
                        for (now in listOf(0L, 0L, 0L, 0L, 50L, 100L, 250L)) {
                            for (key in listOf("k", "ключ:\u00e9", "")) {
                                // Started natively (null would mean the fallback answered).
                                val got = fast.startFast(key, null, now)
                                assertNotNull(got, "$store key $key at $now: not started by the fast call")
                                assertEquals(slow.generatedCheck(key, null, now), got!!.get(), "$store key $key at $now")
                            }
                        }
                        // Many in flight at once, each completed once: 10 keys, a burst of 2 each.
                        val futures = (0 until 200).map { fast.checkFutureFast("many:${it % 10}", 1, 1000) }
                        assertEquals(20, futures.count { it.get().allowed }, store)
                    }
                }
                if (store == "memory") {
                    // Decided in the first poll: no callback, the future comes back done.
                    Limiter(options("m")).use { assertTrue(it.checkFutureFast("done", 1, 0).isDone) }
                }
            }
        }
    }

    @Test
    fun `errors throw what check throws`() {
        Limiter(gcra).use { limiter: Limiter ->
            assertNull(limiter.fastDecision("k", 0, 0))
            assertNull(limiter.startFast("k", 0, 0))
            val fast = assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", cost = 0) }
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.generatedCheck("k", 0, null) }
            assertEquals(slow.text, fast.text)
            assertEquals("cost", fast.field)
            assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", cost = -1) }
            assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", nowMs = -5) }
            val future = assertThrows(ExecutionException::class.java) { limiter.checkFutureFast("k", 0, 0).get() }
            assertTrue(future.cause is PolylimitException.Config, "${future.cause}")
        }
        val closed = Limiter(gcra)
        closed.close()
        assertNull(closed.fastDecision("k", null, 0))
        assertNull(closed.startFast("k", null, 0))
        val fast = assertThrows(PolylimitException.Closed::class.java) { closed.checkFast("k") }
        val slow = assertThrows(PolylimitException.Closed::class.java) { closed.generatedCheck("k", null, null) }
        assertEquals(slow.message, fast.message)
        val future = assertThrows(ExecutionException::class.java) { closed.checkFutureFast("k").get() }
        assertTrue(future.cause is PolylimitException.Closed, "${future.cause}")
    }

    @Test
    fun `the standard calls take the fast path, the generated one only on an error`() {
        val rules = """{"rules": {"policies": {"p": {"rate": "2/h", "burst": 2}},
            "rules": [{"match": {"path": "/api/*"}, "key": ["ip"], "policy": "p"}]}}"""
        Limiter(gcra).use { limiter: Limiter ->
            val before = GeneratedCalls.count()
            limiter.check("a", null, 0)
            limiter.check("a")
            limiter.checkFuture("a", 1, 0).get()
            runBlocking { limiter.checkAsync("a", 1, 0) }
            limiter.checkFast("a", null, 0)
            limiter.checkFutureFast("a", null, 0).get()
            assertEquals(before, GeneratedCalls.count(), "a standard check took the generated path")
            // An error goes to the generated call, which throws: counted.
            assertThrows(PolylimitException.Config::class.java) { limiter.check("a", 0, 0) }
            assertEquals(before + 1, GeneratedCalls.count())
            assertThrows(PolylimitException.Config::class.java) { runBlocking { limiter.checkAsync("a", 0, 0) } }
            assertEquals(before + 2, GeneratedCalls.count())
            // A lone surrogate: the generated encoder rejects it, the fast call never sees it.
            assertThrows(Exception::class.java) { limiter.check("bad\uD800", null, 0) }
            assertEquals(before + 3, GeneratedCalls.count())
        }
        Limiter(rules).use { limiter: Limiter ->
            val request = HttpRequest(path = "/api/x", peer = "203.0.113.9", nowMs = FIXED_NOW_MS)
            val before = GeneratedCalls.count()
            val fast = (0 until 3).map { limiter.checkRequest(request) }
            assertEquals(before, GeneratedCalls.count(), "checkRequest took the generated path")
            assertEquals(listOf(null, null, 429), fast.map { it.status })
            Limiter(rules).use { slow: Limiter ->
                val generated = (0 until 3).map { slow.generatedCheckRequest(request) }
                // Byte-identical: status, headers (names, values, order), body, decisions, token.
                assertEquals(generated, fast)
            }
            val beforeError = GeneratedCalls.count()
            assertThrows(PolylimitException.Config::class.java) { limiter.checkRequest(request.copy(cost = 0)) }
            assertEquals(beforeError + 1, GeneratedCalls.count())
        }
    }

    @Test
    fun `checkPacked answers what checkRequest answers, decisions left out`() {
        val rules = """{"rules": {"policies": {"p": {"algorithm": "gcra", "rate": "2/s", "burst": 2}},
            "rules": [{"match": {"path": "/api/*"}, "key": ["header:x-tenant"], "policy": "p"}]}}"""
        Limiter(rules).use { packed: Limiter ->
            Limiter(rules).use { typed: Limiter ->
                assertTrue(packed.readsHeader("X-Tenant"))
                assertTrue(packed.readsHeader("x-forwarded-for"), "the forwarding header")
                assertFalse(packed.readsHeader("accept"))
                assertFalse(packed.readsRoute(), "no rule matches, keys or tiers by route")
                for (i in 0 until 4) {
                    val p = PackedRequest("GET", "/api/x", null, "203.0.113.9").header("X-Tenant", "t1").header("Accept", "*/*")
                    p.nowMs = 1000L
                    val want = typed.generatedCheckRequest(p.toHttpRequest())
                    assertEquals(want.copy(decisions = emptyList()), packed.checkPacked(p), "request $i")
                }
            }
        }
        Limiter("""{"rules": {"policies": {"p": {"rate": "2/s"}}, "rules": [{"key": ["route"], "policy": "p"}]}}""").use {
            assertTrue(it.readsRoute())
        }
        // An outcome larger than the native call's buffer (20 decisions with long policy names) comes back whole.
        val names = (0 until 20).map { "p$it-" + "x".repeat(120) }
        val long = """{"rules": {"policies": {${names.joinToString(",") { "\"$it\": {\"rate\": \"2/s\", \"burst\": 2}" }}},
            "rules": [${names.joinToString(",") { "{\"match\": {\"path\": \"/api/*\"}, \"key\": [\"ip\"], \"policy\": \"$it\"}" }}]}}"""
        Limiter(long).use { fast: Limiter ->
            Limiter(long).use { slow: Limiter ->
                val request = HttpRequest(path = "/api/x", peer = "203.0.113.9", nowMs = FIXED_NOW_MS)
                val before = GeneratedCalls.count()
                val got = fast.checkRequest(request)
                assertEquals(before, GeneratedCalls.count())
                assertEquals(slow.generatedCheckRequest(request), got)
                assertEquals(names, got.decisions.map { it.policy })
            }
        }
    }
}

/** The direct check alone: the decision, or null when it decided nothing (it falls back then). */
private fun Limiter.fastDecision(key: String, cost: Long?, nowMs: Long?): Decision? =
    startDecision(key, cost, nowMs, peek = false)?.join0()

/** The direct check's future alone, or null when it started nothing. */
private fun Limiter.startFast(key: String, cost: Long?, nowMs: Long?) = startDecision(key, cost, nowMs, peek = false)
