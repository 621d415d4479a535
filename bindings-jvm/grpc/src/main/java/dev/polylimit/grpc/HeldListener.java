package dev.polylimit.grpc;

import io.grpc.ServerCall;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * A call's listener while the limiter decides it: the transport's events
 * (a cancel, readiness; no message arrives, none was requested) wait, in
 * order, until {@link #start} gives the listener they go to, then pass
 * straight through.
 */
final class HeldListener<Q> extends ServerCall.Listener<Q> {
    private ServerCall.Listener<Q> delegate;
    private List<Consumer<ServerCall.Listener<Q>>> waiting = new ArrayList<>();
    private volatile boolean started;

    /** Makes the call's listener (once) and hands it the events that waited, then every later one. */
    void start(Supplier<ServerCall.Listener<Q>> listener) {
        ServerCall.Listener<Q> to = listener.get();
        while (true) {
            List<Consumer<ServerCall.Listener<Q>>> batch;
            synchronized (this) {
                if (waiting.isEmpty()) {
                    delegate = to;
                    started = true;
                    return;
                }
                batch = waiting;
                waiting = new ArrayList<>();
            }
            batch.forEach(event -> event.accept(to));
        }
    }

    private void deliver(Consumer<ServerCall.Listener<Q>> event) {
        if (!started) {
            synchronized (this) {
                if (!started) {
                    waiting.add(event);
                    return;
                }
            }
        }
        event.accept(delegate);
    }

    @Override
    public void onMessage(Q message) {
        deliver(l -> l.onMessage(message));
    }

    @Override
    public void onHalfClose() {
        deliver(ServerCall.Listener::onHalfClose);
    }

    @Override
    public void onCancel() {
        deliver(ServerCall.Listener::onCancel);
    }

    @Override
    public void onComplete() {
        deliver(ServerCall.Listener::onComplete);
    }

    @Override
    public void onReady() {
        deliver(ServerCall.Listener::onReady);
    }
}
