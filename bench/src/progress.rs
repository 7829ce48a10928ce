//! Progress on stderr, and the one way the CLI writes to stderr while progress is shown.
//!
//! Invariants: every bar belongs to [`BARS`]; every stderr line (notes through [`note!`], log
//! lines through [`LogWriter`]) is written with the bars suspended, so no line lands inside a
//! bar; bars are drawn on stderr only, never on stdout, where the tables go; a bar is cleared
//! when its step ends, before a table is printed. Off a terminal the bars are hidden and the
//! notes and log lines are written as they are. Log lines carry colour only on a terminal.
//!
//! While a check provokes refusals on purpose ([`RefusalWarningsHeld`]), the warnings the
//! allocator logs for refused requests and bad frees are held back, unless the user asked for
//! log lines (`-v` or `RUST_LOG`); the check reports each outcome itself.

use std::io::{IsTerminal, Write};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

static BARS: LazyLock<MultiProgress> =
    LazyLock::new(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(5)));

/// How often a bar's clock is redrawn while its step runs.
const TICK: Duration = Duration::from_millis(250);

/// A bar over `len` steps of one job (`what`); its message names the step under way.
pub fn steps(len: u64, what: &str) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new(len)).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(TICK);
    bar
}

/// A bar over the `len` bytes of a file being read (the length may be set later).
pub fn bytes(len: u64, what: &str) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new(len)).with_style(
        ProgressStyle::with_template(
            "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {elapsed:>4}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(TICK);
    bar
}

/// A spinner for one step whose length is unknown (a kernel, a file being read).
pub fn spinner(what: &str) -> ProgressBar {
    let bar = BARS.add(ProgressBar::new_spinner()).with_style(
        ProgressStyle::with_template("{spinner} {prefix} {elapsed:>4} {wide_msg}")
            .expect("a valid template"),
    );
    bar.set_prefix(what.to_string());
    bar.enable_steady_tick(TICK);
    bar
}

/// Runs `f` with the bars taken off the terminal (for a line on stderr).
pub fn suspend<R>(f: impl FnOnce() -> R) -> R {
    BARS.suspend(f)
}

/// A line on stderr that never lands inside a bar.
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::progress::suspend(|| eprintln!($($arg)*))
    };
}
pub(crate) use note;

/// The log subscriber's writer: stderr, with the bars suspended for each line.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        suspend(|| std::io::stderr().write_all(buf)).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

/// The log filter as started, and the handle that swaps it while refusals are expected; set
/// only when the user asked for no log lines.
static QUIETABLE: OnceLock<(reload::Handle<EnvFilter, Registry>, String)> = OnceLock::new();

/// Where the allocator logs refused requests and bad frees.
const REFUSAL_TARGETS: [&str; 2] = ["orchestrator::service", "orchestrator::resolver"];

/// Log to stderr through [`LogWriter`] with `filter`; `chosen` says the user asked for this
/// filter (`-v`, `RUST_LOG`), which [`RefusalWarningsHeld`] then leaves alone.
pub fn init_logging(filter: String, chosen: bool) {
    let (layer, handle) = reload::Layer::new(EnvFilter::new(&filter));
    tracing_subscriber::registry()
        .with(layer)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(LogWriter)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .init();
    if !chosen {
        let _ = QUIETABLE.set((handle, filter));
    }
}

/// Holds back the warnings of refused requests and bad frees (see the module docs) until it
/// is dropped, for checks that provoke them on purpose; other warnings still show. The
/// allocator sums refusals up over a second or at its stop, so keep it until the runtime that
/// refused is dropped.
#[must_use = "the warnings come back when this is dropped"]
pub struct RefusalWarningsHeld(());

impl RefusalWarningsHeld {
    /// Hold them back from now on (a no-op when the user chose the log filter).
    pub fn new() -> Self {
        if let Some((handle, filter)) = QUIETABLE.get() {
            let quiet = REFUSAL_TARGETS.iter().fold(filter.clone(), |acc, target| {
                format!("{acc},{target}=error")
            });
            let _ = handle.reload(EnvFilter::new(quiet));
        }
        Self(())
    }
}

impl Drop for RefusalWarningsHeld {
    fn drop(&mut self) {
        if let Some((handle, filter)) = QUIETABLE.get() {
            let _ = handle.reload(EnvFilter::new(filter));
        }
    }
}
