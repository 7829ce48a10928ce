//! The byte-level parser: blocks of the (decompressed) file, split at newlines, each line read
//! in one pass. A line is never copied; only a malformed one is quoted in its error.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;

use crate::{Error, LoadStats};

/// A graph file's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// SNAP edge list.
    Snap,
    /// Matrix Market coordinate file.
    MatrixMarket,
}

/// Matrix Market's symmetry field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symmetry {
    /// Each entry is one directed edge.
    General,
    /// Each entry stands for both directions (`symmetric`, `skew-symmetric`, `hermitian`).
    Symmetric,
}

/// Edges with the file's ids (Matrix Market's made 0-based), before compaction.
pub(crate) struct Raw {
    pub edges: Vec<(u64, u64)>,
    pub stats: LoadStats,
    pub symmetry: Option<Symmetry>,
    /// What to add to a 0-based id to get the file's (1 for Matrix Market).
    pub id_base: u64,
}

const BLOCK: usize = 1 << 20;

/// Counts the bytes read from the file itself (compressed, for gzip), where the progress
/// callback can see them while a decoder owns the reader.
struct Counting<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

/// What the next line may be.
enum Matrix {
    /// A SNAP edge (or a comment).
    Snap,
    /// Matrix Market's banner.
    Banner,
    /// Matrix Market's size line.
    Size,
    /// A Matrix Market entry.
    Entries { rows: u64, cols: u64, entries: u64 },
}

struct Parser<'a> {
    name: &'a str,
    matrix: Matrix,
    raw: Raw,
}

pub(crate) fn parse(
    reader: impl Read,
    size: u64,
    name: &str,
    format: Format,
    mut progress: impl FnMut(u64, u64),
) -> Result<Raw, Error> {
    let io = |source| Error::Io {
        path: name.to_string(),
        source,
    };
    let read = Rc::new(Cell::new(0u64));
    let mut file = BufReader::with_capacity(
        BLOCK,
        Counting {
            inner: reader,
            read: read.clone(),
        },
    );
    let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
    // About one edge per 10 bytes of text (per 3 bytes of gzip); capped, so that a lying size
    // never reserves much.
    let expected_edges = (size / if gzip { 3 } else { 10 }).min(1 << 26) as usize;
    let mut parser = Parser {
        name,
        matrix: match format {
            Format::Snap => Matrix::Snap,
            Format::MatrixMarket => Matrix::Banner,
        },
        raw: Raw {
            edges: Vec::with_capacity(expected_edges),
            stats: LoadStats {
                file_bytes: size,
                ..LoadStats::default()
            },
            symmetry: None,
            id_base: u64::from(format == Format::MatrixMarket),
        },
    };
    let mut text: Box<dyn Read + '_> = if gzip {
        Box::new(flate2::bufread::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    let mut block = vec![0u8; BLOCK];
    // Bytes of an unfinished line carried to the next block.
    let mut carried = 0usize;
    loop {
        if carried == block.len() {
            // A line longer than a block: grow (no edge line is that long; the line's parse
            // will name what is wrong with it).
            block.resize(block.len() * 2, 0);
        }
        let n = text.read(&mut block[carried..]).map_err(io)?;
        let end = carried + n;
        parser.raw.stats.text_bytes += n as u64;
        let mut start = 0;
        while let Some(at) = block[start..end].iter().position(|&b| b == b'\n') {
            parser.line(&block[start..start + at])?;
            start += at + 1;
        }
        if n == 0 {
            if start < end {
                parser.line(&block[start..end])?;
            }
            break;
        }
        block.copy_within(start..end, 0);
        carried = end - start;
        progress(read.get(), size);
    }
    progress(read.get(), size);
    parser.finish()
}

/// The number at the start of `text`, and the rest; `None` if it does not start with a digit
/// or the number does not fit 64 bits.
pub(crate) fn number(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 {
        return None;
    }
    let mut value = 0u64;
    for &d in &text[..digits] {
        value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some((value, &text[digits..]))
}

pub(crate) fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

pub(crate) fn trim_start(text: &[u8]) -> &[u8] {
    let n = text.iter().take_while(|&&b| is_blank(b)).count();
    &text[n..]
}

/// A line quoted in an error: at most 60 characters.
pub(crate) fn quote(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(60)]);
    let more = if line.len() > 60 { "..." } else { "" };
    format!("{:?}{more}", text.trim_end())
}

impl Parser<'_> {
    fn error(&self, what: String) -> Error {
        Error::Line {
            path: self.name.to_string(),
            line: self.raw.stats.lines,
            what,
        }
    }

    /// `N` whole numbers separated by blanks at the start of `text` (more fields may
    /// follow).
    fn numbers<const N: usize>(
        &self,
        text: &[u8],
        expected: &str,
        line: &[u8],
    ) -> Result<[u64; N], Error> {
        let mut out = [0u64; N];
        let mut rest = text;
        for slot in &mut out {
            rest = trim_start(rest);
            let Some((value, after)) = number(rest) else {
                let field = rest.split(|&b| is_blank(b)).next().unwrap_or(&[]);
                return Err(self.error(if field.is_empty() {
                    format!("expected {expected}, found {}", quote(line))
                } else if field.iter().all(u8::is_ascii_digit) {
                    format!(
                        "{} is too large (ids and counts are below 2^64)",
                        quote(field)
                    )
                } else {
                    format!(
                        "expected {expected}, found {} in {}",
                        quote(field),
                        quote(line)
                    )
                }));
            };
            if !after.first().is_none_or(|&b| is_blank(b)) {
                return Err(self.error(format!("expected {expected}, found {}", quote(line))));
            }
            *slot = value;
            rest = after;
        }
        Ok(out)
    }

    fn line(&mut self, line: &[u8]) -> Result<(), Error> {
        self.raw.stats.lines += 1;
        let text = trim_start(line);
        if let Matrix::Banner = self.matrix {
            return self.banner(line);
        }
        if text.is_empty() || text[0] == b'#' || text[0] == b'%' {
            return Ok(());
        }
        match self.matrix {
            Matrix::Size => {
                let [rows, cols, entries] =
                    self.numbers::<3>(text, "\"rows columns entries\"", line)?;
                self.raw.stats.declared_vertices = rows.max(cols);
                self.matrix = Matrix::Entries {
                    rows,
                    cols,
                    entries,
                };
            }
            Matrix::Entries {
                rows,
                cols,
                entries,
            } => {
                let [r, c] = self.numbers::<2>(text, "\"row column [value]\"", line)?;
                if r == 0 || c == 0 || r > rows || c > cols {
                    return Err(self.error(format!(
                        "entry ({r}, {c}) outside the {rows} x {cols} matrix (indices start at 1)"
                    )));
                }
                if self.raw.stats.edges_read == entries {
                    return Err(self.error(format!(
                        "more entries than the {entries} the size line announced"
                    )));
                }
                self.edge(r - 1, c - 1);
            }
            Matrix::Snap => {
                let [u, v] = self.numbers::<2>(text, "two vertex ids", line)?;
                self.edge(u, v);
            }
            Matrix::Banner => unreachable!("the banner is read above"),
        }
        Ok(())
    }

    fn edge(&mut self, u: u64, v: u64) {
        let s = &mut self.raw.stats;
        s.edges_read += 1;
        s.self_loops += u64::from(u == v);
        s.largest_id = s.largest_id.max(u.max(v) + self.raw.id_base);
        self.raw.edges.push((u, v));
    }

    fn banner(&mut self, line: &[u8]) -> Result<(), Error> {
        let text = String::from_utf8_lossy(line).to_ascii_lowercase();
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.len() < 5 || words[0] != "%%matrixmarket" || words[1] != "matrix" {
            return Err(self.error(format!(
                "not a Matrix Market file (expected \"%%MatrixMarket matrix coordinate ...\", found {})",
                quote(line)
            )));
        }
        if words[2] != "coordinate" {
            return Err(self.error(format!(
                "{} matrices are not graphs; only coordinate files can be read",
                words[2]
            )));
        }
        self.raw.symmetry = Some(match words[4] {
            "general" => Symmetry::General,
            "symmetric" | "skew-symmetric" | "hermitian" => Symmetry::Symmetric,
            other => return Err(self.error(format!("unknown symmetry {other:?}"))),
        });
        self.matrix = Matrix::Size;
        Ok(())
    }

    fn finish(self) -> Result<Raw, Error> {
        let file = |what: String| Error::File {
            path: self.name.to_string(),
            what,
        };
        match self.matrix {
            Matrix::Banner => return Err(file("empty file".into())),
            Matrix::Size => return Err(file("no size line".into())),
            Matrix::Entries { entries, .. } if self.raw.stats.edges_read != entries => {
                return Err(file(format!(
                    "{} entries, the size line announced {entries}",
                    self.raw.stats.edges_read
                )));
            }
            _ => {}
        }
        if self.raw.edges.is_empty() {
            return Err(file("no edges".into()));
        }
        let mut raw = self.raw;
        if raw.symmetry.is_none() {
            raw.stats.declared_vertices = 0;
        }
        Ok(raw)
    }
}
