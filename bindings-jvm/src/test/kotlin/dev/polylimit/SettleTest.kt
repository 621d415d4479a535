package dev.polylimit

import java.math.BigInteger
import java.util.function.BiConsumer
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * The middlewares' one settlement (`Limiter.settle`/`settleFuture`) and `completeCost` on the
 * direct path: a reported whole number reconciles the reservation (charged past it, given back),
 * anything else is told to `warn` and the request completed without it; an HTTP status takes the
 * direct C call, a gRPC OK (0) the generated one, with the same effect.
 */
class SettleTest {
    private val rules = """{"rules": {"policies": {"llm": {"algorithm": "token_bucket", "rate": "1000/d"}},
        "rules": [{"match": {"path": "/llm"}, "key": ["ip"], "policy": "llm", "cost": "header:x-reserve", "max_cost": 500}]}}"""

    /** A request reserving [reserve], decided at [now] (null: the store's clock, as a middleware's; 1000 a day
     * refills a token every 86.4 s, so the counts are exact within a test). */
    private fun request(peer: String, reserve: Long, now: Long? = null) =
        HttpRequest(method = "POST", path = "/llm", peer = peer, headers = listOf(Header("x-reserve", "$reserve")), nowMs = now)

    /** The key's remaining count after one more unit (a peek: nothing charged). */
    private fun Limiter.left(peer: String, now: Long? = null) = peekRequest(request(peer, 1, now)).decisions.single().decision.remaining

    private class Warnings : BiConsumer<String, Throwable?> {
        val seen = mutableListOf<Pair<String, Throwable?>>()
        override fun accept(message: String, e: Throwable?) {
            seen += message to e
        }
    }

    @Test
    fun `a reported whole number reconciles, anything else is warned of and the reservation stands`() {
        Limiter(rules).use { limiter ->
            val warn = Warnings()
            val before = GeneratedCalls.count()
            limiter.settle(limiter.checkRequest(request("10.0.0.1", 100)).completion!!, 200, 300L, warn)
            assertEquals(1000L - 300 - 1, limiter.left("10.0.0.1"))
            limiter.settleFuture(limiter.checkRequest(request("10.0.0.2", 200)).completion!!, 200, 50, warn).get()
            assertEquals(1000L - 50 - 1, limiter.left("10.0.0.2"))
            limiter.settle(limiter.checkRequest(request("10.0.0.3", 100)).completion!!, 200, null, warn)
            assertEquals(1000L - 100 - 1, limiter.left("10.0.0.3"))
            assertEquals(listOf<Pair<String, Throwable?>>(), warn.seen)
            assertEquals(before, GeneratedCalls.count(), "an HTTP settlement took the generated path")
            // Not a whole number: warned, completed as reserved.
            limiter.settle(limiter.checkRequest(request("10.0.0.4", 100)).completion!!, 200, "300", warn)
            assertEquals(1000L - 100 - 1, limiter.left("10.0.0.4"))
            assertTrue(warn.seen.single().first.contains("is not a whole number: 300 (java.lang.String)"), "${warn.seen}")
            assertNull(warn.seen.single().second)
            // Refused by the core (negative): warned with its error, completed as reserved.
            limiter.settleFuture(limiter.checkRequest(request("10.0.0.5", 100)).completion!!, 200, -5L, warn).get()
            assertEquals(1000L - 100 - 1, limiter.left("10.0.0.5"))
            val refused = warn.seen.last().second
            assertTrue(refused is PolylimitException.Config && refused.field == "cost", "$refused")
        }
    }

    @Test
    fun `completeCost answers as the generated call, on the direct path for every status`() = runBlocking {
        Limiter(rules).use { limiter ->
            val before = GeneratedCalls.count()
            limiter.completeCost(limiter.checkRequest(request(NOW, "10.0.1.1", 100)).completion!!, 200, 300, NOW)
            limiter.completeCostAsync(limiter.checkRequest(request(NOW, "10.0.1.2", 100)).completion!!, 200, 300, NOW)
            limiter.completeCostFuture(limiter.checkRequest(request(NOW, "10.0.1.3", 100)).completion!!, 200, 300, NOW).get()
            // Status 0 (a gRPC OK, or no response for HTTP) goes direct too.
            limiter.completeCost(limiter.checkRequest(request(NOW, "10.0.1.4", 100)).completion!!, 0, 300, NOW)
            assertEquals(before, GeneratedCalls.count(), "completeCost took the generated path")
            limiter.generatedCompleteCost(limiter.checkRequest(request(NOW, "10.0.1.5", 100)).completion!!, 200, 300, NOW)
            assertEquals(before + 1, GeneratedCalls.count())
            for (peer in (1..5).map { "10.0.1.$it" }) {
                assertEquals(1000L - 300 - 1, limiter.left(peer, NOW), peer)
            }
        }
    }

    @Test
    fun `a reported cost is a whole number of a Long's range`() {
        assertEquals(3L, Limiter.reportedCost(3.toByte()))
        assertEquals(3L, Limiter.reportedCost(3.toShort()))
        assertEquals(3L, Limiter.reportedCost(3))
        assertEquals(3L, Limiter.reportedCost(BigInteger.valueOf(3)))
        assertNull(Limiter.reportedCost(BigInteger.ONE.shiftLeft(64)))
        assertNull(Limiter.reportedCost(3.0))
        assertNull(Limiter.reportedCost("3"))
        assertNull(Limiter.reportedCost(null))
    }

    /** [request] at [NOW]. */
    private fun request(now: Long, peer: String, reserve: Long) = request(peer, reserve, now)

    private companion object {
        const val NOW = 1_700_000_000_000L
    }
}
