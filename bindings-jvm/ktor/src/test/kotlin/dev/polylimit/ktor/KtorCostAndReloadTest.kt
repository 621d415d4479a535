package dev.polylimit.ktor

import dev.polylimit.Limiter
import dev.polylimit.testkit.RedisServer
import io.ktor.client.HttpClient
import io.ktor.client.request.get
import io.ktor.client.request.header
import io.ktor.client.request.post
import io.ktor.client.statement.HttpResponse
import io.ktor.client.statement.bodyAsText
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.post
import io.ktor.server.routing.routing
import io.ktor.server.testing.testApplication
import java.nio.file.Files
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test

/**
 * Cost and reload through the Ktor plugin in a Ktor test application (cost on memory and a real
 * redis-server, reload on memory): a handler
 * reports its call's actual cost with [reportCost] and the plugin settles with it (the core charges
 * the difference past the reservation, gives it back, or caps it at `max_cost`); the plugin's cost
 * function gives the reservation, bounded by `max_cost`; and the plugin follows `limiter.reload()`
 * of its rules file without a restart, rules that start reading the route and a header included.
 */
class KtorCostAndReloadTest {
    companion object {
        /**
         * 1000 a day per X-Api-Key on POST /llm (a token refills every 86.4 s: the counts are exact); on
         * Redis a generous timeout (a loaded machine's completion slower than 100 ms would be given up).
         */
        fun llmRules(store: String) = """
            {"store": "$store", "headers": "legacy", ${if (store == "memory") "" else "\"timeout\": \"5s\","}
             "policies": {"llm": {"algorithm": "token_bucket", "rate": "1000/d"}},
             "rules": [{"match": {"path": "/llm"}, "key": ["header:x-api-key"], "policy": "llm",
                        "cost": "header:x-reserve", "max_cost": 500}]}"""

        lateinit var redis: RedisServer

        @JvmStatic
        @BeforeAll
        fun startRedis() {
            redis = RedisServer()
        }

        @JvmStatic
        @AfterAll
        fun stopRedis() = redis.close()

        /** 2, then 4, a day per client on every /api/x path: a fixed window of a day, so no boundary falls inside the test. */
        fun byIp(perDay: Int) = "store: memory\nheaders: legacy\npolicies:\n  api: { algorithm: fixed_window, rate: $perDay/d }\n" +
            "rules:\n  - match: { path: /api/* }\n    key: [ip]\n    policy: api\n"

        /** One a day per X-Client header on the route template /api/{name} (every /api/x path is one route). */
        const val BY_ROUTE_AND_CLIENT = "store: memory\nheaders: legacy\npolicies:\n" +
            "  per_client: { algorithm: fixed_window, rate: 1/d }\n" +
            "rules:\n  - match: { route: \"/api/{name}\" }\n    key: [route, \"header:x-client\"]\n    policy: per_client\n"
    }

    private fun remaining(response: HttpResponse): Int {
        assertEquals(200, response.status.value)
        return response.headers["X-RateLimit-Remaining"]!!.toInt()
    }

    private suspend fun HttpClient.llm(apiKey: String, reserve: String, actual: String? = null, estimate: String? = null) =
        post("/llm") {
            header("X-Api-Key", apiKey)
            header("X-Reserve", reserve)
            actual?.let { header("X-Actual-Cost", it) }
            estimate?.let { header("X-Estimate", it) }
        }

    @Test
    fun theReportedCostIsReconciledAndTheCostFunctionReservesOnMemory() = reconcile("memory")

    @Test
    fun theReportedCostIsReconciledAndTheCostFunctionReservesOnRedis() = reconcile(redis.url())

    private fun reconcile(store: String) {
        Limiter.fromRules(llmRules(store)).use { limiter ->
            RedisServer.connected(limiter) // on Redis: its first checks would be the local fallback's
            testApplication {
                install(Polylimit) {
                    this.limiter = limiter
                    cost = { call -> call.request.headers["X-Estimate"]?.toLong() }
                }
                routing {
                    post("/llm") {
                        call.request.headers["X-Actual-Cost"]?.let { call.reportCost(it.toLong()) }
                        call.respondText("answered")
                    }
                }
                startApplication()
                // The reservation first, then the actual cost: charged past it, given back, capped at max_cost.
                assertEquals(900, remaining(client.llm("team-more", "100", "300")))
                assertEquals(1000 - 300 - 1, remaining(client.llm("team-more", "1", "1")))
                assertEquals(800, remaining(client.llm("team-less", "200", "50")))
                assertEquals(1000 - 50 - 1, remaining(client.llm("team-less", "1", "1")))
                assertEquals(990, remaining(client.llm("team-cap", "10", "9999")))
                assertEquals(1000 - 500 - 1, remaining(client.llm("team-cap", "1", "1")))
                // No report: the reservation stands. A negative one is the core's refusal (logged): it stands too.
                assertEquals(880, remaining(client.llm("team-none", "120")))
                assertEquals(880 - 40, remaining(client.llm("team-none", "40", "-5")))
                assertEquals(880 - 40 - 1, remaining(client.llm("team-none", "1", "1")))
                // The cost function replaces the header, within max_cost (above it: the core's 400 naming cost).
                assertEquals(750, remaining(client.llm("team-fn", "5", estimate = "250")))
                val bad = client.llm("team-fn", "5", estimate = "501")
                assertEquals(400, bad.status.value)
                val body = bad.bodyAsText()
                assertTrue(body.contains("\"error\":\"invalid_cost\"") && body.contains("\"field\":\"cost\""), body)
                assertEquals(745, remaining(client.llm("team-fn", "5")))
            }
        }
    }

    @Test
    fun thePluginFollowsAReloadWithoutARestart() {
        val rules = Files.createTempFile("polylimit-ktor-reload", ".yaml")
        Files.writeString(rules, byIp(2))
        Limiter.fromRulesFile(rules.toString()).use { limiter ->
            testApplication {
                install(Polylimit) { this.limiter = limiter }
                routing {
                    get("/api/{name}") { call.respondText("hello ${call.parameters["name"]}") }
                }
                startApplication()
                suspend fun statuses(client: String, vararg paths: String) =
                    paths.map { path -> this.client.get(path) { header("X-Client", client) }.status.value }
                // The first rules read neither the route nor X-Client (sent on every call: the facade asks about it).
                assertEquals(listOf(200, 200, 429), statuses("c1", "/api/a", "/api/b", "/api/c"))
                Files.writeString(rules, byIp(4))
                limiter.reload()
                // The same window, its count kept: two more.
                assertEquals(listOf(200, 200, 429), statuses("c1", "/api/a", "/api/b", "/api/c"))
                Files.writeString(rules, BY_ROUTE_AND_CLIENT)
                limiter.reload()
                // Keyed by the route template and X-Client: /api/a and /api/b are one route, each client has its one.
                assertEquals(listOf(200, 429), statuses("c1", "/api/a", "/api/b"))
                assertEquals(listOf(200, 429), statuses("c2", "/api/c", "/api/a"))
            }
        }
        Files.delete(rules)
    }
}
