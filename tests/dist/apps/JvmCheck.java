import dev.polylimit.Decision;
import dev.polylimit.Limiter;
import dev.polylimit.Polylimit_jvmKt;

/**
 * The clean room's JVM program, compiled against the dist jar alone and run with
 * the jar and its runtime dependencies: 15 checks of one key on the memory store
 * (burst 10, one instant), printed as one JSON line with the version and where
 * the classes came from.
 */
public class JvmCheck {
    public static void main(String[] args) throws Exception {
        String options = "{\"policy\": {\"algorithm\": \"gcra\", \"rate\": \"10/min\", \"burst\": 10}}";
        StringBuilder allowed = new StringBuilder();
        try (Limiter limiter = new Limiter(options)) {
            for (int i = 0; i < 15; i++) {
                Decision d = limiter.check("client", 1L, 0L);
                allowed.append(i == 0 ? "" : ",").append(d.getAllowed());
            }
        }
        String jar = Limiter.class.getProtectionDomain().getCodeSource().getLocation().getPath();
        System.out.println("{\"version\": \"" + Polylimit_jvmKt.version() + "\", \"module\": \"" + jar
            + "\", \"allowed\": [" + allowed + "]}");
    }
}
