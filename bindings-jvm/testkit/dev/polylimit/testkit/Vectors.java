package dev.polylimit.testkit;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * The conformance vectors of tests/conformance/{http,grpc} (their README has
 * the format) as plain records, for the framework adapters' runners: each
 * plays a case's requests through its framework and compares what the client
 * would see with {@link Expect}.
 */
public final class Vectors {
    private Vectors() {}

    public record Request(String kind, String method, String path, String route, String peer,
            List<Map.Entry<String, String>> headers, String user, String apiKey, String key, Long cost, Long nowMs,
            boolean caseInsensitive, boolean ignoreTrailingSlash) {}

    /** What the client sees; {@code trailers} null for an HTTP vector. */
    public record Expect(Integer status, List<List<String>> headers, String body, long delayMs,
            List<List<String>> trailers) {}

    /**
     * One step: a request (with {@code expect}, and {@code complete} when
     * {@code hasComplete}: its ending status, null for none), a peek, or the
     * later completion of request {@code of}.
     */
    public record Step(Request request, boolean peek, Expect expect, boolean hasComplete, Integer complete, Integer of) {}

    public record Case(String file, String name, JsonObject rules, List<Step> steps) {
        /** The case's rules on {@code store}, under their own {@code prefix}. */
        public String options(String store, String prefix) {
            JsonObject o = new JsonObject();
            o.add("rules", rules);
            o.addProperty("store", store);
            o.addProperty("prefix", prefix);
            o.addProperty("timeout", "10s"); // decisions, not latency, are under test
            return o.toString();
        }

        @Override
        public String toString() {
            return file + ": " + name;
        }
    }

    /** The repository's tests/conformance ($POLYLIMIT_VECTORS overrides; else the polylimit.repo property). */
    public static File dir() {
        String env = System.getenv("POLYLIMIT_VECTORS");
        return env != null ? new File(env) : new File(System.getProperty("polylimit.repo", "../.."), "tests/conformance");
    }

    /** Every case of every file of {@code sub} ("http" or "grpc"). */
    public static List<Case> cases(String sub) throws IOException {
        File[] files = new File(dir(), sub).listFiles(f -> f.isFile() && f.getName().endsWith(".json"));
        if (files == null || files.length == 0) {
            throw new IllegalStateException("no vectors in " + new File(dir(), sub));
        }
        Arrays.sort(files);
        List<Case> cases = new ArrayList<>();
        for (File file : files) {
            JsonObject doc = JsonParser.parseString(Files.readString(file.toPath())).getAsJsonObject();
            for (JsonElement c : doc.getAsJsonArray("cases")) {
                JsonObject o = c.getAsJsonObject();
                List<Step> steps = new ArrayList<>();
                for (JsonElement s : o.getAsJsonArray("requests")) {
                    steps.add(step(s.getAsJsonObject()));
                }
                cases.add(new Case(file.getName(), o.get("name").getAsString(), o.getAsJsonObject("rules"), steps));
            }
        }
        return cases;
    }

    private static Step step(JsonObject s) {
        Integer complete = s.has("complete") ? integer(s.get("complete")) : null;
        if (s.has("of")) {
            return new Step(null, false, null, true, complete, s.get("of").getAsInt());
        }
        JsonObject e = s.getAsJsonObject("expect");
        Expect expect = new Expect(integer(e.get("status")), pairs(e.get("headers")), text(e, "body"),
                e.has("delay_ms") ? e.get("delay_ms").getAsLong() : 0, e.has("trailers") ? pairs(e.get("trailers")) : null);
        boolean peek = s.has("peek") && s.get("peek").getAsBoolean();
        return new Step(request(s.getAsJsonObject("request")), peek, expect, s.has("complete"), complete, null);
    }

    private static Request request(JsonObject r) {
        List<Map.Entry<String, String>> headers = new ArrayList<>();
        JsonElement h = r.get("headers");
        if (h != null && h.isJsonObject()) {
            for (var entry : h.getAsJsonObject().entrySet()) {
                headers.add(Map.entry(entry.getKey(), entry.getValue().getAsString()));
            }
        } else if (h != null && h.isJsonArray()) {
            for (JsonElement pair : h.getAsJsonArray()) {
                JsonArray p = pair.getAsJsonArray();
                headers.add(Map.entry(p.get(0).getAsString(), p.get(1).getAsString()));
            }
        }
        String kind = text(r, "kind");
        return new Request(kind == null ? "http" : kind, text(r, "method") == null ? "GET" : text(r, "method"),
                text(r, "path") == null ? "/" : text(r, "path"), text(r, "route"), text(r, "peer"), headers,
                text(r, "user"), text(r, "api_key"), text(r, "key"), number(r, "cost"), number(r, "now_ms"),
                flag(r, "case_insensitive"), flag(r, "ignore_trailing_slash"));
    }

    private static List<List<String>> pairs(JsonElement e) {
        List<List<String>> out = new ArrayList<>();
        if (e != null && e.isJsonArray()) {
            for (JsonElement pair : e.getAsJsonArray()) {
                JsonArray p = pair.getAsJsonArray();
                out.add(List.of(p.get(0).getAsString(), p.get(1).getAsString()));
            }
        }
        return out;
    }

    private static Integer integer(JsonElement e) {
        return e == null || e.isJsonNull() ? null : e.getAsInt();
    }

    private static String text(JsonObject o, String name) {
        JsonElement e = o.get(name);
        return e == null || e.isJsonNull() ? null : e.getAsString();
    }

    private static Long number(JsonObject o, String name) {
        JsonElement e = o.get(name);
        return e == null || e.isJsonNull() ? null : e.getAsLong();
    }

    private static boolean flag(JsonObject o, String name) {
        JsonElement e = o.get(name);
        return e != null && !e.isJsonNull() && e.getAsBoolean();
    }
}
