//! Load generator for profiling: `cargo run --release -p polylimit --example redis_load -- redis://127.0.0.1:6379 64 3`
//! runs that many checks in flight for that many seconds and prints decisions/s.

use std::time::{Duration, Instant};

use polylimit::{Limiter, LimiterConfig, Policy};

fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let in_flight: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let policy = Policy::parse(r#"{"rate": "1000000000/s"}"#).unwrap();
    let mut config = LimiterConfig::new(policy).with_store(url);
    config.timeout = Duration::from_secs(5);
    let limiter = Limiter::new(config).unwrap();
    runtime.block_on(async {
        limiter.check("warm").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let tasks: Vec<_> = (0..in_flight)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        limiter.check("bench").await.unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        println!("{:.0} decisions/s", total as f64 / started.elapsed().as_secs_f64());
    });
}
