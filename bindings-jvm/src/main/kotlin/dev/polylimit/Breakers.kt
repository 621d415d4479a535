@file:JvmName("Breakers")

package dev.polylimit

/**
 * Runs [block] when the breaker lets it through and reports how it went (it
 * returned: success; it threw: failure). [fallback] answers instead, given
 * null when the breaker is open (nothing was called) or what [block] threw.
 */
fun <T> CircuitBreaker.call(block: () -> T, fallback: (Exception?) -> T): T {
    val permit = acquire() ?: return fallback(null)
    permit.use {
        val result = try {
            block()
        } catch (e: Exception) {
            it.failure()
            return fallback(e)
        }
        it.success()
        return result
    }
}
