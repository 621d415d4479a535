package dev.polylimit

import java.util.concurrent.ExecutionException
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNotNull
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * `checkFast` and `checkFutureFast` (FastCheck.kt): decided by the native fast
 * calls, the same decisions and exceptions as `check` / `checkFuture`.
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
    fun `checkFutureFast decides what check decides, memory and Redis`() {
        RedisServer().use { redis ->
            for (store in listOf("memory", redis.url)) {
                fun options(prefix: String) =
                    """{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 2}, "store": "$store", "prefix": "$prefix"}"""
                Limiter(options("fast")).use { fast: Limiter ->
                    Limiter(options("slow")).use { slow: Limiter ->
                        for (now in listOf(0L, 0L, 0L, 0L, 50L, 100L, 250L)) {
                            for (key in listOf("k", "ключ:\u00e9", "")) {
                                // Started natively (null would mean the fallback answered).
                                val got = fast.startFast(key, null, now)
                                assertNotNull(got, "$store key $key at $now: not started by the fast call")
                                assertEquals(slow.check(key, null, now), got!!.get(), "$store key $key at $now")
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
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.check("k", cost = 0) }
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
        val fast = assertThrows(IllegalStateException::class.java) { closed.checkFast("k") }
        val slow = assertThrows(IllegalStateException::class.java) { closed.check("k") }
        assertEquals(slow.message, fast.message)
        val future = assertThrows(ExecutionException::class.java) { closed.checkFutureFast("k").get() }
        assertTrue(future.cause is IllegalStateException, "${future.cause}")
    }
}
