package dev.polylimit

import java.lang.management.ManagementFactory
import java.util.concurrent.CountDownLatch
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.asCoroutineDispatcher
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertFalse
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/**
 * The suspend and CompletableFuture forms hold no thread while the store
 * answers: with redis-server stopped (SIGSTOP), 1,000 suspend checks started
 * from a 4-thread pool and 1,000 CompletableFuture checks are all in flight at
 * once, far fewer threads alive than checks, none decided; SIGCONT, and every
 * one is decided by the store.
 */
class AsyncTest {
    private fun signal(pid: Long, sig: String) {
        assertEquals(0, ProcessBuilder("kill", "-$sig", "$pid").start().waitFor())
    }

    @Test
    fun `2,000 concurrent checks in flight on a handful of threads`() {
        RedisServer().use { redis ->
            val options = """{"policy": {"algorithm": "token_bucket", "rate": "1000/s", "burst": 5000},
                "store": "${redis.url}", "timeout": "60s", "prefix": "jvm-async-${ProcessHandle.current().pid()}"}"""
            Limiter(options).use { limiter: Limiter ->
                assertEquals("store", limiter.check("warm", nowMs = 0).source) // connected before the stop
                val pool = Executors.newFixedThreadPool(4)
                val redisPid = redis.pid()
                signal(redisPid, "STOP")
                try {
                    val n = 1000
                    val started = CountDownLatch(n)
                    val suspended = CoroutineScope(pool.asCoroutineDispatcher()).let { scope ->
                        (0 until n).map { i ->
                            scope.async {
                                started.countDown()
                                limiter.checkAsync("s$i", nowMs = 0)
                            }
                        }
                    }
                    // A blocking call would hold the 4 pool threads: the other 996 would never start.
                    assertTrue(started.await(30, TimeUnit.SECONDS), "only ${n - started.count} of $n checks started")
                    val futures = (0 until n).map { i -> limiter.checkFuture("f$i", null, 0L) }
                    val threads = ManagementFactory.getThreadMXBean().threadCount
                    println("AsyncTest: ${2 * n} checks in flight on $threads JVM threads")
                    assertTrue(threads < 100, "$threads threads alive for ${2 * n} checks in flight")
                    assertFalse(suspended.any { it.isCompleted }, "a check was decided with the store stopped")
                    assertFalse(futures.any { it.isDone }, "a future completed with the store stopped")
                    signal(redisPid, "CONT")
                    val decisions = runBlocking {
                        withTimeout(60_000) { suspended.awaitAll() }
                    } + futures.map { it.get(60, TimeUnit.SECONDS) }
                    assertEquals(2 * n, decisions.size)
                    assertEquals(null, decisions.firstOrNull { !(it.allowed && it.source == "store") })
                } finally {
                    signal(redisPid, "CONT")
                    pool.shutdownNow()
                }
            }
        }
    }
}
