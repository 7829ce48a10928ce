//! How the records and codes the host shares with the device are declared in C++: the device
//! headers' `detail/abi.h` is rendered from these descriptions (the `headergen` crate), so the
//! Rust definitions are the one source of both sides.
//!
//! Invariants, each checked by the compiler or a test here, so a description cannot drift from
//! its Rust definition:
//! - `cpp_struct!` names each field with its Rust type; the compiler refuses a field that does
//!   not exist or has another type, and [`CppStruct::check`] refuses a description that leaves a
//!   field out (the described fields must tile the struct, which `Pod` keeps free of padding).
//! - `cpp_enum!` lists the variants in a `match` that the compiler requires to be exhaustive.

/// One field of a shared record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CppField {
    /// Its name on both sides.
    pub name: &'static str,
    /// Its C++ type: a Rust integer type or record name as written, an array `[T; N]`, or the
    /// pointer type the device sees where Rust holds a device address as `u64`.
    pub cpp_type: &'static str,
    /// Byte offset in the record.
    pub offset: usize,
    /// Bytes.
    pub size: usize,
}

/// A shared record: a `repr(C)`, padding-free struct.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CppStruct {
    /// Its name on both sides.
    pub name: &'static str,
    /// Where the Rust definition (and its documentation) lives.
    pub rust_path: &'static str,
    /// Bytes.
    pub size: usize,
    /// The fields, in declaration order.
    pub fields: &'static [CppField],
}

impl CppStruct {
    /// Whether the fields tile the record from byte 0 to its end, each after the one before:
    /// none left out, none out of order.
    pub fn check(&self) -> Result<(), String> {
        let mut at = 0;
        for f in self.fields {
            if f.offset != at {
                return Err(format!(
                    "{}: field `{}` at byte {} where {} was expected (a field left out of its \
                     description?)",
                    self.name, f.name, f.offset, at
                ));
            }
            at += f.size;
        }
        if at != self.size {
            return Err(format!(
                "{}: the described fields end at byte {at} of {} (a field left out?)",
                self.name, self.size
            ));
        }
        Ok(())
    }
}

/// One code of a shared enumeration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CppCode {
    /// The variant's Rust name (the C++ name is the enum's prefix followed by it).
    pub name: &'static str,
    /// Its value.
    pub value: u64,
}

/// A shared enumeration of codes (`u32` in C++, whatever its Rust representation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CppEnum {
    /// Its name on both sides.
    pub name: &'static str,
    /// Where the Rust definition (and its documentation) lives.
    pub rust_path: &'static str,
    /// The C++ prefix of its codes (`kStatus` makes `kStatusOk`).
    pub prefix: &'static str,
    /// Every code, in declaration order.
    pub codes: &'static [CppCode],
}

/// `impl $record { pub const CPP: CppStruct }`: each field with its Rust type (checked) and,
/// where the device sees a pointer in place of a `u64` address, `as "pointer type"`.
macro_rules! cpp_struct {
    ($record:ident at $path:literal { $($field:ident : $ty:ty $(as $cpp:literal)?),* $(,)? }) => {
        impl $record {
            /// How the device headers declare this record (`detail/abi.h` is rendered from it).
            pub const CPP: $crate::cpp_decl::CppStruct = $crate::cpp_decl::CppStruct {
                name: stringify!($record),
                rust_path: $path,
                size: ::core::mem::size_of::<$record>(),
                fields: &[$($crate::cpp_decl::CppField {
                    name: stringify!($field),
                    cpp_type: $crate::cpp_decl::cpp_struct!(@type $ty $(, $cpp)?),
                    offset: ::core::mem::offset_of!($record, $field),
                    size: ::core::mem::size_of::<$ty>(),
                }),*],
            };
        }
        // The compiler checks each field's name and type against the definition.
        const _: fn(&$record) = |r| { $(let _: &$ty = &r.$field;)* };
    };
    (@type $ty:ty) => { stringify!($ty) };
    (@type $ty:ty, $cpp:literal) => { $cpp };
}
pub(crate) use cpp_struct;

/// `impl $enum { pub const CPP: CppEnum }`: every variant, in an exhaustive `match`.
macro_rules! cpp_enum {
    ($enum:ident at $path:literal, prefix $prefix:literal { $($variant:ident),* $(,)? }) => {
        impl $enum {
            /// How the device headers declare these codes (`detail/abi.h` is rendered from it).
            pub const CPP: $crate::cpp_decl::CppEnum = $crate::cpp_decl::CppEnum {
                name: stringify!($enum),
                rust_path: $path,
                prefix: $prefix,
                codes: &[$($crate::cpp_decl::CppCode {
                    name: stringify!($variant),
                    value: $enum::$variant as u64,
                }),*],
            };
        }
        // A variant added to the enum and left out here fails to compile.
        const _: fn($enum) = |e| match e { $($enum::$variant => {}),* };
    };
}
pub(crate) use cpp_enum;

#[cfg(test)]
mod tests {
    use super::*;

    const FIELD: CppField = CppField {
        name: "a",
        cpp_type: "u32",
        offset: 0,
        size: 4,
    };

    #[test]
    fn a_description_that_leaves_a_field_out_is_refused() {
        let whole = CppStruct {
            name: "T",
            rust_path: "t",
            size: 8,
            fields: &[
                FIELD,
                CppField {
                    name: "b",
                    offset: 4,
                    ..FIELD
                },
            ],
        };
        assert_eq!(whole.check(), Ok(()));
        let tail_missing = CppStruct {
            fields: &[FIELD],
            ..whole
        };
        assert!(
            tail_missing
                .check()
                .unwrap_err()
                .contains("end at byte 4 of 8")
        );
        let middle_missing = CppStruct {
            size: 12,
            fields: &[
                FIELD,
                CppField {
                    name: "c",
                    offset: 8,
                    ..FIELD
                },
            ],
            ..whole
        };
        assert!(
            middle_missing
                .check()
                .unwrap_err()
                .contains("field `c` at byte 8")
        );
    }
}
