//! Renders `device/include/alignmalloc/detail/abi.h`: the C++ declarations of the plain data the
//! host and the device share (the driver's sizes, the layout's and the caches' constants, the
//! mailbox's codes and records, the device settings' defaults), from their Rust definitions,
//! which are the one source. `cargo test -p headergen` fails when the committed header differs
//! from [`render`]'s; `ALIGNMALLOC_BLESS=1` rewrites it.
//!
//! The header declares values, not formulas: each constant is written as the number Rust
//! computed, each record with `static_assert`s of its size and of every field's offset as Rust
//! lays it out (each offset where the compiler has `offsetof`: nvcc and host C++, not NVRTC), so
//! a C++ compiler that laid a record out differently would refuse the header.
//! The functions over these values (translation, cache geometry, the protocol) stay in the
//! hand-written headers.

use std::fmt::Write;

use orchestrator::cpp_decl::{CppEnum, CppStruct};
use orchestrator::records;
use runtime::settings::DeviceSettings;

/// The header's path below the repository's root.
pub const PATH: &str = "device/include/alignmalloc/detail/abi.h";

/// A C++ integer type of a constant.
#[derive(Clone, Copy)]
enum Int {
    U32,
    U64,
}

/// One constant: its C++ name, type, value and the Rust item it comes from.
struct Constant {
    name: &'static str,
    int: Int,
    value: u64,
    rust: &'static str,
}

macro_rules! constants {
    ($($name:literal: $int:ident = $path:path;)*) => {
        vec![$(Constant { name: $name, int: Int::$int, value: $path as u64, rust: stringify!($path) }),*]
    };
}

/// The shared constants, grouped as the header prints them.
fn constants() -> Vec<(&'static str, Vec<Constant>)> {
    vec![
        (
            "The unified-memory driver's sizes and the layout's",
            constants! {
                "kWarpLanes": U32 = translator::WARP_LANES;
                "kSmallAlign": U64 = translator::SMALL_ALIGN;
                "kSmallUnitBytes": U64 = translator::SMALL_UNIT_BYTES;
                "kLeafBytes": U64 = translator::LEAF_BYTES;
                "kVablockBytes": U64 = uvm_geometry::VABLOCK_BYTES;
                "kMinTileLog2": U32 = translator::MIN_TILE_LOG2;
                "kMaxTileLog2": U32 = translator::MAX_TILE_LOG2;
                "kAddressBits": U32 = translator::ADDRESS_BITS;
                "kArrangedMaxExpansion": U64 = translator::ARRANGED_MAX_EXPANSION;
                "kCacheGenerationsStart": U32 = translator::CACHE_GENERATIONS_START;
                "kCacheGenerations": U32 = translator::CACHE_GENERATIONS;
                "kCacheStampFlag": U32 = translator::CACHE_STAMP_FLAG;
            },
        ),
        (
            "The mailbox's record sizes and port lock words",
            constants! {
                "kRequestWords": U32 = orchestrator::records::REQUEST_WORDS;
                "kReplyWords": U32 = orchestrator::records::REPLY_WORDS;
                "kLayoutContiguous": U32 = orchestrator::records::CONTIGUOUS_LAYOUT;
                "kPortHeld": U32 = orchestrator::cpu::PORT_HELD;
                "kPortOwed": U32 = orchestrator::cpu::PORT_OWED;
                "kOwedSeqMask": U32 = orchestrator::cpu::OWED_SEQ_MASK;
            },
        ),
        (
            "The device caches' classes, slabs and words",
            constants! {
                "kCacheClasses": U32 = orchestrator::caches::geometry::CACHE_CLASSES;
                "kCacheRunClass": U32 = orchestrator::caches::geometry::RUN_CLASS;
                "kCacheMinObjectLog2": U32 = orchestrator::caches::geometry::MIN_OBJECT_LOG2;
                "kCachePowerClassesMaxBytes": U64 = orchestrator::caches::geometry::POWER_CLASSES_MAX_BYTES;
                "kCacheRunSlotLog2": U32 = orchestrator::caches::geometry::RUN_SLOT_LOG2;
                "kCachedMaxBytes": U64 = orchestrator::caches::geometry::CACHED_MAX_BYTES;
                "kCacheRunWarpMaxBytes": U64 = orchestrator::caches::geometry::RUN_WARP_MAX_BYTES;
                "kCacheRunSlabBlocks": U64 = orchestrator::caches::geometry::RUN_SLAB_BLOCKS;
                "kCacheRunSpansAt": U32 = orchestrator::caches::geometry::RUN_SPANS_AT;
                "kCacheSlabObjects": U64 = orchestrator::caches::geometry::SLAB_OBJECTS;
                "kCacheSlabWantedObjects": U64 = orchestrator::caches::geometry::SLAB_WANTED_OBJECTS;
                "kCacheSlabWantedMaxBytes": U64 = orchestrator::caches::geometry::SLAB_WANTED_MAX_BYTES;
                "kCacheMaxSlabBlocks": U64 = orchestrator::caches::geometry::MAX_SLAB_BLOCKS;
                "kCacheClaimAheadMaxBlocks": U64 = orchestrator::caches::geometry::CLAIM_AHEAD_MAX_BLOCKS;
                "kCacheBitmapWords": U32 = orchestrator::caches::geometry::BITMAP_WORDS;
                "kSlabNumberShift": U32 = orchestrator::caches::geometry::SLAB_NUMBER_SHIFT;
                "kCursorMask": U64 = orchestrator::caches::geometry::CURSOR_MASK;
                "kEntryIdBits": U32 = orchestrator::caches::channel::ENTRY_ID_BITS;
                "kEntryGenerationShift": U32 = orchestrator::caches::channel::ENTRY_GENERATION_SHIFT;
                "kBlockClassShift": U32 = orchestrator::caches::device::BLOCK_CLASS_SHIFT;
                "kCacheCounterStripes": U32 = orchestrator::caches::device::COUNTER_STRIPES;
                "kCacheFreeCounters": U32 = orchestrator::caches::device::FREE_COUNTERS;
                "kCacheAheadSlabs": U32 = orchestrator::caches::device::AHEAD_SLABS;
                "kCacheAheadWords": U32 = orchestrator::caches::device::AHEAD_WORDS;
            },
        ),
        (
            "The device settings' bound",
            constants! {
                "kLongestPauseNs": U32 = runtime::settings::LONGEST_PAUSE_NS;
            },
        ),
    ]
}

/// `detail/abi.h` as the Rust definitions make it.
pub fn render() -> String {
    let mut out = String::new();
    out.push_str(
        "// alignmalloc: the plain data the host and the device share.\n\
         //\n\
         // Generated from the Rust definitions by the `headergen` crate; do not edit. Each item names\n\
         // the Rust item it comes from, whose documentation says what it is. `cargo test -p headergen`\n\
         // fails when this file is stale (ALIGNMALLOC_BLESS=1 rewrites it). Plain integers only:\n\
         // compiles under nvcc, NVRTC and host C++.\n\
         #ifndef ALIGNMALLOC_ABI_H\n\
         #define ALIGNMALLOC_ABI_H\n\n",
    );
    settings(&mut out);
    out.push_str(
        "namespace am {\n\n\
         typedef unsigned long long u64;\n\
         typedef unsigned int u32;\n\
         typedef unsigned char u8;\n\
         static_assert(sizeof(u64) == 8 && sizeof(u32) == 4 && sizeof(u8) == 1,\n              \
         \"alignmalloc needs 8-, 32- and 64-bit integers\");\n",
    );
    for (title, group) in constants() {
        let _ = writeln!(out, "\n// ---- {title}\n");
        for c in group {
            let (ty, suffix) = match c.int {
                Int::U32 => {
                    // A value the C++ type would truncate is a mistake in the table above.
                    assert!(
                        u32::try_from(c.value).is_ok(),
                        "{} = {} ({}) does not fit a u32",
                        c.name,
                        c.value,
                        c.rust
                    );
                    ("u32", "u")
                }
                Int::U64 => ("u64", "ull"),
            };
            let _ = writeln!(
                out,
                "constexpr {ty} {} = {}{suffix};  // {}",
                c.name, c.value, c.rust
            );
        }
    }
    out.push_str("\n// ---- The mailbox's codes\n");
    for e in records::CPP_ENUMS {
        enumeration(&mut out, &e);
    }
    out.push_str("\n// ---- The mailbox's records\n");
    for s in records::CPP_STRUCTS {
        record(&mut out, &s);
    }
    out.push_str("\n}  // namespace am\n\n#endif  // ALIGNMALLOC_ABI_H\n");
    out
}

/// The device settings as macros of their variables' names, so `nvcc -DNAME=value` (and the
/// runtime's NVRTC options) replace the defaults.
fn settings(out: &mut String) {
    out.push_str(
        "// The device settings' defaults (runtime::settings::DeviceSettings): each a macro named like its\n\
         // environment variable, so a build may set it (`nvcc -DALIGNMALLOC_POLL_PAUSE_MAX_NS=1024`).\n",
    );
    for (name, value) in DeviceSettings::default().named() {
        let _ = writeln!(out, "#ifndef {name}\n#define {name} {value}\n#endif");
    }
    out.push('\n');
}

fn enumeration(out: &mut String, e: &CppEnum) {
    let _ = writeln!(out, "\n// {}\nenum {} : u32 {{", e.rust_path, e.name);
    for code in e.codes {
        let _ = writeln!(out, "  {}{} = {},", e.prefix, code.name, code.value);
    }
    out.push_str("};\n");
}

/// A field's declaration: `T name` or, for `[T; N]`, `T name[N]`.
fn declaration(cpp_type: &str, name: &str) -> String {
    match cpp_type
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.split_once(';'))
    {
        Some((element, len)) => format!("{} {name}[{}]", element.trim(), len.trim()),
        None => format!("{cpp_type} {name}"),
    }
}

fn record(out: &mut String, s: &CppStruct) {
    let _ = writeln!(out, "\n// {}\nstruct {} {{", s.rust_path, s.name);
    for f in s.fields {
        let _ = writeln!(out, "  {};", declaration(f.cpp_type, f.name));
    }
    let _ = writeln!(
        out,
        "}};\nstatic_assert(sizeof({}) == {}, \"{} is laid out as in Rust\");",
        s.name, s.size, s.name
    );
    // NVRTC has no offsetof; nvcc and the host compiler check each field.
    out.push_str("#if !defined(__CUDACC_RTC__)\n");
    for f in s.fields {
        let _ = writeln!(
            out,
            "static_assert(__builtin_offsetof({}, {}) == {}, \"{}::{} is laid out as in Rust\");",
            s.name, f.name, f.offset, s.name, f.name
        );
    }
    out.push_str("#endif\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_declared_the_c_way() {
        assert_eq!(declaration("[u64; 32]", "words"), "u64 words[32]");
        assert_eq!(declaration("u32*", "locks"), "u32* locks");
        assert_eq!(declaration("DeviceCaches", "caches"), "DeviceCaches caches");
    }
}
