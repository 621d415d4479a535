package dev.polylimit

import java.util.concurrent.ExecutionException
import kotlinx.coroutines.DelicateCoroutinesApi
import kotlinx.coroutines.future.future
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** `peek`, `reset`, `complete`, `peekRequest` and the suspend/future `checkRequest` on the fast path (FastCalls.kt). */
class FastCallsTest {
    private val gcra = """{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 2}}"""
    private val slots = """{"policy": {"algorithm": "concurrency", "limit": 1}}"""
    private val rules = """{"rules": {"policies": {"p": {"rate": "2/h", "burst": 2},
        "c": {"algorithm": "concurrency", "limit": 1}},
        "rules": [{"match": {"path": "/api/*"}, "key": ["ip"], "policy": "p"},
                  {"match": {"path": "/slow"}, "key": ["ip"], "policy": "c"}]}}"""

    @Test
    fun `fast peek, reset and complete answer as the generated calls, which they reach only on an error`() = runBlocking {
        Limiter(gcra).use { limiter: Limiter ->
            val before = GeneratedCalls.count()
            limiter.check("k", null, 0)
            val peeks = listOf(limiter.peek("k", null, 0), limiter.peekAsync("k", null, 0), limiter.peekFuture("k", null, 0).get())
            assertEquals(List(3) { limiter.generatedPeek("k", null, 0) }, peeks)
            assertEquals(before + 3, GeneratedCalls.count()) // the three generatedPeek above
            limiter.check("k", null, 0)
            limiter.reset("k")
            assertEquals(1L, limiter.check("k", null, 0).remaining, "reset forgot the key")
            limiter.resetAsync("k")
            assertEquals(1L, limiter.check("k", null, 0).remaining)
            limiter.resetFuture("k").get()
            assertEquals(1L, limiter.check("k", null, 0).remaining)
            assertEquals(before + 3, GeneratedCalls.count(), "peek or reset took the generated path")
            // Errors go to the generated call, which throws what it always throws.
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.generatedPeek("k", 0, 0) }
            val fast = assertThrows(PolylimitException.Config::class.java) { limiter.peek("k", 0, 0) }
            assertEquals(slow.message, fast.message)
            assertThrows(PolylimitException.Config::class.java) { runBlocking { limiter.peekAsync("k", 0, 0) } }
            val future = assertThrows(ExecutionException::class.java) { limiter.peekFuture("k", 0, 0).get() }
            assertTrue(future.cause is PolylimitException.Config, "${future.cause}")
            assertEquals(before + 7, GeneratedCalls.count())
        }
        Limiter(rules).use { limiter: Limiter ->
            val request = HttpRequest(path = "/slow", peer = "203.0.113.9", nowMs = 0)
            val before = GeneratedCalls.count()
            // The memory store answers on the calling thread: the futures come back completed.
            val done = listOf(
                limiter.checkRequestFuture(request.copy(path = "/api/x")), limiter.peekFuture("k", null, 0),
                limiter.completeFuture(limiter.checkRequest(request).completion!!, 200),
            )
            // (resetFuture is the generated resetAsync: the C ABI's reset only blocks.)
            assertEquals(listOf(true, true, true), done.map { it.isDone })
            val first = limiter.checkRequestAsync(request)
            assertEquals(null, first.status)
            assertEquals(429, limiter.checkRequestFuture(request).get().status, "the slot is held")
            assertEquals(429, limiter.peekRequest(request).status)
            limiter.complete(first.completion!!, 200)
            val second = limiter.checkRequestFuture(request).get()
            assertEquals(null, second.status, "complete gave the slot back")
            limiter.completeAsync(second.completion!!, null)
            val third = limiter.checkRequestAsync(request)
            assertEquals(null, third.status, "completeAsync gave the slot back")
            limiter.completeFuture(third.completion!!, 500).get()
            assertEquals(null, limiter.peekRequest(request).status)
            // 0: a gRPC call's OK (an HTTP request's "no response"), on the direct path too.
            limiter.complete(limiter.checkRequest(request).completion!!, 0)
            assertEquals(null, limiter.peekRequest(request).status, "complete(token, 0) gave the slot back")
            assertEquals(before, GeneratedCalls.count(), "a standard call took the generated path")
            // A malformed token: the direct call's own error, the generated call's exception, never a
            // second call; a status that is not one: the generated call (it validates), counted.
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.generatedComplete("nope", 200) }
            val fast = assertThrows(PolylimitException.Config::class.java) { limiter.complete("nope", 200) }
            assertEquals(slow.message, fast.message)
            val status = assertThrows(PolylimitException.Config::class.java) { limiter.complete("nope", 70000) }
            assertEquals("status", status.field)
            assertThrows(PolylimitException.Config::class.java) { runBlocking { limiter.completeAsync("nope", null) } }
            val future = assertThrows(ExecutionException::class.java) { limiter.completeFuture("nope").get() }
            assertTrue(future.cause is PolylimitException.Config, "${future.cause}")
            assertThrows(PolylimitException.Config::class.java) { runBlocking { limiter.checkRequestAsync(request.copy(cost = 0)) } }
            assertEquals(before + 3, GeneratedCalls.count(), "generatedComplete, status 70000, cost 0")
        }
        Limiter(slots).use { limiter: Limiter ->
            val before = GeneratedCalls.count()
            val (first, lease) = limiter.acquire("k", null, 0)
            assertEquals(Decision(true, 1, 0, 0, null, 0, "store"), first.copy(resetAfterMs = 0))
            val (denied, none) = limiter.acquireAsync("k", null, 0)
            assertEquals(false, denied.allowed)
            assertEquals(null, none)
            assertEquals(1L, lease!!.release(0))
            assertEquals(0L, lease.release(0), "a second release gives back nothing")
            val (again, second) = limiter.acquireAsync("k", null, 0)
            assertTrue(again.allowed, "the slot came back")
            assertEquals(1L, second!!.releaseAsync(0))
            assertTrue(second.released())
            assertEquals(before, GeneratedCalls.count(), "acquire or release took the generated path")
            val slow = assertThrows(PolylimitException.Config::class.java) { limiter.native.acquire("k", 0, 0) }
            val fast = assertThrows(PolylimitException.Config::class.java) { limiter.acquire("k", 0, 0) }
            assertEquals(slow.message, fast.message)
            assertEquals(before, GeneratedCalls.count(), "acquire is a generated call, never counted")
        }
        Limiter(rules).use { fast: Limiter ->
            Limiter(rules).use { slow: Limiter ->
                val request = HttpRequest(path = "/api/x", peer = "203.0.113.9", nowMs = FIXED_NOW_MS)
                // Byte-identical: status, headers (names, values, order), body, decisions, token.
                for (i in 0 until 3) {
                    assertEquals(slow.generatedPeekRequest(request), fast.peekRequest(request), "peek $i")
                    assertEquals(slow.generatedCheckRequestAsync(request), fast.checkRequestAsync(request), "check $i")
                }
            }
        }
    }

    @OptIn(DelicateCoroutinesApi::class)
    @Test
    fun `on Redis, many pending fast calls each complete once with their own result`() {
        RedisServer().use { redis ->
            val prefix = "jvm-fastcalls-${ProcessHandle.current().pid()}"
            val options = """{"rules": {"policies": {"p": {"rate": "2/h", "burst": 2}},
                "rules": [{"match": {"path": "/api/*"}, "key": ["user"], "policy": "p"}]},
                "store": "${redis.url}", "timeout": "60s", "prefix": "$prefix"}"""
            val slotOptions = """{"policy": {"algorithm": "concurrency", "limit": 1}, "store": "${redis.url}",
                "timeout": "60s", "prefix": "$prefix-c"}"""
            Limiter(options).use { limiter: Limiter ->
                Limiter(slotOptions).use { slots: Limiter ->
                    val warm = HttpRequest(path = "/api/x", user = "warm", nowMs = 0)
                    assertEquals(null, limiter.checkRequest(warm).status) // connected before the stop
                    slots.acquire("warm", null, 0).lease!!.release(0)
                    val before = GeneratedCalls.count()
                    val pid = redis.pid()
                    assertEquals(0, ProcessBuilder("kill", "-STOP", "$pid").start().waitFor())
                    val (outcomes, peeks, acquires) = try {
                        val outcomes = (0 until 200).map { limiter.checkRequestFuture(HttpRequest(path = "/api/x", user = "u${it % 10}", nowMs = 1000)) }
                        val peeks = (0 until 10).map { limiter.peekFuture("p$it", null, 1000) }
                        val acquires = (0 until 40).map { i -> kotlinx.coroutines.GlobalScope.future { slots.acquireAsync("s${i % 10}", null, 1000) } }
                        assertTrue((outcomes + peeks + acquires).none { it.isDone }, "a call completed with the store stopped")
                        Triple(outcomes, peeks, acquires)
                    } finally {
                        assertEquals(0, ProcessBuilder("kill", "-CONT", "$pid").start().waitFor())
                    }
                    val got = outcomes.map { it.get(60, java.util.concurrent.TimeUnit.SECONDS) }
                    assertEquals(20, got.count { it.status == null }, "2 of each user's 20 requests allowed")
                    for (user in 0 until 10) {
                        val mine = got.filterIndexed { i, _ -> i % 10 == user }
                        assertEquals(2, mine.count { it.status == null }, "user u$user")
                        assertTrue(mine.all { o -> o.decisions.all { it.decision.source == "store" } })
                    }
                    assertTrue(peeks.all { it.get(60, java.util.concurrent.TimeUnit.SECONDS).source == "store" })
                    val acquired = acquires.map { it.get(60, java.util.concurrent.TimeUnit.SECONDS) }
                    assertEquals(10, acquired.count { it.lease != null }, "one slot per key")
                    val released = runBlocking { acquired.mapNotNull { it.lease }.map { it.releaseAsync(2000) } }
                    assertEquals(List(10) { 1L }, released)
                    assertEquals(before, GeneratedCalls.count(), "a pending call fell back to the generated path")
                }
            }
        }
    }
}
