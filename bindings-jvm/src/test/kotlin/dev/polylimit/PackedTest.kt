package dev.polylimit

import com.google.gson.JsonElement
import com.google.gson.JsonObject
import com.google.gson.JsonParser
import java.io.File
import java.math.BigInteger
import java.nio.ByteBuffer
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertNull
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.DynamicTest
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.TestFactory

/**
 * Packed.kt against tests/conformance/wire/packed.json: every record's bytes
 * read back as its value, and the batch read as every record in order.
 */
class PackedTest {
    private val doc: JsonObject =
        JsonParser.parseString(File(ConformanceTest.vectorsDir(), "wire/packed.json").readText()).asJsonObject

    private fun bytes(hex: String) = ByteArray(hex.length / 2) { hex.substring(2 * it, 2 * it + 2).toInt(16).toByte() }

    private fun u64(e: JsonElement): Long = e.asBigInteger.toLong()

    /** A u64 field as the uniffi record's Long: saturated. */
    private fun saturated(e: JsonElement): Long = e.asBigInteger.min(BigInteger.valueOf(Long.MAX_VALUE)).toLong()

    private fun string(e: JsonElement?): String? = if (e == null || e.isJsonNull) null else e.asString

    private fun decision(o: JsonObject) = Decision(
        o["allowed"].asBoolean, saturated(o["limit"]), saturated(o["remaining"]), saturated(o["reset_after_ms"]),
        if (o["retry_after_ms"].isJsonNull) null else saturated(o["retry_after_ms"]), saturated(o["delay_ms"]),
        o["source"].asString,
    )

    private fun outcome(o: JsonObject) = Outcome(
        if (o["status"].isJsonNull) null else o["status"].asInt,
        o["headers"].asJsonArray.map { Header(it.asJsonArray[0].asString, it.asJsonArray[1].asString) },
        string(o["body"]),
        o["trailers"].asJsonArray.map { Header(it.asJsonArray[0].asString, it.asJsonArray[1].asString) },
        saturated(o["delay_ms"]),
        o["decisions"].asJsonArray.map {
            val d = it.asJsonObject
            RuleDecision(d["rule"].asString, d["policy"].asString, decision(d), d["shadow"].asBoolean)
        },
        string(o["completion"]),
    )

    private fun check(name: String, kind: String, expected: JsonElement, record: PackedRecord) {
        if (kind == "error") {
            val e = expected.asJsonObject
            val error = record.error!!
            val want = mapOf(
                "config" to PolylimitException.Config::class, "store_unavailable" to PolylimitException.StoreUnavailable::class,
                "store" to PolylimitException.Store::class, "closed" to PolylimitException.Closed::class,
                "internal" to PolylimitException.Internal::class,
            )
            assertEquals(want[e["kind"].asString], error::class, name)
            assertTrue(error.message!!.contains(e["message"].asString), "$name: ${error.message}")
            if (error is PolylimitException.Config) {
                assertEquals(string(e["field"]) ?: "", error.field, name)
                assertEquals(string(e["value"]) ?: "", error.value, name)
            }
            if (error is PolylimitException.Store) assertEquals(string(e["key"]), error.key, name)
            return
        }
        assertNull(record.error, name)
        val value = record.value
        when (kind) {
            "unit" -> assertNull(value, name)
            "bool" -> assertEquals(expected.asBoolean, value, name)
            "count" -> assertEquals(u64(expected), value, name)
            "decision" -> assertEquals(decision(expected.asJsonObject), value, name)
            "decisions" -> assertEquals(expected.asJsonArray.map { decision(it.asJsonObject) }, value, name)
            "acquired" -> {
                val a = value as PackedAcquired
                assertEquals(decision(expected.asJsonObject["decision"].asJsonObject), a.decision, name)
                val leases = expected.asJsonObject["leases"].asJsonArray.map {
                    val l = it.asJsonObject
                    PackedLease(l["policy"].asInt, l["key"].asString, l["id"].asString)
                }
                assertEquals(leases, a.leases, name)
            }
            "outcome" -> assertEquals(outcome(expected.asJsonObject), value, name)
            // An admin call's answer: its JSON text, compared as JSON.
            "json" -> assertEquals(expected, JsonParser.parseString(value as String), name)
            else -> error("$name: unknown kind $kind")
        }
    }

    @TestFactory
    fun everyRecord(): List<DynamicTest> = doc["records"].asJsonArray.map { it.asJsonObject }.map { r ->
        DynamicTest.dynamicTest(r["name"].asString) {
            val b = bytes(r["hex"].asString)
            val reader = PackedReader(ByteBuffer.wrap(b), 0, b.size)
            val record = reader.record()
            assertTrue(reader.done, "every byte read")
            assertEquals(u64(r["ctx"]), record.ctx)
            check(r["name"].asString, r["kind"].asString, r["value"], record)
        }
    }

    @Test
    fun theBatchIsEveryRecordInOrder() {
        val records = doc["records"].asJsonArray.map { it.asJsonObject }
        val b = bytes(doc["batch"].asString)
        // Read from a direct buffer at an offset, as the bridge's reader and the facade read.
        val direct = ByteBuffer.allocateDirect(b.size + 3)
        direct.put(3, b)
        val reader = PackedReader(direct, 3, b.size + 3)
        for (r in records) {
            val record = reader.record()
            assertEquals(u64(r["ctx"]), record.ctx)
            check(r["name"].asString, r["kind"].asString, r["value"], record)
        }
        assertTrue(reader.done)
    }

    @Test
    fun aTruncatedRecordIsAnInternalError() {
        val hex = doc["records"].asJsonArray[0].asJsonObject["hex"].asString
        val b = bytes(hex).copyOf(hex.length / 2 - 1)
        val e = runCatching { PackedReader(ByteBuffer.wrap(b), 0, b.size).record() }.exceptionOrNull()
        assertTrue(e is PolylimitException.Internal, "$e")
    }

    /** A header name is decoded once and shared; names that share a slot still read as themselves. */
    @Test
    fun `header names are decoded once and never mixed up`() {
        fun read(name: String): String {
            val b = name.toByteArray(Charsets.UTF_8)
            return Names.get(ByteBuffer.wrap(b), 0, b.size)
        }
        val first = read("RateLimit-Policy")
        assertEquals("RateLimit-Policy", first)
        assertTrue(first === read("RateLimit-Policy"), "the second read is the first's String")
        // 65 names: at least two of the 64 slots' names collide, and each evicts the other.
        val names = (0..64).map { "X-Name-$it-é" }
        repeat(2) { names.forEach { assertEquals(it, read(it)) } }
        assertEquals("RateLimit", read("RateLimit"))
        assertEquals("RateLimit-Policy", read("RateLimit-Policy"))
    }
}
