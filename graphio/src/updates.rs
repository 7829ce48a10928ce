//! Update files: batches of edge insertions and deletions for a graph that changes.
//!
//! ```text
//! # a comment (also %); blank lines are skipped
//! + 3 5      insert an edge from 3 to 5
//! - 1 2      delete one edge from 1 to 2
//! =          end of a batch (the last batch needs none)
//! ```
//!
//! Ids are the graph file's own (before compaction). Within a batch the updates keep the file's
//! order. What an update means for a graph (that a deleted edge is there) is for the caller to
//! judge; each [`Update`] carries its line so that a refusal can name it. Plain or gzip, by
//! content.

use std::io::{BufRead, BufReader, Read};

use crate::Error;
use crate::parse::{is_blank, number, quote, trim_start};

/// One line's change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    /// Insert (`+`) or delete (`-`).
    pub insert: bool,
    /// The edge's source, as the file writes it.
    pub from: u64,
    /// The edge's target, as the file writes it.
    pub to: u64,
    /// The 1-based line it came from.
    pub line: u64,
}

/// An update file: its batches, none empty, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Updates {
    /// Each batch's updates in file order.
    pub batches: Vec<Vec<Update>>,
}

/// Read the update file at `path`.
pub fn read_updates_file(path: &std::path::Path) -> Result<Updates, Error> {
    let name = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: name.clone(),
        source,
    })?;
    read_updates(file, &name)
}

/// Read an update file from `reader` (`name` names it in errors), gzip or plain by its first
/// two bytes.
pub fn read_updates(reader: impl Read, name: &str) -> Result<Updates, Error> {
    let io = |source| Error::Io {
        path: name.to_string(),
        source,
    };
    let mut file = BufReader::new(reader);
    let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let mut text: Box<dyn BufRead + '_> = if gzip {
        Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(file)))
    } else {
        Box::new(file)
    };
    let error = |line: u64, what: String| Error::Line {
        path: name.to_string(),
        line,
        what,
    };
    let mut updates = Updates::default();
    let mut batch: Vec<Update> = Vec::new();
    let mut buffer = Vec::new();
    let mut line = 0u64;
    loop {
        buffer.clear();
        if text.read_until(b'\n', &mut buffer).map_err(io)? == 0 {
            break;
        }
        line += 1;
        let raw = buffer.strip_suffix(b"\n").unwrap_or(&buffer);
        let body = trim_start(raw);
        let body = &body[..body.len() - body.iter().rev().take_while(|&&b| is_blank(b)).count()];
        match body.first() {
            None | Some(b'#') | Some(b'%') => {}
            Some(b'=') if body.len() == 1 => {
                if batch.is_empty() {
                    return Err(error(line, "\"=\" ends a batch with no updates".into()));
                }
                updates.batches.push(std::mem::take(&mut batch));
            }
            Some(&op @ (b'+' | b'-')) if body.get(1).is_some_and(|&b| is_blank(b)) => {
                let ids = |text: &[u8]| -> Option<(u64, u64)> {
                    let (from, rest) = number(trim_start(text))?;
                    if !rest.first().is_some_and(|&b| is_blank(b)) {
                        return None;
                    }
                    let (to, rest) = number(trim_start(rest))?;
                    trim_start(rest).is_empty().then_some((from, to))
                };
                let Some((from, to)) = ids(&body[1..]) else {
                    return Err(error(
                        line,
                        format!(
                            "expected \"{} U V\" (two vertex ids below 2^64), found {}",
                            op as char,
                            quote(raw)
                        ),
                    ));
                };
                batch.push(Update {
                    insert: op == b'+',
                    from,
                    to,
                    line,
                });
            }
            Some(_) => {
                return Err(error(
                    line,
                    format!(
                        "expected \"+ U V\" (insert), \"- U V\" (delete) or \"=\" (end of a batch), found {}",
                        quote(raw)
                    ),
                ));
            }
        }
    }
    if !batch.is_empty() {
        updates.batches.push(batch);
    }
    if updates.batches.is_empty() {
        return Err(Error::File {
            path: name.to_string(),
            what: "no updates".into(),
        });
    }
    Ok(updates)
}
