//! CPU time from /proc, for what a request costs: the gateway's own process, and the
//! PostgreSQL server's when it runs on this machine. A rate the machine cannot sustain shows in
//! latency; CPU per request says how far one core would go.

/// CPU seconds (user + system, every thread) process `pid` has used so far.
pub fn process_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(parse_stat(&text)?.1 as f64 / ticks_per_second())
}

/// CPU seconds used so far by the processes named `postgres` on this machine (the server and
/// its backends), or `None` when none runs here. Backends that exit take their time with them:
/// the gateways' connections live as long as the gateways.
pub fn postgres_seconds() -> Option<f64> {
    let mut ticks = 0u64;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some(("postgres", t)) = parse_stat(&text).as_ref().map(|(c, t)| (c.as_str(), *t)) {
            ticks += t;
            found = true;
        }
    }
    found.then(|| ticks as f64 / ticks_per_second())
}

fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second() as f64
}

/// The command name and utime + stime (clock ticks) of a /proc/PID/stat line. The name sits
/// in parentheses and may hold spaces or parentheses itself: the fields start after the last
/// `)`.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let mut fields = text.get(close + 1..)?.split_whitespace();
    // After the name: state (field 3) ... utime is field 14, stime 15.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((comm, utime + stime))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_after_the_name() {
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 500 0 0 0 731 269 0 0 20 0 9 0 1 2 3";
        assert_eq!(parse_stat(line), Some(("a (b) c".to_owned(), 1000)));
        assert_eq!(parse_stat("4242 (x) S 1"), None);
    }

    #[test]
    fn this_process_cpu_time_grows_while_it_computes() {
        let before = process_seconds(std::process::id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut x = 0u64;
        while process_seconds(std::process::id()).unwrap() <= before {
            x = (0..100_000u64).fold(x, |a, i| a.wrapping_mul(31) ^ i);
            assert!(
                std::time::Instant::now() < deadline,
                "no CPU time counted ({x})"
            );
        }
    }
}
