package dev.polylimit

/**
 * [Limiter.onAnomaly] with a Kotlin function: `limiter.onAnomaly { event -> log.warn("{}", event) }`
 * (Java passes a lambda to the [AnomalyListener] form directly).
 */
fun Limiter.onAnomaly(listener: (AnomalyEvent) -> Unit) = onAnomaly(
    object : AnomalyListener {
        override fun onAnomaly(event: AnomalyEvent) = listener(event)
    },
)
