package dev.polylimit.bench;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;

/**
 * The Spring Boot app the HTTP bench loads, one process per variant: with
 * polylimit's auto-configured filter ({@code polylimit.rules-file}, memory or
 * Redis) or without it ({@code polylimit.enabled=false}). Same handler in
 * every variant.
 */
@SpringBootApplication
@RestController
public class App {
    @GetMapping("/api/{name}")
    String hello(@PathVariable String name) {
        return "ok";
    }

    public static void main(String[] args) {
        SpringApplication.run(App.class, args);
    }
}
