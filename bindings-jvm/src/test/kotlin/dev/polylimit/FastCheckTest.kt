package dev.polylimit

import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Test

/** `checkFast` (FastCheck.kt): decided by the native fast call, the same decisions and exceptions as `check`. */
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
                        assertEquals(slow.check(key, null, now), got, "key $key at $now")
                    }
                }
                assertEquals(slow.check("c", 2, 0), fast.checkFast("c", 2, 0))
                assertEquals(Decision(false, 2, 0, 200, null, 0, "store"), fast.checkFast("c", 3, 0))
                // The store's clock when nowMs is left out.
                assertEquals("store", fast.checkFast("clock").source)
            }
        }
    }

    @Test
    fun `errors throw what check throws`() {
        Limiter(gcra).use { limiter: Limiter ->
            assertNull(limiter.fastDecision("k", 0, 0))
            val fast = assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", cost = 0) }
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.check("k", cost = 0) }
            assertEquals(slow.text, fast.text)
            assertEquals("cost", fast.field)
            assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", cost = -1) }
            assertThrows(PolylimitException.Config::class.java) { limiter.checkFast("k", nowMs = -5) }
        }
        val closed = Limiter(gcra)
        closed.close()
        assertNull(closed.fastDecision("k", null, 0))
        val fast = assertThrows(IllegalStateException::class.java) { closed.checkFast("k") }
        val slow = assertThrows(IllegalStateException::class.java) { closed.check("k") }
        assertEquals(slow.message, fast.message)
    }
}
