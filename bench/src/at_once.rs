//! Work started at the same moment on several devices: one thread per device, all released by
//! one barrier, so what each device does overlaps as much as the host can make it.

use std::sync::Barrier;

/// Run `work` on every item, each on its own thread, released together; the results in the
/// items' order. The first error (or a panicked thread) is the result.
pub fn at_once<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> anyhow::Result<R> + Sync,
) -> anyhow::Result<Vec<R>> {
    let barrier = Barrier::new(items.len());
    std::thread::scope(|scope| {
        let running: Vec<_> = items
            .into_iter()
            .map(|item| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    work(item)
                })
            })
            .collect();
        running
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| anyhow::bail!("a device's thread panicked"))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_runs_once_in_order_and_errors_come_back() {
        let out = at_once(vec![1, 2, 3], |x| Ok(x * 10)).unwrap();
        assert_eq!(out, vec![10, 20, 30]);
        let err = at_once(vec![1, 2], |x| {
            anyhow::ensure!(x != 2, "item {x} failed");
            Ok(x)
        })
        .unwrap_err();
        assert!(err.to_string().contains("item 2"));
    }
}
