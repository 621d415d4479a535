package dev.polylimit.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * CPU time of named processes from /proc (utime + stime, USER_HZ 100) and
 * how busy the machine was, between {@link #start} and {@link #stop}: what
 * bounds a throughput on this shared 2-core machine, as the Go and Node
 * benches print it.
 */
final class Cpu {
    private final Map<String, Long> pids;
    private final Map<String, Long> startTicks = new LinkedHashMap<>();
    private final Map<String, Long> startJit = new LinkedHashMap<>();
    private final long[] startMachine;

    private Cpu(Map<String, Long> pids) {
        this.pids = pids;
        pids.forEach((name, pid) -> startTicks.put(name, ticks(pid)));
        pids.forEach((name, pid) -> startJit.put(name, jitTicks(pid)));
        startMachine = machine();
    }

    /** Starts counting the CPU of each named pid. */
    static Cpu start(Map<String, Long> pids) {
        return new Cpu(pids);
    }

    /**
     * CPU µs per unit of work of each process, n units done since start, plus
     * "busy" (cores kept busy); "NAME jit" is the part of NAME's that its JIT
     * compiler threads spent (a JVM still compiling its hot paths).
     */
    Map<String, Double> stop(long n) {
        Map<String, Double> out = new LinkedHashMap<>();
        pids.forEach((name, pid) -> out.put(name, n == 0 ? 0 : (ticks(pid) - startTicks.get(name)) * 10_000.0 / n));
        pids.forEach((name, pid) -> out.put(name + " jit", n == 0 ? 0 : (jitTicks(pid) - startJit.get(name)) * 10_000.0 / n));
        long[] now = machine();
        double total = now[1] - startMachine[1];
        out.put("busy", total > 0 ? (now[0] - startMachine[0]) / total * Runtime.getRuntime().availableProcessors() : 0);
        return out;
    }

    /** The median of each figure over rounds. */
    static Map<String, Double> median(List<Map<String, Double>> rounds) {
        Map<String, Double> out = new LinkedHashMap<>();
        for (String name : rounds.get(0).keySet()) {
            double[] v = rounds.stream().mapToDouble(r -> r.get(name)).sorted().toArray();
            out.put(name, v[v.length / 2]);
        }
        return out;
    }

    private static long ticks(long pid) {
        try {
            String s = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(f[11]) + Long.parseLong(f[12]);
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /** CPU ticks of the JIT compiler threads of a JVM ("C1 CompilerThre", "C2 CompilerThre"); 0 for another process. */
    private static long jitTicks(long pid) {
        long sum = 0;
        try (var tasks = Files.newDirectoryStream(Path.of("/proc/" + pid + "/task"))) {
            for (Path task : tasks) {
                try {
                    String s = Files.readString(task.resolve("stat"));
                    String comm = s.substring(s.indexOf('(') + 1);
                    if (!comm.startsWith("C1 CompilerThre") && !comm.startsWith("C2 CompilerThre")) {
                        continue;
                    }
                    String[] f = s.substring(s.lastIndexOf(')') + 2).split(" ");
                    sum += Long.parseLong(f[11]) + Long.parseLong(f[12]);
                } catch (IOException | RuntimeException e) {
                    // the thread ended
                }
            }
        } catch (IOException | RuntimeException e) {
            return 0;
        }
        return sum;
    }

    /** Busy and total jiffies of all cores (/proc/stat). */
    private static long[] machine() {
        try {
            String first = Files.readAllLines(Path.of("/proc/stat")).get(0);
            long[] v = Arrays.stream(first.trim().split("\\s+")).skip(1).mapToLong(Long::parseLong).toArray();
            long total = Arrays.stream(v).sum();
            return new long[] {total - v[3] - v[4], total};
        } catch (IOException | RuntimeException e) {
            return new long[] {0, 0};
        }
    }
}
