//! graphio: the graph files `alignmalloc walk` reads, as edge lists with dense vertex ids.
//!
//! - SNAP edge lists (`u v` per line, further columns ignored, `#` or `%` comments) and Matrix
//!   Market coordinate files (a banner, `%` comments, a `rows columns entries` line, then
//!   1-based `row column [value]` entries), plain or gzip (by content, not by name).
//! - The file is streamed in blocks and parsed as bytes (no line is copied into a string), so
//!   reading costs time and memory in proportion to its edges; a callback hears how many bytes
//!   of the file were read, for a progress bar.
//! - Vertex ids are compacted: the ids that occur in an edge are numbered 0, 1, ... in the order
//!   of the original ids, and [`IdMap`] turns a dense id back into the file's. A file whose ids
//!   are already 0..n-1 (or 1..n for Matrix Market) keeps them. Ids up to 2^64-1 are read; a
//!   graph may have at most 2^32-1 vertices that occur in edges.
//!
//! - Update files ([`read_updates`]): batches of `+ U V` (insert) and `- U V` (delete) lines
//!   separated by `=` lines, over the graph file's ids, for a graph that changes.
//!
//! Every malformed input is an [`Error`] naming the file and the line; nothing panics.
//!
//! Invariants of an [`EdgeList`]: every endpoint is below `vertices`; every dense id occurs in
//! some edge; `ids.original(d)` is increasing in `d`.

mod compact;
mod parse;
mod updates;

pub use compact::IdMap;
pub use parse::{Format, Symmetry};
pub use updates::{Update, Updates, read_updates, read_updates_file};

use std::io::Read;
use std::path::Path;

/// Why a graph file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// A line is not what the format allows.
    #[error("{path}:{line}: {what}")]
    Line {
        /// The file.
        path: String,
        /// Its 1-based line number.
        line: u64,
        /// What is wrong, and what was found.
        what: String,
    },
    /// The file as a whole is not a graph.
    #[error("{path}: {what}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
}

/// What reading found, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Bytes of the file (compressed, for gzip).
    pub file_bytes: u64,
    /// Bytes of text parsed.
    pub text_bytes: u64,
    /// Lines of the file.
    pub lines: u64,
    /// Edges read (entries, for Matrix Market).
    pub edges_read: u64,
    /// Edges from a vertex to itself.
    pub self_loops: u64,
    /// The largest vertex id in the file (as written).
    pub largest_id: u64,
    /// Vertices the file declares (Matrix Market's `max(rows, columns)`; SNAP: the ids in
    /// edges).
    pub declared_vertices: u64,
    /// Declared vertices in no edge (not kept: a walk from one would have no step).
    pub isolated: u64,
}

/// A graph file as edges over dense ids.
#[derive(Clone, Debug)]
pub struct EdgeList {
    /// Vertices (dense ids `0..vertices`).
    pub vertices: u32,
    /// Edges `(from, to)` in file order.
    pub edges: Vec<(u32, u32)>,
    /// Dense ids back to the file's.
    pub ids: IdMap,
    /// Matrix Market's symmetry (`None` for SNAP).
    pub symmetry: Option<Symmetry>,
    /// What reading found.
    pub stats: LoadStats,
}

/// Read `path` as `format`; `progress` hears the bytes of the file read so far and its size.
pub fn read_file(
    path: &Path,
    format: Format,
    progress: impl FnMut(u64, u64),
) -> Result<EdgeList, Error> {
    let name = path.display().to_string();
    let io = |source| Error::Io {
        path: name.clone(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    read(file, size, &name, format, progress)
}

/// Read a graph of `format` from `reader` (`size` bytes; `name` names it in errors), gzip or
/// plain by its first two bytes.
pub fn read(
    reader: impl Read,
    size: u64,
    name: &str,
    format: Format,
    progress: impl FnMut(u64, u64),
) -> Result<EdgeList, Error> {
    let raw = parse::parse(reader, size, name, format, progress)?;
    compact::compact(raw, name)
}
