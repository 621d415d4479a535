package dev.polylimit.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import dev.polylimit.Limiter;
import dev.polylimit.testkit.RedisServer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * {@link WebFluxCostTest}'s app and tests on a real redis-server: the settlement's completion is
 * pending on the store (the bridge completes it) and the response commits once it has. Each test
 * starts once the limiter is connected (its first checks would be its local fallback's).
 */
class WebFluxCostRedisTest extends WebFluxCostTest {
    static RedisServer redis;

    @DynamicPropertySource
    static void redisRules(DynamicPropertyRegistry registry) throws Exception {
        redis = new RedisServer();
        Path rules = Files.createTempFile("polylimit-webflux-cost", ".yaml");
        Files.writeString(rules, Files.readString(Path.of("src/test/resources/polylimit-cost.yaml"))
                // A generous timeout: on a loaded machine a completion slower than the default 100 ms is
                // given up (the core's fallback rules), which the exact counts cannot allow.
                .replace("store: memory", "store: " + redis.url() + "\ntimeout: 5s"));
        registry.add("polylimit.rules-file", rules::toString);
    }

    @Autowired
    Limiter limiter;

    @BeforeEach
    void connected() throws Exception {
        RedisServer.connected(limiter);
    }

    @Test
    void theStateIsInRedis() throws Exception {
        assertEquals(200, llm("team-redis", "1", "1").statusCode());
        assertNotEquals(":0", redis.command("DBSIZE"), "nothing in Redis: the app is on another store");
    }

    @AfterAll
    static void stopRedis() throws Exception {
        redis.close();
    }
}
