//! What a changing graph goes through, and the host's model of it.
//!
//! A [`Batch`] groups one step's changes by source vertex: each touched vertex first loses its
//! deleted neighbours (a neighbour deleted c times: its last c occurrences in the list; what
//! stays keeps its order), then gains its new neighbours at the end. [`HostLists`] applies batches
//! exactly as the GPU kernels do (device/kernels/graph_update.cuh), so the walks of every
//! system can be checked against walks over the host's lists; a list's capacity follows
//! [`resized_capacity`] on both sides.
//!
//! Three plans: edges streamed into an empty graph ([`stream_batches`]); rounds of Bingo's shape
//! ([`rounds`]: the graph but its last edges loaded, then each round inserts the next edges
//! and deletes as many edges drawn from the graph); and an update file's batches after loading
//! the graph ([`file_batches`]). A deletion always names an edge the graph holds then: drawn
//! from the graph, or refused with its line ([`HostLists::apply`]).

use anyhow::{bail, ensure};
use serde::Serialize;

use crate::graph::{Direction, IdMap};
use crate::patterns::mix;

/// How far a list grows when it overflows: by its capacity (doubled), half of it or a quarter
/// of it (at least to what it must hold). Less growth moves lists more often and leaves less
/// room unused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ListGrowth {
    #[default]
    Double,
    Half,
    Quarter,
}

impl ListGrowth {
    /// Every growth `--list-growth` offers.
    #[cfg(test)]
    pub const ALL: [ListGrowth; 3] = [ListGrowth::Double, ListGrowth::Half, ListGrowth::Quarter];

    /// A list of capacity c grows by c >> shift (graph_update.cuh's `growth_shift`).
    pub fn shift(self) -> u32 {
        match self {
            ListGrowth::Double => 0,
            ListGrowth::Half => 1,
            ListGrowth::Quarter => 2,
        }
    }
}

/// The capacity (in neighbours) of a list of `capacity` that must hold `needed`: none when it
/// is empty; grown by `growth` (at least to `needed`, at least 4) when it overflows; twice
/// `needed` (at least 4) when it falls to a quarter of its capacity; else kept. The twin of
/// `resized_capacity` in device/kernels/graph_update.cuh.
pub fn resized_capacity(capacity: u32, needed: u32, growth: ListGrowth) -> u32 {
    if needed == 0 {
        0
    } else if needed > capacity {
        capacity
            .saturating_add(capacity >> growth.shift())
            .max(needed)
            .max(4)
    } else if capacity > 4 && needed <= capacity / 4 {
        (needed * 2).max(4)
    } else {
        capacity
    }
}

/// One step's changes, grouped by source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Sources with changes, ascending.
    pub touched: Vec<u32>,
    /// `touched.len() + 1` offsets into `adds`.
    pub starts: Vec<u32>,
    /// The new neighbours, in arrival order within a source.
    pub adds: Vec<u32>,
    /// `touched.len() + 1` offsets into `drops`.
    pub drop_starts: Vec<u32>,
    /// The neighbours deleted, ascending within a source, applied before the adds.
    pub drops: Vec<u32>,
    /// The update file's line of each drop (empty when the batch was not read from a file).
    pub drop_lines: Vec<u64>,
}

impl Batch {
    /// The batch of directed `inserts` and `deletes` (`(source, neighbour, line)`; line 0 when
    /// no file asked for it).
    pub fn new(mut inserts: Vec<(u32, u32)>, mut deletes: Vec<(u32, u32, u64)>) -> Self {
        // Stable: arrival order within a source. Deletions by neighbour too (the kernels look
        // a neighbour up among a vertex's deletions by binary search).
        inserts.sort_by_key(|&(u, _)| u);
        deletes.sort_by_key(|&(u, v, _)| (u, v));
        let mut batch = Batch::default();
        let (mut i, mut d) = (0, 0);
        while i < inserts.len() || d < deletes.len() {
            let next = match (inserts.get(i), deletes.get(d)) {
                (Some(&(a, _)), Some(&(b, _, _))) => a.min(b),
                (Some(&(a, _)), None) => a,
                (None, Some(&(b, _, _))) => b,
                (None, None) => unreachable!("the loop runs while one is left"),
            };
            batch.touched.push(next);
            batch.starts.push(batch.adds.len() as u32);
            batch.drop_starts.push(batch.drops.len() as u32);
            while let Some(&(_, v)) = inserts.get(i).filter(|e| e.0 == next) {
                batch.adds.push(v);
                i += 1;
            }
            while let Some(&(_, v, line)) = deletes.get(d).filter(|e| e.0 == next) {
                batch.drops.push(v);
                batch.drop_lines.push(line);
                d += 1;
            }
        }
        batch.starts.push(batch.adds.len() as u32);
        batch.drop_starts.push(batch.drops.len() as u32);
        if batch.drop_lines.iter().all(|&l| l == 0) {
            batch.drop_lines.clear();
        }
        batch
    }

    /// Touched vertex `i`'s new neighbours.
    pub fn adds_of(&self, i: usize) -> &[u32] {
        &self.adds[self.starts[i] as usize..self.starts[i + 1] as usize]
    }

    /// Touched vertex `i`'s deleted neighbours.
    pub fn drops_of(&self, i: usize) -> &[u32] {
        &self.drops[self.drop_starts[i] as usize..self.drop_starts[i + 1] as usize]
    }
}

/// `edges` as directed edges: both ways for an undirected graph (a self-loop once).
fn directed(edges: &[(u32, u32)], direction: Direction) -> Vec<(u32, u32)> {
    let mut out = Vec::with_capacity(edges.len() * 2);
    for &(u, v) in edges {
        out.push((u, v));
        if direction == Direction::Undirected && u != v {
            out.push((v, u));
        }
    }
    out
}

/// One batch inserting all of `edges`: a graph loaded before its updates.
pub fn load_batch(edges: &[(u32, u32)], direction: Direction) -> Batch {
    Batch::new(directed(edges, direction), Vec::new())
}

/// Split `edges` into `count` batches of consecutive edges, insertions only (both directions of
/// an undirected edge in the same batch).
pub fn stream_batches(edges: &[(u32, u32)], direction: Direction, count: u32) -> Vec<Batch> {
    let count = count as usize;
    (0..count)
        .map(|b| {
            let part = &edges[b * edges.len() / count..(b + 1) * edges.len() / count];
            Batch::new(directed(part, direction), Vec::new())
        })
        .collect()
}

/// Bingo's rounds: the graph but its last `rounds * per_round` edges as one load batch, then
/// `rounds` batches, each inserting the next `per_round` edges and deleting `per_round` edges
/// drawn (seeded, uniformly) from those the graph holds before the round.
pub fn rounds(
    edges: &[(u32, u32)],
    direction: Direction,
    rounds: u32,
    per_round: u64,
    seed: u64,
) -> anyhow::Result<(Batch, Vec<Batch>)> {
    let held_out = u64::from(rounds) * per_round;
    ensure!(
        held_out < edges.len() as u64,
        "--rounds {rounds} x --round-edges {per_round} = {held_out} edges, but the graph has \
         only {}: the load must keep some",
        edges.len()
    );
    let split = edges.len() - held_out as usize;
    let mut present: Vec<(u32, u32)> = edges[..split].to_vec();
    let load = load_batch(&present, direction);
    let mut state = seed ^ 0x6A09_E667_F3BC_C908;
    let mut out = Vec::with_capacity(rounds as usize);
    for r in 0..rounds as usize {
        let mut dropped = Vec::with_capacity(per_round as usize);
        for _ in 0..per_round {
            state = mix(state);
            let at = (state % present.len() as u64) as usize;
            dropped.push(present.swap_remove(at));
        }
        let from = split + r * per_round as usize;
        let inserted = &edges[from..from + per_round as usize];
        let deletes = directed(&dropped, direction)
            .into_iter()
            .map(|(u, v)| (u, v, 0))
            .collect();
        out.push(Batch::new(directed(inserted, direction), deletes));
        present.extend_from_slice(inserted);
    }
    Ok((load, out))
}

/// An update file's batches over a graph of `vertices` whose file ids `ids` maps (`None`: ids
/// are dense already, as R-MAT's). An id the graph does not have is refused with its line.
pub fn file_batches(
    updates: &graphio::Updates,
    name: &str,
    ids: Option<&IdMap>,
    vertices: usize,
    direction: Direction,
) -> anyhow::Result<Vec<Batch>> {
    let dense = |id: u64, line: u64| -> anyhow::Result<u32> {
        let found = match ids {
            Some(map) => map.dense(id),
            None => u32::try_from(id).ok().filter(|&d| (d as usize) < vertices),
        };
        match found {
            Some(d) => Ok(d),
            None => bail!(
                "{name}:{line}: vertex {id} is not in the graph (updates change edges between \
                 the graph's vertices; add the vertex to the graph file)"
            ),
        }
    };
    let mut batches = Vec::with_capacity(updates.batches.len());
    for batch in &updates.batches {
        let mut inserts = Vec::new();
        let mut deletes = Vec::new();
        for u in batch {
            let (from, to) = (dense(u.from, u.line)?, dense(u.to, u.line)?);
            if u.insert {
                inserts.extend(directed(&[(from, to)], direction));
            } else {
                deletes.extend(
                    directed(&[(from, to)], direction)
                        .into_iter()
                        .map(|(a, b)| (a, b, u.line)),
                );
            }
        }
        batches.push(Batch::new(inserts, deletes));
    }
    Ok(batches)
}

/// A deletion of an edge the graph did not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingEdge {
    pub from: u32,
    pub to: u32,
    /// The update file's line (0: not from a file).
    pub line: u64,
}

/// The graph as the host keeps it: the CPU reference of every system's lists.
#[derive(Clone)]
pub struct HostLists {
    pub lists: Vec<Vec<u32>>,
    pub capacities: Vec<u32>,
    pub growth: ListGrowth,
}

impl HostLists {
    pub fn new(vertices: usize, growth: ListGrowth) -> Self {
        Self {
            lists: vec![Vec::new(); vertices],
            capacities: vec![0; vertices],
            growth,
        }
    }

    /// Apply `batch`. A deletion of a neighbour a list does not hold (as often as it is
    /// deleted) stops it there (the lists before it changed are kept changed): the caller
    /// refuses the batch. How many lists changed capacity (moved, or were freed).
    pub fn apply(&mut self, batch: &Batch) -> Result<u64, MissingEdge> {
        let mut resized = 0;
        for (i, &v) in batch.touched.iter().enumerate() {
            let list = &mut self.lists[v as usize];
            let drops = batch.drops_of(i);
            if !drops.is_empty() {
                // Each dropped value and how many of it are still to go; the list's last
                // occurrences go first.
                let mut owed: Vec<(u32, u32)> = Vec::new();
                for &x in drops {
                    match owed.last_mut() {
                        Some((value, n)) if *value == x => *n += 1,
                        _ => owed.push((x, 1)),
                    }
                }
                let mut goes = vec![false; list.len()];
                for (at, &x) in list.iter().enumerate().rev() {
                    if let Ok(k) = owed.binary_search_by_key(&x, |e| e.0)
                        && owed[k].1 > 0
                    {
                        owed[k].1 -= 1;
                        goes[at] = true;
                    }
                }
                if let Some(&(x, left)) = owed.iter().find(|e| e.1 > 0) {
                    // The first of the drops of x that found nothing (drops of one value keep
                    // the file's order).
                    let first = drops.iter().position(|&d| d == x).unwrap_or(0);
                    let copies = drops.iter().filter(|&&d| d == x).count();
                    let unmatched = first + copies - left as usize;
                    let line = batch
                        .drop_lines
                        .get(batch.drop_starts[i] as usize + unmatched)
                        .copied()
                        .unwrap_or(0);
                    return Err(MissingEdge {
                        from: v,
                        to: x,
                        line,
                    });
                }
                let mut at = 0;
                list.retain(|_| {
                    at += 1;
                    !goes[at - 1]
                });
            }
            list.extend_from_slice(batch.adds_of(i));
            let capacity = &mut self.capacities[v as usize];
            let wanted = resized_capacity(*capacity, list.len() as u32, self.growth);
            resized += u64::from(wanted != *capacity);
            *capacity = wanted;
            if wanted == 0 {
                *list = Vec::new();
            }
        }
        Ok(resized)
    }

    /// Apply `batch`, which the reference run accepted already (so a refusal is a bug); the
    /// lists it resized.
    pub fn follow(&mut self, batch: &Batch) -> anyhow::Result<u64> {
        self.apply(batch)
            .map_err(|e| anyhow::anyhow!("the reference refused this batch already: {e:?}"))
    }

    pub fn edges(&self) -> u64 {
        self.lists.iter().map(|l| l.len() as u64).sum()
    }

    /// Bytes the lists' capacities ask for.
    pub fn list_bytes(&self) -> u64 {
        self.capacities.iter().map(|&c| u64::from(c) * 4).sum()
    }

    /// The reference digests of `walkers` walks.
    pub fn digests(&self, walkers: u64, length: u32, seed: u64) -> Vec<u64> {
        let vertices = self.lists.len() as u32;
        let mut digests = vec![0u64; walkers as usize];
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let per = (walkers as usize).div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (chunk, part) in digests.chunks_mut(per).enumerate() {
                let lists = &self.lists;
                scope.spawn(move || {
                    for (i, d) in part.iter_mut().enumerate() {
                        let w = (chunk * per + i) as u64;
                        *d = super::super::walk_one(
                            &|v| &lists[v as usize],
                            vertices,
                            w,
                            length,
                            seed,
                            None,
                        );
                    }
                });
            }
        });
        digests
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stream_batches_group_by_source_in_arrival_order_and_keep_every_edge() {
        let edges = [(3, 1), (0, 2), (3, 0), (1, 1), (0, 5)];
        let b = stream_batches(&edges, Direction::Undirected, 2);
        assert_eq!(b.len(), 2);
        // First batch: (3,1), (0,2) both ways.
        assert_eq!(b[0].touched, vec![0, 1, 2, 3]);
        assert_eq!(b[0].starts, vec![0, 1, 2, 3, 4]);
        assert_eq!(b[0].adds, vec![2, 3, 0, 1]);
        assert_eq!(b[0].drop_starts, vec![0; 5]);
        // Second: (3,0), (1,1) once (a self-loop), (0,5); vertex 0 gets 3 then 5.
        assert_eq!(b[1].touched, vec![0, 1, 3, 5]);
        assert_eq!(b[1].adds, vec![3, 5, 1, 0, 0]);
        let directed = stream_batches(&edges, Direction::Directed, 5);
        let total: usize = directed.iter().map(|b| b.adds.len()).sum();
        assert_eq!(total, edges.len());
    }

    #[test]
    fn lists_grow_by_their_growth_shrink_at_a_quarter_and_go_when_empty() {
        use ListGrowth::{Double, Half, Quarter};
        let r = resized_capacity;
        assert_eq!(r(0, 1, Double), 4);
        assert_eq!(r(4, 5, Double), 8);
        assert_eq!(r(4, 20, Double), 20);
        assert_eq!(r(64, 17, Double), 64);
        assert_eq!(r(64, 16, Double), 32);
        assert_eq!(r(64, 1, Double), 4);
        assert_eq!(r(4, 1, Double), 4);
        assert_eq!(r(8, 0, Double), 0);
        assert_eq!(r(u32::MAX / 2 + 1, u32::MAX, Double), u32::MAX);
        assert_eq!((r(64, 65, Half), r(64, 65, Quarter)), (96, 80));
        assert_eq!((r(64, 100, Half), r(64, 81, Quarter)), (100, 81));
        assert_eq!(
            (r(0, 1, Half), r(3, 4, Quarter), r(4, 5, Quarter)),
            (4, 4, 5)
        );
        assert_eq!(r(u32::MAX - 10, u32::MAX, Quarter), u32::MAX);
        assert_eq!((r(64, 16, Half), r(64, 17, Quarter)), (32, 64));
    }

    #[test]
    fn deletions_take_the_last_occurrences_and_the_rest_keeps_its_order() {
        let mut host = HostLists::new(3, ListGrowth::Double);
        let load = Batch::new(
            vec![(0, 1), (0, 2), (0, 1), (0, 0), (0, 2), (0, 1)],
            Vec::new(),
        );
        host.apply(&load).unwrap();
        assert_eq!(host.lists[0], vec![1, 2, 1, 0, 2, 1]);
        assert_eq!(host.capacities[0], 6);
        // Drop 1 twice (the last two) and 2 once (the last), then add 1.
        let b = Batch::new(vec![(0, 1)], vec![(0, 2, 0), (0, 1, 0), (0, 1, 0)]);
        assert_eq!(b.drops, vec![1, 1, 2], "ascending within a source");
        host.apply(&b).unwrap();
        assert_eq!(host.lists[0], vec![1, 2, 0, 1]);
        // Down to one neighbour of capacity 6: a quarter or less, moved to 4.
        let b = Batch::new(Vec::new(), vec![(0, 1, 0), (0, 2, 0), (0, 0, 0)]);
        host.apply(&b).unwrap();
        assert_eq!((host.lists[0].clone(), host.capacities[0]), (vec![1], 4));
        let b = Batch::new(Vec::new(), vec![(0, 1, 0)]);
        host.apply(&b).unwrap();
        assert_eq!((host.lists[0].len(), host.capacities[0]), (0, 0));
        // A deletion of what is not there (or not as often) names the edge and the line.
        let b = Batch::new(Vec::new(), vec![(2, 1, 17)]);
        let missing = MissingEdge {
            from: 2,
            to: 1,
            line: 17,
        };
        assert_eq!(host.apply(&b), Err(missing));
        host.apply(&Batch::new(vec![(2, 1)], Vec::new())).unwrap();
        let b = Batch::new(Vec::new(), vec![(2, 1, 9), (2, 1, 17)]);
        assert_eq!(host.apply(&b).map_err(|e| e.line), Err(17));
    }

    #[test]
    fn rounds_load_all_but_the_held_out_edges_and_delete_only_what_is_there() {
        let edges: Vec<(u32, u32)> = (0..400u32).map(|i| (i % 37, (i * 7) % 41)).collect();
        let (load, rounds) = rounds(&edges, Direction::Undirected, 5, 20, 3).unwrap();
        assert_eq!(rounds.len(), 5);
        let mut host = HostLists::new(41, ListGrowth::Double);
        host.apply(&load).unwrap();
        for r in &rounds {
            let before = host.edges();
            // Fails if a round deletes an edge the graph does not hold then.
            host.apply(r).unwrap();
            assert_eq!(
                host.edges(),
                before + r.adds.len() as u64 - r.drops.len() as u64
            );
            // 20 edges each way, both directions but for self-loops.
            assert!((20..=40).contains(&r.drops.len()) && (20..=40).contains(&r.adds.len()));
        }
        assert!(super::rounds(&edges, Direction::Directed, 20, 20, 3).is_err());
    }

    #[test]
    fn update_files_map_ids_and_refuse_unknown_vertices_with_the_line() {
        let text = "+ 10 30\n- 30 20\n=\n+ 20 20\n";
        let updates = graphio::read_updates(text.as_bytes(), "u").unwrap();
        let g = graphio::read(
            "10 20\n20 30\n".as_bytes(),
            12,
            "g",
            graphio::Format::Snap,
            |_, _| {},
        )
        .unwrap();
        let b = file_batches(&updates, "u", Some(&g.ids), 3, Direction::Undirected).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].touched, vec![0, 1, 2]);
        assert_eq!(
            (b[0].adds.clone(), b[0].drops.clone()),
            (vec![2, 0], vec![2, 1])
        );
        assert_eq!(b[0].drop_lines, vec![2, 2]);
        assert_eq!(
            (b[1].touched.clone(), b[1].adds.clone()),
            (vec![1], vec![1])
        );
        let bad = graphio::read_updates("+ 10 20\n- 10 99\n".as_bytes(), "u").unwrap();
        let e = file_batches(&bad, "u", Some(&g.ids), 3, Direction::Undirected).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("u:2: vertex 99 is not in the graph"),
            "{e}"
        );
        let e = file_batches(&bad, "u", None, 50, Direction::Undirected).unwrap_err();
        assert!(e.to_string().starts_with("u:2: vertex 99"), "{e}");
    }

    proptest! {
        /// Random batches of insertions and deletions of held edges: the lists hold the model's
        /// multiset of edges, and every capacity is what resized_capacity allows.
        #[test]
        fn lists_hold_the_multiset_of_edges(
            steps in proptest::collection::vec(
                (proptest::collection::vec((0u32..6, 0u32..6), 0..12), 0usize..8, any::<u64>()),
                1..12,
            ),
            growth in proptest::sample::select(ListGrowth::ALL.to_vec()),
        ) {
            let mut host = HostLists::new(6, growth);
            let mut model: Vec<(u32, u32)> = Vec::new();
            for (inserts, dropping, pick) in steps {
                let mut deletes = Vec::new();
                let mut left = model.clone();
                let mut state = pick;
                for _ in 0..dropping.min(left.len()) {
                    state = mix(state);
                    let e = left.swap_remove((state % left.len() as u64) as usize);
                    deletes.push((e.0, e.1, 0));
                }
                model = left;
                model.extend_from_slice(&inserts);
                host.apply(&Batch::new(inserts, deletes)).unwrap();
                for v in 0..6u32 {
                    let mut want: Vec<u32> =
                        model.iter().filter(|e| e.0 == v).map(|e| e.1).collect();
                    let mut got = host.lists[v as usize].clone();
                    want.sort_unstable();
                    got.sort_unstable();
                    prop_assert_eq!(&got, &want);
                    let c = host.capacities[v as usize] as usize;
                    prop_assert!(got.len() <= c && (got.is_empty() == (c == 0)));
                    prop_assert!(c <= 4 || got.len() * 4 > c, "{} in {}", got.len(), c);
                }
            }
        }
    }
}
