package dev.polylimit

import com.google.gson.JsonElement
import com.google.gson.JsonObject
import com.google.gson.JsonParser
import com.google.gson.JsonPrimitive
import com.sun.jna.Library
import com.sun.jna.Native
import java.io.File
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertThrows
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestFactory
import org.junit.jupiter.api.fail

/**
 * The configuration vectors of tests/conformance/config/, as the Python
 * runner reads them: each case written for the snake_case naming (the JVM's:
 * options are JSON under the rules-file names) goes through `effectiveConfig`
 * and resolves to the expected effective configuration (a subset) or to
 * `PolylimitException.Config` naming the field. A case's `env` is set in the
 * process environment (libc setenv, which the core reads) and removed after.
 */
class ConfigConformanceTest {
    private interface LibC : Library {
        fun setenv(name: String, value: String, overwrite: Int): Int
        fun unsetenv(name: String): Int
    }

    private val libc: LibC = Native.load("c", LibC::class.java)
    private val dir = File(ConformanceTest.vectorsDir(), "config")

    private fun cases(): List<Pair<String, JsonObject>> = ConformanceTest.files("config").flatMap { file ->
        ConformanceTest.cases(file).map { "${file.nameWithoutExtension}: ${it["name"].asString}" to it }
    }

    /** The options the JVM passes for [case], or null when it is not written for snake_case. */
    private fun optionsFor(case: JsonObject): JsonObject? {
        val options = if (case.has("options")) {
            case.getAsJsonObject("options")["snake"]?.asJsonObject?.deepCopy() ?: return null
        } else {
            JsonObject()
        }
        case["rules"]?.let { options.add("rules", it) }
        // Rules files are named relative to the vector directory.
        options["rules_file"]?.takeIf { it.isJsonPrimitive && it.asJsonPrimitive.isString }?.let {
            options.addProperty("rules_file", File(dir, it.asString).path)
        }
        return options
    }

    @Test
    fun `at least thirty cases run for the JVM`() {
        val n = cases().count { (_, case) -> optionsFor(case) != null }
        assertTrue(n >= 30, "$n configuration vectors for the JVM")
    }

    @TestFactory
    fun configurationVectors(): List<DynamicTest> = cases().mapNotNull { (name, case) ->
        val options = optionsFor(case) ?: return@mapNotNull null
        DynamicTest.dynamicTest(name) { withEnv(case.getAsJsonObject("env")) { play(case, options) } }
    }

    private fun play(case: JsonObject, options: JsonObject) {
        val expect = case.getAsJsonObject("expect")
        if (expect.has("config")) {
            val config = JsonParser.parseString(effectiveConfig(options.toString()))
            contains(config, expect["config"], "config")
            return
        }
        val field = expect.getAsJsonObject("error")["field"].let {
            if (it.isJsonObject) it.asJsonObject["snake"].asString else it.asString
        }
        val e = assertThrows(PolylimitException.Config::class.java) { effectiveConfig(options.toString()) }
        assertEquals(field, e.field, e.text)
    }

    private fun withEnv(env: JsonObject?, body: () -> Unit) {
        val names = env?.keySet().orEmpty()
        val saved = names.associateWith { System.getenv(it) }
        try {
            for (n in names) assertEquals(0, libc.setenv(n, env!![n].asString, 1))
            body()
        } finally {
            for ((n, v) in saved) if (v == null) libc.unsetenv(n) else libc.setenv(n, v, 1)
        }
    }

    /** [expected] is found in [actual]: objects by the keys it lists, lists item by item; scalars as serde_json compares them. */
    private fun contains(actual: JsonElement, expected: JsonElement, path: String) {
        when {
            expected.isJsonObject && actual.isJsonObject -> for ((k, want) in expected.asJsonObject.entrySet()) {
                val got = actual.asJsonObject[k] ?: fail("$path.$k is missing in $actual")
                contains(got, want, "$path.$k")
            }
            expected.isJsonArray && actual.isJsonArray && expected.asJsonArray.size() == actual.asJsonArray.size() ->
                expected.asJsonArray.zip(actual.asJsonArray).forEachIndexed { i, (want, got) ->
                    contains(got, want, "$path[$i]")
                }
            else -> assertTrue(same(actual, expected), "$path: got $actual, expected $expected")
        }
    }

    /** A bool is not 1, an integer is not a float (serde_json's equality, as the Rust runner). */
    private fun same(a: JsonElement, b: JsonElement): Boolean {
        if (a !is JsonPrimitive || b !is JsonPrimitive) return a == b
        if (a.isNumber && b.isNumber) {
            val integral = { p: JsonPrimitive -> !p.asString.contains('.') && !p.asString.contains('e', ignoreCase = true) }
            return integral(a) == integral(b) && a.asBigDecimal.compareTo(b.asBigDecimal) == 0
        }
        return a == b
    }
}
