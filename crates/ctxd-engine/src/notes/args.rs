//! The notes tools' arguments, one struct per tool: the schemas the model is offered are derived
//! from them ([`crate::tools::parameters`]). Orders stay strings so that the core's parsing (and
//! its aliases, `asc`/`desc`) and its messages apply.

use schemars::JsonSchema;
use serde::Deserialize;

use ctxd_core::notes::list::MAX_MAX_RESULTS;

use crate::tools::Whole;

const PATH_DOC: &str = "Note address: bare <vpath> is this session; @project/<vpath>, @human/<vpath>, @self/<vpath>, @agents/<name>/<vpath>, @model/<vpath>, @models/<name>/<vpath> are the other homes. No `..`, no `@` inside a vpath.";

/// `notes_write`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Write {
    #[schemars(description = PATH_DOC)]
    pub path: String,
    /// The whole new text of the note.
    pub text: String,
}

/// `notes_append`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Append {
    #[schemars(description = PATH_DOC)]
    pub path: String,
    /// The text to add at the end.
    pub text: String,
}

/// `notes_read`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Read {
    #[schemars(description = PATH_DOC)]
    pub path: String,
    /// First line (default 1).
    pub start_line: Option<Whole>,
    /// Last line, inclusive (default -1, the last).
    pub stop_line: Option<Whole>,
}

/// `notes_list`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct List {
    /// Address prefix; it may stop inside a name.
    pub prefix: Option<String>,
    /// Default 100.
    #[schemars(range(min = 1, max = MAX_MAX_RESULTS))]
    pub max_results: Option<Whole>,
    /// Default name.
    #[schemars(extend("enum" = ["name", "created_at", "updated_at"]))]
    pub file_order_by: Option<String>,
    /// Default ascending.
    #[schemars(extend("enum" = ["ascending", "descending"]))]
    pub file_order: Option<String>,
}

/// `notes_search`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Search {
    /// Literal text, within one line.
    pub query: String,
    /// Address prefix (one home); default all your homes.
    pub prefix: Option<String>,
    /// Most matching lines (default 100).
    #[schemars(range(min = 1, max = MAX_MAX_RESULTS))]
    pub max_results: Option<Whole>,
}

/// `notes_delete`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Delete {
    #[schemars(description = PATH_DOC)]
    pub path: String,
}

/// `notes_rename`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rename {
    #[schemars(description = PATH_DOC)]
    pub path: String,
    /// The new address.
    pub new_path: String,
}

/// `notes_mark_stale`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MarkStale {
    #[schemars(description = PATH_DOC)]
    pub path: String,
    /// Default true.
    pub stale: Option<bool>,
}
