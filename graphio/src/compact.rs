//! Dense vertex ids: the ids that occur in edges, numbered in the order of the file's ids.
//!
//! Two ways, by how sparse the ids are: when the largest id is at most a few times the number of
//! edges, a table indexed by id marks the ids in use (time and memory in proportion to the
//! edges); otherwise the endpoints are sorted and deduplicated and each is found by binary
//! search. Either way the cost grows with the edges, never with the largest id alone.

use crate::parse::Raw;
use crate::{EdgeList, Error};

/// Dense ids back to the file's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// Added to a dense id when the file's ids were already dense (1 for Matrix Market).
    base: u64,
    /// The file's id of each dense id, when they were compacted.
    ids: Option<Vec<u64>>,
    /// Dense ids in use (`0..vertices`).
    vertices: u32,
}

impl IdMap {
    /// The file's id of dense id `dense`.
    pub fn original(&self, dense: u32) -> u64 {
        match &self.ids {
            Some(ids) => ids[dense as usize],
            None => u64::from(dense) + self.base,
        }
    }

    /// The dense id of the file's id `original`, if it occurs in an edge of the graph.
    pub fn dense(&self, original: u64) -> Option<u32> {
        match &self.ids {
            // Increasing in the dense id (the module's invariant).
            Some(ids) => ids.binary_search(&original).ok().map(|d| d as u32),
            None => original
                .checked_sub(self.base)
                .filter(|&d| d < u64::from(self.vertices))
                .map(|d| d as u32),
        }
    }

    /// Whether the file's ids had gaps (and were renumbered).
    pub fn is_compacted(&self) -> bool {
        self.ids.is_some()
    }
}

/// Most vertices a graph may have (one id is kept free for "no vertex").
pub const MAX_VERTICES: u64 = u32::MAX as u64 - 1;

pub(crate) fn compact(raw: Raw, name: &str) -> Result<EdgeList, Error> {
    let Raw {
        edges,
        mut stats,
        symmetry,
        id_base,
    } = raw;
    let largest = edges.iter().map(|&(u, v)| u.max(v)).max().unwrap_or(0);
    let too_many = |n: u64| Error::File {
        path: name.to_string(),
        what: format!("{n} vertices occur in edges; at most {MAX_VERTICES} are supported"),
    };
    let dense_table = largest < MAX_VERTICES && largest / 4 <= edges.len() as u64 + 1024;
    let (vertices, edges, ids) = if dense_table {
        let mut index = vec![u32::MAX; largest as usize + 1];
        for &(u, v) in &edges {
            index[u as usize] = 0;
            index[v as usize] = 0;
        }
        let mut next = 0u32;
        for slot in index.iter_mut().filter(|s| **s == 0) {
            *slot = next;
            next += 1;
        }
        let gaps = u64::from(next) != largest + 1;
        let ids = gaps.then(|| {
            index
                .iter()
                .enumerate()
                .filter(|&(_, &d)| d != u32::MAX)
                .map(|(id, _)| id as u64 + id_base)
                .collect()
        });
        let edges = edges
            .into_iter()
            .map(|(u, v)| (index[u as usize], index[v as usize]))
            .collect();
        (next, edges, ids)
    } else {
        let mut ids: Vec<u64> = Vec::with_capacity(edges.len() * 2);
        for &(u, v) in &edges {
            ids.push(u);
            ids.push(v);
        }
        radix_sort(&mut ids);
        ids.dedup();
        if ids.len() as u64 > MAX_VERTICES {
            return Err(too_many(ids.len() as u64));
        }
        let table = DenseIds::new(&ids);
        let edges = edges
            .into_iter()
            .map(|(u, v)| (table.get(u), table.get(v)))
            .collect();
        let vertices = ids.len() as u32;
        ids.iter_mut().for_each(|id| *id += id_base);
        (vertices, edges, Some(ids))
    };
    if symmetry.is_none() {
        stats.declared_vertices = u64::from(vertices);
    }
    stats.isolated = stats.declared_vertices.saturating_sub(u64::from(vertices));
    Ok(EdgeList {
        vertices,
        edges,
        ids: IdMap {
            base: id_base,
            ids,
            vertices,
        },
        symmetry,
        stats,
    })
}

/// Sort `keys` by LSD radix sort on 16-bit digits, skipping digits every key shares (the high
/// ones, for ids below 2^48): linear in the keys, where a comparison sort of millions of ids
/// costs several times more.
fn radix_sort(keys: &mut Vec<u64>) {
    let mut scratch = vec![0u64; keys.len()];
    for digit in 0..4 {
        let shift = digit * 16;
        let mut counts = vec![0usize; 1 << 16];
        for &k in keys.iter() {
            counts[(k >> shift) as usize & 0xFFFF] += 1;
        }
        if counts.contains(&keys.len()) {
            continue;
        }
        let mut at = 0;
        for c in counts.iter_mut() {
            (at, *c) = (at + *c, at);
        }
        for &k in keys.iter() {
            let bucket = &mut counts[(k >> shift) as usize & 0xFFFF];
            scratch[*bucket] = k;
            *bucket += 1;
        }
        std::mem::swap(keys, &mut scratch);
    }
}

/// The dense id of each id in a sorted, deduplicated list, by open addressing (a binary search
/// per endpoint would cost a cache miss per step).
struct DenseIds {
    keys: Vec<u64>,
    /// Dense id + 1; 0 for an empty slot.
    values: Vec<u32>,
    shift: u32,
}

impl DenseIds {
    fn new(ids: &[u64]) -> Self {
        let slots = (ids.len() * 2).next_power_of_two().max(16);
        let mut table = Self {
            keys: vec![0; slots],
            values: vec![0; slots],
            shift: 64 - slots.trailing_zeros(),
        };
        let mask = slots - 1;
        for (dense, &id) in ids.iter().enumerate() {
            let mut slot = table.slot(id);
            while table.values[slot] != 0 {
                slot = (slot + 1) & mask;
            }
            table.keys[slot] = id;
            table.values[slot] = dense as u32 + 1;
        }
        table
    }

    fn slot(&self, id: u64) -> usize {
        (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The dense id of `id`, which must be in the list.
    fn get(&self, id: u64) -> u32 {
        let mask = self.keys.len() - 1;
        let mut slot = self.slot(id);
        loop {
            let value = self.values[slot];
            assert!(value != 0, "every endpoint is in the table");
            if self.keys[slot] == id {
                return value - 1;
            }
            slot = (slot + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_sorts_any_ids() {
        let mut x = 0x1234_5678_9ABC_DEF0u64;
        let mut keys: Vec<u64> = (0..5000)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match i % 3 {
                    0 => x,
                    1 => x % 1000,
                    _ => u64::MAX - x % 7,
                }
            })
            .collect();
        let mut want = keys.clone();
        want.sort_unstable();
        radix_sort(&mut keys);
        assert_eq!(keys, want);
        let mut same = vec![42u64; 10];
        radix_sort(&mut same);
        assert_eq!(same, vec![42; 10]);
    }

    #[test]
    fn dense_ids_find_every_id() {
        let mut ids: Vec<u64> = (0..999u64).map(|i| i * i * 7919).collect();
        ids.push(u64::MAX);
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        let table = DenseIds::new(&sorted);
        for (d, &id) in sorted.iter().enumerate() {
            assert_eq!(table.get(id), d as u32);
        }
    }
}
