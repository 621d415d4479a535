//! The classic burst on the embedded memory store: 15 requests against
//! `burst 10, rate 1/s`, for every algorithm.

use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> polylimit::Result<()> {
    let policies = [
        json!({"algorithm": "token_bucket", "rate": "1/s", "burst": 10}),
        json!({"algorithm": "gcra", "rate": "1/s", "burst": 10}),
        json!({"algorithm": "leaky_bucket", "rate": "1/s", "burst": 10}),
        json!({"algorithm": "leaky_bucket", "mode": "shape", "rate": "10/s", "burst": 10}),
        json!({"algorithm": "fixed_window", "rate": "10/10s"}),
        json!({"algorithm": "sliding_window_log", "rate": "10/10s"}),
        json!({"algorithm": "sliding_window_counter", "rate": "10/10s"}),
    ];
    let now = 1_700_000_000_000;
    for spec in policies {
        let limiter = Limiter::new(LimiterConfig::new(Policy::from_value(&spec, "policy")?))?;
        println!("{spec}");
        println!(
            "  {:>3}  {:<8} {:>9} {:>11} {:>8}",
            "#", "decision", "remaining", "retry_after", "delay"
        );
        for i in 1..=15 {
            let d = limiter
                .check_with(
                    "demo-user",
                    CheckOptions {
                        cost: 1,
                        now_ms: Some(now),
                    },
                )
                .await?;
            let retry = d.retry_after_ms.map_or("-".to_string(), |ms| format!("{ms}ms"));
            let verdict = if d.allowed { "allowed" } else { "denied" };
            println!(
                "  {i:>3}  {verdict:<8} {:>9} {retry:>11} {:>6}ms",
                d.remaining, d.delay_ms
            );
        }
        println!();
    }
    Ok(())
}
