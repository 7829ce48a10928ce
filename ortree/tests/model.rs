//! Property tests: `OrTree` and the binary baseline against a plain `Vec<bool>` model, and the
//! portion pool against the isolation rule of the driver's prefetcher.
//!
//! Each `OrTree` run replays well over 100 000 random operations in total (cases x operations x
//! sizes) and checks the invariants after every step.

use ortree::baseline::BinaryOrTree;
use ortree::{OrTree, OrTreeError, PortionError, PortionPool};
use proptest::prelude::*;

/// The reference: one bool per unit (true = free), answers by linear scan.
struct Model {
    free: Vec<bool>,
}

impl Model {
    fn new(len: usize) -> Self {
        Self {
            free: vec![true; len],
        }
    }

    fn find_run(&self, count: usize, align: usize) -> Result<Option<usize>, OrTreeError> {
        let len = self.free.len();
        if count == 0 {
            return Err(OrTreeError::ZeroLength);
        }
        if count > len {
            return Err(OrTreeError::RunTooLong {
                count,
                capacity: len,
            });
        }
        if !align.is_power_of_two() {
            return Err(OrTreeError::BadAlignment { align });
        }
        Ok((0..=len - count)
            .step_by(align)
            .find(|&s| self.free[s..s + count].iter().all(|&f| f)))
    }

    /// Next fit: the first fitting aligned start at or after `hint`, else the leftmost before it.
    fn find_run_from(
        &self,
        count: usize,
        align: usize,
        hint: usize,
    ) -> Result<Option<usize>, OrTreeError> {
        self.find_run(count, align)?;
        let len = self.free.len();
        let fits = |s: &usize| self.free[*s..*s + count].iter().all(|&f| f);
        let hint = hint.min(len);
        let after = (hint.next_multiple_of(align)..=len - count)
            .step_by(align)
            .find(fits);
        Ok(after.or_else(|| (0..=len - count).step_by(align).find(fits)))
    }

    fn set(&mut self, start: usize, count: usize, free: bool) {
        self.free[start..start + count].fill(free);
    }

    fn range_ok(&self, start: usize, count: usize) -> Result<(), OrTreeError> {
        if count == 0 {
            return Err(OrTreeError::ZeroLength);
        }
        if start.checked_add(count).is_none_or(|e| e > self.free.len()) {
            return Err(OrTreeError::OutOfRange {
                start,
                count,
                capacity: self.free.len(),
            });
        }
        Ok(())
    }

    fn alloc_at(&mut self, start: usize, count: usize) -> Result<(), OrTreeError> {
        self.range_ok(start, count)?;
        if let Some(i) = (start..start + count).find(|&u| !self.free[u]) {
            return Err(OrTreeError::NotFree { unit: i });
        }
        self.set(start, count, false);
        Ok(())
    }

    fn free_run(&mut self, start: usize, count: usize) -> Result<(), OrTreeError> {
        self.range_ok(start, count)?;
        if let Some(i) = (start..start + count).find(|&u| self.free[u]) {
            return Err(OrTreeError::NotAllocated { unit: i });
        }
        self.set(start, count, true);
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Op {
    AllocOne,
    AllocRun {
        count: usize,
        align_log2: u32,
    },
    /// A run by next fit from `hint`.
    AllocRunFrom {
        count: usize,
        align_log2: u32,
        hint: usize,
    },
    /// Free a run the model knows is live (picked by index).
    FreeLive {
        pick: usize,
    },
    /// Free an arbitrary range: often a double free or out of range.
    FreeAny {
        start: usize,
        count: usize,
    },
    AllocAt {
        start: usize,
        count: usize,
    },
    NextFree {
        from: usize,
    },
}

fn op(len: usize) -> impl Strategy<Value = Op> {
    let span = len + 3; // reach past the end
    prop_oneof![
        4 => Just(Op::AllocOne),
        4 => (0..=(len.min(200) + 1), 0u32..8)
            .prop_map(|(count, align_log2)| Op::AllocRun { count, align_log2 }),
        2 => (0..=(len.min(200) + 1), 0u32..8, 0..span)
            .prop_map(|(count, align_log2, hint)| Op::AllocRunFrom { count, align_log2, hint }),
        6 => any::<usize>().prop_map(|pick| Op::FreeLive { pick }),
        1 => (0..span, 0..(len.min(70) + 2)).prop_map(|(start, count)| Op::FreeAny { start, count }),
        1 => (0..span, 0..(len.min(70) + 2)).prop_map(|(start, count)| Op::AllocAt { start, count }),
        1 => (0..span).prop_map(|from| Op::NextFree { from }),
    ]
}

/// An allocation's answer must be the model's (`want`: its run, none, or the same argument
/// error), `NoSpace` for none. A successful one is applied to the model and listed as live.
fn expect_alloc(
    model: &mut Model,
    live: &mut Vec<(usize, usize)>,
    got: Result<usize, OrTreeError>,
    want: Result<Option<usize>, OrTreeError>,
    (count, align): (usize, usize),
) -> Result<(), TestCaseError> {
    match want {
        Ok(Some(s)) => {
            prop_assert_eq!(got, Ok(s));
            model.set(s, count, false);
            live.push((s, count));
        }
        Ok(None) => prop_assert_eq!(got, Err(OrTreeError::NoSpace { count, align })),
        Err(e) => prop_assert_eq!(got, Err(e)),
    }
    Ok(())
}

const SIZES: [usize; 7] = [1, 63, 64, 65, 4095, 4097, 32768];

fn run_ortree(len: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut tree = OrTree::new(len).unwrap();
    let mut model = Model::new(len);
    let mut live: Vec<(usize, usize)> = Vec::new();
    for op in ops {
        match *op {
            Op::AllocOne => {
                let want = model.find_run(1, 1).unwrap();
                let got = tree.alloc_one();
                match want {
                    Some(u) => {
                        prop_assert_eq!(got, Ok(u));
                        model.set(u, 1, false);
                        live.push((u, 1));
                    }
                    None => prop_assert_eq!(got, Err(OrTreeError::NoSpace { count: 1, align: 1 })),
                }
            }
            Op::AllocRun { count, align_log2 } => {
                let align = 1 << align_log2;
                prop_assert_eq!(tree.find_run(count, align), model.find_run(count, align));
                let got = tree.alloc_run(count, align);
                let want = model.find_run(count, align);
                expect_alloc(&mut model, &mut live, got, want, (count, align))?;
            }
            Op::AllocRunFrom {
                count,
                align_log2,
                hint,
            } => {
                let align = 1 << align_log2;
                let got = tree.alloc_run_from(count, align, hint);
                let want = model.find_run_from(count, align, hint);
                expect_alloc(&mut model, &mut live, got, want, (count, align))?;
            }
            Op::FreeLive { pick } => {
                if !live.is_empty() {
                    let (s, c) = live.swap_remove(pick % live.len());
                    prop_assert_eq!(tree.free_run(s, c), model.free_run(s, c));
                }
            }
            Op::FreeAny { start, count } => {
                let want = model.free_run(start, count);
                prop_assert_eq!(tree.free_run(start, count), want.clone());
                if want.is_ok() {
                    // Units freed behind the live list's back: drop runs that overlap them.
                    live.retain(|&(s, c)| s + c <= start || start + count <= s);
                    for &(s, c) in &live {
                        prop_assert!(model.free[s..s + c].iter().all(|f| !f));
                    }
                    // Allocated units outside any live run stay allocated but unlisted: fine.
                }
            }
            Op::AllocAt { start, count } => {
                let want = model.alloc_at(start, count);
                prop_assert_eq!(tree.alloc_at(start, count), want.clone());
                if want.is_ok() {
                    live.push((start, count));
                }
            }
            Op::NextFree { from } => {
                let want = (from..len).find(|&u| model.free[u]);
                prop_assert_eq!(tree.next_free(from), want);
            }
        }
        prop_assert_eq!(tree.check_invariants(), Ok(()));
        let model_free = model.free.iter().filter(|&&f| f).count();
        prop_assert_eq!(tree.free_count(), model_free);
    }
    // Every unit agrees with the model at the end.
    for u in 0..len {
        prop_assert_eq!(tree.is_free(u), Ok(model.free[u]));
    }
    Ok(())
}

fn run_binary(len: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut tree = BinaryOrTree::new(len).unwrap();
    let mut model = Model::new(len);
    let mut live: Vec<(usize, usize)> = Vec::new();
    for op in ops {
        match *op {
            Op::AllocOne | Op::AllocRun { .. } => {
                let (count, align) = match *op {
                    Op::AllocRun { count, align_log2 } => (count, 1 << align_log2),
                    _ => (1, 1),
                };
                let got = tree.alloc_run(count, align);
                let want = model.find_run(count, align);
                expect_alloc(&mut model, &mut live, got, want, (count, align))?;
            }
            Op::FreeLive { pick } if !live.is_empty() => {
                let (s, c) = live.swap_remove(pick % live.len());
                prop_assert_eq!(tree.free_run(s, c), model.free_run(s, c));
            }
            Op::NextFree { from } => {
                prop_assert_eq!(tree.next_free(from), (from..len).find(|&u| model.free[u]));
            }
            _ => {}
        }
        prop_assert_eq!(tree.free_count(), model.free.iter().filter(|&&f| f).count());
    }
    Ok(())
}

/// One property per tree size: about 48 cases x 600 operations each, ~200 000 operations a run.
macro_rules! per_size {
    ($($name:ident => $len:expr),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(ops in prop::collection::vec(op($len), 400..800)) {
                    run_ortree($len, &ops)?;
                    run_binary($len, &ops)?;
                }
            )*
        }
    };
}

per_size! {
    matches_model_len_1 => SIZES[0],
    matches_model_len_63 => SIZES[1],
    matches_model_len_64 => SIZES[2],
    matches_model_len_65 => SIZES[3],
    matches_model_len_4095 => SIZES[4],
    matches_model_len_4097 => SIZES[5],
    matches_model_len_32768 => SIZES[6],
}

/// The leaves covered by each node of the driver's prefetch tree over one VABlock (sizes 2..32).
fn tree_nodes() -> impl Iterator<Item = (u32, u32)> {
    (1..=5u32).flat_map(|k| {
        (0..32u32)
            .step_by(1 << k)
            .map(move |start| (start, 1u32 << k))
    })
}

#[derive(Clone, Debug)]
enum PoolOp {
    Alloc { log2: u32 },
    FreeLive { pick: usize },
    FreeAny { block: usize, leaf: u32 },
}

fn pool_op() -> impl Strategy<Value = PoolOp> {
    prop_oneof![
        5 => (0u32..6).prop_map(|log2| PoolOp::Alloc { log2 }),
        4 => any::<usize>().prop_map(|pick| PoolOp::FreeLive { pick }),
        1 => (0usize..10, 0u32..34).prop_map(|(block, leaf)| PoolOp::FreeAny { block, leaf }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Whatever the sequence of operations, (a) warptrees never overlap and keep their padding,
    /// (b) with every live warptree fully resident, no node of a block's prefetch tree that holds
    /// leaves of two warptrees is over the driver's 51% threshold, (c) the pool and arena stay
    /// consistent and empty blocks go back.
    #[test]
    fn portion_pool_keeps_warps_isolated(ops in prop::collection::vec(pool_op(), 1..300)) {
        let mut arena = OrTree::new(8).unwrap();
        let mut pool = PortionPool::new();
        let mut live = Vec::new();
        for op in ops {
            match op {
                PoolOp::Alloc { log2 } => match pool.alloc(&mut arena, log2) {
                    Ok(w) => {
                        prop_assert!(log2 <= 4);
                        prop_assert_eq!(w.first_leaf % (2 << log2), 0);
                        live.push(w);
                    }
                    Err(PortionError::BadWarptreeSize { .. }) => prop_assert!(log2 > 4),
                    Err(PortionError::ArenaFull) => {
                        // Only when no held block has room and the arena has no block left.
                        prop_assert_eq!(arena.free_count(), 0);
                        for b in 0..8 {
                            let room = pool.block(b).and_then(|t| t.largest_free_region_log2());
                            prop_assert!(room.is_none_or(|k| k < log2 + 1));
                        }
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                },
                PoolOp::FreeLive { pick } if !live.is_empty() => {
                    let w = live.swap_remove(pick % live.len());
                    prop_assert_eq!(pool.free(&mut arena, w.block, w.first_leaf), Ok(w));
                }
                PoolOp::FreeAny { block, leaf } => {
                    let known = live.iter().position(|w| w.block == block && w.first_leaf == leaf);
                    let got = pool.free(&mut arena, block, leaf);
                    match known {
                        Some(i) => prop_assert_eq!(got, Ok(live.swap_remove(i))),
                        None => prop_assert!(got.is_err()),
                    }
                }
                PoolOp::FreeLive { .. } => {}
            }
            prop_assert_eq!(pool.check_invariants(&arena), Ok(()));
            prop_assert_eq!(arena.check_invariants(), Ok(()));
            for block in 0..8usize {
                let owners: Vec<_> = live.iter().filter(|w| w.block == block).collect();
                let mut owner_of = [usize::MAX; 32];
                for (i, w) in owners.iter().enumerate() {
                    for leaf in w.first_leaf..w.first_leaf + (1 << w.log2_leaves) {
                        prop_assert_eq!(owner_of[leaf as usize], usize::MAX, "overlap");
                        owner_of[leaf as usize] = i;
                    }
                    // The padding half of the region holds no warptree.
                    let pad = w.first_leaf + (1 << w.log2_leaves);
                    for leaf in pad..pad + (1 << w.log2_leaves) {
                        prop_assert!(owners.iter().all(|o| leaf < o.first_leaf
                            || leaf >= o.first_leaf + (1 << o.log2_leaves)), "padding used");
                    }
                }
                for (start, size) in tree_nodes() {
                    let leaves = &owner_of[start as usize..(start + size) as usize];
                    let populated = leaves.iter().filter(|&&o| o != usize::MAX).count() as u32;
                    let mut distinct: Vec<_> = leaves.iter().filter(|&&o| o != usize::MAX).collect();
                    distinct.dedup();
                    distinct.sort();
                    distinct.dedup();
                    if distinct.len() > 1 {
                        prop_assert!(populated * 100 <= size * 51,
                            "node {start}+{size} holds {} warptrees at {populated}/{size}", distinct.len());
                    }
                }
            }
        }
        for w in live {
            pool.free(&mut arena, w.block, w.first_leaf).unwrap();
        }
        prop_assert_eq!(pool.block_count(), 0);
        prop_assert_eq!(arena.free_count(), 8);
    }
}
