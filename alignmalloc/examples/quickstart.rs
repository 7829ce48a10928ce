//! Quickstart: host code fills one object per thread, a kernel allocates an object per thread
//! from device code and writes into it, the host reads the results, a second kernel frees what
//! the first allocated and the host frees its own objects.
//!
//! `cargo run --release -p alignmalloc --example quickstart` runs it on the GPU when there is one,
//! and on the sim backend (CPU warps through the same mailbox) otherwise.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use alignmalloc::cudarc::driver::{LaunchConfig, PushKernelArg};
use alignmalloc::{BackendKind, Handle, LaneStatus, Runtime};

const THREADS: u32 = 4096;
const WORDS: u32 = 512;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::builder().arena_bytes(1 << 30).build()?;
    println!("backend: {:?} ({})", rt.backend(), rt.backend_reason());

    // One object of WORDS words per thread, warp-arranged, filled from the host.
    let inputs = rt.alloc_arranged(THREADS, u64::from(WORDS) * 8)?;
    for (t, h) in inputs.handles().iter().enumerate() {
        let words: Vec<u8> = (0..u64::from(WORDS))
            .flat_map(|i| (t as u64 * 1000 + i).to_le_bytes())
            .collect();
        rt.write(*h, 0, &words)?;
    }

    // Each thread allocates an object from device code and writes twice its input into it; the
    // host checks every word; then each thread frees its object from device code (objects up to
    // 32 KiB come from the device caches, which only device code frees). `statuses` are the
    // frees' lane statuses.
    let statuses: Vec<u32> = match rt.backend() {
        BackendKind::Cuda => {
            let module = rt.compile("quickstart.cu", include_str!("quickstart.cu"))?;
            let double_it = module.load_function("double_it")?;
            let free_them = module.load_function("free_them")?;
            let stream = rt.stream()?;
            // Handles are kernel arguments as they are.
            let handles = stream.clone_htod(inputs.handles())?;
            let mut outputs = stream.alloc_zeros::<u64>(THREADS as usize)?;
            let mut statuses = stream.alloc_zeros::<u32>(THREADS as usize)?;
            let config = LaunchConfig::for_num_elems(THREADS);
            // SAFETY: double_it(mailbox, inputs, outputs, threads, words): both arrays hold
            // THREADS handles and live until the wait below.
            let launch = unsafe {
                rt.launch(&double_it, config, |args| {
                    args.arg(&handles)
                        .arg(&mut outputs)
                        .arg(&THREADS)
                        .arg(&WORDS);
                })
            }?;
            launch.wait()?;
            let made: Vec<Handle> = stream
                .clone_dtoh(&outputs)?
                .into_iter()
                .map(Handle)
                .collect();
            check(&rt, &made)?;
            // SAFETY: free_them(mailbox, outputs, threads, statuses): THREADS handles and
            // THREADS statuses, live until the wait below.
            let launch = unsafe {
                rt.launch(&free_them, config, |args| {
                    args.arg(&outputs).arg(&THREADS).arg(&mut statuses);
                })
            }?;
            launch.wait()?;
            stream.clone_dtoh(&statuses)?
        }
        BackendKind::Sim => {
            // The same kernels, played by CPU warps.
            let outputs: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
            rt.run_warps(THREADS / 32, |warp| {
                let first = warp.id() as usize * 32;
                let got = warp
                    .malloc(u32::MAX, &[u64::from(WORDS) * 8; 32])
                    .expect("room for the outputs");
                for (lane, out) in got.iter().enumerate() {
                    let input = inputs.handles()[first + lane];
                    for i in 0..u64::from(WORDS) {
                        warp.store(*out, i * 8, 2 * warp.load(input, i * 8));
                    }
                    outputs[first + lane].store(out.0, Ordering::Relaxed);
                }
            })?;
            let made: Vec<Handle> = outputs
                .iter()
                .map(|o| Handle(o.load(Ordering::Relaxed)))
                .collect();
            check(&rt, &made)?;
            let statuses: Vec<AtomicU32> = (0..THREADS).map(|_| AtomicU32::new(0)).collect();
            rt.run_warps(THREADS / 32, |warp| {
                let first = warp.id() as usize * 32;
                let mine: [Handle; 32] = std::array::from_fn(|lane| made[first + lane]);
                let freed = warp.free(u32::MAX, &mine);
                for (lane, status) in freed.lanes.iter().enumerate() {
                    statuses[first + lane].store(*status as u32, Ordering::Relaxed);
                }
            })?;
            statuses.into_iter().map(AtomicU32::into_inner).collect()
        }
    };
    assert!(
        statuses.iter().all(|&s| s == LaneStatus::Ok as u32),
        "every device free answered Ok"
    );
    rt.free_arranged(inputs)?;
    rt.drain_caches()?;
    assert!(rt.is_empty());
    println!("{THREADS} threads x {WORDS} words checked; everything freed");
    Ok(())
}

/// Read every result back through its handle.
fn check(rt: &Runtime, outputs: &[Handle]) -> Result<(), Box<dyn std::error::Error>> {
    let mut bytes = vec![0u8; WORDS as usize * 8];
    for (t, out) in outputs.iter().enumerate() {
        rt.read(*out, 0, &mut bytes)?;
        for (i, word) in bytes.chunks_exact(8).enumerate() {
            let got = u64::from_le_bytes(word.try_into()?);
            assert_eq!(
                got,
                2 * (t as u64 * 1000 + i as u64),
                "thread {t}, word {i}"
            );
        }
    }
    Ok(())
}
