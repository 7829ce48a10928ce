//! Traces: what a program allocates, touches on the host, and accesses from kernels.
//!
//! A kernel is a list of warps; a warp is a list of instructions in program order; an
//! instruction is the addresses its lanes access together (one to 32 of them). Addresses must
//! lie in the trace's allocations.

use serde::{Deserialize, Serialize};

/// One managed allocation (`cudaMallocManaged`): its own VA blocks, clipped to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    /// First byte (a multiple of 64 KiB).
    pub base: u64,
    /// Length in bytes.
    pub bytes: u64,
}

/// One warp's instructions, stored flat.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarpTrace {
    /// End (exclusive) of each instruction in `addresses`.
    ends: Vec<u32>,
    addresses: Vec<u64>,
}

impl WarpTrace {
    /// Append an instruction whose lanes access `addresses` (empty: ignored).
    pub fn push(&mut self, addresses: &[u64]) {
        if addresses.is_empty() {
            return;
        }
        self.addresses.extend_from_slice(addresses);
        self.ends.push(self.addresses.len() as u32);
    }

    /// Instructions.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the warp has no instruction.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Instruction `i`'s addresses.
    pub fn instruction(&self, i: usize) -> &[u64] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.addresses[start..self.ends[i] as usize]
    }

    /// Every address of every instruction.
    pub fn addresses(&self) -> &[u64] {
        &self.addresses
    }
}

/// A kernel launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    /// A name for reports.
    pub name: String,
    /// Its warps, in launch order.
    pub warps: Vec<WarpTrace>,
}

/// Something the program does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// The host writes (or reads) `bytes` bytes from `base`: those pages become resident on the
    /// host, migrating back from the GPU where they were.
    HostTouch {
        /// First byte.
        base: u64,
        /// Bytes.
        bytes: u64,
    },
    /// A kernel runs to completion.
    Kernel(Kernel),
}

/// A program's allocations and events, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// Managed allocations.
    pub allocations: Vec<Allocation>,
    /// What happens, in order.
    pub events: Vec<Event>,
}
