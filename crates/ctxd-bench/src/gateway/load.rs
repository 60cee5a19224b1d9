//! An open-loop load generator: requests leave at fixed times whatever the server does, and
//! each latency runs from the request's *scheduled* time to the last byte of its response, so
//! a slow server cannot hide its slowness by slowing the load (no coordinated omission).
//!
//! A plain thread keeps the schedule (`thread::sleep` wakes within ~0.1 ms; tokio's timer has
//! a 1 ms grain, too coarse for a 1 ms target) and hands each request to the runtime.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

/// One request to send.
pub struct Job {
    pub url: String,
    pub session: String,
    pub body: Vec<u8>,
}

/// One request's outcome.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub latency: Duration,
    pub ok: bool,
}

/// Longest wait for the last responses of a slice.
const DRAIN: Duration = Duration::from_secs(60);

/// Sends `count` jobs at `rate` per second (`make(i)` builds job `i` just before its time) and
/// waits for every response. Jobs still unanswered after [`DRAIN`] count as errors.
pub fn run(
    rt: &Runtime,
    client: &reqwest::Client,
    rate: f64,
    count: usize,
    mut make: impl FnMut(usize) -> Job,
) -> Vec<Sample> {
    let period = Duration::from_secs_f64(1.0 / rate.max(0.001));
    let (tx, rx) = mpsc::channel();
    let start = Instant::now() + Duration::from_millis(5);
    for i in 0..count {
        let job = make(i);
        let at = start + period.mul_f64(i as f64);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let client = client.clone();
        let tx = tx.clone();
        rt.spawn(async move {
            let ok = send(&client, job).await;
            let _ = tx.send(Sample {
                latency: at.elapsed(),
                ok,
            });
        });
    }
    drop(tx);
    let deadline = Instant::now() + DRAIN;
    let mut samples = Vec::with_capacity(count);
    while samples.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(sample) => samples.push(sample),
            Err(_) => break,
        }
    }
    let missing = count - samples.len();
    samples.extend((0..missing).map(|_| Sample {
        latency: DRAIN,
        ok: false,
    }));
    samples
}

/// Sends one request and reads its response to the last byte; `false` on any failure or a
/// non-2xx status.
pub async fn send(client: &reqwest::Client, job: Job) -> bool {
    let sent = client
        .post(&job.url)
        .header("content-type", "application/json")
        .header("x-api-key", "ctxd-bench")
        .header("anthropic-version", "2023-06-01")
        .header("x-ctxd-session", job.session)
        .body(job.body)
        .send()
        .await;
    let Ok(mut res) = sent else {
        return false;
    };
    let ok = res.status().is_success();
    loop {
        match res.chunk().await {
            Ok(Some(_)) => {}
            Ok(None) => return ok,
            Err(_) => return false,
        }
    }
}

/// The `q` quantile (0..=1) by nearest rank, in milliseconds; `None` without samples.
pub fn quantile_ms(sorted: &[Duration], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1].as_secs_f64() * 1000.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|&m| Duration::from_millis(m))
                .collect::<Vec<_>>()
        };
        let s = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(quantile_ms(&s, 0.5), Some(5.0));
        assert_eq!(quantile_ms(&s, 0.99), Some(10.0));
        assert_eq!(quantile_ms(&s, 1.0), Some(10.0));
        assert_eq!(quantile_ms(&s, 0.0), Some(1.0));
        assert_eq!(quantile_ms(&[], 0.5), None);
    }
}
