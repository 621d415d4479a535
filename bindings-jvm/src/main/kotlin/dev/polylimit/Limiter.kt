package dev.polylimit

import java.util.concurrent.CompletableFuture
import java.util.concurrent.CompletionException
import java.util.function.BiConsumer
import java.util.concurrent.atomic.LongAdder
import kotlinx.coroutines.future.await
import kotlinx.coroutines.future.future

/** How often a limiter asks the core whether a `watch` swapped its rules (ns). */
private const val GENERATION_CHECK_NS = 5_000_000L

/** How many header names a limiter remembers the core's [Limiter.readsHeader] answer for. */
private const val READS_HEADER_NAMES = 1024

/**
 * A rate limiter (memory or Redis store), safe to share between threads.
 *
 * The facade over the generated [NativeLimiter]: `check`, `peek`, `reset`,
 * `complete`, `checkRequest` and `peekRequest` (and their suspend and future
 * forms) go through the direct C calls (Direct.kt); an argument the direct
 * call cannot carry (a cost or nowMs out of range, a string that is not valid
 * UTF-16, a status that is no HTTP status) and every other call go through
 * the generated uniffi call, which validates and throws what it throws.
 * `close()` closes the core limiter and frees the C handle: every later call
 * goes to the generated one, which throws [PolylimitException.Closed] (the
 * generated object itself is freed when collected, by uniffi's cleaner).
 */
class Limiter private constructor(internal val native: NativeLimiter) : NativeLimiterInterface by native, AutoCloseable {
    /**
     * A limiter from an options object as JSON text, under the rules-file
     * names: `{"policy": {"rate": "10/s"}, "store": "redis://127.0.0.1:6379"}`.
     */
    @Throws(PolylimitException::class)
    constructor(optionsJson: String) : this(NativeLimiter(optionsJson))

    private val direct = DirectHandle(native.directHandle().toLong())

    // A facade dropped without close() frees its C handle when collected, as
    // uniffi's cleaner frees the NativeLimiter's.
    private val cleanable = directCleaner.register(this, direct.closer())

    /** The limiter's factories from a rules document (Java: `Limiter.Companion.fromRulesFile(path)`). */
    companion object {
        /** A limiter from a rules file's text (YAML or JSON). */
        @Throws(PolylimitException::class)
        fun fromRules(text: String): Limiter = Limiter(NativeLimiter.fromRules(text))

        /** A limiter from a rules file (YAML or JSON). */
        @Throws(PolylimitException::class)
        fun fromRulesFile(path: String): Limiter = Limiter(NativeLimiter.fromRulesFile(path))

        /**
         * The name of the attribute a handler reports its request's actual
         * cost under, in every JVM middleware (a servlet request's or a
         * WebFlux exchange's attribute; Ktor's and gRPC's keys are named so too).
         */
        const val COST_ATTRIBUTE = "polylimit.cost"

        /**
         * A reported actual cost as a whole number: a [Long], [Int], [Short],
         * [Byte] or a [java.math.BigInteger] that fits a Long; null for
         * anything else (a String, a Double: not a cost).
         */
        @JvmStatic
        fun reportedCost(value: Any?): Long? = when (value) {
            is Long -> value
            is Int -> value.toLong()
            is Short -> value.toLong()
            is Byte -> value.toLong()
            is java.math.BigInteger -> if (value.bitLength() < 64) value.toLong() else null
            else -> null
        }
    }

    /**
     * The middlewares' one settlement of a request after its response:
     * completes [token] with [status] and, when the handler reported one
     * ([reported], the value of the middleware's [COST_ATTRIBUTE]), its
     * actual cost ([completeCost]). A reported value that is not a whole
     * number ([reportedCost]), or one the core refuses (negative: the core
     * completes without it), is told to [warn] and the request completed without it, so its token never stays
     * open; a completion that fails is told to [warn] too. The future never
     * fails, and no thread waits for the store.
     */
    fun settleFuture(token: String, status: Int?, reported: Any?, warn: BiConsumer<String, Throwable?>): CompletableFuture<Unit> =
        settling(token, status, reported, warn, blocking = false)

    /** [settleFuture] for a middleware whose thread waits for it (the servlet filter). */
    fun settle(token: String, status: Int?, reported: Any?, warn: BiConsumer<String, Throwable?>) {
        settling(token, status, reported, warn, blocking = true).join0()
    }

    private fun settling(
        token: String, status: Int?, reported: Any?, warn: BiConsumer<String, Throwable?>, blocking: Boolean,
    ): CompletableFuture<Unit> {
        val plain = {
            (startComplete(token, status, blocking = blocking) ?: scope.future { generatedCompleteAsync(token, status) })
                .exceptionally { e -> warn.accept("polylimit: cannot settle the request", unwrapped(e)) }
        }
        if (reported == null) {
            return plain()
        }
        val cost = reportedCost(reported)
        if (cost == null) {
            warn.accept(
                "polylimit: $COST_ATTRIBUTE is not a whole number: $reported (${reported.javaClass.name}); the reservation stands",
                null,
            )
            return plain()
        }
        val costed = startComplete(token, status, cost, null, blocking)
            ?: scope.future { generatedCompleteCostAsync(token, status, cost, null) }
        // A cost the core refuses is an error after the core completed the request without it.
        return costed.exceptionally { e ->
            warn.accept("polylimit: cannot settle the request with $COST_ATTRIBUTE=$reported", unwrapped(e))
        }
    }

    /** Closes the limiter as [shutdown] does, and frees the C handle of the direct calls. */
    override fun close() {
        native.shutdown()
        cleanable.clean()
    }

    @Throws(PolylimitException::class)
    override fun check(key: String, cost: Long?, nowMs: Long?): Decision =
        startDecision(key, cost, nowMs, peek = false, blocking = true)?.join0() ?: generatedCheck(key, cost, nowMs)

    override suspend fun checkAsync(key: String, cost: Long?, nowMs: Long?): Decision =
        startDecision(key, cost, nowMs, peek = false)?.await() ?: generatedCheckAsync(key, cost, nowMs)

    @Throws(PolylimitException::class)
    override fun peek(key: String, cost: Long?, nowMs: Long?): Decision =
        startDecision(key, cost, nowMs, peek = true, blocking = true)?.join0() ?: generatedPeek(key, cost, nowMs)

    override suspend fun peekAsync(key: String, cost: Long?, nowMs: Long?): Decision =
        startDecision(key, cost, nowMs, peek = true)?.await() ?: generatedPeekAsync(key, cost, nowMs)

    @Throws(PolylimitException::class)
    override fun reset(key: String) {
        val bytes = utf8(key)
        val err = LongArray(1)
        val code = bytes?.let { b -> direct.use { CAbi.polylimit_limiter_reset(it, b, b.size.toLong(), err) } }
        when (code) {
            null -> generatedReset(key)
            OK -> Unit
            else -> throw errorAt(err[0], free = true)
        }
    }

    @Throws(PolylimitException::class)
    override fun checkRequest(request: HttpRequest): Outcome =
        startOutcome(request, peek = false, blocking = true)?.join0() ?: generatedCheckRequest(request)

    override suspend fun checkRequestAsync(request: HttpRequest): Outcome =
        startOutcome(request, peek = false)?.await() ?: generatedCheckRequestAsync(request)

    @Throws(PolylimitException::class)
    override fun peekRequest(request: HttpRequest): Outcome =
        startOutcome(request, peek = true, blocking = true)?.join0() ?: generatedPeekRequest(request)

    @Throws(PolylimitException::class)
    override fun complete(token: String, status: Int?) {
        startComplete(token, status, blocking = true)?.join0() ?: generatedComplete(token, status)
    }

    override suspend fun completeAsync(token: String, status: Int?) {
        startComplete(token, status)?.await() ?: generatedCompleteAsync(token, status)
    }

    /**
     * [complete] reporting the request's actual [cost], learned from the
     * response (an LLM call's tokens): the difference from its reservation is
     * given back (smaller) or charged whatever the limit (larger), capped at
     * the rules' `max_cost`; [nowMs] is the clock of that charge (tests).
     */
    @Throws(PolylimitException::class)
    override fun completeCost(token: String, status: Int?, cost: Long, nowMs: Long?) {
        startComplete(token, status, cost, nowMs, blocking = true)?.join0() ?: generatedCompleteCost(token, status, cost, nowMs)
    }

    /** [completeCost] as a suspend function. */
    override suspend fun completeCostAsync(token: String, status: Int?, cost: Long, nowMs: Long?) {
        startComplete(token, status, cost, nowMs)?.await() ?: generatedCompleteCostAsync(token, status, cost, nowMs)
    }

    /**
     * The middleware's call: [checkRequest] of a [PackedRequest], the outcome
     * without its per-policy decisions (`decisions` is empty). The same
     * outcome and exceptions as `checkRequest(request.toHttpRequest())`.
     */
    @Throws(PolylimitException::class)
    fun checkPacked(request: PackedRequest): Outcome {
        val scratch = Scratch.get()
        val packer = request.pack(scratch)
        return packer?.let { decidePacked(scratch, it, request.cost, request.nowMs, request.flags()) }
            ?: generatedCheckRequest(request.generatedForm()).copy(decisions = emptyList())
    }

    /**
     * [checkPacked] for a non-blocking middleware (WebFlux, Ktor, gRPC):
     * no thread waits for the store. The outcome comes back completed when
     * the store answered in the call (memory), else when the store answers.
     */
    fun checkPackedFuture(request: PackedRequest): CompletableFuture<Outcome> {
        val scratch = Scratch.get()
        val packer = request.pack(scratch)
        return packer?.let { startPacked(scratch, it, request.cost, request.nowMs, request.flags(), blocking = false) }
            ?: scope.future { generatedCheckRequestAsync(request.generatedForm()).copy(decisions = emptyList()) }
    }

    /** [checkPackedFuture] as a suspend call (the Ktor plugin's). */
    suspend fun checkPackedAsync(request: PackedRequest): Outcome = checkPackedFuture(request).await()

    /**
     * Whether deciding a request may read its header `name` (any case): a middleware packs only those.
     * The core's answer, remembered per name (at most [READS_HEADER_NAMES] names: they are the clients')
     * until the next [reload].
     */
    fun readsHeader(name: String): Boolean {
        val known = knownRules()
        return known.headers[name] ?: askReadsHeader(name).also {
            if (known.headers.size < READS_HEADER_NAMES) known.headers[name] = it
        }
    }

    private fun askReadsHeader(name: String): Boolean {
        val b = utf8(name) ?: return true
        return (direct.use { CAbi.polylimit_limiter_reads_header(it, b, b.size.toLong()) } ?: 1) != 0
    }

    /**
     * Whether deciding a request may read its route template (a rule matches
     * on `route`, or keys or tiers by it): a middleware finds the route only then.
     * Remembered until the next [reload].
     */
    fun readsRoute(): Boolean {
        val known = knownRules()
        return known.route ?: ((direct.use { CAbi.polylimit_limiter_reads_route(it) } ?: 1) != 0).also { known.route = it }
    }

    /**
     * What the facade remembers of the rules in force ([readsHeader],
     * [readsRoute]). A reload replaces it whole, after the core's swap: an
     * answer the core gave for the old rules, stored while the reload runs,
     * lands in the replaced one and is never read.
     */
    private class KnownRules {
        val headers = java.util.concurrent.ConcurrentHashMap<String, Boolean>()
        @Volatile var route: Boolean? = null
    }

    @Volatile private var rules = KnownRules()

    /** The core's rules generation [rules] was filled under, and when to ask for it again (System.nanoTime). */
    @Volatile private var rulesGeneration = 0L
    @Volatile private var nextGenerationCheck = 0L

    /**
     * [rules], forgotten when the core swapped rules in by itself (the `watch`
     * option): the generation is asked at most every [GENERATION_CHECK_NS],
     * so a watched file's rules reach the middlewares' header and route
     * reads within that of the swap. [reload] forgets at once.
     */
    private fun knownRules(): KnownRules {
        val now = System.nanoTime()
        if (now - nextGenerationCheck >= 0) {
            nextGenerationCheck = now + GENERATION_CHECK_NS
            val generation = direct.use { CAbi.polylimit_limiter_rules_generation(it) }?.takeIf { it >= 0 } ?: rulesGeneration
            if (generation != rulesGeneration) {
                rulesGeneration = generation
                rules = KnownRules()
            }
        }
        return rules
    }

    /** What the facade remembers of the rules is asked again after a reload. */
    private fun forgetRules() {
        rules = KnownRules()
    }

    /**
     * Reads the rules file (or options) again and swaps the rules at once
     * (docs/features/reload.md); a bad file throws [PolylimitException.Config]
     * naming the field and keeps the old rules. A middleware holding this
     * limiter enforces the new rules from its next request.
     */
    @Throws(PolylimitException::class)
    override fun reload() {
        native.reload()
        forgetRules()
    }

    /** [reload] as a suspend function. */
    @Throws(PolylimitException::class)
    override suspend fun reloadAsync() {
        native.reloadAsync()
        forgetRules()
    }

    // The direct forms: a future (completed when the store answered at once),
    // or null when the direct call cannot carry the arguments or the facade is
    // closed (the generated call then throws what it throws). `blocking`: only
    // the caller's own thread waits for the future, so that thread waits for
    // the store itself (Scratch.finish: no bridge thread in between).

    internal fun startDecision(key: String, cost: Long?, nowMs: Long?, peek: Boolean, blocking: Boolean = false): CompletableFuture<Decision>? {
        if ((cost != null && cost <= 0) || (nowMs != null && nowMs < 0)) {
            return null
        }
        val s = Scratch.get()
        val n = s.text(key)
        if (n < 0) {
            return null
        }
        val a = s.address
        val code = direct.use {
            if (peek) CAbi.polylimit_limiter_try_peek(
                it, a + Scratch.INPUT_AT, n.toLong(), cost ?: 1, nowMs ?: -1, a + Scratch.DECISION_AT,
                a + Scratch.PENDING_AT, a + Scratch.ERROR_AT,
            )
            else CAbi.polylimit_limiter_try_check(
                it, a + Scratch.INPUT_AT, n.toLong(), cost ?: 1, nowMs ?: -1, a + Scratch.DECISION_AT,
                a + Scratch.PENDING_AT, a + Scratch.ERROR_AT,
            )
        } ?: return null
        return when (code) {
            OK -> CompletableFuture.completedFuture(s.decision())
            PENDING -> s.finish(blocking) { it as Decision }
            else -> CompletableFuture.failedFuture(errorAt(s.error, free = true))
        }
    }

    internal fun startOutcome(request: HttpRequest, peek: Boolean, blocking: Boolean = false): CompletableFuture<Outcome>? {
        val r = request
        val scratch = Scratch.get()
        val packer = Packer(scratch)
        if (!packer.request(r.method, r.path, r.route, r.peer, r.user, r.apiKey, r.key, r.headers)) {
            return null
        }
        val flags = WITH_DECISIONS or flags(r.caseInsensitive, r.ignoreTrailingSlash) or (if (peek) PEEK else 0)
        return startPacked(scratch, packer, r.cost, r.nowMs, flags, blocking)
    }

    private fun startPacked(
        s: Scratch, packer: Packer, cost: Long?, nowMs: Long?, flags: Int, blocking: Boolean,
    ): CompletableFuture<Outcome>? = when (callPacked(s, packer, cost, nowMs, flags) ?: return null) {
        OK -> CompletableFuture.completedFuture(s.outcome())
        PENDING -> s.finish(blocking) { it as Outcome }
        else -> CompletableFuture.failedFuture(errorAt(s.error, free = true))
    }

    /**
     * [startPacked] for a caller that blocks: an outcome decided in the call
     * (the memory store) is returned as is, with no future around it, and one
     * that waits for the store is waited for on the calling thread.
     */
    private fun decidePacked(s: Scratch, packer: Packer, cost: Long?, nowMs: Long?, flags: Int): Outcome? =
        when (callPacked(s, packer, cost, nowMs, flags) ?: return null) {
            OK -> s.outcome()
            PENDING -> s.await { it as Outcome }
            else -> throw errorAt(s.error, free = true)
        }

    /** The direct call's code (OK, PENDING or an error's), or null when it cannot be made. */
    private fun callPacked(s: Scratch, packer: Packer, cost: Long?, nowMs: Long?, flags: Int): Int? {
        if ((cost != null && cost <= 0) || (nowMs != null && nowMs < 0)) {
            return null
        }
        val all = flags or (if (nowMs != null) HAS_NOW_MS else 0)
        val a = s.address
        return direct.use {
            CAbi.polylimit_limiter_try_check_request(
                it, packer.address, packer.size.toLong(), cost ?: 0, nowMs ?: 0, all, a + Scratch.OUTPUT_AT,
                Scratch.OUTPUT_CAP.toLong(), a + Scratch.OUT_LEN_AT, a + Scratch.OWNED_AT, a + Scratch.PENDING_AT,
                a + Scratch.ERROR_AT,
            )
        }
    }

    /**
     * Settles `token` through the C call: `status` null is no status (the C
     * call's -1), any other as given (a gRPC call's OK is 0); `cost` the
     * actual cost when the handler reported one. A status that is no u16
     * goes to the generated call, whose error is the core's.
     */
    internal fun startComplete(
        token: String, status: Int?, cost: Long? = null, nowMs: Long? = null, blocking: Boolean = false,
    ): CompletableFuture<Unit>? {
        if (status != null && status !in 0..0xffff) {
            return null
        }
        val s = Scratch.get()
        val n = s.text(token)
        if (n < 0) {
            return null
        }
        val a = s.address
        val code = direct.use {
            CAbi.polylimit_limiter_try_complete_call_cost(
                it, a + Scratch.INPUT_AT, n.toLong(), status ?: -1, flag(cost != null), cost ?: 0,
                flag(nowMs != null), nowMs ?: 0, a + Scratch.PENDING_AT, a + Scratch.ERROR_AT,
            )
        } ?: return null
        return when (code) {
            OK -> CompletableFuture.completedFuture(Unit)
            PENDING -> s.finish(blocking) { }
            else -> CompletableFuture.failedFuture(errorAt(s.error, free = true))
        }
    }

    private fun flag(set: Boolean): Byte = if (set) 1 else 0

    // The generated calls, counted: the routing tests assert that the
    // standard calls do not take them.

    internal fun generatedCheck(key: String, cost: Long?, nowMs: Long?) = GeneratedCalls.record { native.check(key, cost, nowMs) }
    internal suspend fun generatedCheckAsync(key: String, cost: Long?, nowMs: Long?): Decision {
        GeneratedCalls.record {}
        return native.checkAsync(key, cost, nowMs)
    }
    internal fun generatedPeek(key: String, cost: Long?, nowMs: Long?) = GeneratedCalls.record { native.peek(key, cost, nowMs) }
    internal suspend fun generatedPeekAsync(key: String, cost: Long?, nowMs: Long?): Decision {
        GeneratedCalls.record {}
        return native.peekAsync(key, cost, nowMs)
    }
    internal fun generatedReset(key: String) = GeneratedCalls.record { native.reset(key) }
    internal fun generatedCheckRequest(request: HttpRequest) = GeneratedCalls.record { native.checkRequest(request) }
    internal suspend fun generatedCheckRequestAsync(request: HttpRequest): Outcome {
        GeneratedCalls.record {}
        return native.checkRequestAsync(request)
    }
    internal fun generatedPeekRequest(request: HttpRequest) = GeneratedCalls.record { native.peekRequest(request) }
    internal fun generatedComplete(token: String, status: Int?) = GeneratedCalls.record { native.complete(token, status) }
    internal suspend fun generatedCompleteAsync(token: String, status: Int?) {
        GeneratedCalls.record {}
        native.completeAsync(token, status)
    }
    internal fun generatedCompleteCost(token: String, status: Int?, cost: Long, nowMs: Long?) =
        GeneratedCalls.record { native.completeCost(token, status, cost, nowMs) }
    internal suspend fun generatedCompleteCostAsync(token: String, status: Int?, cost: Long, nowMs: Long?) {
        GeneratedCalls.record {}
        native.completeCostAsync(token, status, cost, nowMs)
    }
}

/** A future's failure as it was thrown (not the [CompletionException] a dependent stage wraps it in). */
private fun unwrapped(e: Throwable): Throwable = if (e is CompletionException && e.cause != null) e.cause!! else e

private const val PEEK = 16
private const val HAS_NOW_MS = 8

private val directCleaner = java.lang.ref.Cleaner.create()

/** The calls the facade routed to the generated uniffi call (tests read it). */
object GeneratedCalls {
    private val calls = LongAdder()

    /** How many generated-path calls were made so far. */
    @JvmStatic
    fun count(): Long = calls.sum()

    internal inline fun <T> record(block: () -> T): T {
        increment()
        return block()
    }

    @PublishedApi
    internal fun increment() = calls.increment()
}
