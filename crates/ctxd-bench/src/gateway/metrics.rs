//! The gateway's histograms (its own overhead, `ctxd_overhead_seconds`; the wait for the
//! store's commit before a response ends, `ctxd_commit_wait_seconds`) from its Prometheus
//! `/metrics`: buckets summed over label sets, diffed between two scrapes so each row shows its
//! own requests.

use std::collections::BTreeMap;

pub const OVERHEAD: &str = "ctxd_overhead_seconds";
pub const COMMIT_WAIT: &str = "ctxd_commit_wait_seconds";

/// A cumulative histogram: upper bound (seconds) → count, plus sum and count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    /// (le, cumulative count), ascending; `+Inf` as `f64::INFINITY`.
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

/// Parses histogram `name` from the exposition text; `None` when it is absent.
pub fn parse(text: &str, name: &str) -> Option<Histogram> {
    let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    let (mut sum, mut count, mut seen) = (0.0, 0.0, false);
    for line in text.lines().filter(|l| l.starts_with(name)) {
        let rest = &line[name.len()..];
        let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        if rest.starts_with("_bucket") {
            let Some(le) = label(rest, "le") else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            if le.is_nan() {
                continue;
            }
            buckets.entry(le.to_bits()).or_insert((le, 0.0)).1 += value;
            seen = true;
        } else if rest.starts_with("_sum") {
            sum += value;
            seen = true;
        } else if rest.starts_with("_count") {
            count += value;
            seen = true;
        }
    }
    let mut buckets: Vec<(f64, f64)> = buckets.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    seen.then_some(Histogram {
        buckets,
        sum,
        count,
    })
}

/// Writes queued for the store plus the sessions whose indexes its writer has still to catch
/// up; `None` when the queue's gauge is absent (nothing was ever queued).
pub fn store_backlog(text: &str) -> Option<f64> {
    let queued = gauge(text, "ctxd_store_queue_depth")?;
    Some(queued + gauge(text, "ctxd_store_index_backlog").unwrap_or(0.0))
}

/// A gauge's value summed over its label sets; `None` when absent.
pub fn gauge(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue; // another metric sharing the prefix
        }
        if let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

fn label<'a>(rest: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let at = rest.find(&key)? + key.len();
    let end = rest[at..].find('"')?;
    Some(&rest[at..at + end])
}

impl Histogram {
    /// This histogram minus an earlier scrape of it.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before = |le: f64| {
            earlier
                .buckets
                .iter()
                .find(|(l, _)| *l == le)
                .map_or(0.0, |(_, c)| *c)
        };
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c - before(le)))
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        }
    }

    /// The upper bound of the bucket holding the `q` quantile, in ms (a histogram only bounds
    /// a quantile from above).
    pub fn quantile_bound_ms(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let want = q * self.count;
        self.buckets
            .iter()
            .find(|(_, c)| *c >= want)
            .map(|(le, _)| le * 1000.0)
    }

    pub fn mean_ms(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count * 1000.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# TYPE ctxd_overhead_seconds histogram
ctxd_overhead_seconds_bucket{route="messages",le="0.0005"} 10
ctxd_overhead_seconds_bucket{route="messages",le="0.001"} 18
ctxd_overhead_seconds_bucket{route="messages",le="+Inf"} 20
ctxd_overhead_seconds_bucket{route="responses",le="0.0005"} 0
ctxd_overhead_seconds_bucket{route="responses",le="0.001"} 1
ctxd_overhead_seconds_bucket{route="responses",le="+Inf"} 1
ctxd_overhead_seconds_sum{route="messages"} 0.02
ctxd_overhead_seconds_sum{route="responses"} 0.001
ctxd_overhead_seconds_count{route="messages"} 20
ctxd_overhead_seconds_count{route="responses"} 1
other_metric 5
"#;

    #[test]
    fn sums_label_sets_and_bounds_quantiles() {
        let h = parse(TEXT, OVERHEAD).unwrap();
        assert_eq!(h.count, 21.0);
        assert_eq!(
            h.buckets,
            vec![(0.0005, 10.0), (0.001, 19.0), (f64::INFINITY, 21.0)]
        );
        assert_eq!(h.quantile_bound_ms(0.5), Some(1.0));
        assert_eq!(h.quantile_bound_ms(0.4), Some(0.5));
        assert_eq!(h.quantile_bound_ms(0.99), Some(f64::INFINITY));
        assert!((h.mean_ms().unwrap() - 1.0).abs() < 1e-9);
        assert!(parse("other 1\n", OVERHEAD).is_none());
    }

    #[test]
    fn gauges_are_read_by_exact_name() {
        let text = "# TYPE q gauge\nctxd_store_queue_depth 3\nctxd_store_queue_depth_max 9\n";
        assert_eq!(gauge(text, "ctxd_store_queue_depth"), Some(3.0));
        assert_eq!(gauge(text, "ctxd_missing"), None);
    }

    #[test]
    fn diffs_between_scrapes() {
        let later = parse(TEXT, OVERHEAD).unwrap();
        let earlier = Histogram {
            buckets: vec![(0.0005, 10.0)],
            sum: 0.005,
            count: 10.0,
        };
        let d = later.since(&earlier);
        assert_eq!(d.count, 11.0);
        assert_eq!(d.buckets[0], (0.0005, 0.0));
        assert_eq!(d.quantile_bound_ms(0.5), Some(1.0));
    }
}
