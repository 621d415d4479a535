package dev.polylimit

import com.google.gson.JsonObject
import java.util.concurrent.CountDownLatch
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.fail

/**
 * Adaptive limits from the JVM: $POLYLIMIT_VECTORS/adaptive/ on the memory
 * store and a real redis-server, with the alerts each step expects delivered
 * to `onAnomaly` (waited for delivery by delivery, never by sleeping), and the
 * listener's guarantees: off the request path, exceptions counted.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class AdaptiveTest {
    private lateinit var redis: RedisServer
    private val prefixes = AtomicInteger()

    @BeforeAll
    fun startRedis() {
        redis = RedisServer()
    }

    @AfterAll
    fun stopRedis() {
        redis.close()
    }

    /** The alerts a listener received, in order, taken as they arrive. */
    private class Alerts : AnomalyListener {
        val queue = LinkedBlockingQueue<AnomalyEvent>()

        override fun onAnomaly(event: AnomalyEvent) {
            queue.put(event)
        }

        /** The next [n] alerts, each waited for (at most 5 s); fewer if they do not come. */
        fun take(n: Int): List<AnomalyEvent> = buildList {
            repeat(n) { add(queue.poll(5, TimeUnit.SECONDS) ?: return@buildList) }
        }

        /** What has arrived and was not taken. */
        fun rest(): List<AnomalyEvent> = buildList { queue.drainTo(this) }
    }

    @TestFactory
    fun adaptiveVectors(): List<DynamicTest> = listOf("memory" to "memory", "redis" to redis.url).flatMap { (name, store) ->
        ConformanceTest.files("adaptive").map { file ->
            DynamicTest.dynamicTest("$name: adaptive/${file.name}") { play(file, store) }
        }
    }

    private fun play(file: java.io.File, store: String) {
        val failures = mutableListOf<String>()
        var alerts = 0
        for (case in ConformanceTest.cases(file)) {
            val where = "${file.name}: ${case["name"].asString}"
            ConformanceTest.fields(where, case, setOf("name", "description", "policy", "steps"), setOf("name", "policy", "steps"))
            val options = JsonObject().apply {
                add("policy", case["policy"])
                addProperty("store", store)
                addProperty("timeout", "10s") // decisions, not latency, are under test
                addProperty("prefix", "jvm-adaptive-${ProcessHandle.current().pid()}-${prefixes.incrementAndGet()}")
            }
            val received = Alerts()
            Limiter(options.toString()).use { limiter: Limiter ->
                limiter.onAnomaly(received)
                for ((i, element) in case.getAsJsonArray("steps").withIndex()) {
                    val step = element.asJsonObject
                    ConformanceTest.fields("$where step $i", step, STEP, setOf("now_ms", "expect"))
                    val expect = step.getAsJsonObject("expect")
                    ConformanceTest.fields("$where step $i expect", expect, EXPECT, setOf("allowed"))
                    val every = step["every_ms"]?.asLong ?: 0L
                    for (n in 0 until (step["times"]?.asInt ?: 1)) {
                        val nowMs = step["now_ms"].asLong + n * every
                        val key = step["key"]?.asString ?: "k"
                        val cost = step["cost"]?.asLong ?: 1L
                        val d = if (step["peek"]?.asBoolean == true) limiter.peek(key, cost, nowMs) else limiter.check(key, cost, nowMs)
                        val want = mutableMapOf<String, Any?>("allowed" to expect["allowed"].asBoolean)
                        expect["remaining"]?.let { want["remaining"] = it.asLong }
                        expect["retry_after_ms"]?.let { want["retry_after_ms"] = if (it.isJsonNull) null else it.asLong }
                        expect["source"]?.let { want["source"] = it.asString }
                        val have = mapOf(
                            "allowed" to d.allowed, "remaining" to d.remaining,
                            "retry_after_ms" to d.retryAfterMs, "source" to d.source,
                        ).filterKeys { it in want }
                        if (have != want) failures += "$where step $i at $nowMs: expected $want, got $have"
                    }
                    // The alerts this step expects, each waited for; one no step expects shows
                    // in a later step's (or in what is left at the end) and fails there.
                    val wanted = expect.getAsJsonArray("events")?.map { it.asJsonObject }.orEmpty()
                    val got = received.take(wanted.size) + received.rest()
                    alerts += got.size
                    val shown = got.map {
                        mapOf(
                            "kind" to it.event.removePrefix("polylimit."), "key" to it.key, "rate" to it.rate,
                            "baseline" to it.baseline, "limited_to" to it.limitedTo,
                        )
                    }
                    val expected = wanted.map { e ->
                        ConformanceTest.fields("$where step $i event", e, EVENT, EVENT)
                        mapOf(
                            "kind" to e["kind"].asString, "key" to e["key"].asString, "rate" to e["rate"].asDouble,
                            "baseline" to e["baseline"].asDouble, "limited_to" to e["limited_to"].asDouble,
                        )
                    }
                    if (shown != expected) failures += "$where step $i: alerts $shown, expected $expected"
                    if (got.any { it.policy != "default" || it.atMs < 0 }) failures += "$where step $i: alerts $got"
                }
                val counted = Regex("polylimit_anomaly_callback_errors_total (\\d+)").find(limiter.metricsText())?.groupValues?.get(1)
                if (counted != "0") failures += "$where: $counted failed deliveries"
            }
            val late = received.rest()
            if (late.isNotEmpty()) failures += "$where: alerts no step expected: $late"
        }
        assertTrue(alerts > 0, "${file.name}: no alerts delivered")
        if (failures.isNotEmpty()) fail("${failures.size} mismatches on $store:\n" + failures.joinToString("\n"))
    }

    /** 1000/s with windows of 1 s over 4 s, factor 3: warm at 2 a window, 4 at once at 4000 ms is anomalous. */
    private val policy = """{"policy": {"rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s", "alert_keys": "raw"}}}"""

    /** Warms `k`, then jumps: the sources of the six checks at 4000 ms; then calm at 7000 ms (recovered). */
    private fun incident(limiter: Limiter): List<String> {
        for (t in 0L until 4000L step 500L) assertTrue(limiter.check("k", nowMs = t).allowed, "denied while warming up")
        val sources = (0 until 6).map { limiter.check("k", nowMs = 4000).source }
        assertTrue(limiter.check("k", nowMs = 7000).allowed)
        return sources
    }

    @Test
    fun `an exception in the listener is counted and never reaches the request`() {
        val second = CountDownLatch(1)
        val calls = AtomicInteger()
        Limiter(policy).use { limiter: Limiter ->
            limiter.onAnomaly(object : AnomalyListener {
                override fun onAnomaly(event: AnomalyEvent) {
                    if (calls.incrementAndGet() == 1) throw IllegalStateException("alerting is down")
                    second.countDown()
                }
            })
            assertEquals(listOf("store", "store", "store", "store", "adaptive", "adaptive"), incident(limiter))
            // One alert thread, in order: the second alert comes after the first one's exception was counted.
            assertTrue(second.await(5, TimeUnit.SECONDS), "the recovery alert was not delivered")
            assertTrue(limiter.metricsText().contains("polylimit_anomaly_callback_errors_total 1\n"), limiter.metricsText())
        }
    }

    @Test
    fun `alerts are delivered off the request path, in order`() {
        val release = CountDownLatch(1)
        val entered = CountDownLatch(1)
        val seen = LinkedBlockingQueue<AnomalyEvent>()
        Limiter(policy).use { limiter: Limiter ->
            limiter.onAnomaly(object : AnomalyListener {
                override fun onAnomaly(event: AnomalyEvent) {
                    entered.countDown()
                    release.await() // a listener stuck on its alerting backend
                    seen.put(event)
                }
            })
            // The checks answer while the listener is blocked on the first alert.
            assertEquals(listOf("store", "store", "store", "store", "adaptive", "adaptive"), incident(limiter))
            assertTrue(entered.await(5, TimeUnit.SECONDS), "the anomaly alert was not delivered")
            assertEquals(0, seen.size)
            release.countDown()
            val first = seen.poll(5, TimeUnit.SECONDS)!!
            val second = seen.poll(5, TimeUnit.SECONDS)!!
            assertEquals(listOf("polylimit.anomalous", "polylimit.recovered"), listOf(first.event, second.event))
            assertEquals(listOf("limit", "restore"), listOf(first.action, second.action))
            assertEquals(listOf("k", "k"), listOf(first.key, second.key))
            assertEquals(4000L, first.atMs)
            assertTrue(first.rate > 3 * first.baseline && first.limitedTo > 0 && second.limitedTo == 0.0, "$first")
            assertTrue(limiter.metricsText().contains("polylimit_anomalies_total{policy=\"default\"} 1\n"))
            limiter.onAnomaly(null) // removes it
        }
    }

    companion object {
        val STEP = setOf("now_ms", "key", "cost", "times", "every_ms", "peek", "expect")
        val EXPECT = setOf("allowed", "remaining", "retry_after_ms", "source", "events")
        val EVENT = setOf("kind", "key", "rate", "baseline", "limited_to")
    }
}
