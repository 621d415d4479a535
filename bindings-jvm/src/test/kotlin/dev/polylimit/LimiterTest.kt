package dev.polylimit

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

class LimiterTest {
    private val gcra = """{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 2}}"""

    @Test
    fun `check decides by the core and peek charges nothing`() {
        Limiter(gcra).use { limiter: Limiter ->
            val first = limiter.check("k", nowMs = 0)
            assertEquals(Decision(true, 2, 1, 100, null, 0, "store"), first)
            assertEquals(0L, limiter.peek("k", nowMs = 0).remaining) // what a second check would leave
            assertTrue(limiter.check("k", nowMs = 0).allowed)
            val denied = limiter.check("k", nowMs = 0)
            assertFalse(denied.allowed)
            assertEquals(100L, denied.retryAfterMs)
            limiter.reset("k")
            assertTrue(limiter.check("k", nowMs = 0).allowed)
            assertTrue(limiter.metricsText().contains("polylimit_"))
            assertEquals(listOf("default"), limiter.policyNames())
        }
    }

    @Test
    fun `bad options throw Config naming the field and value`() {
        val e = assertThrows(PolylimitException.Config::class.java) {
            Limiter("""{"policy": {"algorithm": "gcra", "rate": "ten", "burst": 2}}""")
        }
        assertEquals("policy.rate", e.field)
        assertEquals("\"ten\"", e.value)
        assertTrue(e.text.startsWith("policy.rate: \"ten\" "), e.text)
        val cost = assertThrows(PolylimitException.Config::class.java) { Limiter(gcra).use { it.check("k", cost = 0) } }
        assertEquals("cost", cost.field)
        val json = assertThrows(PolylimitException.Config::class.java) { Limiter("{not json") }
        assertEquals("options", json.field)
    }

    /** The core's kind names; exhaustive over the sealed class: a new variant is a compile error here. */
    private fun kind(e: PolylimitException): String = when (e) {
        is PolylimitException.Config -> "config"
        is PolylimitException.StoreUnavailable -> "store_unavailable"
        is PolylimitException.Store -> "store"
        is PolylimitException.Closed -> "closed"
        is PolylimitException.Internal -> "internal"
    }

    @Test
    fun `a closed limiter cannot be used`() {
        val limiter = Limiter(gcra)
        limiter.close()
        // The core limiter is closed: every call form throws Closed, not uniffi's IllegalStateException.
        assertThrows(PolylimitException.Closed::class.java) { limiter.check("k") }
        assertThrows(PolylimitException.Closed::class.java) { limiter.checkRequest(HttpRequest(path = "/", peer = "10.0.0.1")) }
        assertEquals("config", kind(PolylimitException.Config("t", "f", "v")))
    }

    @Test
    fun `a lease holds a concurrency slot until released or closed`() {
        Limiter("""{"policy": {"algorithm": "concurrency", "limit": 1, "lease": "30s"}}""").use { limiter: Limiter ->
            val (first, lease) = limiter.acquire("k", nowMs = 0)
            assertTrue(first.allowed)
            assertFalse(limiter.acquire("k", nowMs = 1).decision.allowed)
            assertEquals(1L, lease!!.release(2))
            assertTrue(lease.released())
            assertEquals(0L, lease.release(3)) // only the first release gives the slot back
            // On the store's clock (the background release uses it): close() (try-with-resources,
            // use) releases on the native runtime, in the background.
            val held = limiter.acquire("k2")
            assertTrue(held.decision.allowed)
            assertFalse(limiter.peek("k2").allowed)
            held.lease!!.close()
            val deadline = System.nanoTime() + 5_000_000_000L
            while (!limiter.peek("k2").allowed) {
                assertTrue(System.nanoTime() < deadline, "the closed lease's slot never came back")
                Thread.onSpinWait()
            }
        }
    }

    @Test
    fun `checkRequest answers what the middleware writes`() {
        val rules = """{"rules": {"policies": {"api": {"algorithm": "fixed_window", "rate": "1/s"}},
            "rules": [{"name": "all", "key": ["ip"], "policy": "api"}]}}"""
        Limiter(rules).use { limiter: Limiter ->
            val request = HttpRequest(path = "/x", peer = "10.0.0.1", nowMs = 1_000)
            val ok = limiter.checkRequest(request)
            assertNull(ok.status)
            val refused = limiter.checkRequest(request)
            assertEquals(429, refused.status)
            assertTrue(refused.headers.any { it.name.equals("retry-after", ignoreCase = true) }, "${refused.headers}")
            assertTrue(refused.body!!.isNotEmpty())
        }
    }
}
