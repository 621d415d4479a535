package dev.polylimit

import com.google.gson.JsonArray
import com.google.gson.JsonElement
import com.google.gson.JsonNull
import com.google.gson.JsonObject
import com.google.gson.JsonParser
import com.google.gson.JsonPrimitive
import java.io.File
import java.util.concurrent.atomic.AtomicInteger
import kotlinx.coroutines.runBlocking
import org.junit.jupiter.api.AfterAll
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.BeforeAll
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.TestInstance
import org.junit.jupiter.api.fail

/**
 * Every vector of $POLYLIMIT_VECTORS (default tests/conformance) and of its
 * http/, cost/, limits/ and concurrency/ directories through the public API, on the memory store and on a real
 * redis-server started for the class. Unknown fields and unreadable files
 * fail; nothing is skipped. The decision vectors go through the blocking
 * `check`/`checkAsync`/`checkFuture` and `peek`/`peekAsync`/`peekFuture` (in turn; each
 * must take the fast native call: no generated-path call is counted), and again through
 * the generated calls they fall back to; the HTTP vectors through `checkRequest` +
 * `complete` (blocking), `checkPacked` + `complete` (the Spring filter's), the suspend
 * `checkRequestAsync` + `completeAsync` and `checkRequestFuture` + `completeFuture`
 * (`peekRequest` blocking), each on the fast path; concurrency vectors through
 * `acquire`/`acquireAsync` and the lease's `release`/`releaseAsync`, on the fast path too.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ConformanceTest {
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

    private fun stores() = listOf("memory" to "memory", "redis" to redis.url)

    private fun prefix(tag: String) = "jvm-$tag-${ProcessHandle.current().pid()}-${prefixes.incrementAndGet()}"

    @TestFactory
    fun decisionVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("").map { file -> DynamicTest.dynamicTest("$name: ${file.name}") { playDecisions(file, store) } }
    }

    /**
     * The same vectors through the uniffi-generated calls the standard ones
     * fall back to on an error (`generatedCheck`, `generatedCheckFuture`,
     * alternating): the same decisions.
     */
    @TestFactory
    fun generatedDecisionVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("").map { file ->
            DynamicTest.dynamicTest("generated $name: ${file.name}") { playDecisions(file, store, generated = true) }
        }
    }

    /** The cost vectors (tests/conformance/cost): completions with the actual cost (`completeCost`). */
    @TestFactory
    fun costVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("cost").map { file -> DynamicTest.dynamicTest("$name: cost/${file.name}") { playHttp(file, store, Http.BLOCKING) } }
    }

    /**
     * The limit vectors (tests/conformance/limits): HTTP vectors with steps that set, read or
     * remove a policy-wide limit (`setLimit`, `getLimit`, `removeLimit`) or set a per-key
     * override (`setOverride`) between the requests.
     */
    @TestFactory
    fun limitsVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("limits").map { file -> DynamicTest.dynamicTest("$name: limits/${file.name}") { playHttp(file, store, Http.BLOCKING) } }
    }

    @TestFactory
    fun httpVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("http").map { file -> DynamicTest.dynamicTest("$name: http/${file.name}") { playHttp(file, store, Http.ASYNC) } }
    }

    /** The HTTP vectors through the blocking `checkRequest` (the packed fast call; no generated call made). */
    @TestFactory
    fun httpVectorsBlocking(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("http").map { file ->
            DynamicTest.dynamicTest("blocking $name: http/${file.name}") { playHttp(file, store, Http.BLOCKING) }
        }
    }

    /** The HTTP vectors through `checkPacked`, the Spring filter's call (a [PackedRequest]; no generated call made). */
    @TestFactory
    fun httpVectorsPacked(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("http").map { file ->
            DynamicTest.dynamicTest("packed $name: http/${file.name}") { playHttp(file, store, Http.PACKED) }
        }
    }

    /** The HTTP vectors through `checkRequestFuture` / `completeFuture` (no generated call made). */
    @TestFactory
    fun httpVectorsFuture(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("http").map { file ->
            DynamicTest.dynamicTest("future $name: http/${file.name}") { playHttp(file, store, Http.FUTURE) }
        }
    }

    /** The HTTP vectors through `checkPackedFuture` (the non-blocking adapters' call) / `completeFuture`. */
    @TestFactory
    fun httpVectorsPackedFuture(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("http").map { file ->
            DynamicTest.dynamicTest("packed future $name: http/${file.name}") { playHttp(file, store, Http.PACKED_FUTURE) }
        }
    }

    enum class Http { ASYNC, FUTURE, BLOCKING, PACKED, PACKED_FUTURE }

    @TestFactory
    fun concurrencyVectors(): List<DynamicTest> = stores().flatMap { (name, store) ->
        files("concurrency").map { file ->
            DynamicTest.dynamicTest("$name: concurrency/${file.name}") { playConcurrency(file, store) }
        }
    }

    /**
     * Acquire steps through `acquire` and `acquireAsync` in turn; a release step releases the
     * lease of the step it names (`release` and `releaseAsync` in turn). Every one on the fast path.
     */
    private fun playConcurrency(file: File, store: String) = runBlocking {
        val failures = mutableListOf<String>()
        var steps = 0
        val generatedBefore = GeneratedCalls.count()
        for (case in cases(file)) {
            val where = "${file.name}: ${case["name"]}"
            fields(where, case, CASE, setOf("name", "policy", "steps"))
            val options = JsonObject().apply {
                add("policy", case["policy"])
                addProperty("store", store)
                addProperty("prefix", prefix("conc"))
                addProperty("timeout", "10s") // decisions, not latency, are under test
            }
            Limiter(options.toString()).use { limiter: Limiter ->
                val leases = mutableListOf<Lease?>()
                for ((i, element) in case.getAsJsonArray("steps").withIndex()) {
                    val step = element.asJsonObject
                    fields("$where step $i", step, CONCURRENCY_STEP, setOf("now_ms"))
                    steps++
                    val nowMs = step["now_ms"].asLong
                    val at = "$where step $i (now_ms $nowMs)"
                    if (step.has("release")) {
                        fields("$where step $i", step, setOf("now_ms", "release", "released"), setOf("release", "released"))
                        val j = step["release"].asInt
                        val lease = leases.getOrNull(j)
                        assertTrue(j < i && lease != null, "$at: `release` names an earlier allowed acquire")
                        val released = if (i % 2 == 0) lease!!.release(nowMs) else lease!!.releaseAsync(nowMs)
                        // `released`: a count, or true/false for one lease (as Python's int() reads it).
                        val expected = step["released"].asJsonPrimitive.let { if (it.isBoolean) (if (it.asBoolean) 1L else 0L) else it.asLong }
                        if (released != expected) failures += "$at: released $released, expected $expected"
                        leases += null
                        continue
                    }
                    val expect = step.getAsJsonObject("expect")
                    fields("$at expect", expect, setOf("allowed", "remaining", "reset_after_ms", "retry_after_ms", "limit"), EXPECT_REQUIRED)
                    val key = step["key"]?.asString ?: "k"
                    val cost = step["cost"]?.asLong ?: 1L
                    val (got, lease) = if (i % 2 == 0) limiter.acquire(key, cost, nowMs) else limiter.acquireAsync(key, cost, nowMs)
                    val want = mutableMapOf<String, Any?>(
                        "allowed" to expect["allowed"].asBoolean,
                        "remaining" to expect["remaining"].asLong,
                        "reset_after_ms" to expect["reset_after_ms"].asLong,
                        "retry_after_ms" to expect["retry_after_ms"].let { if (it.isJsonNull) null else it.asLong },
                        "delay_ms" to 0L,
                        "source" to "store",
                    )
                    expect["limit"]?.let { want["limit"] = it.asLong }
                    val have = mapOf(
                        "allowed" to got.allowed,
                        "remaining" to got.remaining,
                        "reset_after_ms" to got.resetAfterMs,
                        "retry_after_ms" to got.retryAfterMs,
                        "delay_ms" to got.delayMs,
                        "source" to got.source,
                        "limit" to got.limit,
                    ).filterKeys { it in want }
                    if (have != want) failures += "$at: expected $want, got $have"
                    if ((lease != null) != got.allowed) failures += "$at: lease $lease for $got"
                    leases += lease
                }
                if (!limiter.metricsText().contains("polylimit_store_errors_total 0\n")) {
                    failures += "$where: a store call failed"
                }
            }
        }
        assertTrue(steps > 0, "${file.name}: no steps played")
        if (failures.isNotEmpty()) fail("${failures.size} mismatches on $store:\n" + failures.joinToString("\n"))
        assertEquals(generatedBefore, GeneratedCalls.count(), "${file.name}: generated-path calls")
    }

    private fun playDecisions(file: File, store: String, generated: Boolean = false) = runBlocking {
        val failures = mutableListOf<String>()
        var steps = 0
        val generatedBefore = GeneratedCalls.count()
        for (case in cases(file)) {
            val where = "${file.name}: ${case["name"]}"
            fields(where, case, CASE, setOf("name", "policy", "steps"))
            val options = JsonObject().apply {
                add("policy", case["policy"])
                addProperty("store", store)
                addProperty("prefix", prefix("conf"))
                addProperty("timeout", "10s") // decisions, not latency, are under test
            }
            val stepList = case.getAsJsonArray("steps")
            assertTrue(stepList.size() > 0, "$where: no steps")
            Limiter(options.toString()).use { limiter: Limiter ->
                stepList.forEachIndexed { i, element ->
                    val step = element.asJsonObject
                    fields("$where step $i", step, STEP, setOf("now_ms", "expect"))
                    val expect = step.getAsJsonObject("expect")
                    fields("$where step $i expect", expect, EXPECT, EXPECT_REQUIRED)
                    val key = step["key"]?.asString ?: "k"
                    val cost = step["cost"]?.asLong ?: 1L
                    val nowMs = step["now_ms"].asLong
                    // A peek step: the decision a check would get, with nothing charged.
                    val got = if (step["peek"]?.asBoolean == true && generated) {
                        limiter.generatedPeek(key, cost, nowMs)
                    } else if (step["peek"]?.asBoolean == true) {
                        // The standard peeks, in turn: blocking, suspend, CompletableFuture.
                        when (i % 3) {
                            0 -> limiter.peek(key, cost, nowMs)
                            1 -> limiter.peekAsync(key, cost, nowMs)
                            else -> limiter.peekFuture(key, cost, nowMs).get()
                        }
                    } else if (generated && i % 2 == 0) {
                        limiter.generatedCheck(key, cost, nowMs)
                    } else if (generated) {
                        limiter.generatedCheckFuture(key, cost, nowMs).get()
                    } else {
                        // The standard calls, in turn: blocking, suspend, CompletableFuture.
                        when (i % 3) {
                            0 -> limiter.check(key, cost, nowMs)
                            1 -> limiter.checkAsync(key, cost, nowMs)
                            else -> limiter.checkFuture(key, cost, nowMs).get()
                        }
                    }
                    steps++
                    val want = mutableMapOf<String, Any?>(
                        "allowed" to expect["allowed"].asBoolean,
                        "remaining" to expect["remaining"].asLong,
                        "reset_after_ms" to expect["reset_after_ms"].asLong,
                        "retry_after_ms" to expect["retry_after_ms"].let { if (it.isJsonNull) null else it.asLong },
                        "delay_ms" to (expect["delay_ms"]?.asLong ?: 0L),
                    )
                    expect["limit"]?.let { want["limit"] = it.asLong }
                    expect["source"]?.let { want["source"] = it.asString }
                    val all = mapOf(
                        "allowed" to got.allowed,
                        "remaining" to got.remaining,
                        "reset_after_ms" to got.resetAfterMs,
                        "retry_after_ms" to got.retryAfterMs,
                        "delay_ms" to got.delayMs,
                        "limit" to got.limit,
                        "source" to got.source,
                    )
                    val have = all.filterKeys { it in want }
                    if (got.source != "store" && got.source != "penalty") {
                        failures += "$where step $i: decided by ${got.source}, not the store"
                    }
                    if (have != want) failures += "$where step $i (now_ms $nowMs): expected $want, got $have"
                }
            }
        }
        assertTrue(steps > 0, "${file.name}: no steps played")
        if (failures.isNotEmpty()) fail("${failures.size} mismatches on $store:\n" + failures.joinToString("\n"))
        if (!generated) {
            // The checks and peeks users call took the fast native path, every one.
            assertEquals(generatedBefore, GeneratedCalls.count(), "${file.name}: generated-path calls")
        }
    }

    private fun playHttp(file: File, store: String, mode: Http) = runBlocking {
        val failures = mutableListOf<String>()
        var played = 0
        val generatedBefore = GeneratedCalls.count()
        for (case in cases(file)) {
            val where = "${file.name}: ${case["name"]}"
            fields(where, case, HTTP_CASE, setOf("name", "rules", "requests"))
            val options = JsonObject().apply {
                add("rules", case["rules"])
                addProperty("store", store)
                addProperty("prefix", prefix("http"))
                addProperty("timeout", "10s") // decisions, not latency, are under test
            }
            val requests = case.getAsJsonArray("requests")
            assertTrue(requests.size() > 0, "$where: no requests")
            Limiter(options.toString()).use { limiter: Limiter ->
                val tokens = mutableListOf<String?>()
                for ((i, element) in requests.withIndex()) {
                    val step = element.asJsonObject
                    if (LIMIT_STEPS.keys.any(step::has)) {
                        tokens += null
                        played++
                        playLimitStep(limiter, "$where step $i", step)?.let { failures += it }
                        continue
                    }
                    if (step.has("of")) {
                        // The completion of an earlier request, now (what a middleware does after the response).
                        fields("$where step $i", step, HTTP_LATER, setOf("complete", "of"))
                        val token = tokens[step["of"].asInt]
                        tokens += null
                        if (token == null) {
                            failures += "$where step $i: request ${step["of"]} has no completion token"
                        } else if (step.has("actual_cost")) {
                            limiter.completeCost(token, status(step["complete"]), step["actual_cost"].asLong, step["at_ms"]?.asLong)
                        } else {
                            complete(limiter, mode, token, status(step["complete"]))
                        }
                        continue
                    }
                    fields("$where request $i", step, HTTP_STEP, setOf("request", "expect"))
                    val expect = step.getAsJsonObject("expect")
                    fields("$where request $i expect", expect, HTTP_EXPECT, setOf("status", "headers", "body"))
                    val request = request("$where request $i", step.getAsJsonObject("request"))
                    val outcome = if (step["peek"]?.asBoolean == true) {
                        limiter.peekRequest(request)
                    } else {
                        when (mode) {
                            Http.ASYNC -> limiter.checkRequestAsync(request)
                            Http.FUTURE -> limiter.checkRequestFuture(request).get()
                            Http.BLOCKING -> limiter.checkRequest(request)
                            Http.PACKED -> limiter.checkPacked(packed(request))
                            // The non-blocking adapters' call (WebFlux, Ktor, gRPC).
                            Http.PACKED_FUTURE -> limiter.checkPackedFuture(packed(request)).get()
                        }
                    }
                    played++
                    tokens += outcome.completion
                    if (step.has("complete")) {
                        val token = outcome.completion
                        if (token == null) {
                            failures += "$where request $i: no completion token"
                        } else if (step.has("actual_cost")) {
                            // cost/: the actual cost, at the completion's clock (default: the request's).
                            val at = step["at_ms"]?.asLong ?: step.getAsJsonObject("request")["now_ms"]?.asLong
                            limiter.completeCost(token, status(step["complete"]), step["actual_cost"].asLong, at)
                        } else {
                            complete(limiter, mode, token, status(step["complete"]))
                        }
                    }
                    val want = listOf(
                        expect["status"].let { if (it.isJsonNull) null else it.asInt },
                        expect.getAsJsonArray("headers").map { h -> h.asJsonArray.let { it[0].asString to it[1].asString } },
                        expect["body"].let { if (it.isJsonNull) null else it.asString },
                        expect["delay_ms"]?.asLong ?: 0L,
                    )
                    val have = listOf(
                        outcome.status,
                        outcome.headers.map { it.name to it.value },
                        outcome.body,
                        outcome.delayMs,
                    )
                    val fallback = outcome.decisions.filter { it.decision.source in FALLBACKS }
                    if (fallback.isNotEmpty()) failures += "$where request $i: decided by a fallback: $fallback"
                    if (have != want) failures += "$where request $i: expected $want, got $have"
                }
            }
        }
        assertTrue(played > 0, "${file.name}: no requests played")
        if (failures.isNotEmpty()) fail("${failures.size} mismatches on $store:\n" + failures.joinToString("\n"))
        // Every check, peek and completion took the fast native path (a completion with a cost
        // is a generated call).
        if (file.parentFile.name != "cost") {
            assertEquals(generatedBefore, GeneratedCalls.count(), "${file.name}: generated-path calls")
        }
    }

    /**
     * Plays a limits/ step (exactly one kind and its expectation, nothing else): a failure
     * text, or null when it returned what it expects (in the vectors' form).
     */
    private fun playLimitStep(limiter: Limiter, where: String, step: JsonObject): String? {
        val kinds = LIMIT_STEPS.keys.filter(step::has)
        assertEquals(1, kinds.size, "$where: step kinds $kinds")
        val kind = kinds.single()
        val (allowed, expectField) = LIMIT_STEPS.getValue(kind)
        fields(where, step, setOf(kind, expectField), setOf(kind, expectField))
        val args = step.getAsJsonObject(kind)
        fields("$where $kind", args, allowed, allowed intersect setOf("key", "rate"))
        fun text(name: String): String? = args[name]?.takeUnless { it.isJsonNull }?.asString
        fun long(name: String): Long? = args[name]?.takeUnless { it.isJsonNull }?.asLong
        val ttl = long("ttl_ms")?.let { "${it}ms" }
        fun limit(l: PolicyLimit?): JsonElement = l?.let {
            JsonObject().apply {
                addProperty("policy", it.policy)
                addProperty("rate", it.rate)
                addProperty("burst", it.burst)
                addProperty("limit", it.limit)
                addProperty("expires_at_ms", it.expiresAtMs)
            }
        } ?: JsonNull.INSTANCE
        val got: JsonElement = try {
            when (kind) {
                "set_limit" -> limit(limiter.setLimit(text("rate")!!, text("policy"), long("burst"), ttl, long("now_ms")))
                "get_limit" -> limit(limiter.getLimit(text("policy"))) // at the store's clock
                "remove_limit" -> JsonPrimitive(limiter.removeLimit(text("policy")))
                else -> limiter.setOverride(text("key")!!, text("rate")!!, text("policy"), long("burst"), ttl, long("now_ms")).let {
                    JsonObject().apply {
                        addProperty("policy", it.policy)
                        addProperty("key", it.key)
                        addProperty("rate", it.rate)
                        addProperty("burst", it.burst)
                        addProperty("limit", it.limit)
                        addProperty("expires_at_ms", it.expiresAtMs)
                    }
                }
            }
        } catch (e: PolylimitException) {
            return "$where: $kind: error $e"
        }
        val want = step[expectField]
        // Compared as parsed JSON (numbers by value): the vectors' form.
        val same = JsonParser.parseString(got.toString()) == JsonParser.parseString(want.toString())
        return if (same) null else "$where: $kind: expected $want, got $got"
    }

    /** A completion in the mode's form: the suspend, future or (as the Spring filter) blocking `complete`. */
    private suspend fun complete(limiter: Limiter, mode: Http, token: String, status: Int?) = when (mode) {
        Http.ASYNC -> limiter.completeAsync(token, status)
        Http.FUTURE -> limiter.completeFuture(token, status).get()
        Http.BLOCKING, Http.PACKED -> limiter.complete(token, status)
        Http.PACKED_FUTURE -> limiter.completeFuture(token, status).get()
    }

    /** The typed request as the Spring filter packs it. */
    private fun packed(r: HttpRequest): PackedRequest =
        PackedRequest(r.method, r.path, r.route, r.peer, r.user, r.apiKey, r.key).also { p ->
            r.headers.forEach { p.header(it.name, it.value) }
            p.cost = r.cost
            p.nowMs = r.nowMs
            p.caseInsensitive = r.caseInsensitive
            p.ignoreTrailingSlash = r.ignoreTrailingSlash
        }

    /** A completion's status: a number, or null for "no response". */
    private fun status(value: JsonElement): Int? = if (value.isJsonNull) null else value.asInt

    /** A vector's request object as the typed [HttpRequest]; unknown fields fail. */
    private fun request(where: String, obj: JsonObject): HttpRequest {
        fields(where, obj, REQUEST, emptySet())
        fun text(name: String): String? = obj[name]?.takeUnless { it.isJsonNull }?.asString
        val headers = when (val h = obj["headers"]) {
            null, is JsonNull -> emptyList()
            is JsonObject -> h.entrySet().map { (k, v) -> Header(k, v.asString) }
            is JsonArray -> h.map { pair -> pair.asJsonArray.let { Header(it[0].asString, it[1].asString) } }
            else -> fail("$where: headers $h is not an object or a list of pairs")
        }
        return HttpRequest(
            method = text("method") ?: "GET",
            path = text("path") ?: "/",
            route = text("route"),
            peer = text("peer"),
            headers = headers,
            user = text("user"),
            apiKey = text("api_key"),
            key = text("key"),
            cost = obj["cost"]?.takeUnless { it.isJsonNull }?.asLong,
            nowMs = obj["now_ms"]?.takeUnless { it.isJsonNull }?.asLong,
            caseInsensitive = obj["case_insensitive"]?.asBoolean ?: false,
            ignoreTrailingSlash = obj["ignore_trailing_slash"]?.asBoolean ?: false,
        )
    }

    companion object {
        val CASE = setOf("name", "description", "policy", "steps")
        val STEP = setOf("now_ms", "key", "cost", "peek", "expect")
        val EXPECT = setOf("allowed", "remaining", "reset_after_ms", "retry_after_ms", "limit", "delay_ms", "source")
        val EXPECT_REQUIRED = setOf("allowed", "remaining", "reset_after_ms", "retry_after_ms")
        val CONCURRENCY_STEP = setOf("now_ms", "key", "cost", "expect", "release", "released")
        val HTTP_CASE = setOf("name", "description", "rules", "requests")
        val HTTP_STEP = setOf("request", "peek", "expect", "complete", "actual_cost", "at_ms")

        // A step that completes an earlier request (`of`: its index) with a status.
        val HTTP_LATER = setOf("complete", "of", "actual_cost", "at_ms")
        val HTTP_EXPECT = setOf("status", "headers", "body", "delay_ms")

        // limits/: a step with no request, its arguments and the field of what it returns.
        val LIMIT_STEPS = mapOf(
            "set_limit" to (setOf("policy", "rate", "burst", "ttl_ms", "now_ms") to "expect_limit"),
            "get_limit" to (setOf("policy") to "expect_limit"),
            "remove_limit" to (setOf("policy") to "expect_removed"),
            "set_override" to (setOf("key", "policy", "rate", "burst", "ttl_ms", "now_ms") to "expect_override"),
        )
        val REQUEST = setOf(
            "method", "path", "route", "peer", "headers", "user", "api_key", "key", "cost", "now_ms",
            "case_insensitive", "ignore_trailing_slash",
        )
        val FALLBACKS = setOf("local", "fail_open", "fail_closed")

        /** `$POLYLIMIT_VECTORS` (like the other runners), default the repository's tests/conformance. */
        fun vectorsDir(): File = System.getenv("POLYLIMIT_VECTORS")?.let(::File)
            ?: File(System.getProperty("polylimit.repo") ?: "..", "tests/conformance")

        fun files(sub: String): List<File> {
            val dir = File(vectorsDir(), sub)
            val found = dir.listFiles { f -> f.isFile && f.name.endsWith(".json") }
                ?: error("cannot read $dir")
            check(found.isNotEmpty()) { "no vectors in $dir" }
            return found.sortedBy { it.name }
        }

        fun cases(file: File): List<JsonObject> {
            val doc = JsonParser.parseString(file.readText()).asJsonObject
            assertEquals(setOf("cases"), doc.keySet(), "${file.name}: top-level fields")
            val cases = doc.getAsJsonArray("cases").map(JsonElement::getAsJsonObject)
            assertTrue(cases.isNotEmpty(), "${file.name}: no cases")
            val names = cases.map { it["name"]?.asString }
            assertEquals(names.size, names.toSet().size, "${file.name}: duplicate case names")
            return cases
        }

        fun fields(where: String, obj: JsonObject, allowed: Set<String>, required: Set<String>) {
            val unknown = obj.keySet() - allowed
            assertTrue(unknown.isEmpty(), "$where: unknown fields ${unknown.sorted()}")
            val missing = required - obj.keySet()
            assertTrue(missing.isEmpty(), "$where: missing fields ${missing.sorted()}")
        }
    }
}
