//! Listing rules: order, direction, result limits, prefix filtering.

use std::cmp::Ordering;

use serde::Serialize;

use super::NoteError;

/// Results a listing or search returns when the caller does not say.
pub const DEFAULT_MAX_RESULTS: usize = 100;
/// The most results one call returns.
pub const MAX_MAX_RESULTS: usize = 1000;

/// `file_order_by`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderBy {
    /// The resolved address (the path within one home).
    #[default]
    Name,
    CreatedAt,
    UpdatedAt,
}

/// `file_order`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    #[default]
    Ascending,
    Descending,
}

/// How a listing is ordered. The default is by name, ascending. Ties (same time) are broken
/// by name ascending, so a listing is deterministic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ListOrder {
    pub by: OrderBy,
    pub direction: Direction,
}

impl OrderBy {
    pub fn parse(s: &str) -> Result<Self, NoteError> {
        match s {
            "name" => Ok(OrderBy::Name),
            "created_at" => Ok(OrderBy::CreatedAt),
            "updated_at" => Ok(OrderBy::UpdatedAt),
            other => Err(NoteError::Argument(format!(
                "file_order_by {other:?}: use name, created_at or updated_at"
            ))),
        }
    }
}

impl Direction {
    pub fn parse(s: &str) -> Result<Self, NoteError> {
        match s {
            "ascending" | "asc" => Ok(Direction::Ascending),
            "descending" | "desc" => Ok(Direction::Descending),
            other => Err(NoteError::Argument(format!(
                "file_order {other:?}: use ascending or descending"
            ))),
        }
    }
}

/// What ordering needs of a listed note.
pub trait Listed {
    /// The name ordered by (the resolved address across homes, the path within one).
    fn name(&self) -> &str;
    fn created_at_ms(&self) -> i64;
    fn updated_at_ms(&self) -> i64;
}

/// Compare two notes under `order`.
pub fn compare<T: Listed>(a: &T, b: &T, order: ListOrder) -> Ordering {
    let primary = match order.by {
        OrderBy::Name => a.name().cmp(b.name()),
        OrderBy::CreatedAt => a.created_at_ms().cmp(&b.created_at_ms()),
        OrderBy::UpdatedAt => a.updated_at_ms().cmp(&b.updated_at_ms()),
    };
    let primary = match order.direction {
        Direction::Ascending => primary,
        Direction::Descending => primary.reverse(),
    };
    primary.then_with(|| a.name().cmp(b.name()))
}

/// Sort `notes` under `order` and keep the first `max`.
pub fn sort_and_limit<T: Listed>(notes: &mut Vec<T>, order: ListOrder, max: usize) {
    notes.sort_by(|a, b| compare(a, b, order));
    notes.truncate(max);
}

/// `max_results`: absent → [`DEFAULT_MAX_RESULTS`]; must be 1..=[`MAX_MAX_RESULTS`].
pub fn max_results(requested: Option<i64>) -> Result<usize, NoteError> {
    match requested {
        None => Ok(DEFAULT_MAX_RESULTS),
        Some(n) if (1..=MAX_MAX_RESULTS as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(NoteError::Argument(format!(
            "max_results {n}: use a number from 1 to {MAX_MAX_RESULTS}"
        ))),
    }
}

/// Whether `path` is under `prefix` (a plain string prefix: `pla` matches `plans/a.md`).
pub fn has_prefix(path: &str, prefix: &str) -> bool {
    path.starts_with(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct N(&'static str, i64, i64);
    impl Listed for N {
        fn name(&self) -> &str {
            self.0
        }
        fn created_at_ms(&self) -> i64 {
            self.1
        }
        fn updated_at_ms(&self) -> i64 {
            self.2
        }
    }

    fn names(order: ListOrder, max: usize) -> Vec<&'static str> {
        let mut v = vec![N("b", 1, 30), N("a", 2, 20), N("c", 3, 20), N("d", 2, 10)];
        sort_and_limit(&mut v, order, max);
        v.into_iter().map(|n| n.0).collect()
    }

    #[test]
    fn orders() {
        use Direction::*;
        use OrderBy::*;
        let o = |by, direction| ListOrder { by, direction };
        assert_eq!(names(ListOrder::default(), 10), ["a", "b", "c", "d"]);
        assert_eq!(names(o(Name, Descending), 10), ["d", "c", "b", "a"]);
        assert_eq!(names(o(CreatedAt, Ascending), 10), ["b", "a", "d", "c"]);
        assert_eq!(names(o(CreatedAt, Descending), 10), ["c", "a", "d", "b"]);
        assert_eq!(names(o(UpdatedAt, Descending), 10), ["b", "a", "c", "d"]);
        assert_eq!(names(o(UpdatedAt, Ascending), 2), ["d", "a"]);
    }

    #[test]
    fn parsing_and_limits() {
        assert_eq!(OrderBy::parse("updated_at").unwrap(), OrderBy::UpdatedAt);
        assert!(OrderBy::parse("size")
            .unwrap_err()
            .to_string()
            .contains("name, created_at"));
        assert_eq!(
            Direction::parse("descending").unwrap(),
            Direction::Descending
        );
        assert!(Direction::parse("up").is_err());
        assert_eq!(max_results(None).unwrap(), DEFAULT_MAX_RESULTS);
        assert_eq!(max_results(Some(1000)).unwrap(), 1000);
        assert!(max_results(Some(0)).is_err());
        assert!(max_results(Some(1001)).is_err());
        assert!(has_prefix("plans/a.md", "pla"));
        assert!(has_prefix("plans/a.md", ""));
        assert!(!has_prefix("a.md", "plans/"));
    }
}
