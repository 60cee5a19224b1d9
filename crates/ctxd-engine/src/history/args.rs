//! The history tools' arguments, one struct per tool: the schemas the model is offered are
//! derived from them ([`crate::tools::parameters`]). The role stays a string so that the core's
//! check (and its message listing the roles) applies.

use schemars::JsonSchema;
use serde::Deserialize;

use ctxd_core::history as h;

use super::{ItemsQuery, ReadQuery, Scope, SearchMode, SearchQuery, WindowsQuery};

/// `history_list_windows`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListWindows {
    /// "main" or the session's agent name.
    agent_name: Option<String>,
    /// Newest window first.
    recent_first: Option<bool>,
    #[schemars(range(min = 1, max = h::MAX_LIMIT))]
    limit: Option<usize>,
    /// Windows of every branch, not only the active one.
    all_branches: Option<bool>,
}

impl From<ListWindows> for WindowsQuery {
    fn from(a: ListWindows) -> Self {
        WindowsQuery {
            scope: Scope {
                agent_name: a.agent_name,
                all_branches: a.all_branches.unwrap_or(false),
            },
            recent_first: a.recent_first.unwrap_or(false),
            limit: a.limit,
        }
    }
}

/// A struct of a listing's filters and `$field`s (serde refuses `flatten` with unknown fields
/// denied, so the filters are spelled once here).
macro_rules! with_filters {
    ($(#[$attr:meta])* $name:ident { $($(#[$field_attr:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$attr])*
        #[derive(Debug, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            /// "main" (or the session's agent name) for the main conversation, "subagent" for
            /// subagent sidechains (these are off the active branch: add all_branches).
            agent_name: Option<String>,
            /// Only this window (an id from history_list_windows).
            window_id: Option<String>,
            /// Only items of this role.
            #[schemars(extend("enum" = h::ROLES))]
            role: Option<String>,
            /// Only items that call this tool or hold its results.
            tool_name: Option<String>,
            /// Newest first (default: oldest first).
            recent_first: Option<bool>,
            #[schemars(
                range(min = 1, max = h::MAX_LIMIT),
                description = format!("At most this many results (default {}).", h::DEFAULT_LIMIT)
            )]
            limit: Option<usize>,
            /// Include entries off the active branch (default: the active branch only).
            all_branches: Option<bool>,
            $($(#[$field_attr])* $field: $ty,)*
        }

        impl $name {
            /// The filters, as a listing's query.
            fn filters(&self) -> ItemsQuery {
                ItemsQuery {
                    scope: Scope {
                        agent_name: self.agent_name.clone(),
                        all_branches: self.all_branches.unwrap_or(false),
                    },
                    window_id: self.window_id.clone(),
                    role: self.role.clone(),
                    tool_name: self.tool_name.clone(),
                    recent_first: self.recent_first.unwrap_or(false),
                    limit: self.limit,
                    max_chars_per_item: None,
                    offset: None,
                }
            }
        }
    };
}

with_filters! {
    /// `history_list_items`'s arguments.
    ListItems {
        #[schemars(
            range(min = 1, max = h::MAX_ITEM_CHARS),
            description = format!(
                "Preview length per item (default {}); read the item for all of it.",
                h::DEFAULT_ITEM_CHARS
            )
        )]
        max_chars_per_item: Option<usize>,
    }
}

impl From<ListItems> for ItemsQuery {
    fn from(a: ListItems) -> Self {
        ItemsQuery {
            max_chars_per_item: a.max_chars_per_item,
            ..a.filters()
        }
    }
}

with_filters! {
    /// `history_search_contents`'s arguments.
    SearchContents {
        /// Text to find. literal: case-sensitive substring; ranked: words, any case, best
        /// matches first.
        query: String,
        /// literal (default) or ranked full-text (ranks matches in blocks of 1,000, newest block
        /// first).
        #[schemars(with = "Option<String>", extend("enum" = ["literal", "ranked"]))]
        mode: Option<SearchMode>,
    }
}

impl From<SearchContents> for SearchQuery {
    fn from(a: SearchContents) -> Self {
        SearchQuery {
            filters: a.filters(),
            query: a.query,
            mode: a.mode.unwrap_or_default(),
        }
    }
}

/// `history_read_item`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadItem {
    /// The item (an id from history_list_items or history_search_contents).
    item_id: String,
    /// Optional: the item's window, checked if given.
    window_id: Option<String>,
    // Accepted and never read: the item id alone finds the item.
    #[allow(dead_code)]
    agent_name: Option<String>,
    /// Start at this character (default 0).
    offset_chars: Option<usize>,
    #[schemars(
        range(min = 1, max = h::MAX_READ_CHARS),
        description = format!("At most this many characters (default {}).", h::DEFAULT_READ_CHARS)
    )]
    limit_chars: Option<usize>,
}

impl From<ReadItem> for ReadQuery {
    fn from(a: ReadItem) -> Self {
        ReadQuery {
            window_id: a.window_id,
            item_id: a.item_id,
            offset_chars: a.offset_chars,
            limit_chars: a.limit_chars,
        }
    }
}
