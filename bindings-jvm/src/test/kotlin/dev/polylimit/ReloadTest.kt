package dev.polylimit

import java.io.File
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.assertThrows
import org.junit.jupiter.params.ParameterizedTest
import org.junit.jupiter.params.provider.ValueSource
import kotlinx.coroutines.runBlocking

/**
 * Reload (issue 38), on memory and on a real redis-server: `reload` (blocking,
 * suspend and future) reads the rules file again and swaps the rules at once,
 * keeping the state of an unchanged window; a bad file throws `Config` naming
 * the field and the old rules keep serving; `watch` picks up a changed file.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ReloadTest {
    private lateinit var redis: RedisServer

    @BeforeAll
    fun startRedis() {
        redis = RedisServer()
    }

    @AfterAll
    fun stopRedis() {
        redis.close()
    }

    private val now = 1_700_000_040_000L
    private var prefix = 0

    private fun rules(rate: String) =
        "policies:\n  api: { algorithm: fixed_window, rate: $rate }\nrules:\n  - { key: [ip], policy: api }\n"

    private fun file(text: String): File = File.createTempFile("polylimit-reload", ".yaml").apply {
        deleteOnExit()
        writeText(text)
    }

    @ParameterizedTest
    @ValueSource(strings = ["memory", "redis"])
    fun `reload keeps the window and a bad file keeps serving`(store: String) {
        val rules = file(rules("3/min"))
        val at = if (store == "redis") """"${redis.url}", "prefix": "reload${prefix++}"""" else "\"memory\""
        Limiter("""{"rules_file": "${rules.path}", "store": $at, "timeout": "10s"}""").use { limiter ->
            repeat(3) { assertTrue(limiter.check("k", nowMs = now).allowed) }
            rules.writeText(rules("5/min"))
            limiter.reload()
            val d = limiter.check("k", nowMs = now)
            assertEquals(listOf(true, 5L, 1L), listOf(d.allowed, d.limit, d.remaining))
            rules.writeText(rules("often"))
            val e = assertThrows<PolylimitException.Config> { limiter.reload() }
            assertEquals("policies.api.rate", e.field)
            assertEquals(5L, limiter.check("k", nowMs = now).limit, "the old rules keep serving")
            rules.writeText(rules("9/min"))
            runBlocking { limiter.reloadAsync() }
            assertEquals(9L, limiter.peek("k", nowMs = now).limit)
            rules.writeText(rules("11/min"))
            limiter.reloadFuture().get()
            assertEquals(11L, limiter.peek("k", nowMs = now).limit)
            val text = limiter.metricsText()
            assertTrue(text.contains("polylimit_config_reloads_total{result=\"ok\"} 3"), text)
            assertTrue(text.contains("polylimit_config_reloads_total{result=\"error\"} 1"), text)
        }
    }

    @Test
    fun `watch picks up a changed file`() {
        val rules = file(rules("3/min"))
        Limiter("""{"rules_file": "${rules.path}", "watch": "50ms"}""").use { limiter ->
            rules.writeText(rules("7/min"))
            val deadline = System.nanoTime() + 10_000_000_000L
            while (limiter.peek("k", nowMs = now).limit != 7L && System.nanoTime() < deadline) Thread.sleep(20)
            assertEquals(7L, limiter.peek("k", nowMs = now).limit)
        }
        val e = assertThrows<PolylimitException.Config> { Limiter("""{"policy": {"rate": "1/s"}, "watch": true}""") }
        assertEquals("watch", e.field)
    }

    @Test
    fun `a watched swap reaches what the facade remembers of the rules`() {
        val rules = file(rules("3/min"))
        Limiter("""{"rules_file": "${rules.path}", "watch": "50ms"}""").use { limiter ->
            // Remembered: no rule reads the header or the route.
            assertFalse(limiter.readsHeader("X-Tenant"))
            assertFalse(limiter.readsRoute())
            rules.writeText(
                "policies:\n  api: { algorithm: fixed_window, rate: 3/min }\n" +
                    "rules:\n  - { key: [\"header:x-tenant\", route], policy: api }\n",
            )
            // The watch swaps the rules in by itself (no reload() call here): the
            // middlewares' header and route reads must follow, not the old answers.
            val deadline = System.nanoTime() + 10_000_000_000L
            while (!(limiter.readsHeader("X-Tenant") && limiter.readsRoute()) && System.nanoTime() < deadline) Thread.sleep(20)
            assertTrue(limiter.readsHeader("X-Tenant"))
            assertTrue(limiter.readsRoute())
        }
    }
}
