package dev.polylimit

import com.google.gson.JsonElement
import com.google.gson.JsonParser
import com.sun.net.httpserver.HttpServer
import java.io.File
import java.net.InetSocketAddress
import java.net.URI
import java.net.http.HttpClient
import java.net.http.HttpResponse
import java.util.concurrent.atomic.AtomicInteger
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.fail

/**
 * The client helper: $POLYLIMIT_VECTORS/client/retry_after.json (which the
 * Python, JavaScript and Go helpers play too) through `parseRetryAfter` and
 * `retryWait`, then `RetryAfterClient` against a real HTTP server on loopback
 * with an injected clock and sleep (no waiting).
 */
class ClientTest {
    private val vectors = File(ConformanceTest.vectorsDir(), "client/retry_after.json")

    private fun text(e: JsonElement?): String? = e?.takeUnless { it.isJsonNull }?.asString

    @Test
    fun `the shared vectors`() {
        val v = JsonParser.parseString(vectors.readText()).asJsonObject
        ConformanceTest.fields(vectors.name, v, setOf("now_ms", "parse", "decide"), setOf("now_ms", "parse", "decide"))
        val now = v["now_ms"].asLong
        val failures = mutableListOf<String>()
        var played = 0
        for (c in v.getAsJsonArray("parse").map { it.asJsonObject }) {
            ConformanceTest.fields("parse", c, setOf("value", "wait_ms", "form"), setOf("value", "wait_ms"))
            val got = parseRetryAfter(text(c["value"]), now)
            val want = c["wait_ms"].takeUnless { it.isJsonNull }?.asLong
            if (got != want) failures += "parse ${c["value"]}: got $got, want $want"
            played++
        }
        val decideRequired = setOf("name", "options", "status", "retry_after", "retries", "elapsed_ms", "random", "wait_ms")
        for (c in v.getAsJsonArray("decide").map { it.asJsonObject }) {
            ConformanceTest.fields("decide", c, decideRequired + "method", decideRequired)
            val o = c.getAsJsonObject("options")
            val optionFields = setOf("max_retries", "max_wait_ms", "budget_ms", "jitter", "statuses")
            ConformanceTest.fields("decide ${c["name"]} options", o, optionFields + "retry_non_idempotent", optionFields)
            val policy = RetryPolicy(
                maxRetries = o["max_retries"].asInt, maxWaitMs = o["max_wait_ms"].asLong, budgetMs = o["budget_ms"].asLong,
                jitter = o["jitter"].asDouble, statuses = o.getAsJsonArray("statuses").map { it.asInt },
                retryNonIdempotent = o["retry_non_idempotent"]?.asBoolean ?: false,
            )
            val got = retryWait(
                policy, c["method"]?.asString ?: "GET", c["status"].asInt, text(c["retry_after"]), c["retries"].asInt, c["elapsed_ms"].asLong, now,
                c["random"].asDouble,
            )
            val want = c["wait_ms"].takeUnless { it.isJsonNull }?.asDouble
            if (got?.toDouble() != want) failures += "${c["name"]}: got $got, want $want"
            played++
        }
        assertEquals(true, played > 20, "$played vectors")
        if (failures.isNotEmpty()) fail(failures.joinToString("\n"))
    }

    @Test
    fun `a bad policy field throws Config naming it`() {
        val e = assertThrows(PolylimitException.Config::class.java) { retryWait(RetryPolicy(jitter = 2.0), "GET", 429, "1", 0, 0, 0, 0.5) }
        assertEquals("jitter", e.field)
        val max = assertThrows(PolylimitException.Config::class.java) { retryWait(RetryPolicy(maxWaitMs = -1), "GET", 429, "1", 0, 0, 0, 0.5) }
        assertEquals("maxWaitMs", max.field)
    }

    @Test
    fun `refused options give the core's error under the Kotlin names (client retry_options json)`() {
        val v = JsonParser.parseReader(File(ConformanceTest.vectorsDir(), "client/retry_options.json").reader()).asJsonObject
        val camel = v.getAsJsonArray("invalid").map { it.asJsonObject }.filter { it["naming"].asString == "camel" }
        assertEquals(true, camel.size >= 5, "${camel.size} camel cases")
        for (c in camel) {
            val o = c.getAsJsonObject("options")
            ConformanceTest.fields("invalid options", o, setOf("maxRetries", "maxWaitMs", "budgetMs", "jitter", "statuses"), emptySet())
            val policy = RetryPolicy(
                maxRetries = o["maxRetries"]?.asInt ?: 3, maxWaitMs = o["maxWaitMs"]?.asLong ?: 60000,
                budgetMs = o["budgetMs"]?.asLong ?: 120000, jitter = o["jitter"]?.asDouble ?: 0.1,
                statuses = o["statuses"]?.asJsonArray?.map { it.asInt },
            )
            val e = assertThrows(PolylimitException.Config::class.java) { retryWait(policy, "GET", 429, "1", 0, 0, 0, 0.5) }
            assertEquals(c["error"].asString, e.text, "$o")
        }
    }

    @Test
    fun `RetryAfterClient retries a 429 after its Retry-After against a real server`() {
        val hits = AtomicInteger()
        val server = HttpServer.create(InetSocketAddress("127.0.0.1", 0), 0)
        server.createContext("/") { exchange ->
            val n = hits.incrementAndGet()
            val (status, body) = if (n <= 2) 429 to "slow down" else 200 to "ok"
            if (status == 429) exchange.responseHeaders.add("Retry-After", "2")
            exchange.sendResponseHeaders(status, body.length.toLong())
            exchange.responseBody.use { it.write(body.toByteArray()) }
        }
        server.start()
        try {
            var now = 1_700_000_000_000L
            val slept = mutableListOf<Long>()
            val client = RetryAfterClient(
                HttpClient.newHttpClient(), RetryPolicy(),
                clock = { now }, sleep = { ms -> slept += ms; now += ms }, random = { 0.5 },
            )
            val request = java.net.http.HttpRequest.newBuilder(URI("http://127.0.0.1:${server.address.port}/x")).build()
            val response = client.send(request, HttpResponse.BodyHandlers.ofString())
            assertEquals(200 to "ok", response.statusCode() to response.body())
            assertEquals(listOf(2100L, 2100L), slept) // 2 s plus half of 10 % jitter, twice
            assertEquals(3, hits.get())
            // Out of retries: the last 429 comes back.
            hits.set(-10)
            val refused = RetryAfterClient(HttpClient.newHttpClient(), RetryPolicy(maxRetries = 1), clock = { now }, sleep = { now += it })
                .send(request, HttpResponse.BodyHandlers.ofString())
            assertEquals(429, refused.statusCode())
            assertEquals(-8, hits.get())
        } finally {
            server.stop(0)
        }
    }
}
