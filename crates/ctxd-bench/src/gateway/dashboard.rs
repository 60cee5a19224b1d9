//! A dashboard client beside the load (`--dashboard-poll SECS`): what an open browser tab on
//! `/ui` does, every period the sessions list fragment (the live page's poll) and one busy
//! session's page (the load keeps appending to it: rebuilt once per `--ui-refresh-ms`, a copy
//! in between). Its own latencies are
//! reported beside the row's, so both what it costs the gateway and what it gets are seen.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::load::Sample;

/// Poll `base`'s dashboard every `period` until `stop` is set; every request's latency.
pub async fn poll(
    client: reqwest::Client,
    base: String,
    period: Duration,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut session: Option<i64> = None;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        samples.push(get(&client, &format!("{base}/ui/frag/sessions")).await);
        if session.is_none() {
            session = newest(&client, &base).await;
        }
        if let Some(id) = session {
            samples.push(get(&client, &format!("{base}/ui/frag/session/{id}")).await);
        }
    }
    samples
}

async fn get(client: &reqwest::Client, url: &str) -> Sample {
    let start = Instant::now();
    let ok = match client.get(url).send().await {
        Ok(r) if r.status().is_success() => r.bytes().await.is_ok(),
        _ => false,
    };
    Sample {
        latency: start.elapsed(),
        ok,
    }
}

/// The id of the most recently active session.
async fn newest(client: &reqwest::Client, base: &str) -> Option<i64> {
    let r = client
        .get(format!("{base}/ui/api/sessions"))
        .send()
        .await
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.ok()?).ok()?;
    v["sessions"].get(0)?["id"].as_i64()
}
