//! What the `--devices` commands share: the devices named for reports, and work started at the
//! same moment on all of them (one thread per device, all released by one barrier, so what each
//! device does overlaps as much as the host can make it).

use std::sync::Barrier;

use alignmalloc::Devices;

use crate::progress::note;

/// Each device's (ordinal, name), in the set's order, after saying which they are; a note when
/// runtimes share a GPU.
pub fn describe(devices: &Devices) -> anyhow::Result<Vec<(usize, String)>> {
    let listed = (0..devices.len())
        .map(|i| {
            let name = devices
                .get(i)?
                .device_info()
                .map_or_else(|| "CPU warps".to_string(), |d| d.name.clone());
            anyhow::Ok((devices.ordinal(i)?, name))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    note!(
        "devices: {}",
        listed
            .iter()
            .enumerate()
            .map(|(i, (o, name))| format!("{i}: ordinal {o} ({name})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if devices.shares_a_gpu() {
        note!(
            "an ordinal is listed twice: runtimes share one GPU (own arenas, mailboxes and service threads; one GPU's SMs and memory)"
        );
    }
    Ok(listed)
}

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
