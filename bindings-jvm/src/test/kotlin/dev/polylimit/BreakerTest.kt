package dev.polylimit

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** The core's circuit breaker: its defaults, its checks, and `call` around it. */
class BreakerTest {
    private fun fail(breaker: CircuitBreaker, times: Int) = repeat(times) { breaker.acquire()!!.use { it.failure() } }

    @Test
    fun `the defaults open after 5 consecutive failures for 30s`() {
        CircuitBreaker().use { breaker ->
            fail(breaker, 4)
            assertEquals("closed", breaker.state())
            breaker.acquire()!!.use { it.success() } // a success starts the count again
            fail(breaker, 4)
            assertEquals("closed", breaker.state())
            fail(breaker, 1)
            assertEquals("open", breaker.state())
            assertNull(breaker.acquire())
            val wait = breaker.retryInMs()
            assertTrue(wait in 29_000..30_000, "$wait")
        }
    }

    @Test
    fun `call reports the outcome and answers the fallback when open`() {
        CircuitBreaker(threshold = 2, cooldown = "1h", halfOpenMax = 1).use { breaker ->
            assertEquals("ok", breaker.call({ "ok" }, { "fallback" }))
            val seen = mutableListOf<String?>()
            repeat(2) { breaker.call({ error("down") }, { e -> seen.add(e?.message); "fallback" }) }
            assertEquals(listOf<String?>("down", "down"), seen)
            assertEquals("open", breaker.state())
            assertEquals("open: null", breaker.call({ "called" }, { e -> "open: $e" }))
        }
    }

    @Test
    fun `bad settings throw Config naming the field and a permit reports once`() {
        val threshold = assertThrows(PolylimitException.Config::class.java) { CircuitBreaker(threshold = 0) }
        assertEquals("threshold" to "0", threshold.field to threshold.value)
        val cooldown = assertThrows(PolylimitException.Config::class.java) { CircuitBreaker(cooldown = "soon") }
        assertEquals("cooldown" to "\"soon\"", cooldown.field to cooldown.value)
        assertEquals("halfOpenMax", assertThrows(PolylimitException.Config::class.java) { CircuitBreaker(halfOpenMax = -1) }.field)
        CircuitBreaker().use { breaker ->
            val permit = breaker.acquire()!!
            permit.success()
            assertEquals("permit", assertThrows(PolylimitException.Config::class.java) { permit.failure() }.field)
        }
    }
}
