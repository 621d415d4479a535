package dev.polylimit.ktor

import dev.polylimit.Limiter
import dev.polylimit.PackedRequest
import dev.polylimit.endedStatus
import io.ktor.http.ContentType
import io.ktor.http.HttpStatusCode
import io.ktor.server.application.Application
import io.ktor.server.application.ApplicationCall
import io.ktor.server.application.ApplicationCallPipeline
import io.ktor.server.application.PipelineCall
import io.ktor.server.application.createApplicationPlugin
import io.ktor.server.application.hooks.CallFailed
import io.ktor.server.application.hooks.ResponseBodyReadyForSend
import io.ktor.server.application.pluginOrNull
import io.ktor.server.response.respondText
import io.ktor.server.routing.RoutingResolveContext
import io.ktor.server.routing.RoutingResolveResult
import io.ktor.server.routing.RoutingRoot
import io.ktor.server.routing.path
import io.ktor.util.AttributeKey
import io.ktor.server.application.ApplicationStopped
import java.io.IOException
import java.util.concurrent.CompletableFuture
import java.util.concurrent.atomic.AtomicBoolean
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Job
import kotlinx.coroutines.delay
import kotlinx.coroutines.future.await
import org.slf4j.LoggerFactory

/**
 * The [Polylimit] plugin's settings: the limiter ([limiter], or one built from
 * [rulesFile], its store replaced by [store] when set) and the functions that
 * give a call's rule dimensions (null or "" leaves one out).
 */
class PolylimitConfig {
    /** The rules file (YAML or JSON) the limiter is built from, when no [limiter] is given. */
    var rulesFile: String = "polylimit.yaml"

    /** The store, replacing the rules file's (`memory`, `redis://host:6379`). */
    var store: String? = null

    /** A limiter of the application's (closed by the application, not the plugin). */
    var limiter: Limiter? = null

    /** The authenticated user of a call (the `user` dimension). */
    var user: (ApplicationCall) -> String? = { null }

    /** The API key of a call (the `api_key` dimension). */
    var apiKey: (ApplicationCall) -> String? = { null }

    /** A key of the application's choosing (the `key` dimension). */
    var key: (ApplicationCall) -> String? = { null }

    /**
     * The units a call costs (its reservation; null: the rules' cost, or 1),
     * like the key function; the core checks it against the rules'
     * `max_cost` (above it: the core's 400 `invalid_cost`, nothing charged).
     */
    var cost: (ApplicationCall) -> Long? = { null }

    /**
     * The client address as the connection gives it (default the socket's
     * peer, `request.local.remoteAddress`; forwarded headers are the core's
     * `trusted_proxies`' business, not this one's).
     */
    var peer: (ApplicationCall) -> String? = { it.request.local.remoteAddress }

    /** The time decisions are made at, ms since the epoch (tests; null: the store's clock). */
    var clock: (() -> Long)? = null

    /** Match paths case-insensitively (a router configured so; Ktor's is case-sensitive). */
    var caseInsensitive: Boolean = false

    /** `/a/` matches `/a` (set it with Ktor's IgnoreTrailingSlash plugin). */
    var ignoreTrailingSlash: Boolean = false

    /** How a shaped call waits the core's delay, in ms (default: the coroutine's `delay`). */
    var wait: suspend (Long) -> Unit = { delay(it) }
}

private val log = LoggerFactory.getLogger("dev.polylimit.ktor.Polylimit")

/** What settles a call that holds a completion token, once. */
private class Pending(val token: String) {
    val settled = AtomicBoolean()
}

private val PendingKey = AttributeKey<Pending>("polylimit.pending")

/**
 * The call attribute a handler's actual cost is reported under
 * ([reportCost]; named as the other JVM middlewares' `polylimit.cost`).
 */
val CostKey: AttributeKey<Long> = AttributeKey<Long>(Limiter.COST_ATTRIBUTE)

/**
 * Reports the call's actual cost (an LLM call's tokens), before its
 * response is sent: the plugin completes the call with it and the core
 * reconciles the reservation the rule's `cost` charged (the difference given
 * back, or charged past it, capped at `max_cost`). Not reported: the
 * reservation stands. The last report wins.
 */
fun ApplicationCall.reportCost(cost: Long) {
    attributes.put(CostKey, cost)
}

/**
 * polylimit for Ktor: `install(Polylimit) { rulesFile = "polylimit.yaml" }`.
 *
 * Every call is decided by the limiter's rules before its handler, in a
 * suspend call (no thread waits for the store): the call (method, path,
 * Ktor's matched route template, peer, the headers the rules read) goes to
 * the core packed; the core's headers are set on every response, a refusal
 * is answered with the core's status and JSON body, a shaped call waits the
 * core's delay, and a call whose rules count only some responses (or hold a
 * concurrency slot) is settled with its status once the response is sent,
 * or as no response when it fails or the client leaves; a handler reports a
 * call's actual cost with [reportCost]. Adaptation only: every decision,
 * header and body is the core's.
 */
val Polylimit = createApplicationPlugin("Polylimit", ::PolylimitConfig) {
    val config = pluginConfig
    val limiter = config.limiter ?: run {
        val options = buildString {
            append("{\"rules_file\":").append(json(config.rulesFile))
            config.store?.let { append(",\"store\":").append(json(it)) }
            append('}')
        }
        Limiter(options).also { own -> application.monitor.subscribe(ApplicationStopped) { own.close() } }
    }
    val calls = Calls(config, limiter, application)
    // A raw interceptor, not onCall: a refused call finishes the pipeline (no later plugin, no handler runs).
    application.intercept(ApplicationCallPipeline.Plugins) {
        if (!calls.decide(context)) finish()
    }
    // Settled before the response goes out: the next call of this client sees the completion.
    on(ResponseBodyReadyForSend) { call, content -> calls.settle(call, null, content.status)?.await() }
    on(CallFailed) { call, cause -> calls.settle(call, cause)?.await() }
}

/** The plugin's work on each call. */
private class Calls(val config: PolylimitConfig, val limiter: Limiter, val application: Application) {
    /** The template of the route Ktor's routing resolves the call to, found as routing will (only when a rule reads it). */
    private suspend fun route(call: ApplicationCall): String? {
        if (!limiter.readsRoute()) return null // asked each call: a reload may change it
        val root = application.pluginOrNull(RoutingRoot) ?: return null
        val pipelineCall = call as? PipelineCall ?: return null
        return try {
            (RoutingResolveContext(root, pipelineCall, emptyList()).resolve() as? RoutingResolveResult.Success)?.route?.path
        } catch (e: Exception) {
            null // no route: the rules match on the path
        }
    }

    /** Decides [call]: true to serve it, false when the core's refusal was answered. */
    suspend fun decide(call: ApplicationCall): Boolean {
        val request = call.request
        val path = request.local.uri.substringBefore('?').ifEmpty { "/" }
        val packed = PackedRequest(request.local.method.value, path, route(call), config.peer(call),
            config.user(call), config.apiKey(call), config.key(call))
        for (name in request.headers.names()) {
            if (limiter.readsHeader(name)) request.headers.getAll(name)?.forEach { packed.header(name, it) }
        }
        packed.cost = config.cost(call)
        packed.nowMs = config.clock?.invoke()
        packed.caseInsensitive = config.caseInsensitive
        packed.ignoreTrailingSlash = config.ignoreTrailingSlash
        val outcome = limiter.checkPackedAsync(packed)
        for (h in outcome.headers) {
            call.response.headers.append(h.name, h.value, safeOnly = false)
        }
        val status = outcome.status
        if (status != null) {
            call.respondText(outcome.body ?: "", ContentType.Application.Json, HttpStatusCode.fromValue(status))
            return false
        }
        val token = outcome.completion
        if (token != null) {
            call.attributes.put(PendingKey, Pending(token))
            // The client left, or the call ended without a response: settled then (slots released).
            call.coroutineContext[Job]?.invokeOnCompletion { cause -> settle(call, cause ?: IOException("no response")) }
        }
        if (outcome.delayMs > 0) {
            config.wait(outcome.delayMs)
        }
        return true
    }

    /**
     * Completes the call's token (if it holds one) with the status it ended
     * with, by the core's rule (`endedStatus`), once: as its response is about
     * to be sent ([sending]: that response's status), or when it failed.
     */
    fun settle(call: ApplicationCall, failed: Throwable?, sending: HttpStatusCode? = null): CompletableFuture<Unit>? {
        val pending = call.attributes.getOrNull(PendingKey) ?: return null
        if (!pending.settled.compareAndSet(false, true)) return null
        // The status of the content being sent (respondText's), else the call's.
        val status = sending ?: call.response.status()
        val answered = failed == null || call.response.isCommitted
        val ended = endedStatus(status?.value ?: 200, answered, failed != null,
            failed is IOException || failed is CancellationException)
        // With the actual cost the handler reported (reportCost), if any: the one settlement every JVM
        // middleware shares (it never fails; what it cannot settle is logged).
        return limiter.settleFuture(pending.token, ended, call.attributes.getOrNull(CostKey)) { message, e ->
            log.warn(message, e)
        }
    }
}

/** `s` as a JSON string. */
private fun json(s: String): String = buildString {
    append('"')
    for (c in s) {
        when {
            c == '"' || c == '\\' -> append('\\').append(c)
            c < ' ' -> append("\\u%04x".format(c.code))
            else -> append(c)
        }
    }
    append('"')
}
