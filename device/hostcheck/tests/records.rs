//! `records.h` (built as host C++) against `orchestrator::records`: sizes, field offsets, codes.

use std::mem::{offset_of, size_of};

use orchestrator::records::{
    CONTIGUOUS_LAYOUT, DeviceCaches, DeviceMailbox, LaneStatus, Op, ReplyRecord, RequestRecord,
    Status,
};

fn check(which: u32, size: usize, offsets: &[usize]) {
    assert_eq!(
        hostcheck::record_layout(which, 99),
        Some(size as u64),
        "size of record {which}"
    );
    for (field, &offset) in offsets.iter().enumerate() {
        assert_eq!(
            hostcheck::record_layout(which, field as u32),
            Some(offset as u64),
            "record {which} field {field}"
        );
    }
    assert_eq!(
        hostcheck::record_layout(which, offsets.len() as u32),
        None,
        "record {which} has more fields in C++"
    );
}

#[test]
fn request_record_matches() {
    check(
        0,
        size_of::<RequestRecord>(),
        &[
            offset_of!(RequestRecord, op),
            offset_of!(RequestRecord, lane_mask),
            offset_of!(RequestRecord, warp),
            offset_of!(RequestRecord, reserved),
            offset_of!(RequestRecord, words),
        ],
    );
}

#[test]
fn reply_record_matches() {
    check(
        1,
        size_of::<ReplyRecord>(),
        &[
            offset_of!(ReplyRecord, status),
            offset_of!(ReplyRecord, size_class),
            offset_of!(ReplyRecord, tile_log2),
            offset_of!(ReplyRecord, layout),
            offset_of!(ReplyRecord, chunk_base),
            offset_of!(ReplyRecord, lane_span),
            offset_of!(ReplyRecord, reserved),
            offset_of!(ReplyRecord, failed_lanes),
            offset_of!(ReplyRecord, lane_status),
        ],
    );
}

#[test]
fn device_mailbox_matches() {
    check(
        2,
        size_of::<DeviceMailbox>(),
        &[
            offset_of!(DeviceMailbox, ports),
            offset_of!(DeviceMailbox, reserved),
            offset_of!(DeviceMailbox, req_seq),
            offset_of!(DeviceMailbox, requests),
            offset_of!(DeviceMailbox, ack_seq),
            offset_of!(DeviceMailbox, replies),
            offset_of!(DeviceMailbox, closed),
            offset_of!(DeviceMailbox, locks),
            offset_of!(DeviceMailbox, caches),
        ],
    );
}

#[test]
fn device_caches_match() {
    use orchestrator::caches::DEVICE_ARRAYS;
    check(
        3,
        size_of::<DeviceCaches>(),
        &[
            offset_of!(DeviceCaches, classes),
            offset_of!(DeviceCaches, max_slabs),
            offset_of!(DeviceCaches, hash_len),
            offset_of!(DeviceCaches, ring_len),
            offset_of!(DeviceCaches, device),
            offset_of!(DeviceCaches, device) + (DEVICE_ARRAYS - 1) * 8,
            offset_of!(DeviceCaches, filled),
            offset_of!(DeviceCaches, denied),
            offset_of!(DeviceCaches, ring),
            offset_of!(DeviceCaches, taken),
            offset_of!(DeviceCaches, demand),
            offset_of!(DeviceCaches, returns),
            offset_of!(DeviceCaches, claimed),
        ],
    );
}

#[test]
fn cache_geometry_matches() {
    use orchestrator::caches::{
        BITMAP_WORDS, CACHE_CLASSES, CACHED_MAX_BYTES, RUN_CLASS, RUN_SPANS_AT, cache_class,
        channel::entry_parts, device::hash_home, object_slots, run_class_serves, slab_blocks,
        slab_objects, slot_log2,
    };
    assert_eq!(
        hostcheck::cache(10, 0, 0),
        u64::from(translator::CACHE_GENERATIONS_START)
    );
    assert_eq!(hostcheck::cache(5, 0, 0), BITMAP_WORDS as u64);
    assert_eq!(hostcheck::cache(6, 0, 0), CACHED_MAX_BYTES);
    assert_eq!(hostcheck::cache(7, 0, 0), CACHE_CLASSES as u64);
    assert_eq!(
        hostcheck::cache(11, 0, 0),
        u64::from(orchestrator::caches::geometry::SLAB_NUMBER_SHIFT)
    );
    // The driver's sizes, defined once per language.
    assert_eq!(hostcheck::cache(12, 0, 0), translator::VABLOCK_BYTES);
    assert_eq!(hostcheck::cache(13, 0, 0), translator::LEAF_BYTES);
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    for size in (0..=70_000)
        .chain((4 << 20) - 10..=(4 << 20) + 10)
        .chain((0..100_000).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }))
    {
        let rust = cache_class(size).map_or(CACHE_CLASSES as u64, |c| c as u64);
        assert_eq!(hostcheck::cache(0, size, 0), rust, "class of {size}");
        let (base, id, generation) = entry_parts(size);
        assert_eq!(
            hostcheck::cache(3, size, 0),
            u64::from(translator::CACHE_STAMP_FLAG | generation)
        );
        assert_eq!(hostcheck::cache(8, size, 0), u64::from(id));
        assert_eq!(hostcheck::cache(9, size, 0), base);
        let len = 64usize << (size % 12);
        assert_eq!(
            hostcheck::cache(4, size >> 21, len as u64),
            hash_home(size >> 21, len) as u64
        );
    }
    for class in 0..CACHE_CLASSES {
        assert_eq!(hostcheck::cache(1, class as u64, 0), slab_blocks(class));
        assert_eq!(hostcheck::cache(2, class as u64, 0), slab_objects(class));
        assert_eq!(
            hostcheck::cache(14, class as u64, 0),
            u64::from(slot_log2(class))
        );
    }
    assert_eq!(hostcheck::cache(17, 0, 0), RUN_CLASS as u64);
    assert_eq!(hostcheck::cache(18, 0, 0), RUN_SPANS_AT as u64);
    let mut x = 0x0FED_CBA9_8765_4321u64;
    for size in (0..=CACHED_MAX_BYTES + 70_000)
        .step_by(997)
        .chain([CACHED_MAX_BYTES, CACHED_MAX_BYTES + 1])
    {
        let class = cache_class(size).unwrap_or(RUN_CLASS);
        assert_eq!(
            hostcheck::cache(15, class as u64, size),
            object_slots(class, size),
            "slots of {size}"
        );
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Half the draws around the warp's run-class cap, half far past it.
        let packed = x % (if x & 1 == 0 { 2 } else { 64 } * CACHED_MAX_BYTES);
        for arranged in [false, true] {
            assert_eq!(
                hostcheck::cache(16, size | u64::from(arranged) << 63, packed) != 0,
                run_class_serves(arranged, size, packed),
                "max {size}, packed {packed}, arranged {arranged}"
            );
        }
    }
}

#[test]
fn codes_match() {
    let mut rust: Vec<u64> = [Op::Alloc, Op::AllocContiguous, Op::Free, Op::FreePointer]
        .iter()
        .map(|&o| o as u64)
        .collect();
    rust.extend(Status::ALL.iter().map(|&s| s as u64));
    rust.extend(LaneStatus::ALL.iter().map(|&s| s as u64));
    rust.push(u64::from(CONTIGUOUS_LAYOUT));
    assert_eq!(hostcheck::codes(), rust);
}
