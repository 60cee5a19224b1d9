//! The store contract: the traits every backend implements, the types they exchange, and the
//! rules that do not depend on the database (how an entry is stored, the group-commit rule,
//! the history index's walk, note versioning). A backend keeps only its SQL and its driver.

pub(crate) mod backend;
pub(crate) mod dump;
pub(crate) mod entry;
pub(crate) mod group;
pub(crate) mod history;
pub(crate) mod index;
pub(crate) mod notes;
pub(crate) mod same;
pub(crate) mod versions;
