//! Notes: virtual files in five homes. The address grammar ([`address`]), the pure text
//! operations ([`text`]), the listing rules ([`list`]) and the snapshot the boot's notes index is
//! rendered from ([`NotesSnapshot`]).

pub mod address;
mod error;
pub mod list;
pub mod render;
mod snapshot;
pub mod text;

pub use address::{resolve, resolve_prefix, Home, NoteAddress, NotePrefix, Who};
pub use error::NoteError;
pub use list::{Direction, ListOrder, OrderBy};
pub use render::NoteInfo;
pub use snapshot::{HomeScope, NoteRow, NotesSnapshot};

/// The most UTF-8 bytes one note may hold (seed: "Each note is limited to 1,000,000 UTF-8
/// bytes; use another file for additional material").
pub const MAX_NOTE_BYTES: usize = 1_000_000;
