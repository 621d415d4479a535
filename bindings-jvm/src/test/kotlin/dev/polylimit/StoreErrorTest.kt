package dev.polylimit

import java.util.concurrent.ExecutionException
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test

/** A key holding someone else's data is a `Store` error naming that store key, in every call form. */
class StoreErrorTest {
    @Test
    fun `a key of the wrong type is a Store error with its key, other keys are unaffected`() {
        RedisServer().use { redis ->
            val storeKey = "polylimit:token_bucket:default:p1000:{wrongtype}"
            assertEquals("+OK", redis.command("SET $storeKey hello"))
            Limiter("""{"policy": {"rate": "10/s"}, "store": "${redis.url}", "timeout": "10s"}""").use { limiter: Limiter ->
                val blocking = assertThrows(PolylimitException.Store::class.java) { limiter.check("wrongtype", null, null) }
                assertEquals(storeKey, blocking.key)
                val suspended = assertThrows(PolylimitException.Store::class.java) {
                    runBlocking { limiter.checkAsync("wrongtype", null, null) }
                }
                assertEquals(storeKey, suspended.key)
                val future = assertThrows(ExecutionException::class.java) { limiter.checkFuture("wrongtype", null, null).get() }
                assertTrue(future.cause is PolylimitException.Store, "${future.cause}")
                assertEquals(storeKey, (future.cause as PolylimitException.Store).key)
                assertTrue(limiter.check("other", null, null).allowed)
            }
        }
    }
}
