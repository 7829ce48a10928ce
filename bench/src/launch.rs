//! How the CLI's kernels are launched: one thread per item, in blocks of up to 256 threads (a
//! whole number of warps), so small launches get one block of just the warps they need. Every
//! kernel checks its thread index against the item count, so the last block may run past it.

use cudarc::driver::LaunchConfig;

/// Threads per block (the geometry kernel of layout-parity needs more registers than a block of
/// 1024 threads can have).
const BLOCK: u64 = 256;

/// The launch of `items` threads.
pub fn grid(items: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (items.div_ceil(BLOCK).max(1) as u32, 1, 1),
        block_dim: (items.clamp(1, BLOCK).next_multiple_of(32) as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_whole_warps_of_at_most_256() {
        let g = grid(1000);
        assert_eq!((g.grid_dim.0, g.block_dim.0), (4, 256));
        let g = grid(40);
        assert_eq!((g.grid_dim.0, g.block_dim.0), (1, 64));
        let g = grid(32);
        assert_eq!((g.grid_dim.0, g.block_dim.0), (1, 32));
        let g = grid(262_144);
        assert_eq!(g.grid_dim.0 as u64 * g.block_dim.0 as u64, 262_144);
    }
}
