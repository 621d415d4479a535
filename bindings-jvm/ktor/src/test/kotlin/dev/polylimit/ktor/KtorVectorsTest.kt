package dev.polylimit.ktor

import dev.polylimit.Limiter
import dev.polylimit.testkit.RedisServer
import dev.polylimit.testkit.Vectors
import io.ktor.client.request.header
import io.ktor.client.request.request
import io.ktor.client.statement.HttpResponse
import io.ktor.client.statement.bodyAsText
import io.ktor.http.HttpHeaders
import io.ktor.http.HttpMethod
import io.ktor.http.HttpStatusCode
import io.ktor.server.application.ApplicationCall
import io.ktor.server.application.createApplicationPlugin
import io.ktor.server.application.install
import io.ktor.server.response.respondText
import io.ktor.server.routing.route
import io.ktor.server.routing.routing
import io.ktor.server.testing.testApplication
import java.util.concurrent.atomic.AtomicLong
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.selects.select
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.fail

/**
 * The HTTP conformance vectors (tests/conformance/http) through the Ktor
 * plugin in a Ktor test application, on memory and on a real redis-server:
 * each case's route templates are the app's routes (Ktor's spelling), so the
 * route the plugin passes is the one Ktor's routing resolves; the peer, user,
 * API key, key, cost and clock come from the plugin's hooks; a handler answers
 * the step's `complete` status, fails (no response), or waits for its `of`
 * step. What the client sees (status, headers, body) and the delay the plugin
 * waited must be the vector's. Peeks are the limiter's, not the plugin's: skipped.
 */
class KtorVectorsTest {
    companion object {
        lateinit var redis: RedisServer

        @JvmStatic
        @BeforeAll
        fun startRedis() {
            redis = RedisServer()
        }

        @JvmStatic
        @AfterAll
        fun stopRedis() = redis.close()

        val prefixes = AtomicLong()

        /** A vector's template in Ktor's spelling: `:id`, `{id:int}` → `{id}`; a method prefix dropped. */
        fun ktorTemplate(route: String): String = route.substringAfter(' ')
            .replace(Regex(":([A-Za-z_][A-Za-z0-9_]*)(\\([^)]*\\))?\\??")) { "{${it.groupValues[1]}}" }
            .replace(Regex("\\{([A-Za-z_][A-Za-z0-9_]*):[^}]*\\}")) { "{${it.groupValues[1]}}" }
    }

    /** The request target a client sends (an absolute-form target reaches the router as its path). */
    private fun target(path: String): String {
        val p = path.substringBefore('#')
        val scheme = p.indexOf("://")
        return if (scheme < 0) p else p.substring(scheme + 3).let { rest -> rest.substring(rest.indexOf('/').takeIf { it >= 0 } ?: rest.length) }.ifEmpty { "/" }
    }

    @Test
    fun memory() = play("memory")

    @Test
    fun redis() = play(redis.url())

    private fun play(store: String) {
        val failures = mutableListOf<String>()
        var played = 0
        for (case in Vectors.cases("http")) {
            val prefix = "ktor-${ProcessHandle.current().pid()}-${prefixes.incrementAndGet()}"
            Limiter(case.options(store, prefix)).use { played += playCase(case, it, failures) }
        }
        assertTrue(played > 300, "played $played")
        if (failures.isNotEmpty()) fail("${failures.size} mismatches on $store:\n" + failures.joinToString("\n"))
    }

    /** What a handler saw of one request. */
    private class Reached(val headers: List<List<String>>)

    private fun playCase(case: Vectors.Case, limiter: Limiter, failures: MutableList<String>): Int {
        var played = 0
        var current: Vectors.Request? = null
        val waited = AtomicLong()
        val answers = HashMap<Int, CompletableDeferred<Int?>>()
        val reached = HashMap<Int, CompletableDeferred<Reached>>()
        testApplication {
            install(Polylimit) {
                this.limiter = limiter
                user = { current?.user() }
                apiKey = { current?.apiKey() }
                key = { current?.key() }
                cost = { current?.cost() }
                peer = { current?.peer() }
                clock = { current?.nowMs() ?: System.currentTimeMillis() }
                wait = { waited.addAndGet(it) }
                caseInsensitive = case.steps().any { it.request()?.caseInsensitive() == true }
                ignoreTrailingSlash = case.steps().any { it.request()?.ignoreTrailingSlash() == true }
            }
            // The handler: tells the test what it saw, then answers the step's status, or fails (no response).
            suspend fun answer(call: ApplicationCall) {
                val i = call.request.headers["x-vector-step"]!!.toInt()
                reached[i]!!.complete(Reached(call.response.headers.allValues().entries().flatMap { (k, vs) ->
                    vs.map { listOf(k, it) }
                }))
                val status = answers[i]!!.await() ?: error("the handler failed")
                // respondText carries the status in its content (as apps answer): the plugin must read it there.
                call.respondText("", status = HttpStatusCode.fromValue(status))
            }
            // A request the vector gives no route: answered outside routing (installed after Polylimit, so after it).
            install(createApplicationPlugin("Unrouted") {
                onCall { call -> if (current?.route() == null && !call.response.isSent) answer(call) }
            })
            routing {
                val templates = case.steps().mapNotNull { it.request()?.route() }.map(::ktorTemplate).toSet()
                for (template in templates) {
                    route(template) {
                        handle { answer(call) }
                    }
                }
            }
            startApplication()
            coroutineScope {
            val calls = HashMap<Int, kotlinx.coroutines.Deferred<HttpResponse>>()
            for ((i, step) in case.steps().withIndex()) {
                val where = "$case step $i"
                val of = step.of()
                if (of != null) {
                    if (case.steps()[of].hasComplete()) continue // a second completion: no framework ends a response twice
                    val answer = answers[of]
                    if (answer == null || !reached[of]!!.isCompleted) {
                        failures += "$where: request $of did not reach its handler"
                        continue
                    }
                    answer.complete(step.complete())
                    withTimeout(10_000) { calls[of]!!.await() }
                    continue
                }
                if (step.peek()) continue
                val r = step.request()
                current = r
                waited.set(0)
                answers[i] = CompletableDeferred<Int?>().also { if (step.hasComplete()) it.complete(step.complete()) }
                reached[i] = CompletableDeferred()
                val call = async {
                    client.request(target(r.path())) {
                        method = HttpMethod.parse(r.method())
                        header("x-vector-step", "$i")
                        for (h in r.headers()) header(h.key, h.value)
                    }
                }
                calls[i] = call
                // A request no step completes is still in its handler when the case ends (as in the core's runner).
                val handled = withTimeout(10_000) {
                    select {
                        reached[i]!!.onAwait { it }
                        call.onAwait { null }
                    }
                }
                if (step.hasComplete()) {
                    withTimeout(10_000) { call.await() } // answered: the response is out before the next step
                }
                played++
                val want = step.expect()
                val have: List<Any?>
                if (handled != null) {
                    have = listOf(null, handled.headers, null, waited.get())
                } else {
                    val response = call.await()
                    val headers = response.headers.entries().filter { (k, _) ->
                        !k.equals(HttpHeaders.ContentType, true) && !k.equals(HttpHeaders.ContentLength, true)
                    }.flatMap { (k, vs) -> vs.map { listOf(k, it) } }
                    val status = response.status.value
                    have = listOf(status, headers, response.bodyAsText(), waited.get())
                }
                val expect = listOf(want.status(), want.headers(), want.body(), want.delayMs())
                if (have != expect) failures += "$where: expected $expect, got $have"
            }
            // The handlers still waiting: the client leaves.
            answers.values.forEach { it.complete(null) }
            }
        }
        return played
    }
}
