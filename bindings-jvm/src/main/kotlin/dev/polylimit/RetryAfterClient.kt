package dev.polylimit

import java.net.http.HttpClient
import java.net.http.HttpResponse
import java.util.concurrent.ThreadLocalRandom

/**
 * Sends a request through a `java.net.http.HttpClient` and again after each
 * retried response's `Retry-After` (429 and 503 by default; a status other
 * than 429 only for an idempotent method, GET, HEAD, OPTIONS, PUT, DELETE,
 * unless [RetryPolicy.retryNonIdempotent]), as Python's
 * `polylimit.client`, Node's `polylimit/client` and Go's `client.RetryTransport`
 * do: whole seconds or an HTTP-date, plus up to `jitter` of that wait (never
 * earlier than the server asked). It returns the last response when it has no
 * readable Retry-After (no guessing), when Retry-After is over `maxWaitMs`,
 * after `maxRetries` retries, or when the wait would end past `budgetMs` after
 * the first attempt. The arithmetic is the core's ([retryWait]); this class
 * only sends and waits. An interrupt during the wait throws
 * `InterruptedException`, as `HttpClient.send` does.
 *
 * `clock`, `sleep` and `random` are for tests (defaults: the wall clock,
 * `Thread.sleep`, a uniform draw in [0, 1)).
 */
class RetryAfterClient @JvmOverloads constructor(
    private val client: HttpClient,
    private val policy: RetryPolicy = RetryPolicy(),
    private val clock: () -> Long = System::currentTimeMillis,
    private val sleep: (Long) -> Unit = { ms -> Thread.sleep(ms) },
    private val random: () -> Double = { ThreadLocalRandom.current().nextDouble() },
) {
    /** [HttpClient.send], again after each retried response's Retry-After. */
    fun <T> send(request: java.net.http.HttpRequest, handler: HttpResponse.BodyHandler<T>): HttpResponse<T> {
        val started = clock()
        var retries = 0
        while (true) {
            val response = client.send(request, handler)
            val now = clock()
            val retryAfter = response.headers().firstValue("retry-after").orElse(null)
            val wait = retryWait(policy, request.method(), response.statusCode(), retryAfter, retries, now - started, now, random())
                ?: return response
            (response.body() as? AutoCloseable)?.close()
            sleep(wait)
            retries++
        }
    }
}
