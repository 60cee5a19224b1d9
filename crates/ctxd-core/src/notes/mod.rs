//! Notes: virtual files in five homes. The address grammar and the snapshot the boot's notes
//! index is rendered from.

mod snapshot;

pub use snapshot::{HomeScope, NoteRow, NotesSnapshot};
