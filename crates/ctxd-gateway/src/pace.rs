//! The distillation thread's pacing ([`ctxd_core::pace`]) and the CPU clock it reads.

pub use ctxd_core::pace::{Pacer, DEFAULT_CPU_PERCENT};

use std::time::Duration;

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
