package dev.polylimit

import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.ValueSource
import kotlinx.coroutines.runBlocking

/**
 * Policy-wide limits (issue 38) on memory and on a real redis-server: a
 * limit decides every key of its policy, a per-key override still wins, it
 * is read back, ends with its TTL and is removed; another limiter on the
 * store applies it at its next check; bad arguments (or a limiter without
 * `"overrides": true`) throw `Config` naming the field.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LimitsTest {
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

    private fun limiter(store: String, overrides: Boolean = true, name: String = "lim${prefix++}"): Limiter {
        val at = if (store == "redis") """"${redis.url}", "prefix": "$name"""" else "\"memory\""
        return Limiter("""{"policy": {"algorithm": "fixed_window", "rate": "1/h"}, "overrides": $overrides, "timeout": "10s", "store": $at}""")
    }

    private fun allowed(limiter: Limiter, key: String, n: Int) = (1..n).map { limiter.check(key, nowMs = 1_000).allowed }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `a limit decides every key until removed, an override still wins`(store: String) {
        limiter(store).use { limiter ->
            val set = limiter.setLimit("3/h", nowMs = 1_000)
            assertEquals(PolicyLimit("default", "3/1h", 3, 3, null), set)
            assertEquals(set, limiter.getLimit(nowMs = 1_000))
            assertEquals(listOf(true, true, true, false), allowed(limiter, "a", 4))
            assertEquals(listOf(true, true, true, false), allowed(limiter, "b", 4))
            limiter.setOverride("vip", "5/h", nowMs = 1_000)
            assertEquals(5L, limiter.check("vip", nowMs = 1_000).limit)
            assertTrue(limiter.removeLimit())
            assertFalse(limiter.removeLimit("default"))
            assertNull(limiter.getLimit(nowMs = 1_000))
            assertEquals(1L, limiter.check("c", nowMs = 1_000).limit)
            assertTrue(limiter.metricsText().contains("polylimit_limit_changes_total{policy=\"default\",action=\"set\"} 1"))
        }
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `async forms and a ttl on nowMs`(store: String) = runBlocking {
        limiter(store).use { limiter ->
            val set = limiter.setLimitAsync("10/m", policy = "default", ttl = "1m", nowMs = 1_000)
            assertEquals(PolicyLimit("default", "10/1m", 10, 10, 61_000), set)
            assertEquals(set, limiter.getLimitAsync(nowMs = 60_999))
            assertNull(limiter.getLimitAsync(nowMs = 61_000))
            assertEquals(1L, limiter.check("k", nowMs = 61_000).limit)
            limiter.setLimitAsync("10/m")
            assertTrue(limiter.removeLimitAsync("default"))
            assertNull(limiter.getLimitAsync())
        }
    }

    @Test
    fun `another limiter on the store applies it at its next check`() {
        limiter("redis", name = "limshared").use { a ->
            limiter("redis", name = "limshared").use { b ->
                assertEquals(1L, b.check("k", nowMs = 1_000).limit)
                a.setLimit("2/h", nowMs = 1_000)
                assertEquals(listOf(true, true, false), allowed(b, "k", 3))
                assertTrue(b.removeLimit())
            }
        }
    }

    @Test
    fun `bad limits name the field`() {
        limiter("memory").use { limiter ->
            assertEquals("rate", assertThrows(PolylimitException.Config::class.java) { limiter.setLimit("fast") }.field)
            assertEquals("burst", assertThrows(PolylimitException.Config::class.java) { limiter.setLimit("1/s", burst = 0) }.field)
            assertEquals("ttl", assertThrows(PolylimitException.Config::class.java) { limiter.setLimit("1/s", ttl = "soon") }.field)
            assertEquals("policy", assertThrows(PolylimitException.Config::class.java) { limiter.setLimit("1/s", policy = "nope") }.field)
        }
        limiter("memory", overrides = false).use { limiter ->
            assertEquals("overrides", assertThrows(PolylimitException.Config::class.java) { limiter.setLimit("1/s") }.field)
        }
    }
}
