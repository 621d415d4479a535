package dev.polylimit

import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.ValueSource
import kotlinx.coroutines.runBlocking

/**
 * Per-key overrides (SPEC §11) and the `Closed` error, on memory and on a
 * real redis-server: an override's rate decides its key's checks on a
 * limiter with `"overrides": true`, is read back, ends with its TTL and is
 * removed; bad arguments (or a limiter without the option) throw `Config`
 * naming the field.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class OverridesAndClosedTest {
    private lateinit var redis: RedisServer

    @BeforeAll
    fun startRedis() {
        redis = RedisServer()
    }

    @AfterAll
    fun stopRedis() {
        redis.close()
    }

    private var prefix = 0

    private fun limiter(store: String, overrides: Boolean = true): Limiter {
        val at = if (store == "redis") """"${redis.url}", "prefix": "ov${prefix++}:"""" else "\"memory\""
        return Limiter("""{"policy": {"algorithm": "fixed_window", "rate": "1/h"}, "overrides": $overrides, "timeout": "10s", "store": $at}""") // decisions, not latency
    }

    private fun allowed(limiter: Limiter, key: String, n: Int) = (1..n).map { limiter.check(key, nowMs = 1_000).allowed }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `an override decides its key until removed`(store: String) {
        limiter(store).use { limiter ->
            val set = limiter.setOverride("vip", "3/h", nowMs = 1_000)
            assertEquals(Override("default", "vip", "3/1h", 3, 3, null), set) // the rate as the core writes it
            assertEquals(set, limiter.getOverride("vip", nowMs = 1_000))
            assertEquals(listOf(true, true, true, false), allowed(limiter, "vip", 4))
            assertEquals(3L, limiter.check("vip", nowMs = 1_000).limit)
            assertEquals(listOf(true, false), allowed(limiter, "other", 2))
            assertTrue(limiter.removeOverride("vip"))
            assertFalse(limiter.removeOverride("vip"))
            assertNull(limiter.getOverride("vip", nowMs = 1_000))
            assertEquals(1L, limiter.check("vip", nowMs = 1_000).limit)
        }
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `an override with a ttl ends and the suspend forms match`(store: String) = runBlocking {
        limiter(store).use { limiter ->
            val set = limiter.setOverrideAsync("k", "10/m", policy = "default", ttl = "1m", nowMs = 1_000)
            assertEquals(Override("default", "k", "10/1m", 10, 10, 61_000), set)
            assertEquals(set, limiter.getOverrideAsync("k", nowMs = 60_999))
            assertNull(limiter.getOverrideAsync("k", nowMs = 61_000))
            limiter.setOverrideAsync("k", "10/m")
            assertTrue(limiter.removeOverrideAsync("k", "default"))
            assertNull(limiter.getOverrideAsync("k"))
        }
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `without the overrides option setting one throws Config naming overrides`(store: String) {
        limiter(store, overrides = false).use { limiter ->
            val e = assertThrows(PolylimitException.Config::class.java) { limiter.setOverride("vip", "3/h") }
            assertEquals("overrides" to "false", e.field to e.value)
        }
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `bad arguments throw Config naming the field`(store: String) {
        limiter(store).use { limiter ->
            assertEquals("rate", assertThrows(PolylimitException.Config::class.java) { limiter.setOverride("k", "fast") }.field)
            assertEquals("burst", assertThrows(PolylimitException.Config::class.java) { limiter.setOverride("k", "1/s", burst = 0) }.field)
            assertEquals("ttl", assertThrows(PolylimitException.Config::class.java) { limiter.setOverride("k", "1/s", ttl = "soon") }.field)
            assertEquals("policy", assertThrows(PolylimitException.Config::class.java) { limiter.setOverride("k", "1/s", policy = "nope") }.field)
        }
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `a shut down limiter throws Closed`(store: String) = runBlocking {
        limiter(store).use { limiter ->
            assertTrue(limiter.check("k", nowMs = 1_000).allowed)
            limiter.shutdown()
            assertThrows(PolylimitException.Closed::class.java) { limiter.check("k", nowMs = 1_000) }
            assertThrows(PolylimitException.Closed::class.java) { limiter.setOverride("k", "1/s") }
            assertThrows(PolylimitException.Closed::class.java) { runBlocking { limiter.checkAsync("k") } }
            Unit
        }
    }
}
