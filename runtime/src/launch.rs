//! [`Launch`]: a kernel launched on the runtime's stream, waited for by blocking or by `.await`.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaEvent};

use crate::error::{Error, Result};

/// A launched kernel. Dropping it does not wait: the runtime waits for every kernel before it
/// stops its service thread.
pub struct Launch {
    context: Arc<CudaContext>,
    event: CudaEvent,
}

impl Launch {
    pub(crate) fn new(context: Arc<CudaContext>, event: CudaEvent) -> Self {
        Self { context, event }
    }

    /// Whether the kernel finished (never blocks).
    pub fn is_finished(&self) -> Result<bool> {
        Ok(self.event.is_complete())
    }

    /// Block until the kernel finished; a fault in it is returned as a driver error.
    pub fn wait(&self) -> Result<()> {
        self.event.synchronize()?;
        self.context.check_err()?;
        Ok(())
    }

    /// Wait without blocking the caller's executor: a helper thread blocks on the kernel's event
    /// and hands the outcome over (works under tokio or any other executor).
    pub async fn finished(self) -> Result<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("alignmalloc-launch-wait".into())
            .spawn(move || {
                let _ = tx.send(self.wait());
            })
            .map_err(|_| Error::CompletionLost)?;
        rx.await.map_err(|_| Error::CompletionLost)?
    }
}
