package dev.polylimit

import java.io.File
import java.net.InetSocketAddress
import java.net.ServerSocket
import java.net.Socket

/**
 * A real redis-server for tests: a free loopback port, no persistence,
 * waited for with PING, killed by its pid.
 */
class RedisServer : AutoCloseable {
    val port: Int = ServerSocket(0).use { it.localPort }
    val url: String get() = "redis://127.0.0.1:$port"
    private val process: Process = ProcessBuilder(
        "redis-server", "--port", "$port", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--protected-mode", "no",
    ).redirectOutput(ProcessBuilder.Redirect.to(File("/dev/null")))
        .redirectError(ProcessBuilder.Redirect.to(File("/dev/null")))
        .start()

    init {
        val deadline = System.nanoTime() + 10_000_000_000L
        while (command("PING") != "+PONG") {
            check(process.isAlive) { "redis-server on port $port exited with ${process.exitValue()}" }
            check(System.nanoTime() < deadline) { "redis-server on port $port did not answer PING" }
            Thread.sleep(20)
        }
    }

    /** The server's process id (to stop and continue it). */
    fun pid(): Long = process.pid()

    /** One inline command, its first reply line; null when the server cannot be reached. */
    fun command(line: String): String? = try {
        Socket().use { s ->
            s.connect(InetSocketAddress("127.0.0.1", port), 500)
            s.soTimeout = 500
            s.getOutputStream().write("$line\r\n".toByteArray())
            s.getInputStream().bufferedReader().readLine()
        }
    } catch (e: java.io.IOException) {
        null
    }

    /** SIGKILL by pid, then reaped. */
    override fun close() {
        if (process.isAlive) {
            ProcessBuilder("kill", "-KILL", "${process.pid()}").start().waitFor()
            process.waitFor()
        }
    }
}
