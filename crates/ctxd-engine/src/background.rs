//! Work that must give way to requests (distillation passes, their model, the dashboard's
//! reads): the lowest CPU priority for a thread, and a thread's own CPU clock to pace it by
//! ([`ctxd_core::pace::Pacer`]).

use std::time::Duration;

/// Nice 19 on the calling thread only (Linux: the nice value is per thread). `thread` names it
/// in the log when it cannot be lowered.
pub fn lowest_priority(thread: &str) {
    #[cfg(unix)]
    if let Err(e) = rustix::process::setpriority_process(None, 19) {
        tracing::debug!(error = %e, thread, "cannot lower the thread's priority");
    }
    #[cfg(not(unix))]
    let _ = thread;
}

/// The calling thread's CPU clock (zero where there is none: no pacing then).
pub fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        )
    }
    #[cfg(not(unix))]
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_moves() {
        let a = thread_cpu();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        #[cfg(unix)]
        assert!(thread_cpu() > a);
    }
}
