//! Pacing background work (distillation passes, a classifier's model) to a share of one core.
//!
//! Nice 19 alone does not keep passes off the request path: on a machine whose cores are all
//! busy (the gateway's worker, the provider's client, a build), the scheduler still gives the
//! pass thread a large slice, and passes (~50 ms of CPU each on 1 MB of history with the local
//! classifier) queued by many sessions ran back to back, a whole core at nice 19. A pass is
//! never urgent (a late pass's edits land one request later), so the thread is held to a share
//! of one core, measured on its own CPU clock: after a pass used `cpu`, the next may start once
//! `cpu / share` has passed. A token bucket: credit accrues at `share` CPU-seconds per second
//! of wall time, capped at what [`IDLE_CREDIT`] of wall time earns, so an idle gateway runs its
//! next pass at once but never bursts for long.

use std::time::{Duration, Instant};

/// The most wall time whose credit an idle thread keeps.
pub const IDLE_CREDIT: Duration = Duration::from_millis(250);

/// The distillation thread's default share of one core, in percent.
pub const DEFAULT_CPU_PERCENT: u8 = 25;

/// A token bucket over a thread's CPU time (pure: the clocks are passed in; the thread reads
/// its own CPU clock, which the core cannot).
#[derive(Debug)]
pub struct Pacer {
    /// CPU-seconds earned per wall-second, in (0, 1].
    share: f64,
    /// CPU-seconds the thread may still use before it must wait (negative: in debt).
    credit: f64,
    /// The clocks at the last look.
    last: Option<(Instant, Duration)>,
}

impl Pacer {
    /// A pacer holding the thread to `percent` % of one core (clamped to 1-100).
    pub fn new(percent: u8) -> Self {
        let share = f64::from(percent.clamp(1, 100)) / 100.0;
        Pacer {
            share,
            credit: share * IDLE_CREDIT.as_secs_f64(),
            last: None,
        }
    }

    /// How long the next pass must wait, given the wall clock and the thread's CPU clock now.
    /// Call it before each pass; the CPU used since the last call is charged then.
    pub fn delay(&mut self, wall: Instant, cpu: Duration) -> Duration {
        let cap = self.share * IDLE_CREDIT.as_secs_f64();
        if let Some((last_wall, last_cpu)) = self.last {
            let earned = wall.saturating_duration_since(last_wall).as_secs_f64() * self.share;
            let used = cpu.saturating_sub(last_cpu).as_secs_f64();
            self.credit = (self.credit + earned).min(cap) - used;
        }
        self.last = Some((wall, cpu));
        if self.credit >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.credit / self.share)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_pass_after_idle_starts_at_once_and_the_next_waits_its_cpu_over_the_share() {
        let mut pacer = Pacer::new(25);
        let t0 = Instant::now();
        assert_eq!(pacer.delay(t0, Duration::ZERO), Duration::ZERO);
        // A 50 ms pass, over at t0 + 50 ms: the credit (62.5 ms at 25 %) covers it.
        let wait = pacer.delay(t0 + 50 * MS, 50 * MS);
        assert_eq!(wait, Duration::ZERO);
        // A second 50 ms pass right after: 12.5 + 12.5 earned - 50 = -25 ms of CPU, 100 ms.
        let wait = pacer.delay(t0 + 100 * MS, 100 * MS);
        let expected = 100.0;
        assert!(
            (wait.as_secs_f64() * 1e3 - expected).abs() < 0.01,
            "{wait:?}"
        );
    }

    #[test]
    fn idle_credit_is_capped() {
        let mut pacer = Pacer::new(25);
        let t0 = Instant::now();
        pacer.delay(t0, Duration::ZERO);
        // An hour idle earns no more than 250 ms of wall time's worth: 62.5 ms of CPU.
        let t1 = t0 + Duration::from_secs(3600);
        assert_eq!(pacer.delay(t1, Duration::ZERO), Duration::ZERO);
        let wait = pacer.delay(t1, 162 * MS + MS / 2);
        assert!((wait.as_secs_f64() - 0.4).abs() < 1e-6, "{wait:?}");
    }

    #[test]
    fn over_a_long_run_the_thread_uses_its_share() {
        for percent in [10u8, 25, 50, 100] {
            let mut pacer = Pacer::new(percent);
            let t0 = Instant::now();
            let (mut wall, mut cpu) = (Duration::ZERO, Duration::ZERO);
            // Back-to-back 40 ms passes, each started when the pacer allows.
            for _ in 0..2000 {
                wall += pacer.delay(t0 + wall, cpu);
                wall += 40 * MS;
                cpu += 40 * MS;
            }
            let share = cpu.as_secs_f64() / wall.as_secs_f64();
            let want = f64::from(percent) / 100.0;
            assert!(
                (share - want).abs() < 0.01 * want.max(0.1),
                "{percent}%: {share}"
            );
        }
    }

    #[test]
    fn the_share_is_clamped() {
        let mut zero = Pacer::new(0);
        let t0 = Instant::now();
        zero.delay(t0, Duration::ZERO);
        // 0 % is read as 1 %: a 10 ms pass past the credit (2.5 ms) waits 750 ms.
        let wait = zero.delay(t0, 10 * MS);
        assert!((wait.as_secs_f64() - 0.75).abs() < 1e-6, "{wait:?}");
    }
}
