package dev.polylimit.example;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.polylimit.Limiter;
import dev.polylimit.webflux.ExchangeResolvers.UserResolver;
import dev.polylimit.webflux.PolylimitWebFilter;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.DeleteMapping;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestHeader;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Spring WebFlux + polylimit: every request is decided by the shared rules
 * file (POLYLIMIT_RULES, default ../polylimit.yaml). The polylimit-webflux
 * auto-configuration builds the limiter and puts its WebFilter before every
 * handler; this app only says who the user is. The routes are the Spring
 * example's, non-blocking.
 */
@SpringBootApplication
@RestController
public class ExampleApp {
    /** The demo's one account password; a real app checks its user store. */
    static final String DEMO_PASSWORD = "open-sesame";

    private final Limiter limiter;
    private final ObjectMapper json;
    private final Gauge stats = new Gauge();

    ExampleApp(Limiter limiter, ObjectMapper json) {
        this.limiter = limiter;
        this.json = json;
    }

    public static void main(String[] args) {
        SpringApplication.run(ExampleApp.class, args);
    }

    /** The rules' {@code user} dimension: stands in for your auth. */
    @Bean
    UserResolver user() {
        return exchange -> exchange.getRequest().getHeaders().getFirst("X-User");
    }

    @GetMapping("/api/{name}")
    Map<String, String> hello(@PathVariable String name) {
        return Map.of("hello", name);
    }

    @PostMapping("/api/payments/{id}")
    Map<String, String> pay(@PathVariable String id) {
        return Map.of("paid", id);
    }

    /**
     * An LLM-style endpoint: the rules file's llm rule reserves the X-Reserve
     * header's cost before the handler; the handler reports the actual cost
     * (here X-Actual-Cost, in a real app the model's token usage) in the
     * exchange attribute, and the filter reconciles as the response commits.
     */
    @PostMapping("/api/llm")
    Mono<Map<String, Boolean>> llm(ServerWebExchange exchange) {
        String actual = exchange.getRequest().getHeaders().getFirst("X-Actual-Cost");
        return Mono.fromSupplier(() -> {
            if (actual != null) {
                exchange.getAttributes().put(PolylimitWebFilter.COST_ATTRIBUTE, Long.parseLong(actual));
            }
            return Map.of("answered", true);
        });
    }

    /** The login rule counts only failed logins (a 401 here); successful ones are given back. */
    @PostMapping("/login")
    ResponseEntity<Map<String, String>> login(@RequestHeader(name = "X-Login-User", required = false) String user,
            @RequestBody(required = false) byte[] body) {
        String password = null;
        try {
            JsonNode node = body == null ? null : json.readTree(body);
            password = node == null ? null : node.path("password").asText(null);
        } catch (java.io.IOException e) {
            // not JSON: a wrong password
        }
        if (user == null || user.isEmpty() || !DEMO_PASSWORD.equals(password)) {
            return ResponseEntity.status(HttpStatus.UNAUTHORIZED).body(Map.of("error", "wrong user or password"));
        }
        return ResponseEntity.ok(Map.of("logged_in", user));
    }

    /** A slow report (at most 10 in flight per client): held ms milliseconds (default 300); fail=1 then fails (a 500). */
    @GetMapping("/reports/{id}")
    Mono<Map<String, String>> report(@PathVariable String id, @RequestParam(required = false) String ms,
            @RequestParam(required = false) String fail) {
        return Mono.fromRunnable(stats::enter)
                .then(Mono.delay(Duration.ofMillis(holdMs(ms))))
                .doFinally(s -> stats.leave())
                .then(Mono.defer(() -> "1".equals(fail)
                        ? Mono.error(new IllegalStateException("report " + id + " failed"))
                        : Mono.just(Map.of("report", id))));
    }

    @GetMapping("/stats")
    Map<String, Integer> stats() {
        return stats.read(false);
    }

    @DeleteMapping("/stats")
    Map<String, Integer> resetStats() {
        return stats.read(true);
    }

    @GetMapping(path = "/metrics", produces = MediaType.TEXT_PLAIN_VALUE)
    String metrics() {
        return limiter.metricsText();
    }

    /** The ms query parameter: 300 ms by default, at most 30 s. */
    static long holdMs(String ms) {
        try {
            return Math.min(Math.max(Long.parseLong(ms), 0), 30_000);
        } catch (NumberFormatException e) {
            return 300;
        }
    }

    /** Counts the requests inside a handler. */
    static final class Gauge {
        private int inFlight;
        private int maxInFlight;
        private int started;

        synchronized void enter() {
            inFlight++;
            started++;
            maxInFlight = Math.max(maxInFlight, inFlight);
        }

        synchronized void leave() {
            inFlight--;
        }

        /** The counts; reset starts the maximum and the count of started requests over. */
        synchronized Map<String, Integer> read(boolean reset) {
            if (reset) {
                maxInFlight = inFlight;
                started = 0;
            }
            Map<String, Integer> counts = new LinkedHashMap<>();
            counts.put("in_flight", inFlight);
            counts.put("max_in_flight", maxInFlight);
            counts.put("started", started);
            return counts;
        }
    }
}
