//! A changing graph's update as `device/kernels/graph_update.cuh` makes it (`update_lists`, which
//! every list system of `alignmalloc walk` runs, and `rebuild_csr_vertex`, the GPU CSR's
//! rebuild), compiled as host C++ and run on host warps one after another, lists in the host's
//! heap. A test gives it the batches it gives the host's model and compares the lists, degrees,
//! capacities and statuses each leaves.
//!
//! Invariants: a batch is checked before the C++ sees it (its offsets end at its arrays, touched
//! vertices are in the graph), so the C++ reads and writes only inside the arrays handed over;
//! `HeapLists` owns every list the C++ allocated for it and frees them when dropped.

use std::fmt;

/// The header's `graph_update::Batch` as the C++ compiler lays it out.
#[repr(C)]
struct CBatch {
    touched: *const u32,
    starts: *const u32,
    adds: *const u32,
    drop_starts: *const u32,
    drops: *const u32,
    seen: *mut u32,
    count: u32,
}

unsafe extern "C" {
    fn am_hostcheck_graph_update(
        batch: CBatch,
        growth_shift: u32,
        warps: u32,
        allocations: u64,
        lists: *mut u64,
        degrees: *mut u32,
        capacities: *mut u32,
        statuses: *mut u32,
    ) -> i64;
    fn am_hostcheck_graph_list_free(list: u64);
    fn am_hostcheck_csr_rebuild(
        batch: CBatch,
        shift: *const i64,
        old_offsets: *const u64,
        old_neighbors: *mut u32,
        vertices: u32,
        offsets: *mut u64,
        neighbors: *mut u32,
        statuses: *mut u32,
    );
    fn am_hostcheck_graph_update_codes(out: *mut u32);
}

/// One batch grouped by source, as the header's `Batch` takes it: `touched` (ascending) gains
/// `adds[starts[t] .. starts[t + 1]]` and loses `drops[drop_starts[t] .. drop_starts[t + 1]]`
/// (ascending within a source).
#[derive(Clone, Copy)]
pub struct BatchArrays<'a> {
    /// Sources with changes, ascending.
    pub touched: &'a [u32],
    /// `touched.len() + 1` offsets into `adds`.
    pub starts: &'a [u32],
    /// New neighbours, in order within a source.
    pub adds: &'a [u32],
    /// `touched.len() + 1` offsets into `drops`.
    pub drop_starts: &'a [u32],
    /// Deleted neighbours, ascending within a source.
    pub drops: &'a [u32],
}

/// A batch the C++ would read or write outside its arrays with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadBatch(pub String);

impl fmt::Display for BadBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl BatchArrays<'_> {
    /// The batch for the C++, with `seen` (a zeroed word per drop, at least one).
    fn raw(&self, count: u32, seen: &mut [u32]) -> CBatch {
        CBatch {
            touched: self.touched.as_ptr(),
            starts: self.starts.as_ptr(),
            adds: self.adds.as_ptr(),
            drop_starts: self.drop_starts.as_ptr(),
            drops: self.drops.as_ptr(),
            seen: seen.as_mut_ptr(),
            count,
        }
    }

    fn check(&self, vertices: usize) -> Result<u32, BadBatch> {
        let count = self.touched.len();
        let offsets_fit = |offsets: &[u32], values: usize| {
            offsets.len() == count + 1
                && offsets[0] == 0
                && offsets.windows(2).all(|w| w[0] <= w[1])
                && offsets[count] as usize == values
        };
        if !offsets_fit(self.starts, self.adds.len())
            || !offsets_fit(self.drop_starts, self.drops.len())
        {
            return Err(BadBatch(
                "starts and drop_starts must be count + 1 rising offsets from 0 to the ends of \
                 adds and drops"
                    .into(),
            ));
        }
        if let Some(&v) = self.touched.iter().find(|&&v| v as usize >= vertices) {
            return Err(BadBatch(format!(
                "touched vertex {v} is not in a graph of {vertices}"
            )));
        }
        if self.touched.windows(2).any(|w| w[0] >= w[1]) {
            return Err(BadBatch("touched vertices must ascend".into()));
        }
        u32::try_from(count).map_err(|_| BadBatch("too many touched vertices".into()))
    }
}

/// The statuses the header gives a touched vertex: an allocation that failed, a free that
/// failed (plus the free's status), a deleted neighbour missing from its list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateCodes {
    /// The allocator gave no list (`kAllocFailed`).
    pub alloc_failed: u32,
    /// Added to a failed free's status (`kFreeFailed`).
    pub free_failed: u32,
    /// A deleted neighbour was not in its list (`kMissingEdge`).
    pub missing_edge: u32,
}

/// The header's status codes.
pub fn update_codes() -> UpdateCodes {
    let mut out = [0u32; 3];
    // SAFETY: writes three u32 into `out`.
    unsafe { am_hostcheck_graph_update_codes(out.as_mut_ptr()) };
    UpdateCodes {
        alloc_failed: out[0],
        free_failed: out[1],
        missing_edge: out[2],
    }
}

/// Per-vertex lists in the host's heap, changed only by the header's `update_lists`.
pub struct HeapLists {
    lists: Vec<u64>,
    degrees: Vec<u32>,
    capacities: Vec<u32>,
    growth_shift: u32,
    /// Heap blocks the updates allocated less those they freed.
    blocks: i64,
}

impl HeapLists {
    /// `vertices` empty lists that grow by capacity >> `growth_shift` when they overflow.
    pub fn new(vertices: usize, growth_shift: u32) -> Self {
        Self {
            lists: vec![0; vertices],
            degrees: vec![0; vertices],
            capacities: vec![0; vertices],
            growth_shift,
            blocks: 0,
        }
    }

    /// Apply `batch` with `warps` warps (at least one per 32 touched vertices, as a launch
    /// gives), the first `allocations` allocations succeeding (`None`: all of them); each
    /// touched vertex's status.
    pub fn update(
        &mut self,
        batch: BatchArrays<'_>,
        warps: u32,
        allocations: Option<u64>,
    ) -> Result<Vec<u32>, BadBatch> {
        let count = batch.check(self.lists.len())?;
        if u64::from(warps) * 32 < u64::from(count.max(1)) {
            // Lane l of warp w takes touched vertex l x warps + w: fewer would leave some out.
            return Err(BadBatch(format!(
                "{count} touched vertices need at least {} warps",
                count.max(1).div_ceil(32)
            )));
        }
        let mut seen = vec![0u32; batch.drops.len().max(1)];
        let mut statuses = vec![0u32; batch.touched.len().max(1)];
        // SAFETY: the batch's offsets end at its arrays and its touched vertices index the
        // per-vertex arrays (checked above); `seen` has a word per drop and `statuses` one per
        // touched vertex; the lists are this value's own heap blocks of their capacities.
        self.blocks += unsafe {
            am_hostcheck_graph_update(
                batch.raw(count, &mut seen),
                self.growth_shift,
                warps,
                allocations.unwrap_or(u64::MAX),
                self.lists.as_mut_ptr(),
                self.degrees.as_mut_ptr(),
                self.capacities.as_mut_ptr(),
                statuses.as_mut_ptr(),
            )
        };
        statuses.truncate(batch.touched.len());
        Ok(statuses)
    }

    /// Vertex `v`'s neighbours.
    pub fn list(&self, v: usize) -> &[u32] {
        if self.lists[v] == 0 || self.degrees[v] == 0 {
            return &[];
        }
        // SAFETY: a list is a heap block of `capacities[v]` u32 that update_lists allocated
        // and wrote its first `degrees[v]` of (degree <= capacity); it lives until the next
        // update or the drop, both of which need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.lists[v] as *const u32, self.degrees[v] as usize) }
    }

    /// Vertex `v`'s capacity in neighbours.
    pub fn capacity(&self, v: usize) -> u32 {
        self.capacities[v]
    }

    /// Vertices with a list (a heap block).
    pub fn held(&self) -> usize {
        self.lists.iter().filter(|&&l| l != 0).count()
    }

    /// Heap blocks the updates allocated less those they freed: [`Self::held`] unless an
    /// update lost a list or freed one twice.
    pub fn blocks(&self) -> i64 {
        self.blocks
    }
}

impl Drop for HeapLists {
    fn drop(&mut self) {
        for &list in self.lists.iter().filter(|&&l| l != 0) {
            // SAFETY: each nonzero entry is a heap block update_lists allocated and no list
            // names twice.
            unsafe { am_hostcheck_graph_list_free(list) };
        }
    }
}

/// A CSR: `offsets` (vertices + 1) into `neighbors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Csr {
    /// Where each vertex's neighbours start, and the end.
    pub offsets: Vec<u64>,
    /// Every vertex's neighbours, one after the other.
    pub neighbors: Vec<u32>,
}

/// The CSR after `batch`, rebuilt from `old` by the header's `rebuild_csr_vertex` (one warp per
/// vertex; the deletions are made in `old` first, as on the GPU); each touched vertex's status.
pub fn rebuild_csr(old: &mut Csr, batch: BatchArrays<'_>) -> Result<(Csr, Vec<u32>), BadBatch> {
    let vertices = old.offsets.len().saturating_sub(1);
    let count = batch.check(vertices)?;
    let vertices_u32 = u32::try_from(vertices).map_err(|_| BadBatch("too many vertices".into()))?;
    if old.offsets.first() != Some(&0)
        || old.offsets.windows(2).any(|w| w[0] > w[1])
        || old.offsets[vertices] as usize != old.neighbors.len()
    {
        return Err(BadBatch(
            "the old CSR's offsets must rise from 0 to its neighbours' end".into(),
        ));
    }
    let mut shift = Vec::with_capacity(batch.touched.len() + 1);
    let mut sum = 0i64;
    shift.push(0);
    for t in 0..batch.touched.len() {
        let adds = batch.starts[t + 1] - batch.starts[t];
        let drops = batch.drop_starts[t + 1] - batch.drop_starts[t];
        let degree =
            old.offsets[batch.touched[t] as usize + 1] - old.offsets[batch.touched[t] as usize];
        if u64::from(drops) > degree {
            return Err(BadBatch(format!(
                "vertex {} loses more neighbours than it has",
                batch.touched[t]
            )));
        }
        sum += i64::from(adds) - i64::from(drops);
        shift.push(sum);
    }
    // Vertex v writes at most its old degree plus its adds from old_offsets[v] + shift[k]
    // (more than its share only when a deletion found nothing), and shift[k] is at most the
    // adds before it: every write lands below the old edges plus all adds.
    let mut neighbors = vec![0u32; old.neighbors.len() + batch.adds.len()];
    let mut offsets = vec![0u64; vertices + 1];
    let mut seen = vec![0u32; batch.drops.len().max(1)];
    let mut statuses = vec![0u32; batch.touched.len().max(1)];
    // SAFETY: the batch's arrays and touched vertices fit (checked above); offsets has
    // vertices + 1 entries; no vertex loses more than its degree, so old_offsets[v] + shift[k]
    // >= 0, and every write to `neighbors` lands inside it (above); the old CSR is read and
    // changed only within each vertex's own range.
    unsafe {
        am_hostcheck_csr_rebuild(
            batch.raw(count, &mut seen),
            shift.as_ptr(),
            old.offsets.as_ptr(),
            old.neighbors.as_mut_ptr(),
            vertices_u32,
            offsets.as_mut_ptr(),
            neighbors.as_mut_ptr(),
            statuses.as_mut_ptr(),
        )
    };
    neighbors.truncate(offsets[vertices] as usize);
    statuses.truncate(batch.touched.len());
    Ok((Csr { offsets, neighbors }, statuses))
}
