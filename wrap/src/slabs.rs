//! Size classes for the wrapped program's small allocations: objects of up to
//! [`MAX_SLAB_OBJECT`] bytes are carved from 2 MiB slabs (one VA block each, placed by the
//! resolver), one slab class per multiple of 256 B, so an allocation is a bitmap search and a
//! free a bit test, where a resolver chunk per object would cost a chunk record each.
//!
//! Invariants: a slab's `live` bits are exactly its objects handed out and not freed, and
//! `records` holds each live object's record index; a slab is in its class's `with_room` list
//! exactly when it has a clear bit, and no word before its `hint` has one; a free is judged
//! exactly: the start of a live object frees it, the start of a freed one is a double free,
//! anything else in a slab an interior pointer.

use std::collections::HashMap;

use orchestrator::LaneStatus;
use ortree::VABLOCK_BYTES;

/// Bytes of a slab: one VA block.
pub const SLAB_BYTES: u64 = VABLOCK_BYTES;
/// Objects of up to this many bytes come from slabs.
pub const MAX_SLAB_OBJECT: u64 = 4096;
/// Slab classes are multiples of this (the driver's allocation alignment).
pub const CLASS_STEP: u64 = 256;
const CLASSES: usize = (MAX_SLAB_OBJECT / CLASS_STEP) as usize;

/// The slab class of `bytes` (`1..=MAX_SLAB_OBJECT`), else `None`.
pub fn class_of(bytes: u64) -> Option<usize> {
    (1..=MAX_SLAB_OBJECT)
        .contains(&bytes)
        .then(|| (bytes.div_ceil(CLASS_STEP) - 1) as usize)
}

/// Bytes of one object of `class`.
pub fn class_bytes(class: usize) -> u64 {
    (class as u64 + 1) * CLASS_STEP
}

struct Slab {
    base: u64,
    class: usize,
    live: u32,
    /// No word before this one has a clear bit.
    hint: usize,
    /// Objects handed out and not freed.
    bits: Vec<u64>,
    /// Objects ever handed out (a free of one no longer live is a double free).
    used: Vec<u64>,
    /// The record index of each object, while live.
    records: Vec<u32>,
}

impl Slab {
    fn objects(&self) -> usize {
        (SLAB_BYTES / class_bytes(self.class)) as usize
    }
}

/// What an address in a slab is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlabHit {
    /// Not in any slab.
    NoSlab,
    /// In the live object starting at `base`, whose record is `record`.
    Live {
        /// The object's first byte.
        base: u64,
        /// Its record index.
        record: u32,
    },
    /// In a slab, in no live object.
    Dead,
}

/// The slabs of every class.
#[derive(Default)]
pub struct Slabs {
    slabs: Vec<Slab>,
    by_base: HashMap<u64, u32>,
    with_room: [Vec<u32>; CLASSES],
}

impl Slabs {
    /// An object of `class` for record `record`, from a slab with room; `None` when the class
    /// needs a new slab ([`Slabs::add`]).
    pub fn take(&mut self, class: usize, record: u32) -> Option<u64> {
        while let Some(&index) = self.with_room[class].last() {
            let slab = &mut self.slabs[index as usize];
            let objects = slab.objects();
            let free_word = slab.bits[slab.hint..]
                .iter()
                .position(|&w| w != u64::MAX)
                .map(|w| w + slab.hint);
            let object = free_word.and_then(|w| {
                let i = w * 64 + slab.bits[w].trailing_ones() as usize;
                (i < objects).then_some(i)
            });
            let Some(i) = object else {
                self.with_room[class].pop();
                continue;
            };
            slab.bits[i / 64] |= 1 << (i % 64);
            slab.used[i / 64] |= 1 << (i % 64);
            slab.records[i] = record;
            slab.live += 1;
            slab.hint = i / 64;
            if slab.live as usize == objects {
                self.with_room[class].pop();
            }
            return Some(slab.base + i as u64 * class_bytes(class));
        }
        None
    }

    /// A new slab of `class` at `base` (`SLAB_BYTES`, block aligned).
    pub fn add(&mut self, base: u64, class: usize) {
        let objects = (SLAB_BYTES / class_bytes(class)) as usize;
        let words = objects.div_ceil(64);
        let index = self.slabs.len() as u32;
        self.slabs.push(Slab {
            base,
            class,
            live: 0,
            hint: 0,
            bits: vec![0; words],
            used: vec![0; words],
            records: vec![0; objects],
        });
        self.by_base.insert(base, index);
        self.with_room[class].push(index);
    }

    /// What `address` is.
    pub fn find(&self, address: u64) -> SlabHit {
        let Some(&index) = self.by_base.get(&(address & !(SLAB_BYTES - 1))) else {
            return SlabHit::NoSlab;
        };
        let slab = &self.slabs[index as usize];
        let size = class_bytes(slab.class);
        let i = ((address - slab.base) / size) as usize;
        if i < slab.objects() && slab.bits[i / 64] >> (i % 64) & 1 == 1 {
            SlabHit::Live {
                base: slab.base + i as u64 * size,
                record: slab.records[i],
            }
        } else {
            SlabHit::Dead
        }
    }

    /// Free the object starting at `address` (in a slab): its record index, or why not.
    pub fn free(&mut self, address: u64) -> Result<u32, LaneStatus> {
        let Some(&index) = self.by_base.get(&(address & !(SLAB_BYTES - 1))) else {
            return Err(LaneStatus::InvalidHandle);
        };
        let slab = &mut self.slabs[index as usize];
        let size = class_bytes(slab.class);
        let offset = address - slab.base;
        let i = (offset / size) as usize;
        if !offset.is_multiple_of(size) || i >= slab.objects() {
            return Err(LaneStatus::InteriorPointer);
        }
        let bit = 1u64 << (i % 64);
        if slab.bits[i / 64] & bit == 0 {
            return Err(if slab.used[i / 64] & bit != 0 {
                LaneStatus::DoubleFree
            } else {
                LaneStatus::InvalidHandle
            });
        }
        slab.bits[i / 64] &= !bit;
        slab.live -= 1;
        slab.hint = slab.hint.min(i / 64);
        if slab.live as usize + 1 == slab.objects() {
            // It was full: it has room again.
            self.with_room[slab.class].push(index);
        }
        Ok(slab.records[i])
    }

    /// Slabs, and bytes of them, for the report.
    pub fn count(&self) -> (u64, u64) {
        (
            self.slabs.len() as u64,
            self.slabs.len() as u64 * SLAB_BYTES,
        )
    }

    /// The invariants of the module docs, and `live` against the bits.
    pub fn check(&self) -> Result<(), String> {
        for (index, slab) in self.slabs.iter().enumerate() {
            let bits: u32 = slab.bits.iter().map(|w| w.count_ones()).sum();
            if bits != slab.live {
                return Err(format!("slab {index}: {bits} bits set, {} live", slab.live));
            }
            if slab.bits.iter().zip(&slab.used).any(|(b, u)| b & !u != 0) {
                return Err(format!("slab {index}: a live object never handed out"));
            }
            let room = (slab.live as usize) < slab.objects();
            let listed = self.with_room[slab.class]
                .iter()
                .filter(|&&i| i == index as u32)
                .count();
            if listed != usize::from(room) {
                return Err(format!("slab {index}: room {room}, listed {listed} times"));
            }
            if slab.bits[..slab.hint].iter().any(|&w| w != u64::MAX) {
                return Err(format!("slab {index}: room before its hint"));
            }
            if self.by_base.get(&slab.base) != Some(&(index as u32)) {
                return Err(format!("slab {index} is not found by its base"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_multiples_of_256_up_to_4_kib() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(1), Some(0));
        assert_eq!(class_of(256), Some(0));
        assert_eq!(class_of(257), Some(1));
        assert_eq!(class_of(4096), Some(15));
        assert_eq!(class_of(4097), None);
        assert_eq!(class_bytes(15), 4096);
    }

    #[test]
    fn a_slab_fills_then_a_new_one_is_needed_and_frees_are_judged_exactly() {
        let mut slabs = Slabs::default();
        let class = class_of(4096).unwrap();
        assert_eq!(slabs.take(class, 0), None, "no slab yet");
        slabs.add(64 << 21, class);
        let per_slab = (SLAB_BYTES / 4096) as u32;
        let objects: Vec<u64> = (0..per_slab)
            .map(|r| slabs.take(class, r).unwrap())
            .collect();
        assert_eq!(slabs.take(class, 99), None, "full");
        slabs.check().unwrap();
        assert_eq!(objects[3], (64 << 21) + 3 * 4096);
        assert_eq!(
            slabs.find(objects[3] + 100),
            SlabHit::Live {
                base: objects[3],
                record: 3
            }
        );
        assert_eq!(
            slabs.free(objects[3] + 100),
            Err(LaneStatus::InteriorPointer)
        );
        assert_eq!(slabs.free(objects[3]), Ok(3));
        assert_eq!(slabs.find(objects[3]), SlabHit::Dead);
        assert_eq!(slabs.free(objects[3]), Err(LaneStatus::DoubleFree));
        assert_eq!(slabs.find(1 << 40), SlabHit::NoSlab);
        slabs.check().unwrap();
        // The freed place is handed out again, before any new slab.
        assert_eq!(slabs.take(class, 7), Some(objects[3]));
        assert_eq!(slabs.take(class, 8), None);
        slabs.add(65 << 21, class);
        assert_eq!(slabs.take(class, 9), Some(65 << 21));
        slabs.check().unwrap();
        // Never handed out: invalid, not a double free.
        let other = class_of(300).unwrap();
        slabs.add(66 << 21, other);
        assert_eq!(slabs.free((66 << 21) + 512), Err(LaneStatus::InvalidHandle));
        slabs.check().unwrap();
    }
}
