package dev.polylimit

import java.lang.management.ManagementFactory
import java.util.concurrent.CompletableFuture
import kotlinx.coroutines.future.future
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Tag
import org.junit.jupiter.api.Test

/**
 * A measurement, not a test: process CPU per call (every thread: the
 * runtime's, GC, JNA's cleaner) of each fast call beside the generated call it
 * replaces, alternating. It prints and asserts nothing, so it is tagged
 * `bench`, which `make test` excludes; `make jvm-call-cost` runs it.
 * POLYLIMIT_CALL_COST_ROUNDS sets the rounds (default 3);
 * POLYLIMIT_CALL_COST_REDIS_ONLY skips the memory-store forms.
 */
@Tag("bench")
class CallCostBench {
    private val rules = """{"rules": {"policies": {"p": {"rate": "2/h", "burst": 2},
        "c": {"algorithm": "concurrency", "limit": 1}},
        "rules": [{"match": {"path": "/api/*"}, "key": ["ip"], "policy": "p"},
                  {"match": {"path": "/slow"}, "key": ["ip"], "policy": "c"}]}}"""

    @Test
    fun `cpu per call`() = runBlocking {
        val rounds = System.getenv("POLYLIMIT_CALL_COST_ROUNDS")?.toInt() ?: 3
        val redisOnly = System.getenv("POLYLIMIT_CALL_COST_REDIS_ONLY") != null
        val n = 20_000
        val bean = ManagementFactory.getOperatingSystemMXBean() as com.sun.management.OperatingSystemMXBean
        Limiter(rules).use { limiter: Limiter ->
            val request = HttpRequest(path = "/api/x", peer = "203.0.113.9", headers = List(8) { Header("x-h$it", "v$it") }, nowMs = 0)
            val slot = HttpRequest(path = "/slow", peer = "203.0.113.9", nowMs = 0)
            val token = limiter.checkRequest(slot).completion!!
            val calls = linkedMapOf<String, suspend (Int) -> Unit>(
                "peek fast" to { i -> limiter.peek("k$i", null, 0) },
                "peek generated" to { i -> limiter.generatedPeek("k$i", null, 0) },
                "reset fast" to { i -> limiter.reset("k$i") },
                "reset generated" to { i -> limiter.generatedReset("k$i") },
                "complete fast" to { _ -> limiter.complete(token, 200) },
                "complete generated" to { _ -> limiter.generatedComplete(token, 200) },
                "peekRequest fast" to { _ -> limiter.peekRequest(request) },
                "peekRequest generated" to { _ -> limiter.generatedPeekRequest(request) },
                "checkRequest fast" to { _ -> limiter.checkRequest(request) },
                "checkRequest generated" to { _ -> limiter.generatedCheckRequest(request) },
                "checkRequestAsync fast" to { _ -> limiter.checkRequestAsync(request) },
                "checkRequestAsync generated" to { _ -> limiter.generatedCheckRequestAsync(request) },
                "checkRequestFuture fast" to { _ -> limiter.checkRequestFuture(request).get() },
            )
            val slotLimiter = Limiter("""{"policy": {"algorithm": "concurrency", "limit": 100000}}""")
            calls["acquire+release fast"] = { i -> slotLimiter.acquire("k$i", null, 0).lease!!.release(0) }
            calls["acquire+release generated"] = { i -> slotLimiter.native.acquire("k$i", null, 0).lease!!.release(0) }
            repeat(if (redisOnly) 0 else rounds) { round ->
                for ((name, call) in calls) {
                    System.gc() // the previous form's garbage is collected before, not charged to this one
                    val t0 = bean.processCpuTime
                    for (i in 0 until n) call(i % 1000)
                    val ns = (bean.processCpuTime - t0) / n
                    println("cpu per call, round $round: $name ${ns} ns")
                }
            }
            slotLimiter.close()
        }
        // On a real redis-server, one call in flight: the fast call completes through the native callback.
        RedisServer().use { redis ->
            val options = """{"rules": {"policies": {"p": {"rate": "1000000/s", "burst": 1000000},
                "c": {"algorithm": "concurrency", "limit": 100000}},
                "rules": [{"match": {"path": "/api/*"}, "key": ["ip"], "policy": "p"},
                          {"match": {"path": "/slow"}, "key": ["ip"], "policy": "c"}]},
                "store": "${redis.url}", "timeout": "10s"}"""
            val keys = Limiter("""{"policy": {"rate": "1000000/s", "burst": 1000000}, "store": "${redis.url}", "timeout": "10s"}""")
            Limiter(options).use { limiter: Limiter ->
                val request = HttpRequest(path = "/api/x", peer = "203.0.113.9", headers = List(8) { Header("x-h$it", "v$it") })
                val slot = HttpRequest(path = "/slow", peer = "203.0.113.9")
                val calls = linkedMapOf<String, suspend (Int) -> Unit>(
                    "redis checkRequestAsync generated" to { _ -> limiter.generatedCheckRequestAsync(request) },
                    "redis checkRequestAsync fast" to { _ -> limiter.checkRequestAsync(request) },
                    "redis checkRequest+complete generated" to { _ ->
                        limiter.generatedComplete(limiter.checkRequest(slot).completion!!, 200)
                    },
                    "redis checkRequest+complete fast" to { _ -> limiter.complete(limiter.checkRequest(slot).completion!!, 200) },
                    "redis peekAsync generated" to { i -> keys.generatedPeekAsync("k$i", null, null) },
                    "redis peekAsync fast" to { i -> keys.peekAsync("k$i", null, null) },
                    "redis checkAsync generated" to { i -> keys.generatedCheckAsync("k$i", null, null) },
                    "redis checkAsync fast" to { i -> keys.checkAsync("k$i", null, null) },
                )
                repeat(rounds) { round ->
                    for ((name, call) in calls) {
                        System.gc() // the previous form's garbage is collected before, not charged to this one
                        val t0 = bean.processCpuTime
                        val w0 = System.nanoTime()
                        for (i in 0 until n / 4) call(i % 1000)
                        val ns = (bean.processCpuTime - t0) / (n / 4)
                        val wall = (System.nanoTime() - w0) / (n / 4)
                        println("cpu per call, round $round: $name ${ns} ns (wall ${wall} ns)")
                    }
                }
                // 64 in flight: the futures' throughput and process CPU per call.
                val futures = linkedMapOf<String, (Int) -> CompletableFuture<*>>(
                    "redis checkRequestFuture generated" to { _ -> scope.future { limiter.generatedCheckRequestAsync(request) } },
                    "redis checkRequestFuture fast" to { _ -> limiter.checkRequestFuture(request) },
                    "redis peekFuture generated" to { i -> scope.future { keys.generatedPeekAsync("k$i", null, null) } },
                    "redis peekFuture fast" to { i -> keys.peekFuture("k$i", null, null) },
                    "redis checkFuture generated" to { i -> keys.generatedCheckFuture("k$i", null, null) },
                    "redis checkFuture fast" to { i -> keys.checkFuture("k$i", null, null) },
                )
                repeat(rounds) { round ->
                    for ((name, call) in futures) {
                        System.gc()
                        val inFlight = java.util.concurrent.Semaphore(64)
                        val count = n
                        val t0 = bean.processCpuTime
                        val w0 = System.nanoTime()
                        for (i in 0 until count) {
                            inFlight.acquire()
                            call(i % 1000).whenComplete { _, _ -> inFlight.release() }
                        }
                        inFlight.acquire(64)
                        val ns = (bean.processCpuTime - t0) / count
                        val perSecond = count * 1_000_000_000L / (System.nanoTime() - w0)
                        println("cpu per call, round $round, 64 in flight: $name ${ns} ns, $perSecond calls/s")
                    }
                }
            }
            keys.close()
        }
    }
}
