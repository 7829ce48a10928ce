//! Quickstart: host code fills one object per thread, a kernel allocates an object per thread
//! from device code and writes into it, the host reads the results and frees everything.
//!
//! `cargo run --release -p runtime --example quickstart` runs it on the GPU when there is one,
//! and on the sim backend (CPU warps through the same mailbox) otherwise.

use runtime::cudarc::driver::{LaunchConfig, PushKernelArg};
use runtime::{BackendKind, Handle, Runtime};

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

    let outputs: Vec<Handle> = match rt.backend() {
        BackendKind::Cuda => {
            let module = rt.compile("quickstart.cu", include_str!("quickstart.cu"))?;
            let kernel = module.load_function("double_it")?;
            let stream = rt.stream()?;
            let handles = stream.clone_htod(&inputs.words())?;
            let mut outputs = stream.alloc_zeros::<u64>(THREADS as usize)?;
            let config = LaunchConfig::for_num_elems(THREADS);
            // SAFETY: double_it(mailbox, inputs, outputs, threads, words): both arrays hold
            // THREADS handles and live until the wait below.
            let launch = unsafe {
                rt.launch(&kernel, config, |args| {
                    args.arg(&handles)
                        .arg(&mut outputs)
                        .arg(&THREADS)
                        .arg(&WORDS);
                })
            }?;
            launch.wait()?;
            stream
                .clone_dtoh(&outputs)?
                .into_iter()
                .map(Handle)
                .collect()
        }
        BackendKind::Sim => {
            // The same kernel, played by CPU warps.
            let outputs: Vec<_> = (0..THREADS)
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect();
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
                    outputs[first + lane].store(out.0, std::sync::atomic::Ordering::Relaxed);
                }
            })?;
            outputs
                .into_iter()
                .map(|o| Handle(o.into_inner()))
                .collect()
        }
    };

    // Read every result back through its handle; the host frees what the kernel allocated.
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
        rt.free(*out)?;
    }
    rt.free_arranged(inputs)?;
    assert!(rt.is_empty());
    println!("{THREADS} threads x {WORDS} words checked; everything freed");
    Ok(())
}
