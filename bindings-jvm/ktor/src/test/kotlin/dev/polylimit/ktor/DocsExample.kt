package dev.polylimit.ktor

import io.ktor.server.application.Application
import io.ktor.server.application.install
import io.ktor.server.response.respondText
import io.ktor.server.routing.get
import io.ktor.server.routing.routing

fun Application.limited(rules: String = "polylimit.yaml") {
    install(Polylimit) {
        rulesFile = rules                          // store: memory, or redis://… shared by every instance
        user = { it.request.headers["X-User"] }    // the rules' `user` dimension: stands in for your auth
    }
    routing {
        get("/api/{name}") { call.respondText("hello ${call.parameters["name"]}") }
    }
}
