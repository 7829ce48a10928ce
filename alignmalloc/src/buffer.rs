//! [`Buffer`]: a typed object in the arena that host code owns.
//!
//! Invariants: a buffer holds one live plain object of at least `len * size_of::<T>()` bytes
//! from the runtime it borrows, or, after [`Buffer::into_handle`], nothing (the handle's new
//! owner frees it). Dropping a buffer frees its object once; a failed free is logged, since drop
//! cannot return it.

use std::marker::PhantomData;
use std::mem::size_of;

use bytemuck::Pod;
use runtime::{Error, Handle, Result, Runtime};

/// `len` values of `T` in one plain (thread-contiguous) object of the arena, freed on drop.
/// Reads and writes go through the runtime, so they work the same on the GPU's managed memory and
/// on the sim backend; kernels take [`Buffer::handle`] as an argument.
pub struct Buffer<'rt, T: Pod> {
    rt: &'rt Runtime,
    handle: Handle,
    len: usize,
    values: PhantomData<T>,
}

impl<'rt, T: Pod> Buffer<'rt, T> {
    /// Room for `len` values of `T` (contents unspecified until written). `len` 0, or a size over
    /// the runtime's limit, is refused with the runtime's error.
    pub fn new(rt: &'rt Runtime, len: usize) -> Result<Self> {
        let bytes =
            (len as u64)
                .checked_mul(size_of::<T>() as u64)
                .ok_or(Error::SizeOverLimit {
                    bytes: u64::MAX,
                    limit: translator::geometry::MAX_LANE_BYTES_LIMIT,
                })?;
        let handle = rt.alloc(bytes)?;
        Ok(Self {
            rt,
            handle,
            len,
            values: PhantomData,
        })
    }

    /// A buffer holding `values`.
    pub fn from_slice(rt: &'rt Runtime, values: &[T]) -> Result<Self> {
        let buffer = Self::new(rt, values.len())?;
        buffer.write(0, values)?;
        Ok(buffer)
    }

    /// How many values it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no values (never: a buffer has at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The object's handle, for a kernel argument (`am::ptr<T>` in the kernel). The buffer still
    /// owns the object.
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Write `values` from value `start` on; past the end is [`Error::OutOfBounds`] and writes
    /// nothing.
    pub fn write(&self, start: usize, values: &[T]) -> Result<()> {
        self.check(start, values.len())?;
        self.rt.write(
            self.handle,
            (start * size_of::<T>()) as u64,
            bytemuck::cast_slice(values),
        )
    }

    /// Read `out.len()` values from value `start` on; past the end is [`Error::OutOfBounds`].
    pub fn read(&self, start: usize, out: &mut [T]) -> Result<()> {
        self.check(start, out.len())?;
        self.rt.read(
            self.handle,
            (start * size_of::<T>()) as u64,
            bytemuck::cast_slice_mut(out),
        )
    }

    /// Every value, copied out.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        self.read(0, &mut out)?;
        Ok(out)
    }

    /// Give up ownership: the object stays allocated and whoever holds the handle frees it (a
    /// kernel with `am::free`, or [`Runtime::free`]).
    pub fn into_handle(self) -> Handle {
        let handle = self.handle;
        std::mem::forget(self);
        handle
    }

    fn check(&self, start: usize, count: usize) -> Result<()> {
        match start.checked_add(count) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfBounds {
                handle: self.handle.0,
                offset: (start as u64).saturating_mul(size_of::<T>() as u64),
                len: (count as u64).saturating_mul(size_of::<T>() as u64),
                capacity: (self.len * size_of::<T>()) as u64,
            }),
        }
    }
}

impl<T: Pod> Drop for Buffer<'_, T> {
    fn drop(&mut self) {
        if let Err(error) = self.rt.free(self.handle) {
            tracing::error!(handle = format_args!("{:#x}", self.handle.0), %error, "freeing a buffer");
        }
    }
}

impl<T: Pod> std::fmt::Debug for Buffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("handle", &self.handle)
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::BackendChoice;

    fn sim() -> Runtime {
        Runtime::builder()
            .backend(BackendChoice::Sim)
            .arena_bytes(64 << 20)
            .build()
            .unwrap()
    }

    #[test]
    fn values_go_in_and_come_back() {
        let rt = sim();
        let values: Vec<[f32; 3]> = (0..1000)
            .map(|i| [i as f32, 2.0 * i as f32, -1.0])
            .collect();
        let buffer = Buffer::from_slice(&rt, &values).unwrap();
        assert_eq!(buffer.len(), 1000);
        assert_eq!(buffer.to_vec().unwrap(), values);
        buffer.write(10, &[[7.0; 3]]).unwrap();
        let mut one = [[0.0; 3]];
        buffer.read(10, &mut one).unwrap();
        assert_eq!(one, [[7.0; 3]]);
    }

    #[test]
    fn dropping_frees_and_into_handle_hands_over() {
        let rt = sim();
        {
            let _buffer = Buffer::<u64>::new(&rt, 4096).unwrap();
            assert!(!rt.is_empty());
        }
        assert!(rt.is_empty(), "dropped buffers are freed");
        let handle = Buffer::<u8>::new(&rt, 10).unwrap().into_handle();
        assert!(!rt.is_empty(), "the handle's owner frees it");
        rt.free(handle).unwrap();
        assert!(rt.is_empty());
        rt.check_invariants().unwrap();
    }

    #[test]
    fn out_of_bounds_and_bad_sizes_are_refused_and_change_nothing() {
        let rt = sim();
        let buffer = Buffer::<u32>::from_slice(&rt, &[1, 2, 3]).unwrap();
        assert!(matches!(
            buffer.write(2, &[9, 9]),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            buffer.read(usize::MAX, &mut [0]),
            Err(Error::OutOfBounds { .. })
        ));
        assert_eq!(buffer.to_vec().unwrap(), [1, 2, 3]);
        assert!(Buffer::<u32>::new(&rt, 0).is_err());
        assert!(Buffer::<u64>::new(&rt, usize::MAX).is_err());
        drop(buffer);
        assert!(rt.is_empty());
        rt.check_invariants().unwrap();
    }
}
