package dev.polylimit.example

import dev.polylimit.Limiter
import dev.polylimit.ktor.Polylimit
import dev.polylimit.ktor.reportCost
import io.ktor.http.ContentType
import io.ktor.http.HttpStatusCode
import io.ktor.server.application.install
import io.ktor.server.engine.embeddedServer
import io.ktor.server.netty.Netty
import io.ktor.server.request.receiveText
import io.ktor.server.response.respondText
import io.ktor.server.routing.delete
import io.ktor.server.routing.get
import io.ktor.server.routing.post
import io.ktor.server.routing.routing
import kotlinx.coroutines.delay

// Ktor + polylimit: every call is decided by the shared rules file
// (POLYLIMIT_RULES, default ../polylimit.yaml) by the polylimit-ktor plugin;
// this app only says who the user is. The routes are the other example apps'.

/** The demo's one account password; a real app checks its user store. */
const val DEMO_PASSWORD = "open-sesame"

/** Counts the calls inside a handler. */
object Gauge {
    private var inFlight = 0
    private var maxInFlight = 0
    private var started = 0

    @Synchronized fun enter() {
        inFlight++
        started++
        maxInFlight = maxOf(maxInFlight, inFlight)
    }

    @Synchronized fun leave() {
        inFlight--
    }

    /** The counts as JSON; reset starts the maximum and the count of started calls over. */
    @Synchronized fun read(reset: Boolean): String {
        if (reset) {
            maxInFlight = inFlight
            started = 0
        }
        return """{"in_flight":$inFlight,"max_in_flight":$maxInFlight,"started":$started}"""
    }
}

/** `s` as a JSON string (the path segments are the client's). */
fun json(s: String): String = buildString {
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

fun main() {
    val limiter = Limiter.fromRulesFile(System.getenv("POLYLIMIT_RULES") ?: "../polylimit.yaml")
    val port = (System.getenv("PORT") ?: "8080").toInt()
    embeddedServer(Netty, port = port, host = "127.0.0.1") {
        install(Polylimit) {
            this.limiter = limiter
            user = { it.request.headers["X-User"] } // the rules' `user` dimension: stands in for your auth
        }
        routing {
            get("/api/{name}") {
                call.respondText("""{"hello":${json(call.parameters["name"]!!)}}""", ContentType.Application.Json)
            }
            post("/api/payments/{id}") {
                call.respondText("""{"paid":${json(call.parameters["id"]!!)}}""", ContentType.Application.Json)
            }
            // An LLM-style endpoint: the rules file's llm rule reserves the X-Reserve header's cost before
            // the handler; the handler reports the actual cost (here X-Actual-Cost, in a real app the
            // model's token usage) and the plugin reconciles as the response is sent.
            post("/api/llm") {
                call.request.headers["X-Actual-Cost"]?.let { call.reportCost(it.toLong()) }
                call.respondText("""{"answered":true}""", ContentType.Application.Json)
            }
            // The login rule counts only failed logins (a 401 here); successful ones are given back.
            post("/login") {
                val user = call.request.headers["X-Login-User"]
                // The demo's JSON body {"password": "..."}, read without a JSON library.
                val password = Regex("\"password\"\\s*:\\s*\"([^\"]*)\"").find(call.receiveText())?.groupValues?.get(1)
                if (user.isNullOrEmpty() || password != DEMO_PASSWORD) {
                    call.respondText("""{"error":"wrong user or password"}""", ContentType.Application.Json, HttpStatusCode.Unauthorized)
                } else {
                    call.respondText("""{"logged_in":${json(user)}}""", ContentType.Application.Json)
                }
            }
            // A slow report (at most 10 in flight per client): held ms milliseconds (default 300); fail=1 then fails (a 500).
            get("/reports/{id}") {
                val ms = call.request.queryParameters["ms"]?.toLongOrNull()?.coerceIn(0, 30_000) ?: 300
                Gauge.enter()
                try {
                    delay(ms)
                } finally {
                    Gauge.leave()
                }
                if (call.request.queryParameters["fail"] == "1") error("report ${call.parameters["id"]} failed")
                call.respondText("""{"report":${json(call.parameters["id"]!!)}}""", ContentType.Application.Json)
            }
            get("/stats") { call.respondText(Gauge.read(false), ContentType.Application.Json) }
            delete("/stats") { call.respondText(Gauge.read(true), ContentType.Application.Json) }
            get("/metrics") { call.respondText(limiter.metricsText(), ContentType.Text.Plain) }
        }
    }.start(wait = true)
}
